// Return probes on the inject engine: an entry hook swaps the return address for a return
// trampoline in the process (a per-thread shadow stack keeps the real one), except where
// the plan catches returns at the function's exits (Go; C++ and Rust code an unwinder may
// pass through), which int3s serve. The truth is the target's own counters of calls and
// returns, and the results it computes; afterwards nothing may be left: no traced process,
// no page of ours in a process that runs on, no target process still running.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { COEXIST_TARGETS } from '../helpers/coexist-targets.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { ended, ofThisFile, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

interface JsonEvent {
  probe: string;
  kind: string;
  tid: number;
  fields: Record<string, number | string>;
  latencyNs?: string;
}

/** The C target: recursion, longjmp out of call chains, threads (see its source). */
function target(): string {
  // No sibling-call optimisation: rec() stays a real recursion at -O2.
  return compileProgram('inject-returns', {
    flags: ['-O2', '-fno-optimize-sibling-calls'],
    link: ['-lpthread'],
  });
}

interface Truth {
  rec: [number, number];
  deep: [number, number];
  work: [number, number];
  jumps: number;
  checksum: string;
}

/** The target's own counts of calls and returns, and its checksum. */
function truthOf(stdout: string): Truth {
  const m =
    /^rec (\d+) (\d+) deep (\d+) (\d+) work (\d+) (\d+) jumps (\d+) checksum (-?\d+)$/m.exec(
      stdout,
    );
  assert.ok(m, `the target printed its counts:\n${stdout.slice(-500)}`);
  const n = (i: number) => Number(m[i]);
  return {
    rec: [n(1), n(2)],
    deep: [n(3), n(4)],
    work: [n(5), n(6)],
    jumps: n(7),
    checksum: m[8]!,
  };
}

/** The same run untraced: what the program computes (its checksum) and counts. */
function untraced(app: string, args: readonly string[]): Truth {
  return truthOf(execFileSync(app, args, { encoding: 'utf8' }));
}

/**
 * This file's processes still running this program (none may be left by a test; inject.int
 * and inject-faults.int, which may run beside, run the same programs: a target of
 * inject-faults.int's was once taken for one left here).
 */
function running(app: string): string[] {
  const out = execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((line) => line.includes(app) && ofThisFile(Number.parseInt(line, 10)));
}

function afterwards(app: string): void {
  assert.deepEqual(tracedChildren(), []);
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(running(app), [], 'no target process left running');
}

