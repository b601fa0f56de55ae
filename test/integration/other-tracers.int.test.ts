// upscope beside other tracers of the same process: a process another tracer holds is named
// with that tracer; the ptrace engine's probes and a kernel uprobe on the same function (the
// bpf engine's, bpftrace's) both count every call; nothing is left behind.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, type Spawned, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

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
  const app = compileProgram('coexist-target', { flags: ['-O2', '-pthread'] });
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
  test('ptrace: is refused naming that tracer (pid and name), not with privilege hints', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'strace'] })) return;
    const { pid, app, send } = await startTarget();
    const strace = spawnCollected('strace', ['-p', String(pid), '-o', '/dev/null']);
    started.push(strace);
    const deadline = Date.now() + 20_000;
    while (tracerPid(pid) !== strace.pid) {
      assert.ok(Date.now() < deadline, `strace attached: ${strace.stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    for (const command of ['count', 'trace']) {
      const run = runCli([
        command,
        '--engine',
        'ptrace',
        '-p',
        String(pid),
        `${app}:co_work`,
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
  await waitFor(running, /^Counting /m);
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
  for (const first of ['ptrace', 'bpf'] as const) {
    test(`a ptrace count while a bpf count starts and stops 10 times (${first} first): both count every call`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { pid, app, send } = await startTarget(2);
      const spec = `${app}:co_work`;
      let bpf = first === 'bpf' ? await counting('bpf', pid, spec) : undefined;
      const ptrace = await counting('ptrace', pid, spec);
      for (let round = 0; round < 10; round++) {
        bpf ??= await counting('bpf', pid, spec);
        const before = (await send('run 0'))!;
        const after = (await send(`run ${CALLS}`))!;
        assert.equal(after - before, CALLS);
        assert.equal(await stopCounting(bpf, 'co_work'), CALLS, `bpf count ${round + 1}`);
        bpf = undefined;
      }
      await send(`run ${CALLS}`);
      const total = (await send('quit'))!;
      assert.equal(total, 11 * CALLS);
      const exit = await ended(ptrace);
      assert.equal(exit.code, 0, ptrace.stderr);
      assert.equal(jsonCount(ptrace.stdout, 'co_work'), total, ptrace.stderr);
      assert.deepEqual(tracedChildren([pid]), []);
    });
  }
});
