// upscope beside other tracers of the same process: a process another tracer holds is named
// with that tracer; the ptrace engine's probes and a kernel uprobe on the same function (the
// bpf engine's, bpftrace's) both count every call; nothing is left behind. Each target runs
// from a copy of its own (ownCopy), so the kernel uprobes placed here are on no other test
// file's program.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { COEXIST_TARGETS } from '../helpers/coexist-targets.js';
import { compileProgram, ownCopy } from '../helpers/compile.js';
import { sized } from '../helpers/full-size.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { findRustc } from '../helpers/rustc.js';
import { ended, type Spawned, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

const scratch = mkdtempSync(join(tmpdir(), 'upscope-coexist-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

const started: Spawned[] = [];
afterEach(async () => {
  for (const running of started.splice(0)) {
    if (running.child.exitCode === null && running.child.signalCode === null) {
      running.child.kill('SIGKILL');
      await running.exited;
    }
  }
  assert.deepEqual(leftovers(), [], 'no uprobe events or instances of a gone upscope');
});

/** The target, commanded through its stdin (see coexist-target.c). */
interface Target {
  readonly running: Spawned;
  readonly pid: number;
  readonly app: string;
  /** Send a command; with `done`, wait for the line it prints and return its number. */
  send(command: string): Promise<number | undefined>;
}

async function startTarget(threads = 1): Promise<Target> {
  const app = ownCopy(compileProgram('coexist-target', { flags: ['-O2', '-pthread'] }), scratch);
  const child = spawn(app, [String(threads)], { stdio: ['pipe', 'pipe', 'pipe'] });
  const running: Spawned = {
    child,
    pid: child.pid!,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) =>
      child.once('close', (code, signal) => resolve({ code, signal })),
    ),
  };
  child.stdout!.on('data', (chunk: Buffer) => {
    running.stdout += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    running.stderr += chunk.toString();
  });
  started.push(running);
  await waitFor(running, /^ready \d+$/m, 'stdout');
  const dones = () => [...running.stdout.matchAll(/^done (\d+)$/gm)].map((m) => Number(m[1]));
  return {
    running,
    pid: child.pid!,
    app,
    async send(command) {
      const before = dones().length;
      child.stdin!.write(`${command}\n`);
      if (command === 'spin') return undefined;
      if (command === 'quit') {
        const m = await waitFor(running, /^total (\d+)$/m, 'stdout');
        // Reaped before it is looked for among the zombies (it was found one, once, under load).
        await ended(running);
        return Number(m[1]);
      }
      const deadline = Date.now() + 60_000;
      while (dones().length === before) {
        assert.ok(Date.now() < deadline, `the target answered ${command}: ${running.stdout}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return dones().at(-1);
    },
  };
}

/** The TracerPid of a process. */
function tracerPid(pid: number): number {
  return Number(/^TracerPid:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
}

describe('a process another tracer holds', () => {
  test('ptrace: trace, count, hist and latency are refused naming that tracer (pid and name), not with privilege hints', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'strace'] })) return;
    const { pid, app, send } = await startTarget();
    const strace = spawnCollected('strace', ['-p', String(pid), '-o', '/dev/null']);
    started.push(strace);
    const deadline = Date.now() + 20_000;
    while (tracerPid(pid) !== strace.pid) {
      assert.ok(Date.now() < deadline, `strace attached: ${strace.stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    for (const command of ['count', 'trace', 'hist', 'latency']) {
      const run = runCli([
        command,
        '--engine',
        'ptrace',
        '-p',
        String(pid),
        `${app}:co_work`,
        ...(command === 'hist' ? ['arg0'] : []),
        '--duration',
        '1',
      ]);
      assert.equal(run.status, 4, run.stderr);
      const lines = run.stderr.split('\n').filter((line) => line !== '');
      assert.equal(
        lines[0],
        `error[ERR_ALREADY_TRACED]: Cannot trace process ${pid} (thread ${pid}): it is already traced by process ${strace.pid} ("strace"), and a process can have only one tracer`,
      );
      assert.match(run.stderr, new RegExp(`hint: Detach strace \\(process ${strace.pid}\\)`));
      assert.doesNotMatch(run.stderr, /CAP_SYS_PTRACE|ptrace_scope|as root/, 'no privilege hints');
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
    }
    // strace still holds it, and it runs on.
    assert.equal(tracerPid(pid), strace.pid);
    strace.child.kill('SIGINT');
    await ended(strace);
    assert.equal(await send('run 100'), 100, 'the target runs on');
    assert.equal(await send('quit'), 100);
    assert.deepEqual(tracedChildren([pid]), []);
  });
});

/** The count of `probe` in the last JSON table of `count --json`. */
function jsonCount(stdout: string, probe: string): number {
  const rows = JSON.parse(stdout.trim().split('\n').at(-1)!) as { probe: string; count: number }[];
  return rows.filter((row) => row.probe === probe).reduce((sum, row) => sum + row.count, 0);
}

/** `upscope count --json -p PID SPEC` on an engine, once it says it counts. */
async function counting(engine: string, pid: number, spec: string): Promise<Spawned> {
  const running = spawnUpscope(['count', '--engine', engine, '--json', '-p', String(pid), spec]);
  started.push(running);
  // Planning a fresh copy of a Go program's symbols, with two other files' tests running, can
  // take longer than waitFor()'s 30 s (a full run at load 6 did): up to 2 minutes.
  await waitFor(running, /^Counting /m, 'stderr', 120_000);
  return running;
}

/** End a count with Ctrl-C, and take its last table's count of `probe`. */
async function stopCounting(running: Spawned, probe: string): Promise<number> {
  running.child.kill('SIGINT');
  const exit = await ended(running);
  assert.equal(exit.code, 0, running.stderr);
  return jsonCount(running.stdout, probe);
}

describe('the ptrace engine and a kernel uprobe on the same function', () => {
  const CALLS = 2000;
  // Issue 23 names 10 bpf counts in a row (npm run reliability, part "full"); the suite makes 3.
  const ROUNDS = sized(3, 10);
  for (const first of ['ptrace', 'bpf'] as const) {
    test(`a ptrace count while a bpf count starts and stops ${ROUNDS} times (${first} first): both count every call`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { pid, app, send } = await startTarget(2);
      const spec = `${app}:co_work`;
      let bpf = first === 'bpf' ? await counting('bpf', pid, spec) : undefined;
      const ptrace = await counting('ptrace', pid, spec);
      for (let round = 0; round < ROUNDS; round++) {
        bpf ??= await counting('bpf', pid, spec);
        const before = (await send('run 0'))!;
        const after = (await send(`run ${CALLS}`))!;
        assert.equal(after - before, CALLS);
        assert.equal(await stopCounting(bpf, 'co_work'), CALLS, `bpf count ${round + 1}`);
        bpf = undefined;
      }
      await send(`run ${CALLS}`);
      const total = (await send('quit'))!;
      assert.equal(total, (ROUNDS + 1) * CALLS);
      const exit = await ended(ptrace);
      assert.equal(exit.code, 0, ptrace.stderr);
      assert.equal(jsonCount(ptrace.stdout, 'co_work'), total, ptrace.stderr);
      assert.deepEqual(tracedChildren([pid]), []);
    });
  }

  test(`a ptrace count while calls never stop and a bpf count comes and goes ${ROUNDS} times: ptrace counts every call`, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const { pid, app, send } = await startTarget(2);
    const spec = `${app}:co_work`;
    const ptrace = await counting('ptrace', pid, spec);
    await send('spin');
    for (let round = 0; round < ROUNDS; round++) {
      const bpf = await counting('bpf', pid, spec);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const counted = await stopCounting(bpf, 'co_work');
      assert.ok(counted > 0, `bpf count ${round + 1} saw calls`);
    }
    await send('stop');
    const total = (await send('quit'))!;
    assert.ok(total > 0);
    const exit = await ended(ptrace);
    assert.equal(exit.code, 0, ptrace.stderr);
    assert.equal(jsonCount(ptrace.stdout, 'co_work'), total, ptrace.stderr);
    assert.match(
      ptrace.stderr,
      /co_work \(0x[0-9a-f]+\) in process \d+ also holds another tracer's breakpoint/,
    );
    assert.doesNotMatch(ptrace.stderr, /may have been missed/);
    assert.deepEqual(tracedChildren([pid]), []);
  });

  test('where no guard fits (co_leaf starts by writing %rax), a kernel uprobe there first is refused by name, and one that comes and goes is said with what may have been missed', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
    const { pid, app, send } = await startTarget(1);
    const spec = `${app}:co_leaf`;
    // The truth about the instruction: it writes a register the probe cannot take back.
    assert.match(
      tool('objdump', ['-d', '--no-show-raw-insn', app]),
      /<co_leaf>:\n\s+[0-9a-f]+:\s+lea\s/,
    );
    const bpf = await counting('bpf', pid, spec);
    const refused = runCli([
      'count',
      '--engine',
      'ptrace',
      '-p',
      String(pid),
      spec,
      '--duration',
      '1',
    ]);
    assert.notEqual(refused.status, 0);
    assert.match(
      refused.stderr,
      /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot probe co_leaf \(0x[0-9a-f]+\) in process \d+: another tracer's kernel uprobe is on that instruction \(bpftrace, perf, or upscope's bpf or tracefs engine, .*\), and upscope cannot see its calls from the instruction after it instead: "lea [^"]*" writes \w+, which cannot be taken back$/m,
    );
    assert.match(refused.stderr, /^ {2}hint: Stop the other tracer first/m);
    assert.equal(await send('run 100'), 100, 'the target runs on');
    assert.equal(await stopCounting(bpf, 'co_leaf'), 100);

    const ptrace = await counting('ptrace', pid, spec);
    assert.equal(await send('run 1000'), 1100);
    const again = await counting('bpf', pid, spec);
    assert.equal(await send('run 1000'), 2100);
    assert.equal(await stopCounting(again, 'co_leaf'), 1000);
    // The kernel puts back the byte it found (upscope's int3 was there): upscope notices.
    await waitFor(
      ptrace,
      /^upscope: co_leaf \(0x[0-9a-f]+\) in process \d+: another tracer removed upscope's breakpoint .*; it is in again, but hits in the last [\d.]+ s \(since its last hit\) may have been missed$/m,
    );
    assert.equal(await send('run 1000'), 3100);
    assert.equal(await send('quit'), 3100);
    const exit = await ended(ptrace);
    assert.equal(exit.code, 0, ptrace.stderr);
    // What it counted: every call but those the kernel uprobe took, as it said.
    assert.equal(jsonCount(ptrace.stdout, 'co_leaf'), 2000, ptrace.stderr);
    assert.deepEqual(tracedChildren([pid]), []);
  });

  for (const first of ['ptrace', 'bpftrace'] as const) {
    test(`a ptrace count while bpftrace counts the same function 3 times (${first} first): both count every call`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'bpftrace'] })) return;
      const { pid, app, send } = await startTarget(2);
      const spec = `${app}:co_work`;
      const prints = (running: Spawned) =>
        [...running.stdout.matchAll(/^@calls: (\d+)$/gm)].map((m) => Number(m[1]));
      // bpftrace, counting; it says it attaches before it has: a call is made (and its maps
      // printed, SIGUSR1) until one is counted. Returns it with that count.
      const bpftrace = async () => {
        const running = spawnCollected('bpftrace', [
          '-p',
          String(pid),
          '-e',
          `uprobe:${app}:co_work { @calls = count(); }`,
        ]);
        started.push(running);
        await waitFor(running, /^Attaching 1 probe/m, 'stdout');
        const deadline = Date.now() + 30_000;
        for (;;) {
          await send('run 1');
          running.child.kill('SIGUSR1');
          await new Promise((resolve) => setTimeout(resolve, 200));
          const counted = prints(running).at(-1);
          if (counted !== undefined && counted > 0) return { running, counted };
          assert.ok(Date.now() < deadline, `bpftrace attached: ${running.stdout}`);
        }
      };
      // What bpftrace counted once it says `expected`, or after 30 s: asked (SIGUSR1) until
      // then, then ended (a full run under load once read 1 at its exit, where 2001 calls had
      // been made: whether bpftrace had not counted them yet or never would, this tells).
      const stopBpftrace = async (running: Spawned, expected: number) => {
        const deadline = Date.now() + 30_000;
        while ((prints(running).at(-1) ?? 0) < expected && Date.now() < deadline) {
          running.child.kill('SIGUSR1');
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        running.child.kill('SIGINT');
        // bpftrace 0.17 at times does not end on SIGINT (here, once or twice a run, each time
        // waited for 30 s): what it printed last is the count, killed or not.
        await ended(running, 5_000);
        return prints(running).at(-1)!;
      };
      let other = first === 'bpftrace' ? await bpftrace() : undefined;
      const ptrace = await counting('ptrace', pid, spec);
      // Calls made before (bpftrace's first ones) are not ptrace's to count.
      const start = (await send('run 0'))!;
      for (let round = 0; round < 3; round++) {
        other ??= await bpftrace();
        const before = (await send('run 0'))!;
        const after = (await send(`run ${CALLS}`))!;
        const seen = await stopBpftrace(other.running, other.counted + CALLS);
        assert.equal(seen, other.counted + CALLS, `bpftrace ${round + 1}`);
        assert.equal(after - before, CALLS);
        other = undefined;
      }
      const total = (await send('quit'))!;
      const exit = await ended(ptrace);
      assert.equal(exit.code, 0, ptrace.stderr);
      assert.equal(jsonCount(ptrace.stdout, 'co_work'), total - start, ptrace.stderr);
      assert.deepEqual(tracedChildren([pid]), []);
    });
  }
});