test('count --engine inject -c: returns through recursion 1,500 deep, longjmp out of call chains, 4 threads: exact, results unchanged', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target();
  const args = ['4', '2000', '1500'];
  const plain = untraced(app, args);
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} ${args.join(' ')}`,
    `r:${app}:rec`,
    `r:${app}:deep`,
    `r:${app}:work`,
    `${app}:rec`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = truthOf(result.stdout);
  assert.deepEqual(truth, plain, 'the program counts and computes what it does untraced');
  assert.ok(truth.jumps > 0 && truth.deep[1] < truth.deep[0], 'some calls were left by longjmp');
  const counted = (probe: string) =>
    Number(new RegExp(`^(\\d+)\\s+${probe.replace(':', '\\:')}$`, 'm').exec(result.stdout)?.[1]);
  assert.equal(counted('r:rec'), truth.rec[1], 'every return of rec, 1,500 deep');
  assert.equal(counted('rec'), truth.rec[0], 'every call of rec');
  assert.equal(counted('r:deep'), truth.deep[1], 'the returns of deep, none of the calls left');
  assert.equal(counted('r:work'), truth.work[1]);
  assert.match(result.stderr, /Counting 4 probes \(inject, process \d+/);
  assert.doesNotMatch(result.stderr, /served by (an )?int3|not counted|not reported/);
  afterwards(app);
});

test('trace --engine inject -c: return values and latencies of each call, paired with its entry', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target();
  const result = runCli([
    'trace',
    '--engine',
    'inject',
    '--json',
    '--command-output',
    'inherit',
    '-c',
    `${app} 1 300 3`,
    `r:${app}:work retval`,
    `r:${app}:rec retval`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = truthOf(result.stdout);
  const events = result.stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"probe"'))
    .map((l) => JSON.parse(l) as JsonEvent);
  const work = events.filter((e) => e.probe === 'work');
  assert.equal(work.length, truth.work[1]);
  // work(i) returns 2i + 1 for i = 0, 1, 2 ... in order (one thread).
  assert.deepEqual(
    work.map((e) => Number(Object.values(e.fields)[0])),
    work.map((_, i) => 2 * i + 1),
  );
  // rec(3) returns 0, 1, 2, 3 as it unwinds, twice.
  assert.deepEqual(
    events.filter((e) => e.probe === 'rec').map((e) => Number(Object.values(e.fields)[0])),
    [0, 1, 2, 3, 0, 1, 2, 3],
  );
  assert.ok(events.every((e) => e.kind === 'return' && BigInt(e.latencyNs ?? -1) > 0n));
  afterwards(app);
});

test('latency and hist --engine inject -c: every call timed, every value seen', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target();
  const latency = runCli([
    'latency',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} 4 1000 200`,
    `${app}:work`,
    `${app}:rec`,
  ]);
  assert.equal(latency.status, 0, latency.stderr);
  let truth = truthOf(latency.stdout);
  assert.match(latency.stdout, new RegExp(`^work: count ${truth.work[1]},`, 'm'));
  assert.match(latency.stdout, new RegExp(`^rec: count ${truth.rec[1]},`, 'm'));
  assert.match(latency.stderr, /Timing 2 functions \(inject, process \d+/);
  const hist = runCli([
    'hist',
    '--engine',
    'inject',
    '--json',
    '--command-output',
    'inherit',
    '-c',
    `${app} 1 64 0`,
    `${app}:work`,
    'arg0',
  ]);
  assert.equal(hist.status, 0, hist.stderr);
  truth = truthOf(hist.stdout);
  const [reading] = JSON.parse(hist.stdout.split('\n').find((l) => l.startsWith('[{'))!) as {
    count: number;
    sum: number;
  }[];
  // work(i) for i = 0 .. 63: each value once.
  assert.equal(truth.work[0], 64);
  assert.equal(reading!.count, 64);
  assert.equal(reading!.sum, (63 * 64) / 2);
  afterwards(app);
});

