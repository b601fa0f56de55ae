import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;
type Engine = (typeof ENGINES)[number];

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function cxx(t: Parameters<typeof requireHost>[0]): string | undefined {
  if (!requireHost(t, { root: true, commands: ['g++'] })) return undefined;
  return compileProgram('cxx-unwind', { flags: ['-O2'], link: ['-lpthread'] });
}

/** The `name=value` numbers of the program's line that starts with `word`. */
function account(stdout: string, word: string): { line: string; n: Record<string, number[]> } {
  const line = stdout.split('\n').find((l) => l.startsWith(`${word} `));
  assert.ok(line, `the program printed its "${word}" line: ${stdout.slice(0, 400)}`);
  const n = Object.fromEntries(
    [...line.matchAll(/(\w+)=([-\d,]+)/g)].map((m) => [m[1]!, m[2]!.split(',').map(Number)]),
  );
  return { line: `${line}\n`, n };
}

/**
 * Per probe: the returns seen and the calls seen left by an unwind, from `count --json`
 * (bpf, ptrace) or from the events of `trace --json` (tracefs).
 */
function returnsAndUnwinds(
  engine: Engine,
  command: string,
  specs: string[],
): { stdout: string; seen: Record<string, { returns: number; unwound: number }> } {
  const verb = engine === 'tracefs' ? 'trace' : 'count';
  // The command's account is read from stdout, beside upscope's JSON.
  const result = runCli(
    [verb, '--engine', engine, '--json', '--command-output', 'inherit', '-c', command, ...specs],
    { timeoutMs: 600_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  const seen: Record<string, { returns: number; unwound: number }> = {};
  const add = (probe: string, unwound: boolean, n: number) => {
    const name = probe.replace(/^r:/, '');
    seen[name] ??= { returns: 0, unwound: 0 };
    if (unwound) seen[name].unwound += n;
    else seen[name].returns += n;
  };
  const lines = result.stdout.trim().split('\n');
  if (verb === 'trace') {
    for (const line of lines.filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))) {
      const event = JSON.parse(line) as { probe: string; kind: string; exit?: string };
      if (event.kind === 'return') add(event.probe, event.exit === 'unwind', 1);
    }
  } else {
    const rows = JSON.parse(lines.at(-1)!) as { probe: string; count: number; exit?: string }[];
    for (const row of rows) add(row.probe, row.exit === 'unwind', row.count);
  }
  return { stdout: result.stdout, seen };
}