describe('the ptrace engine beside a kernel uprobe, on C++ (throwing), Rust and Go functions', () => {
  test("Go: a return probe whose calls' entry (after the stack check) holds a kernel uprobe is refused naming that entry; with the uprobe gone, it counts every return", async (t) => {
    const target = COEXIST_TARGETS.find((c) => c.language === 'Go')!;
    if (!requireHost(t, { root: true, commands: target.needs })) return;
    const app = ownCopy(target.build(), scratch);
    const spec = `${app}:${target.fn}`;
    const go = join(scratch, 'go-return-entry');
    const stop = join(scratch, 'stop-return-entry');
    const program = spawnCollected(app, [go, stop]);
    started.push(program);
    const pid = Number((await waitFor(program, /^ready (\d+)$/m, 'stdout'))[1]);
    // The entry a bpf count probes is where a return probe's calls begin: after the check.
    const entry = /address\s+vaddr 0x([0-9a-f]+)/.exec(runCli(['resolve', spec]).stdout)![1]!;
    const start =
      /<main\.step>:\n\s+([0-9a-f]+):\s+cmp\s+0x10\(%r14\),%rsp\n\s+[0-9a-f]+:\s+jbe .*\n\s+([0-9a-f]+):/.exec(
        tool('objdump', ['-d', '--no-show-raw-insn', app]),
      );
    assert.equal(entry, start?.[2], 'the entry is the instruction after the stack check');
    const bpf = await counting('bpf', pid, spec);
    const refused = runCli(['count', '--engine', 'ptrace', '-p', String(pid), `r:${spec}`]);
    assert.equal(refused.status, 3, refused.stderr);
    assert.match(
      refused.stderr,
      new RegExp(
        `^error\\[ERR_UNPROBEABLE_INSTRUCTION\\]: Cannot probe main\\.step's calls' entry \\(0x${entry}, where its returns are paired\\) in process ${pid}: another tracer's kernel uprobe is on that instruction .*: it is not the probe's own instruction`,
        'm',
      ),
    );
    assert.match(refused.stderr, /^ {2}hint: Or probe this function with a kernel engine too/m);
    assert.doesNotMatch(refused.stderr, /another debugger/);
    writeFileSync(go, '');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.ok((await stopCounting(bpf, target.probe)) > 0, 'the program runs on, counted by bpf');
    // The kernel's uprobe gone, the same return probe is placed, and sees each call return.
    const returns = await counting('ptrace', pid, `r:${spec}`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    writeFileSync(stop, '');
    await waitFor(program, /^calls (\d+)/m, 'stdout');
    await ended(program);
    const exit = await ended(returns);
    assert.equal(exit.code, 0, returns.stderr);
    assert.ok(jsonCount(returns.stdout, `r:${target.probe}`) > 0, returns.stdout);
    assert.deepEqual(tracedChildren([pid]), []);
  });

  for (const target of COEXIST_TARGETS) {
    for (const first of ['ptrace', 'bpf'] as const) {
      test(`${target.language}: a ptrace count -p while bpf counts come and go (${first} first) counts every call`, async (t) => {
        if (!requireHost(t, { root: true, commands: target.needs })) return;
        if (target.language === 'Rust' && findRustc() === undefined) {
          if (STRICT) assert.fail('Cannot run test under CI: needs rustc');
          t.skip('needs rustc');
          return;
        }
        const app = ownCopy(target.build(), scratch);
        const spec = `${app}:${target.fn}`;
        const go = join(scratch, `go-${target.language}-${first}`);
        const stop = join(scratch, `stop-${target.language}-${first}`);
        const program = spawnCollected(app, [go, stop]);
        started.push(program);
        const pid = Number((await waitFor(program, /^ready (\d+)$/m, 'stdout'))[1]);
        // Go's runtime may run a function's first instruction again for one call (a goroutine
        // grown or preempted at its stack check): there, the truth for a count of entries is
        // a kernel count of the whole run (whose uprobe then stays: it comes first, or second).
        const reference = target.language === 'Go';
        // Kernel first: a bpf count in before ptrace places its probe (for Go, the reference).
        let bpf = first === 'bpf' ? await counting('bpf', pid, spec) : undefined;
        let whole = reference ? bpf : undefined;
        if (reference) bpf = undefined;
        const ptrace = await counting('ptrace', pid, spec);
        if (first === 'bpf') {
          await waitFor(ptrace, /also holds another tracer's breakpoint/);
        }
        whole ??= reference ? await counting('bpf', pid, spec) : undefined;
        writeFileSync(go, '');
        for (let round = 0; round < 3; round++) {
          bpf ??= await counting('bpf', pid, spec);
          await new Promise((resolve) => setTimeout(resolve, 300));
          assert.ok(
            (await stopCounting(bpf, target.probe)) > 0,
            `bpf count ${round + 1} saw calls`,
          );
          bpf = undefined;
        }
        await new Promise((resolve) => setTimeout(resolve, 300));
        writeFileSync(stop, '');
        const calls = Number((await waitFor(program, /^calls (\d+)/m, 'stdout'))[1]);
        await ended(program);
        const exit = await ended(ptrace);
        assert.equal(exit.code, 0, ptrace.stderr);
        const counted = jsonCount(ptrace.stdout, target.probe);
        if (whole !== undefined) {
          // The kernel's count of the same run: the same entries. It ends with the process.
          const wholeExit = await ended(whole);
          assert.equal(wholeExit.code, 0, whole.stderr);
          assert.equal(counted, jsonCount(whole.stdout, target.probe), ptrace.stderr);
          assert.ok(counted >= calls, `${counted} entries, ${calls} calls`);
        } else {
          assert.equal(counted, calls, ptrace.stderr);
        }
        assert.match(ptrace.stderr, /also holds another tracer's breakpoint/);
        assert.doesNotMatch(ptrace.stderr, /may have been missed/);
        assert.deepEqual(tracedChildren([pid]), []);
      });
    }
  }
});