test('latency --engine inject -c: timed inside the process, far more calls than the ring holds: each counted once, none lost, calls a longjmp left said apart', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target();
  // 2 threads x 200,000 calls of work, and deep chains left by longjmp: a record per entry
  // and per return would be 900,000 records, far more than the ring's 65,536.
  const latency = runCli([
    'latency',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} 2 200000 10`,
    `${app}:work`,
    `${app}:deep`,
  ]);
  assert.equal(latency.status, 0, latency.stderr);
  const truth = truthOf(latency.stdout);
  assert.equal(truth.checksum, untraced(app, ['2', '200000', '10']).checksum);
  assert.match(latency.stdout, new RegExp(`^work: count ${truth.work[1]},`, 'm'));
  assert.match(latency.stdout, new RegExp(`^deep: count ${truth.deep[1]},`, 'm'));
  assert.doesNotMatch(latency.stderr, /lost|not counted|dropped/);
  // Calls a longjmp left are dropped from the shadow stack at the thread's next hooked
  // call above them (those of the last jump of each thread maybe never): said, not timed.
  const unwound = Number(/(\d+) calls ended by an unwind/.exec(latency.stderr)?.[1]);
  assert.ok(unwound > 0, `the calls a longjmp left are said:\n${latency.stderr}`);
  assert.ok(unwound <= truth.deep[0] - truth.deep[1], `${unwound} unwound at most`);
  afterwards(app);
});

test('trace --engine inject -p: detach while threads are deep in hooked calls puts every return address back; the program runs on unharmed', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target();
  // Until SIGUSR1: each thread checks that every round computes what its first did.
  const program = spawnCollected(app, ['4', '20000', '1500', '0', '0']);
  try {
    const traced = spawnUpscope([
      'count',
      '--engine',
      'inject',
      '-p',
      String(program.pid),
      '--duration',
      '1',
      `r:${app}:rec`,
      `r:${app}:deep`,
      `r:${app}:work`,
    ]);
    const end = await ended(traced, 60_000);
    assert.equal(end.code, 0, traced.stderr);
    assert.match(traced.stderr, /Counting 3 probes \(inject, process \d+/);
    assert.doesNotMatch(readFileSync(`/proc/${program.pid}/maps`, 'utf8'), /upscope-inject/);
    // It ran on after the detach: rounds go on, and each computes what it did untraced.
    await new Promise((r) => setTimeout(r, 300));
    program.child.kill('SIGUSR1');
    const exit = await ended(program, 120_000);
    assert.deepEqual(exit, { code: 0, signal: null }, program.stderr);
    const truth = truthOf(program.stdout);
    const m = /^rounds (\d+) mismatches (\d+)$/m.exec(program.stdout);
    assert.ok(m && Number(m[1]) > 4, program.stdout);
    assert.equal(m[2], '0', 'every round computed what the first did');
    assert.equal(truth.rec[0], truth.rec[1], 'every call of rec returned');
    assert.equal(truth.work[0], truth.work[1], 'every call of work returned');
    // deep: chains of 11 calls, every other one left by longjmp.
    const chains = truth.deep[0] / 11;
    assert.equal(truth.deep[1], 11 * (chains - truth.jumps), 'the others returned');
  } finally {
    program.child.kill('SIGKILL');
    await ended(program);
  }
  afterwards(app);
});

// C++ (check() throws through the probed step() every 128th call), Rust and Go: a return
// event for every call that returns, with its value, and the program's results unchanged.
// Go's returns, and by default those of C++ and Rust code (an unwinder may pass through it),
// are caught at the function's exits by int3s; --return-probes=trampoline swaps the return
// address in C++ and Rust too, put back before a throw unwinds the stack.
const MODES = [
  { language: 'C++', mode: 'auto' },
  { language: 'C++', mode: 'trampoline' },
  { language: 'Rust', mode: 'auto' },
  { language: 'Rust', mode: 'trampoline' },
  { language: 'Go', mode: 'auto' },
] as const;
for (const { language: name, mode } of MODES) {
  const language = COEXIST_TARGETS.find((l) => l.language === name)!;
  test(`trace --engine inject -p on ${name} (--return-probes=${mode}): every return with its value, the program's results unchanged`, async (t) => {
    if (!requireHost(t, { commands: language.needs })) return;
    if (name === 'Rust' && findRustc() === undefined) {
      if (STRICT) assert.fail('Cannot run test under CI: needs rustc');
      t.skip('needs rustc');
      return;
    }
    const app = language.build();
    const dir = mkdtempSync(join(tmpdir(), 'upscope-inject-'));
    const program = spawnCollected(app, [join(dir, 'go'), join(dir, 'stop')]);
    try {
      await waitFor(program, /^ready \d+$/m, 'stdout');
      const traced = spawnUpscope([
        'trace',
        '--engine',
        'inject',
        '--json',
        '--return-probes',
        mode,
        '-p',
        String(program.pid),
        `r:${app}:${language.fn} retval`,
      ]);
      await waitFor(traced, /Tracing 1 probe \(inject, process \d+\)/);
      writeFileSync(join(dir, 'go'), '');
      await new Promise((r) => setTimeout(r, 1500));
      writeFileSync(join(dir, 'stop'), '');
      const done = await waitFor(program, /^calls (\d+)(?: thrown (\d+))? sum (-?\d+)$/m, 'stdout');
      const exit = await ended(program);
      assert.deepEqual(exit, { code: 0, signal: null }, program.stderr);
      const end = await ended(traced);
      assert.equal(end.code, 0, traced.stderr);
      const calls = Number(done[1]);
      // What step(i) returns, for each call that returned (C++: check() throws for every 128th).
      const expected: bigint[] = [];
      let sum = 0n;
      for (let i = 0n; i < BigInt(calls); i++) {
        if (name === 'C++' && (i & 127n) === 127n) continue;
        const value = name === 'Rust' ? 2n * i + 1n : 2n * i + 2n;
        expected.push(value);
        sum += value;
      }
      assert.equal(done[3], String(sum), 'its sum is that of an untouched run');
      const events = traced.stdout
        .split('\n')
        .filter((l) => l.startsWith('{') && l.includes('"probe"'))
        .map((l) => JSON.parse(l) as JsonEvent & { exit?: string });
      // Calls a throw unwound: said as such where exits are probed (auto); with the return
      // address swapped, the address is put back before the unwind and they give no event.
      const unwound = events.filter((e) => e.exit === 'unwind').length;
      const thrown = Number(done[2] ?? 0);
      assert.equal(unwound, mode === 'auto' ? thrown : 0, 'calls unwound');
      const seen = events
        .filter((e) => e.exit === undefined)
        .map((e) => BigInt(Object.values(e.fields)[0]!));
      assert.equal(seen.length, expected.length, 'one return event per call that returned');
      // Which path served it is said: int3s at the exits, or (nothing said) the inline hook.
      if (mode === 'auto') assert.match(traced.stderr, /served by int3s: its returns are caught/);
      else assert.doesNotMatch(traced.stderr, /served by (an )?int3/);
      assert.ok(
        seen.every((v, i) => v === expected[i]),
        `each return's value in order (first wrong at ${seen.findIndex((v, i) => v !== expected[i])})`,
      );
    } finally {
      program.child.kill('SIGKILL');
      await ended(program);
      rmSync(dir, { recursive: true, force: true });
    }
    afterwards(app);
  });
}

