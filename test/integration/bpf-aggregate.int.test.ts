import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { Tracer } from '../../src/api/index.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

interface Account {
  pid: number;
  calls: number;
  sum: number;
  retSum: number;
  retNegative: number;
  min: number;
  max: number;
  keys: number[];
  linear: number[];
  rows: Record<string, number>;
}

interface JsonHistogram {
  probe: string;
  count: number;
  sum?: number;
  min?: number;
  max?: number;
  buckets: { low: number | null; high: number | null; count: number }[];
}

function target(): string {
  return compileProgram('bpf-target', { flags: ['-O2'], link: ['-lpthread'] });
}

/** The target's own account (its first JSON line) and upscope's JSON (the last). */
function outputs<T>(stdout: string): { account: Account; result: T } {
  const lines = stdout.split('\n').filter((l) => l.startsWith('{') || l.startsWith('['));
  return { account: JSON.parse(lines[0]!), result: JSON.parse(lines.at(-1)!) };
}

function started(args: string[]): { child: ChildProcess; stdout: Promise<string> } {
  const child = spawn(args[0]!, args.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  const stdout = once(child, 'exit').then(() => text);
  return { child, stdout };
}

function bucketsByLow(h: JsonHistogram): Record<string, number> {
  const out: Record<string, number> = {};
  for (const b of h.buckets) if (b.count > 0) out[String(b.low)] = b.count;
  return out;
}

/**
 * That calls bucketed as `actual` (by low bound) are each at least as long as in `floor` and at
 * most as long as in `ceiling`: at every bucket, the calls in it and above are between
 * `floor`'s and `ceiling`'s, and they are as many in all.
 */
function assertBetween(
  actual: Record<string, number>,
  floor: Record<string, number>,
  ceiling: Record<string, number>,
): void {
  const lows = [
    ...new Set([...Object.keys(actual), ...Object.keys(floor), ...Object.keys(ceiling)]),
  ]
    .map(Number)
    .sort((a, b) => a - b);
  const atLeast = (h: Record<string, number>, low: number) =>
    Object.entries(h).reduce((n, [at, count]) => (Number(at) >= low ? n + count : n), 0);
  const what = `${JSON.stringify(actual)} between ${JSON.stringify(floor)} and ${JSON.stringify(ceiling)}`;
  for (const low of lows) {
    assert.ok(atLeast(actual, low) >= atLeast(floor, low), `${what}: at ${low} and above`);
    assert.ok(atLeast(actual, low) <= atLeast(ceiling, low), `${what}: at ${low} and above`);
  }
  assert.equal(atLeast(actual, 0), atLeast(ceiling, 0), what);
}

/**
 * Run the CLI; once its start line is out ("Counting ..."), SIGUSR1 ends the wait of the
 * `waiting` targets (started with a long delay): they start their calls only when the probes
 * are in, however long upscope takes to start on a loaded machine.
 */
function startedCli(
  args: string[],
  waiting: readonly ChildProcess[],
): { child: ChildProcess; stdout: Promise<string> } {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  let errors = '';
  let signalled = false;
  child.stdout!.on('data', (chunk: Buffer) => {
    text += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    process.stderr.write(chunk);
    errors += chunk.toString();
    if (!signalled && /^(Counting|Tracing) /m.test(errors)) {
      signalled = true;
      for (const target of waiting) target.kill('SIGUSR1');
    }
  });
  const stdout = once(child, 'exit').then(() => text);
  return { child, stdout };
}

/** How long a target waits for upscope's start at most (SIGUSR1 ends the wait). */
const START_WAIT_MS = '60000';

const spawned: ChildProcess[] = [];

afterEach(() => {
  for (const child of spawned.splice(0)) child.kill('SIGKILL');
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

describe('upscope count (bpf engine)', () => {
  test('counts every entry and return exactly, from 2 threads, in the command only while a bystander runs the same code', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const bystander = started([app, 'spin', '4']);
    spawned.push(bystander.child);
    const result = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} hammer 20000 0`,
      `${app}:bpf_hit`,
      `r:${app}:bpf_hit`,
      `${app}:bpf_key`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stderr, /Counting 3 probes \(bpf, uprobe_multi/);
    const { account, result: rows } = outputs<{ probe: string; count: number }[]>(result.stdout);
    assert.equal(account.calls, 40000);
    assert.deepEqual(Object.fromEntries(rows.map((r) => [r.probe, r.count])), {
      bpf_hit: account.calls,
      'r:bpf_hit': account.calls,
      bpf_key: account.calls,
    });
    assert.equal(bystander.child.exitCode, null, 'the bystander runs on unharmed');
  });

  test('--by arg0 counts per value, --filter counts only the hits it admits', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const byKey = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '--by',
      'arg0:s32',
      '-c',
      `${app} hammer 3000 0`,
      `${app}:bpf_key`,
    ]);
    assert.equal(byKey.status, 0, byKey.stderr);
    const keyed = outputs<{ key: number; count: number }[]>(byKey.stdout);
    const counts = [0, 0, 0];
    for (const row of keyed.result) counts[row.key] = row.count;
    assert.deepEqual(counts, keyed.account.keys);

    const filtered = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '--filter',
      'arg0 < 64',
      '-c',
      `${app} hammer 3000 0`,
      `${app}:bpf_hit`,
    ]);
    assert.equal(filtered.status, 0, filtered.stderr);
    const { account, result } = outputs<{ count: number }[]>(filtered.stdout);
    // Values below 64 are the target's rows [0], [1], [2,4) ... [32,64).
    const below = ['0', '1', '2', '4', '8', '16', '32'].reduce(
      (n, low) => n + (account.rows[low] ?? 0),
      0,
    );
    assert.ok(below > 0);
    assert.equal(result[0]?.count, below);
  });

  test('-p counts one process while another runs the same program', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const traced = started([app, 'hammer', '5000', START_WAIT_MS]);
    const other = started([app, 'hammer', '7000', START_WAIT_MS]);
    spawned.push(traced.child, other.child);
    const cli = startedCli(
      ['count', '--json', '-p', String(traced.child.pid), `${app}:bpf_hit`],
      [traced.child, other.child],
    );
    const [tracedOut, otherOut, cliOut] = await Promise.all([
      traced.stdout,
      other.stdout,
      cli.stdout,
    ]);
    assert.equal(cli.child.exitCode, 0);
    const account: Account = JSON.parse(tracedOut);
    assert.equal(JSON.parse(otherOut).calls, 14000);
    const rows: { count: number }[] = JSON.parse(cliOut.trim().split('\n').at(-1)!);
    assert.equal(rows[0]?.count, account.calls);
  });

  for (const how of ['-c', '-p'] as const) {
    test(`--by ustack (${how}): each call path its own stack, named, with the caller of an entry probe`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram('bpf-stacks', { flags: ['-O2', '-fno-omit-frame-pointer'] });
      const name = app.slice(app.lastIndexOf('/') + 1);
      // -c: a command that ends within milliseconds; -p: a process that waits for upscope.
      const traced = how === '-c' ? undefined : started([app, '300', '200', START_WAIT_MS, '1500']);
      if (traced !== undefined) spawned.push(traced.child);
      const target = how === '-c' ? `${app} 300 200 0` : String(traced!.child.pid);
      const cli = startedCli(
        [
          'count',
          '--json',
          '--command-output',
          'inherit',
          '--by',
          'ustack',
          how,
          target,
          `${app}:stack_leaf`,
        ],
        traced === undefined ? [] : [traced.child],
      );
      const [cliOut, tracedOut] = await Promise.all([cli.stdout, traced?.stdout]);
      assert.equal(cli.child.exitCode, 0);
      const lines = cliOut.trim().split('\n');
      const account = JSON.parse(tracedOut ?? lines[0]!);
      const rows: { key: string; frames: string[]; pid: number; count: number }[] = JSON.parse(
        lines.at(-1)!,
      );
      // via_a's one call site, and via_b's two: three stacks, each named to its caller.
      assert.equal(rows.length, 3, cliOut);
      const callers = new Map<string, number>();
      for (const row of rows) {
        assert.equal(row.frames[0], `stack_leaf (${name})`);
        assert.match(row.frames[2]!, new RegExp(`^main\\+0x[0-9a-f]+ \\(${name}\\)$`));
        // The folded key: the frames' function names, outermost first.
        const names = row.frames.map((f) => f.replace(/(\+0x[0-9a-f]+)? \([^()]+\)$/, ''));
        assert.equal(row.key, names.toReversed().join(';'));
        const caller = /^(via_[ab])\+0x[0-9a-f]+ /.exec(row.frames[1]!)?.[1];
        assert.ok(caller !== undefined, row.frames[1]);
        callers.set(caller, (callers.get(caller) ?? 0) + row.count);
      }
      assert.equal(callers.get('via_a'), account.via_a);
      assert.equal(callers.get('via_b'), account.via_b * 2);
      if (how === '-p') {
        // A process whose map was read: libc's frames are named too.
        assert.ok(rows.every((row) => row.frames.some((f) => /\(libc\.so\.6\)$/.test(f))));
      }
    });
  }
});

describe('without BPF: the ptrace engine for one process', () => {
  test('as an unprivileged user, count, hist and latency of a command run on ptrace, with the same numbers', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
    const app = target();
    const run = (args: string[]) => {
      const result = runCli(args, { asNobody: true });
      assert.equal(result.status, 0, result.stderr);
      assert.match(result.stderr, /BPF is not allowed here: using the ptrace engine/);
      return result;
    };
    const counted = run([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '--by',
      'arg0',
      '-c',
      `${app} hammer 300 0`,
      `${app}:bpf_key`,
    ]);
    const { account: keyed, result: rows } = outputs<{ key: number; count: number }[]>(
      counted.stdout,
    );
    assert.deepEqual(
      Object.fromEntries(rows.map((r) => [r.key, r.count])),
      Object.fromEntries(keyed.keys.map((n, k) => [k, n])),
    );
    const hist = run([
      'hist',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} hammer 300 0`,
      `${app}:bpf_hit`,
      'arg0',
    ]);
    const { account, result: hists } = outputs<JsonHistogram[]>(hist.stdout);
    const h = hists[0]!;
    assert.deepEqual(
      { count: h.count, sum: h.sum, min: h.min, max: h.max },
      { count: account.calls, sum: account.sum, min: account.min, max: account.max },
    );
    assert.deepEqual(bucketsByLow(h), account.rows);
    const timed = run([
      'latency',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} nap 0`,
      `${app}:bpf_nap`,
    ]);
    const naps: JsonHistogram[] = JSON.parse(timed.stdout.trim().split('\n').at(-1)!);
    // 4 naps of 2.1 ms, 3 of 4.2, 2 of 8.4: each timed at least as long as it slept (a
    // return served in user space can add milliseconds on a loaded machine).
    const nap = naps[0]! as JsonHistogram & { minNs: number };
    assert.equal(nap.count, 9);
    assert.ok(nap.minNs >= 2_100_000, `min ${nap.minNs} ns`);
    const atLeast = (low: number) =>
      nap.buckets.filter((b) => (b.low ?? 0) >= low).reduce((sum, b) => sum + b.count, 0);
    assert.ok(atLeast(4096) >= 5 && atLeast(8192) >= 2, JSON.stringify(nap.buckets));
  });
});

describe('upscope hist (bpf engine)', () => {
  test('log2 buckets, count, sum, min and max equal the target’s own', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const result = runCli([
      'hist',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} hammer 20000 0`,
      `${app}:bpf_hit`,
      'arg0',
    ]);
    assert.equal(result.status, 0, result.stderr);
    const { account, result: hists } = outputs<JsonHistogram[]>(result.stdout);
    const h = hists[0]!;
    assert.deepEqual(
      { count: h.count, sum: h.sum, min: h.min, max: h.max },
      { count: account.calls, sum: account.sum, min: account.min, max: account.max },
    );
    assert.deepEqual(bucketsByLow(h), account.rows);
  });

  test('signed return values: sum and negative buckets; linear buckets', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const signed = runCli([
      'hist',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} hammer 5000 0`,
      `r:${app}:bpf_hit`,
      'retval:s64',
    ]);
    assert.equal(signed.status, 0, signed.stderr);
    const { account, result } = outputs<JsonHistogram[]>(signed.stdout);
    const h = result[0]!;
    assert.equal(h.count, account.calls);
    assert.equal(h.sum, account.retSum);
    assert.equal(h.min, account.min - 2500);
    assert.equal(h.max, account.max - 2500);
    const negative = h.buckets.filter((b) => b.high !== null && b.high <= 0);
    assert.equal(
      negative.reduce((n, b) => n + b.count, 0),
      account.retNegative,
    );

    const linear = runCli([
      'hist',
      '--json',
      '--command-output',
      'inherit',
      '--linear',
      '0,5000,500',
      '-c',
      `${app} hammer 5000 0`,
      `${app}:bpf_hit`,
      'arg0',
    ]);
    assert.equal(linear.status, 0, linear.stderr);
    const lin = outputs<JsonHistogram[]>(linear.stdout);
    const expected: Record<string, number> = {};
    lin.account.linear.forEach((count, i) => {
      if (count > 0) expected[String(i * 500)] = count;
    });
    assert.deepEqual(bucketsByLow(lin.result[0]!), expected);
  });
});

describe('upscope latency (bpf engine)', () => {
  test('puts each call in its bucket, with recursion and 2 threads kept apart', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const result = runCli([
      'latency',
      '--json',
      '--command-output',
      'inherit',
      '--unit',
      'us',
      '-c',
      `${app} nap 0`,
      `${app}:bpf_nap`,
      `${app}:bpf_recurse`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.doesNotMatch(result.stderr, /without their entry/);
    const { account, result: hists } = outputs<JsonHistogram[]>(result.stdout);
    const by = Object.fromEntries(hists.map((h) => [h.probe, h]));
    // Each call no shorter than its sleeps (2.1, 4.2 and 8.4 ms; 6.3, 4.2 and 2.1 ms nested)
    // and no longer than the target measured around it: the probes' times are inside the
    // target's, which on a loaded machine may hold a wait before or after the call.
    const own = account as unknown as Record<'naps' | 'recursions', Record<string, number>>;
    assertBetween(bucketsByLow(by['bpf_nap']!), { 2048: 4, 4096: 3, 8192: 2 }, own.naps);
    assertBetween(bucketsByLow(by['bpf_recurse']!), { 2048: 2, 4096: 4 }, own.recursions);
    assert.equal(by['bpf_nap']!.count, 9);
    assert.equal(by['bpf_recurse']!.count, 6);
    const text = runCli(['latency', '-c', `${app} nap 0`, `${app}:bpf_nap`]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(
      text.stdout,
      /^bpf_nap: count 9, avg \d+\.\d{3} ms, min \d\.\d{3} ms, p50 .*, max \d+\.\d{3} ms$/m,
    );
    assert.match(text.stdout, /^\[\d+K, \d+K\) +\d \|@+ *\|$/m);
  });
});

// A string key longer than the key (63 bytes and its NUL) was cut without a mark, and strings
// that began alike were counted as one: a cut one now ends with "...", as trace marks one.
describe('upscope count --by a string (bpf engine)', () => {
  test('a key longer than 63 bytes ends with "..."; one of 63 is whole (the program\'s own string)', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram(new URL('../programs/ifunc-calls.c', import.meta.url).pathname, {
      flags: ['-O2', '-fno-builtin'],
    });
    for (const length of [62, 63, 64, 200]) {
      const result = runCli([
        'count',
        '--json',
        '--by',
        'arg0:string',
        '-c',
        `${app} 3 ${length}`,
        'libc:strlen',
      ]);
      assert.equal(result.status, 0, result.stderr);
      const rows = JSON.parse(result.stdout) as { key?: string; count: number }[];
      const ours = rows.filter((r) => typeof r.key === 'string' && r.key.startsWith('xx'));
      const key = length <= 63 ? 'x'.repeat(length) : `${'x'.repeat(63)}...`;
      assert.deepEqual(
        ours.map((r) => [r.key, r.count]),
        [[key, 3]],
        `${length} bytes: ${result.stdout}`,
      );
    }
  });
});

// A function whose first instruction the kernel single-steps is timed from before that trap
// (13 us and more in a VM): latency says which, objdump's first instructions the truth (the
// kernel emulates a push and a jmp; a mov or a lea it runs out of line).
describe('upscope latency says which functions the kernel single-steps at entry', () => {
  test('bpf_key (mov) and bpf_hit (lea) are named, bpf_nap (jmp) and bpf_recurse (push) not', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
    const app = target();
    const text = execFileSync('objdump', ['-d', '--no-show-raw-insn', app], { encoding: 'utf8' });
    const first = new Map(
      [...text.matchAll(/^[0-9a-f]+ <(bpf_\w+)>:\n\s+[0-9a-f]+:\s+(\S+)/gm)].map((m) => [
        m[1]!,
        m[2]!,
      ]),
    );
    const functions = ['bpf_nap', 'bpf_recurse', 'bpf_key', 'bpf_hit'];
    const stepped = functions.filter((fn) => !/^(push|jmp|call|nop)/.test(first.get(fn)!));
    assert.deepEqual(
      functions.map((fn) => first.get(fn)),
      ['jmp', 'push', 'mov', 'lea'],
      'what gcc made of them',
    );
    const result = runCli([
      'latency',
      '-c',
      `${app} nap 0`,
      ...functions.map((f) => `${app}:${f}`),
    ]);
    assert.equal(result.status, 0, result.stderr);
    const note = result.stderr.split('\n').find((l) => l.includes('single-steps')) ?? '';
    assert.match(
      note,
      new RegExp(
        `^upscope: the kernel single-steps the first instruction of ${stepped.length} of the 4 functions timed \\(`,
      ),
    );
    for (const fn of functions) {
      assert.equal(
        note.includes(`${fn}: ${first.get(fn)}`),
        stepped.includes(fn),
        `${fn}: ${note}`,
      );
    }
    // Only emulated ones: nothing said.
    const quiet = runCli(['latency', '-c', `${app} nap 0`, `${app}:bpf_nap`, `${app}:bpf_recurse`]);
    assert.equal(quiet.status, 0, quiet.stderr);
    assert.doesNotMatch(quiet.stderr, /single-steps/);
    // trace times a return from its function's entry: the same is said of its return probes
    // (not of an entry probe, which times nothing).
    const trace = runCli([
      'trace',
      '--engine',
      'tracefs',
      '-c',
      `${app} nap 0`,
      `r:${app}:bpf_nap`,
      `r:${app}:bpf_key`,
      `${app}:bpf_hit`,
    ]);
    assert.equal(trace.status, 0, trace.stderr);
    assert.match(
      trace.stderr,
      /^upscope: the kernel single-steps the first instruction \("mov"\) of bpf_key: /m,
    );
  });
});

function manyFunctions(count: number): string {
  const lines = ['#include <stdio.h>'];
  for (let i = 0; i < count; i++) {
    lines.push(
      `__attribute__((noinline)) int gen_f${i}(int x) { __asm__ volatile(""); return x + ${i}; }`,
    );
  }
  lines.push('int main(void) {', '  long total = 0;');
  for (let i = 0; i < count; i++) {
    lines.push(`  for (int k = 0; k < ${(i % 3) + 1}; k++) total += gen_f${i}(k);`);
  }
  lines.push('  printf("%ld\\n", total);', '  return 0;', '}');
  const file = join(tmpdir(), `upscope-many-${count}.c`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

describe('attaching many probes (bpf engine)', () => {
  // Closing a perf uprobe event waits for the kernel (about 90 ms each on this kernel, one at a
  // time), so the fallback is tested on fewer functions; uprobe_multi detaches all at once.
  for (const [mode, functions] of [
    ['multi', 1000],
    ['perf', 25],
  ] as const) {
    test(`${functions} functions attach, count exactly and detach (${mode === 'multi' ? 'uprobe_multi' : 'one perf event each, the fallback'})`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram(manyFunctions(functions), { flags: ['-O1'] });
      const aggregate = await new Tracer().count(`${app}:gen_f*`, { command: app, attach: mode });
      try {
        const report = aggregate.attachReport;
        assert.equal(report.probes, functions);
        assert.equal(mode === 'multi' ? report.multi : report.perf, functions);
        await aggregate.ended;
        assert.equal(aggregate.exit?.code, 0);
        const rows = aggregate.read();
        assert.equal(rows.length, functions);
        for (const row of rows) {
          const i = Number(/^gen_f(\d+)$/.exec(row.probe)?.[1]);
          assert.equal(row.count, BigInt((i % 3) + 1), row.probe);
        }
        t.diagnostic(
          `${mode}: attached ${report.probes} probes in ${report.milliseconds.toFixed(1)} ms`,
        );
      } finally {
        aggregate.close();
      }
    });
  }
});

describe('bpf engine errors', () => {
  test('as an unprivileged user on every process: one line naming the missing capability', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
    const app = target();
    const result = runCli(['count', '--duration', '5', `${app}:bpf_hit`], { asNobody: true });
    assert.equal(result.status, 5, result.stderr);
    const lines = result.stderr.trim().split('\n');
    assert.match(lines[0]!, /^error\[ERR_PRIVILEGES\]: Cannot create BPF map "\w+": EPERM/);
    assert.match(result.stderr, /CAP_BPF and CAP_PERFMON/);
    assert.match(result.stderr, /--engine ptrace/);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  });
});
