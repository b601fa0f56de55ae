// upscope-tests: apart libc-allocator (its runs over every process put kernel uprobes on libc's malloc in each: leaks.int's ptrace run on malloc would meet them).
// Which processes a run covers: a -c command from its exec (not upscope's launcher), the
// children it forks, a filter decided at each call's entry, and never upscope itself in a run
// over every process.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnUpscope } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function target(): string {
  return compileProgram('procs-target', { flags: ['-O2'] });
}

/** The JSON array upscope printed last (count, hist and latency --json). */
function lastJson<T>(stdout: string): T {
  const line = stdout
    .split('\n')
    .filter((l) => l.startsWith('['))
    .at(-1);
  assert.ok(line !== undefined, `no JSON in:\n${stdout}`);
  return JSON.parse(line) as T;
}

/** The target's own `pid=P calls=N` lines, as pid -> calls. */
function ownCounts(stdout: string): Map<number, number> {
  const counts = new Map<number, number>();
  for (const [, pid, calls] of stdout.matchAll(/^pid=(\d+) calls=(\d+)$/gm)) {
    counts.set(Number(pid), Number(calls));
  }
  return counts;
}

describe('-c starts at the command, not at its launcher (bpf)', () => {
  test('count, hist and latency -c /bin/true on libc:malloc count nothing: /bin/true never calls it, and the shell that launches it is not counted', (t) => {
    if (!requireHost(t, { root: true })) return;
    const count = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '--by',
      'comm',
      '-c',
      '/bin/true',
      'libc:malloc',
    ]);
    assert.equal(count.status, 0, count.stderr);
    assert.match(count.stderr, /Counting 1 probe \(bpf/);
    // Every probe is listed (0 where it had no hits): no key, so nothing of sh or anyone.
    assert.deepEqual(
      lastJson<{ probe: string; count: number }[]>(count.stdout),
      [{ probe: 'malloc', count: 0 }],
      'no malloc counted, of sh or anyone',
    );
    const hist = runCli([
      'hist',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      '/bin/true',
      'libc:malloc',
      'arg0',
    ]);
    assert.equal(hist.status, 0, hist.stderr);
    assert.equal(lastJson<{ count: number }[]>(hist.stdout)[0]?.count, 0, hist.stdout);
    const latency = runCli([
      'latency',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      '/bin/true',
      'libc:malloc',
    ]);
    assert.equal(latency.status, 0, latency.stderr);
    assert.equal(lastJson<{ count: number }[]>(latency.stdout)[0]?.count, 0, latency.stdout);
  });
});

describe('-c follows the children the command forks', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`count --by pid (${engine}): every process of the command, each with its own count of calls`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = target();
      const run = runCli([
        'count',
        '--engine',
        engine,
        '--json',
        '--command-output',
        'inherit',
        '--by',
        'pid',
        '-c',
        `${app} forks 3 50`,
        `${app}:procs_work`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      const own = ownCounts(run.stdout);
      assert.equal(own.size, 4, run.stdout);
      const rows = lastJson<{ key: number; count: number }[]>(run.stdout);
      assert.deepEqual(new Map(rows.map((r) => [r.key, r.count])), own);
    });
  }

  test('hist and latency -c (bpf): the calls of the forked children are in them too', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    for (const args of [
      ['hist', `${app}:procs_work`, 'arg0'],
      ['latency', `${app}:procs_work`],
    ]) {
      const run = runCli([
        args[0]!,
        '--json',
        '--command-output',
        'inherit',
        '-c',
        `${app} forks 2 40`,
        ...args.slice(1),
      ]);
      assert.equal(run.status, 0, run.stderr);
      const total = [...ownCounts(run.stdout).values()].reduce((a, b) => a + b, 0);
      assert.equal(total, 120, run.stdout);
      assert.equal(lastJson<{ count: number }[]>(run.stdout)[0]?.count, total, run.stdout);
    }
  });

  test("count -c bash --by pid: bash's subshells are counted, each under its own pid", (t) => {
    if (!requireHost(t, { root: true, commands: ['bash'] })) return;
    // Each subshell runs a list (execute_command per part) and says its pid; so does the shell.
    const script = 'for i in 1 2 3; do (echo sub=$BASHPID; true); done; echo main=$$';
    const run = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '--by',
      'pid',
      '-c',
      `bash -c '${script}'`,
      'bash:execute_command',
    ]);
    assert.equal(run.status, 0, run.stderr);
    const said = [...run.stdout.matchAll(/^(?:sub|main)=(\d+)$/gm)].map((m) => Number(m[1]));
    assert.equal(said.length, 4, run.stdout);
    const rows = lastJson<{ key: number; count: number }[]>(run.stdout);
    assert.deepEqual(
      rows.map((r) => r.key).sort((a, b) => a - b),
      said.sort((a, b) => a - b),
      run.stdout,
    );
  });
});