/** What the widths programs printed: per kind (`u8`, `s16`, `ptr`...), each value in order. */
function printedValues(stdout: string): Map<string, bigint[]> {
  const values = new Map<string, bigint[]>();
  for (const m of stdout.matchAll(/^(\w+) (\d+) (-?(?:0x)?[0-9a-f]+)$/gm)) {
    const list = values.get(m[1]!) ?? [];
    assert.equal(Number(m[2]), list.length, `${m[1]} printed in order`);
    list.push(BigInt(m[3]!.startsWith('-0x') ? `-${m[3]!.slice(1)}` : m[3]!));
    values.set(m[1]!, list);
  }
  return values;
}

/** Each return event's fields as numbers (decimal or 0x hex), by probe, in order. */
function returnedFields(stdout: string): Map<string, Record<string, bigint>[]> {
  const by = new Map<string, Record<string, bigint>[]>();
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{') || !line.includes('"probe"')) continue;
    const event = JSON.parse(line) as JsonEvent;
    assert.equal(event.kind, 'return');
    const fields = Object.fromEntries(
      Object.entries(event.fields).map(([k, v]) => [k, BigInt(String(v))]),
    );
    by.set(event.probe, [...(by.get(event.probe) ?? []), fields]);
  }
  return by;
}

test('trace --engine inject -c: return values of each width and sign, each as the program got it (the bits above the width left dirty)', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('inject-widths', { flags: ['-O2'] });
  const calls = 300;
  // Each probe fetches its function's return value with the types of its width: signed,
  // unsigned, hex; the C functions return u8 ... s64 and a pointer.
  const probes: [string, string][] = [
    ['ret_u8', 'u=retval:u8 x=retval:x8'],
    ['ret_s8', 's=retval:s8'],
    ['ret_u16', 'u=retval:u16 x=retval:x16'],
    ['ret_s16', 's=retval:s16'],
    ['ret_u32', 'u=retval:u32 x=retval:x32'],
    ['ret_s32', 's=retval:s32'],
    ['ret_u64', 'u=retval:u64 x=retval:x64'],
    ['ret_s64', 's=retval:s64'],
    ['ret_ptr', 'p=retval:ptr x=retval:x64'],
    ['ret_dirty8', 'u=retval:u8 x=retval:x8 s=retval:s8'],
    ['ret_dirty16', 's=retval:s16 u=retval:u16 x=retval:x16'],
  ];
  // The program's lines to a file of their own: its 64 KiB writes to a pipe shared with
  // upscope's lines were cut by them (a line lost, in one run of a full suite).
  const dir = mkdtempSync(join(tmpdir(), 'upscope-widths-'));
  const programOut = join(dir, 'out.txt');
  const result = runCli([
    'trace',
    '--engine',
    'inject',
    '--json',
    '--command-output',
    programOut,
    '-c',
    `${app} ${calls}`,
    ...probes.map(([fn, fetches]) => `r:${app}:${fn} ${fetches}`),
  ]);
  const own = readFileSync(programOut, 'utf8');
  rmSync(dir, { recursive: true, force: true });
  assert.equal(result.status, 0, result.stderr);
  assert.match(own, new RegExp(`^done ${calls}$`, 'm'));
  assert.doesNotMatch(result.stderr, /served by (an )?int3/, 'inline hooks served every probe');
  const printed = printedValues(own);
  const events = returnedFields(result.stdout);
  const bits: Record<string, number> = { 8: 8, 16: 16, 32: 32, 64: 64 };
  for (const [fn] of probes) {
    const kind = fn.replace('ret_', '');
    const truth = printed.get(kind)!;
    assert.equal(truth.length, calls, `${kind}: the program printed each call`);
    const seen = events.get(fn) ?? [];
    assert.equal(seen.length, calls, `${fn}: one return event per call`);
    const width = bits[/\d+/.exec(kind)?.[0] ?? '64']!;
    for (const [i, fields] of seen.entries()) {
      const value = truth[i]!;
      const unsigned = BigInt.asUintN(width, value);
      const signed = BigInt.asIntN(width, value);
      const at = `${fn} call ${i} (the program got ${value})`;
      if (fields['u'] !== undefined) assert.equal(fields['u'], unsigned, at);
      if (fields['s'] !== undefined) assert.equal(fields['s'], signed, at);
      if (fields['x'] !== undefined) assert.equal(fields['x'], unsigned, at);
      if (fields['p'] !== undefined) assert.equal(fields['p'], value, at);
    }
  }
  // The values cover both signs in every signed width.
  for (const kind of ['s8', 's16', 's32', 's64']) {
    const list = printed.get(kind)!;
    assert.ok(list.some((v) => v < 0n) && list.some((v) => v > 0n), kind);
  }
  afterwards(app);
});

