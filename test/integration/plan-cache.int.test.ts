// The plans `upscope record` keeps of a program's functions (trace, count, hist and latency
// too; see src/plan/plan-cache.ts): a recording made with a kept plan records what one made
// without it does, a rebuilt program is planned again, and a damaged or unusable cache is no
// failure.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { ended, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

const work = mkdtempSync(join(tmpdir(), 'upscope-plan-cache-test-'));
const cache = join(work, 'cache');
const plans = join(cache, 'plans');
const saved = process.env.UPSCOPE_CACHE_DIR;
before(() => {
  process.env.UPSCOPE_CACHE_DIR = cache;
});
after(() => {
  if (saved === undefined) delete process.env.UPSCOPE_CACHE_DIR;
  else process.env.UPSCOPE_CACHE_DIR = saved;
  rmSync(work, { recursive: true, force: true });
});

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

/**
 * hot.c built for this file alone (a define it does not read makes it a file of its own):
 * calls.int records the same program on the inject engine meanwhile, and this file's kernel
 * uprobes on a shared file would be in its process as another tracer's breakpoints.
 */
function ownHot(): string {
  return compileProgram(new URL('../../bench/programs/hot.c', import.meta.url).pathname, {
    flags: ['-O2', '-DUPSCOPE_PLAN_CACHE_TEST'],
    link: ['-lpthread'],
  });
}

/** The kept plans (in the test's cache, or `dir`): name and modification time. */
function keptPlans(dir = plans): Map<string, number> {
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.plan'));
  } catch {
    // none yet
  }
  return new Map(names.map((n) => [n, statSync(join(dir, n)).mtimeMs]));
}

/** runCli() with the plans kept in `dir`, not in the test's cache. */
function runCached(dir: string, args: readonly string[]): ReturnType<typeof runCli> {
  process.env.UPSCOPE_CACHE_DIR = dir;
  try {
    return runCli(args);
  } finally {
    process.env.UPSCOPE_CACHE_DIR = cache;
  }
}

/** `upscope record` (bpf) of `command`: per function, its calls and unwound calls. */
function recordCounts(
  command: string,
  targets: string[],
): {
  counts: Record<string, [number, number]>;
  stdout: string;
  stderr: string;
} {
  const dir = join(work, `rec-${readdirSync(work).length}`);
  const result = runCli(['record', '-c', command, '-o', dir, ...targets]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stderr, /, 0 lost\n/);
  const report = runCli(['report', dir, '--json']);
  assert.equal(report.status, 0, report.stderr);
  const rows = JSON.parse(report.stdout) as { function: string; calls: number; unwound: number }[];
  return {
    counts: Object.fromEntries(rows.map((r) => [r.function, [r.calls, r.unwound]])),
    stdout: result.stdout,
    stderr: result.stderr,
  };
}

/** Records twice: the first plans and keeps the plans, the second takes them (unchanged). */
function twice(
  command: string,
  targets: string[],
  check: (run: ReturnType<typeof recordCounts>) => void,
): void {
  const before = keptPlans();
  const first = recordCounts(command, targets);
  check(first);
  const made = keptPlans();
  const added = [...made.keys()].filter((name) => !before.has(name));
  assert.equal(added.length, 2, 'a plan kept for the entries and one for the returns');
  const second = recordCounts(command, targets);
  check(second);
  for (const name of added) {
    assert.equal(keptPlans().get(name), made.get(name), 'the kept plan was taken, not made again');
  }
}