describe('latency --filter is decided at each call', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    // Returns caught through the trampoline, or at the function's exits (frames paired by
    // stack pointer): the decision is carried either way.
    for (const returns of ['trampoline', 'sites'] as const) {
      test(`latency --filter (${engine}, returns at ${returns}): on an argument, decided at the entry; on the return value, at the return`, (t) => {
        if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
        const app = target();
        // procs_work(200001) returns 3 * (200001 + 7): the same calls, picked either way.
        for (const filter of ['arg0 == 200001', 'retval == 600024']) {
          const run = runCli([
            'latency',
            '--engine',
            engine,
            '--return-probes',
            returns,
            '--json',
            '--command-output',
            'inherit',
            '-c',
            `${app} args 900`,
            `${app}:procs_work`,
            '--filter',
            filter,
          ]);
          assert.equal(run.status, 0, run.stderr);
          const wanted = Number(/^calls=900 wanted=(\d+)$/m.exec(run.stdout)?.[1]);
          assert.equal(wanted, 300, run.stdout);
          const [timed] = lastJson<{ count: number }[]>(run.stdout);
          assert.equal(timed?.count, wanted, `${filter}\n${run.stdout}`);
        }
      });
    }
  }
});

describe('a run over every process leaves upscope out', () => {
  test("count --by pid, trace on tracefs and on bpf: none of upscope's own hits; --include-self takes them", async (t) => {
    if (!requireHost(t, { root: true })) return;
    const dir = mkdtempSync(join(tmpdir(), 'upscope-self-'));
    try {
      /** Run upscope over every process for 2 s; its pid and the pids it saw. */
      const pidsSeen = async (args: string[], read: (stdout: string) => number[]) => {
        const began = performance.now();
        const running = spawnUpscope([...args, '--duration', '2']);
        const exit = await ended(running, 120_000);
        const seconds = (performance.now() - began) / 1000;
        t.diagnostic(`${args.slice(0, 3).join(' ')}: ended after ${seconds.toFixed(1)} s`);
        assert.equal(exit.code, 0, running.stderr);
        return { self: running.pid, seen: new Set(read(running.stdout)) };
      };
      const counted = (stdout: string) => lastJson<{ key: number }[]>(stdout).map((row) => row.key);
      // Text lines (`TIME COMM PID/TID malloc`) are the cheapest to write: other processes
      // may call malloc millions of times while this runs.
      const traced = (file: string) => () =>
        [...readFileSync(file, 'utf8').matchAll(/ (\d+)\/\d+ malloc$/gm)].map((m) => Number(m[1]));

      const count = await pidsSeen(['count', '--json', '--by', 'pid', 'libc:malloc'], counted);
      assert.ok(count.seen.size > 0, 'malloc is called on this machine');
      assert.equal(count.seen.has(count.self), false, 'upscope counted itself');
      for (const engine of ['tracefs', 'bpf']) {
        const file = join(dir, `${engine}.txt`);
        const trace = await pidsSeen(
          ['trace', '--engine', engine, '--buffer-size', '512', '-o', file, 'libc:malloc'],
          traced(file),
        );
        assert.ok(trace.seen.size > 0, `malloc is traced (${engine})`);
        assert.equal(trace.seen.has(trace.self), false, `upscope traced itself (${engine})`);
      }

      // Asked for, upscope's own calls are there (so the check above can fail).
      const own = await pidsSeen(
        ['count', '--json', '--by', 'pid', '--include-self', 'libc:malloc'],
        counted,
      );
      assert.equal(own.seen.has(own.self), true, 'upscope --include-self counted itself');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