test('trace --engine inject -c on Rust: return values of each width, with the return address swapped and at the exits', (t) => {
  const rustc = findRustc();
  if (rustc === undefined) {
    if (STRICT) assert.fail('Cannot run test under CI: needs rustc');
    t.skip('needs rustc');
    return;
  }
  const app = compileRust(rustc, 'inject-widths', ['-C', 'opt-level=2']);
  const calls = 200;
  const probes: [string, string, string][] = [
    ['widths_u8', 'u8', 'v=retval:u8'],
    ['widths_i8', 'i8', 'v=retval:s8'],
    ['widths_i16', 'i16', 'v=retval:s16'],
    ['widths_u32', 'u32', 'v=retval:u32'],
    ['widths_i32', 'i32', 'v=retval:s32'],
    ['widths_i64', 'i64', 'v=retval:s64'],
  ];
  for (const mode of ['trampoline', 'auto']) {
    // The program's lines to a file of their own (see the C test above).
    const dir = mkdtempSync(join(tmpdir(), 'upscope-widths-'));
    const programOut = join(dir, 'out.txt');
    const result = runCli([
      'trace',
      '--engine',
      'inject',
      '--return-probes',
      mode,
      '--json',
      '--command-output',
      programOut,
      '-c',
      `${app} ${calls}`,
      ...probes.map(([fn, , fetch]) => `r:${app}:${fn} ${fetch}`),
    ]);
    const own = readFileSync(programOut, 'utf8');
    rmSync(dir, { recursive: true, force: true });
    assert.equal(result.status, 0, result.stderr);
    if (mode === 'trampoline') assert.doesNotMatch(result.stderr, /served by (an )?int3/);
    else {
      // The six in one line.
      assert.match(
        result.stderr,
        /upscope: 6 functions \(widths_u8, .*\): served by int3s: its returns are caught/,
      );
    }
    const printed = printedValues(own);
    const events = returnedFields(result.stdout);
    for (const [fn, kind] of probes) {
      const truth = printed.get(kind)!;
      assert.equal(truth.length, calls, kind);
      assert.deepEqual(
        (events.get(fn) ?? []).map((f) => f['v']),
        truth,
        `${fn} (--return-probes=${mode}): each value as the program got it`,
      );
    }
  }
  afterwards(app);
});

test('trace --engine inject --return-probes=trampoline on Go: refused in one line, nothing started', (t) => {
  if (!requireHost(t, { commands: ['go'] })) return;
  const go = COEXIST_TARGETS.find((l) => l.language === 'Go')!;
  const app = go.build();
  const result = runCli([
    'trace',
    '--engine',
    'inject',
    '--return-probes',
    'trampoline',
    '-c',
    `${app} /nonexistent/go /nonexistent/stop`,
    `r:${app}:${go.fn}`,
  ]);
  assert.notEqual(result.status, 0);
  assert.match(result.stderr, /Cannot place a return trampoline in .*: it is a Go program/);
  assert.doesNotMatch(result.stderr, /\n\s+at /, 'no stack trace');
  afterwards(app);
});