describe('upscope record: plans kept of the functions of a program', () => {
  test('C: a recording with the kept plan counts every call as the program does', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const hot = ownHot();
    twice(`${hot} 20000`, [`${hot}:hot_*`], (run) => {
      const own = Number(/calls=(\d+)/.exec(run.stderr)?.[1]);
      assert.equal(own, 20000, run.stderr);
      assert.deepEqual(run.counts['hot_function'], [own, 0]);
    });
  });

  test('C++: an exception through 3 recorded frames: the kept plan catches the same returns and unwinds', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++'] })) return;
    const app = compileProgram('cxx-unwind', { flags: ['-O2'], link: ['-lpthread'] });
    twice(`${app} throw 30`, [`${app}:level*`, `${app}:leaf`], (run) => {
      const said = /calls=(\d+),(\d+),(\d+) returns=(\d+),(\d+),(\d+)/.exec(run.stdout);
      assert.ok(said, run.stdout);
      const [c1, c2, c3, r1, r2, r3] = said.slice(1).map(Number);
      assert.deepEqual(run.counts['level1(long)'], [c1, c1! - r1!]);
      assert.deepEqual(run.counts['level2(long)'], [c2, c2! - r2!]);
      assert.deepEqual(run.counts['level3(long)'], [c3, c3! - r3!]);
      assert.ok(c1! > r1!, 'some calls were unwound');
    });
  });

  test('Rust: a panic caught through a recorded function: the kept plan catches the same returns and unwinds', (t) => {
    const rustc = findRustc();
    if (!requireHost(t, { root: true, commands: rustc === undefined ? ['rustc'] : [] })) return;
    const app = compileRust(rustc!, 'rust-unwind', ['-C', 'opt-level=1']);
    twice(`${app} 300`, [`${app}:rust_unwind*`], (run) => {
      const own = /calls=(\d+) returns=(\d+)/.exec(run.stdout)!;
      const [calls, returns] = own.slice(1).map(Number);
      assert.deepEqual(run.counts['rust_unwind_probed'], [calls, calls! - returns!]);
    });
  });

  test('Go: planned each time (its entries follow the stack check), no plan kept; calls as the program counts them', (t) => {
    const go = findGo();
    if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
    const app = compileGo(go!, 'go-returns');
    const before = keptPlans();
    for (let round = 0; round < 2; round++) {
      const run = recordCounts(`${app} panic 300`, [`${app}:main.*`]);
      const own = /calls=(\d+) returns=(\d+)/.exec(run.stdout)!;
      const [calls, returns] = own.slice(1).map(Number);
      assert.deepEqual(run.counts['main.mayPanic'], [calls, calls! - returns!]);
    }
    assert.deepEqual([...keptPlans().keys()], [...before.keys()]);
  });

  test('a program rebuilt at the same path is planned again: its new function is recorded', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const dir = join(work, 'rebuilt');
    mkdirSync(dir, { recursive: true });
    const app = join(dir, 'app');
    const build = (extra: boolean) => {
      const source = join(dir, 'app.c');
      writeFileSync(
        source,
        `#include <stdio.h>
__attribute__((noinline)) int one(int x) { return x + 1; }
${extra ? '__attribute__((noinline)) int two(int x) { return x * 2; }' : ''}
int main(void) {
  int n = 0;
  for (int i = 0; i < 50; i++) n = one(n);
  ${extra ? 'for (int i = 0; i < 7; i++) n = two(n) % 1000;' : ''}
  printf("%d\\n", n);
  return 0;
}
`,
      );
      execFileSync('gcc', ['-O1', '-o', app, source]);
    };
    build(false);
    const first = recordCounts(app, []);
    assert.deepEqual(first.counts['one'], [50, 0]);
    assert.equal(first.counts['two'], undefined);
    build(true);
    const second = recordCounts(app, []);
    assert.deepEqual(second.counts['one'], [50, 0]);
    assert.deepEqual(second.counts['two'], [7, 0]);
  });

  test('a recording killed as soon as it says its probes are live has kept its plans', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const hot = ownHot();
    // 100 calls a second: it runs on until the test ends it.
    const target = spawnCollected(hot, ['100000000', '1', '100']);
    const own = join(work, 'own-cache');
    try {
      const run = spawnUpscope(
        ['record', '-p', String(target.pid), `${hot}:hot_*`, '-o', join(work, 'killed')],
        { UPSCOPE_CACHE_DIR: own },
      );
      await waitFor(run, /^Recording \d+ functions? /m);
      run.child.kill('SIGKILL');
      await ended(run);
      assert.equal(
        readdirSync(join(own, 'plans')).filter((name) => name.endsWith('.plan')).length,
        2,
        'the plans of the entries and of the returns',
      );
    } finally {
      target.child.kill('SIGKILL');
      await ended(target);
    }
  });

  test('count and latency keep plans of a pattern too, each its own: a second run takes it and counts every call', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const hot = ownHot();
    // A cache of its own: a recording's plan of the same entries is count's (the same plan).
    const own = join(work, 'aggregate-cache');
    const ownPlans = join(own, 'plans');
    const aggregate = (command: 'count' | 'latency') => {
      const result = runCached(own, [command, '--json', '-c', `${hot} 20000`, `${hot}:hot_*`]);
      assert.equal(result.status, 0, result.stderr);
      const calls = Number(/calls=(\d+)/.exec(result.stderr)?.[1]);
      assert.equal(calls, 20000, result.stderr);
      const rows = JSON.parse(result.stdout) as { probe: string; count: number; p50Ns?: number }[];
      return { calls, row: rows.find((r) => r.probe === 'hot_function') };
    };
    for (const command of ['count', 'latency'] as const) {
      const before = keptPlans(ownPlans);
      const first = aggregate(command);
      assert.equal(first.row?.count, first.calls, `${command} counts every call`);
      const made = keptPlans(ownPlans);
      const added = [...made.keys()].filter((name) => !before.has(name));
      // latency's plan has each function's returns, count's has not: not taken for the other.
      assert.equal(added.length, 1, `${command} keeps a plan of its own`);
      const second = aggregate(command);
      assert.equal(second.row?.count, second.calls, `${command} with the kept plan`);
      if (command === 'latency')
        assert.ok(second.row!.p50Ns! > 0, 'calls are timed to their returns');
      assert.equal(
        keptPlans(ownPlans).get(added[0]!),
        made.get(added[0]!),
        'the kept plan was taken',
      );
    }
  });

  test('trace keeps the plans of its patterns: a second run takes them and shows every call and return', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const hot = ownHot();
    const own = join(work, 'trace-cache');
    const ownPlans = join(own, 'plans');
    const trace = () => {
      const result = runCached(own, [
        'trace',
        '-c',
        `${hot} 2000`,
        `${hot}:hot_*`,
        `r:${hot}:hot_*`,
      ]);
      assert.equal(result.status, 0, result.stderr);
      assert.match(result.stderr, /calls=2000 /);
      const lines = result.stdout.split('\n');
      assert.equal(lines.filter((l) => / hot_function$/.test(l)).length, 2000, 'every call');
      assert.equal(lines.filter((l) => / r:hot_function \(/.test(l)).length, 2000, 'every return');
    };
    trace();
    const made = keptPlans(ownPlans);
    assert.equal(made.size, 2, 'a plan kept for the entries and one for the returns');
    trace();
    assert.deepEqual(keptPlans(ownPlans), made, 'the kept plans were taken, not made again');
  });

  test('damaged kept plans are planned again and rewritten; a cache directory that cannot be made is no failure', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const hot = ownHot();
    const target = [`${hot}:hot_func*`];
    const before = keptPlans();
    recordCounts(`${hot} 1000`, target);
    const kept = [...keptPlans().keys()].filter((name) => !before.has(name));
    assert.equal(kept.length, 2);
    const made = new Map(kept.map((name) => [name, readFileSync(join(plans, name))]));
    for (const [name, bytes] of made) writeFileSync(join(plans, name), bytes.subarray(0, 40));
    const run = recordCounts(`${hot} 1000`, target);
    assert.deepEqual(run.counts['hot_function'], [1000, 0]);
    for (const [name, bytes] of made) {
      assert.deepEqual(readFileSync(join(plans, name)), bytes, `${name} is written again`);
    }
    // A file where the cache directory would be: planned, recorded, nothing said of it.
    const blocked = join(work, 'not-a-dir');
    writeFileSync(blocked, 'x');
    process.env.UPSCOPE_CACHE_DIR = blocked;
    try {
      const unkept = recordCounts(`${hot} 1000`, target);
      assert.deepEqual(unkept.counts['hot_function'], [1000, 0]);
      assert.doesNotMatch(unkept.stderr, /ENOTDIR|not a directory|error/i);
    } finally {
      process.env.UPSCOPE_CACHE_DIR = cache;
    }
  });
});