describe('return probes where an unwinder passes: C++ exceptions, pthread_cancel, Rust panics', () => {
  for (const engine of ENGINES) {
    test(`${engine}: an exception thrown through 3 probed frames is caught above them; returns + unwinds = calls`, (t) => {
      const app = cxx(t);
      if (app === undefined) return;
      const n = engine === 'ptrace' ? 30 : 3000;
      const untraced = execFileSync(app, ['throw', String(n)], { encoding: 'utf8' });
      const { stdout, seen } = returnsAndUnwinds(engine, `${app} throw ${n}`, [
        `r:${app}:level1`,
        `r:${app}:level2`,
        `r:${app}:level3`,
      ]);
      const own = account(stdout, 'throw');
      assert.equal(own.line, untraced, 'caught, and cleaned up, as without probes');
      for (const level of [1, 2, 3]) {
        const calls = own.n['calls']![level - 1]!;
        const returns = own.n['returns']![level - 1]!;
        assert.deepEqual(seen[`level${level}(long)`], { returns, unwound: calls - returns });
      }
    });

    test(`${engine}: pthread_cancel of a thread inside probed functions; returns + unwinds = calls`, (t) => {
      const app = cxx(t);
      if (app === undefined) return;
      const n = 5;
      const untraced = execFileSync(app, ['cancel', String(n)], { encoding: 'utf8' });
      const { stdout, seen } = returnsAndUnwinds(engine, `${app} cancel ${n}`, [
        `r:${app}:outer`,
        `r:${app}:blocked`,
      ]);
      const own = account(stdout, 'cancel');
      assert.equal(own.line, untraced, 'every thread cancelled, its destructors run');
      assert.equal(own.n['cancelled']![0], n);
      const [outerCalls, blockedCalls] = own.n['calls']!;
      const [outerReturns, blockedReturns] = own.n['returns']!;
      assert.deepEqual(seen['outer(long)'], {
        returns: outerReturns,
        unwound: outerCalls! - outerReturns!,
      });
      assert.deepEqual(seen['blocked(long)'], {
        returns: blockedReturns,
        unwound: blockedCalls! - blockedReturns!,
      });
    });

    test(`${engine}: a Rust panic caught by catch_unwind through a probed function; returns + unwinds = calls`, (t) => {
      if (!requireHost(t, { root: true })) return;
      const rustc = findRustc();
      if (rustc === undefined) {
        if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      const app = compileRust(rustc, 'rust-unwind', ['-C', 'opt-level=1']);
      const n = engine === 'ptrace' ? 30 : 3000;
      const untraced = execFileSync(app, [String(n)], { encoding: 'utf8' });
      const { stdout, seen } = returnsAndUnwinds(engine, `${app} ${n}`, [
        `r:${app}:rust_unwind_probed`,
      ]);
      const own = account(stdout, 'rust');
      assert.equal(own.line, untraced, 'every panic caught, every guard dropped');
      const calls = own.n['calls']![0]!;
      const returns = own.n['returns']![0]!;
      assert.ok(calls > returns, 'some calls panicked');
      assert.deepEqual(seen['rust_unwind_probed'], { returns, unwound: calls - returns });
    });
  }
});

describe('latency where an unwinder passes: C++ exceptions and Rust panics (bpf and ptrace)', () => {
  /** latency --json of `specs` under `command`: the timed calls per function, and stderr. */
  function timed(engine: 'bpf' | 'ptrace', command: string, specs: string[]) {
    const result = runCli(
      [
        'latency',
        '--engine',
        engine,
        '--json',
        '--command-output',
        'inherit',
        '-c',
        command,
        ...specs,
      ],
      { timeoutMs: 600_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    const lines = result.stdout.trim().split('\n');
    const rows = JSON.parse(lines.at(-1)!) as { probe: string; count: number; minNs?: number }[];
    const unwound = /^upscope: (\d+) calls ended by an unwind .*, not timed$/m.exec(result.stderr);
    return {
      stdout: result.stdout,
      counts: Object.fromEntries(rows.map((row) => [row.probe, row.count])),
      minNs: rows.map((row) => row.minNs ?? 0),
      unwound: Number(unwound?.[1] ?? 0),
      stderr: result.stderr,
    };
  }

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`${engine}: an exception through probed frames: the calls that returned are timed, the others said`, (t) => {
      const app = cxx(t);
      if (app === undefined) return;
      const n = engine === 'ptrace' ? 30 : 3000;
      const run = timed(engine, `${app} throw ${n}`, [`${app}:level1`, `${app}:level3`]);
      const own = account(run.stdout, 'throw');
      const [calls1, , calls3] = own.n['calls']!;
      const [returns1, , returns3] = own.n['returns']!;
      assert.deepEqual(run.counts, { 'level1(long)': returns1, 'level3(long)': returns3 });
      assert.equal(run.unwound, calls1! - returns1! + (calls3! - returns3!), run.stderr);
      assert.ok(run.minNs.every((ns) => ns > 0));
    });

    test(`${engine}: a Rust panic through a probed function: the calls that returned are timed, the others said`, (t) => {
      if (!requireHost(t, { root: true })) return;
      const rustc = findRustc();
      if (rustc === undefined) {
        if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      const app = compileRust(rustc, 'rust-unwind', ['-C', 'opt-level=1']);
      const n = engine === 'ptrace' ? 30 : 3000;
      const run = timed(engine, `${app} ${n}`, [`${app}:rust_unwind_probed`]);
      const own = account(run.stdout, 'rust');
      const calls = own.n['calls']![0]!;
      const returns = own.n['returns']![0]!;
      assert.ok(calls > returns, 'some calls panicked');
      assert.deepEqual(run.counts, { rust_unwind_probed: returns });
      assert.equal(run.unwound, calls - returns, run.stderr);
    });
  }
});