test('record --engine inject -c of every function of a C++ program that throws: the returns int3s serve are said in one line, with how many', (t) => {
  if (!requireHost(t, { root: true, commands: ['g++'] })) return;
  const app = compileProgram('cxx-unwind', { flags: ['-O2'], link: ['-lpthread'] });
  const dir = mkdtempSync(join(tmpdir(), 'upscope-inject-'));
  try {
    const result = runCli([
      'record',
      '--engine',
      'inject',
      '-o',
      join(dir, 'rec'),
      '-c',
      `${app} throw 30`,
      `${app}:*`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout, execFileSync(app, ['throw', '30'], { encoding: 'utf8' }));
    // Every function with unwind information (the C++ ones) has its returns caught at its
    // exits: one line for them all, not one each.
    const said = result.stderr.split('\n').filter((line) => line.includes('served by int3s'));
    assert.equal(said.length, 1, result.stderr);
    const m =
      /^upscope: (\d+) functions \(.*, \.\.\.\): served by int3s: its returns are caught/.exec(
        said[0]!,
      );
    assert.ok(m !== null, said[0]);
    assert.ok(Number(m[1]) > 3, said[0]);
    for (const name of ['level1(long)', 'level2(long)', 'level3(long)', 'leaf(long)']) {
      assert.ok(!result.stderr.includes(`upscope: ${name}: served by int3s`), name);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  afterwards(app);
});

test('resolve --engine inject: per site, an inline hook over the instructions objdump shows, or an int3 and why', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'g++', 'objdump'] })) return;
  const app = target();
  const other = compileProgram('inject-target', { flags: ['-O2'], link: ['-lpthread'] });
  const cpp = COEXIST_TARGETS.find((l) => l.language === 'C++')!.build();
  // The bytes the jump covers: whole instructions as objdump decodes them, 5 or more.
  const covered = (file: string, symbol: string) => {
    // Instruction starts: lines with a mnemonic (a long one's bytes go on over a next line).
    const starts = execFileSync('objdump', ['-d', `--disassemble=${symbol}`, file], {
      encoding: 'utf8',
    })
      .split('\n')
      .filter((l) => /^\s+[0-9a-f]+:\t/.test(l) && l.split('\t').length >= 3)
      .map((l) => Number.parseInt(l.trim().split(':')[0]!, 16));
    return starts.find((at) => at - starts[0]! >= 5)! - starts[0]!;
  };
  // An instruction boundary inside work, past its entry (objdump's, as above).
  const inside = `${app}:work+${covered(app, 'work')}`;
  const result = runCli([
    'resolve',
    '--engine',
    'inject',
    '--json',
    `${app}:work`,
    `r:${app}:rec`,
    `${other}:looper`,
    `${other}:tiny`,
    `r:${cpp}:app::step`,
    inside,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const sites = (
    JSON.parse(result.stdout) as {
      sites: { spec: string; vaddr: string; inject: { hook: string; why: string } }[];
    }
  ).sites;
  const of = (spec: string) => sites.find((s) => s.spec === spec)!.inject;
  assert.equal(of(`${app}:work`).hook, 'inline');
  assert.match(of(`${app}:work`).why, new RegExp(`first ${covered(app, 'work')} bytes`));
  assert.equal(of(`r:${app}:rec`).hook, 'inline');
  assert.match(of(`r:${app}:rec`).why, /return trampoline/);
  assert.equal(of(`${other}:looper`).hook, 'int3');
  assert.match(of(`${other}:looper`).why, /branch|jump/);
  assert.equal(of(`${other}:tiny`).hook, 'int3');
  assert.match(of(`${other}:tiny`).why, /"ret"/);
  assert.equal(of(`r:${cpp}:app::step`).hook, 'int3');
  assert.match(of(`r:${cpp}:app::step`).why, /exception .* can pass through it.*1-byte ret/);
  assert.equal(of(inside).hook, 'int3');
  assert.match(of(inside).why, /function entries/);
  // The same in text.
  const text = runCli(['resolve', '--engine', 'inject', `${other}:tiny`]);
  assert.match(text.stdout, /^\s+inject\s+int3: "ret" in its first 5 bytes is a branch/m);
});
