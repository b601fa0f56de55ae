// The inject engine: function entries hooked inside the traced process (a jmp to a
// trampoline that records each hit into a ring upscope reads), no trap per hit. The truth is
// the target's own counters; after each run nothing may be left: no traced process, no
// patched byte, no page of ours mapped in a process that runs on.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ProcessTracer } from '../../src/api/index.js';
import { Injector } from '../../src/engines/index.js';
import { processBytes, symbolBytes } from '../helpers/code-bytes.js';
import { COEXIST_TARGETS } from '../helpers/coexist-targets.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { findRustc } from '../helpers/rustc.js';
import { ended, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

interface JsonEvent {
  probe: string;
  tid: number;
  fields: Record<string, number | string>;
}

const UPSCOPE = new URL('../../bin/upscope.js', import.meta.url).pathname;

const FETCHES =
  'a=arg0:s8 b=arg1:s16 c=arg2:s32 d=arg3:s64 e=arg4:u8 f=arg5:x64 g=arg6:s32 h=arg7:s64';

function target(flags: readonly string[]): string {
  return compileProgram('inject-target', { flags, link: ['-lpthread'] });
}

/** The target's own totals: `hooked N looper N tiny N`. */
function totals(stdout: string): { hooked: number; looper: number; tiny: number } {
  const m = /^hooked (\d+) looper (\d+) tiny (\d+)$/m.exec(stdout);
  assert.ok(m, `the target printed its totals:\n${stdout.slice(-500)}`);
  return { hooked: Number(m[1]), looper: Number(m[2]), tiny: Number(m[3]) };
}

/** The threads of process `pid` that a tracer holds (TracerPid in their status). */
function tracedThreads(pid: number): number[] {
  const traced: number[] = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      if (!/^TracerPid:\s+0$/m.test(status)) traced.push(Number(tid));
    } catch {
      // Ended meanwhile.
    }
  }
  return traced;
}

for (const [threads, flags] of [
  [4, ['-O2']],
  [16, ['-O0']],
] as const) {
  test(`trace --engine inject -c: every call from ${threads} threads (${flags[0]}), with arguments of each width`, (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = target(flags);
    const calls = 20_000;
    const result = runCli([
      'trace',
      '--engine',
      'inject',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} ${threads} ${calls}`,
      `${app}:hooked ${FETCHES}`,
      `${app}:looper`,
      `${app}:tiny`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    const truth = totals(result.stdout);
    assert.equal(truth.hooked, threads * calls);
    const events: JsonEvent[] = result.stdout
      .split('\n')
      .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
      .map((l) => JSON.parse(l));
    const by = (probe: string) => events.filter((e) => e.probe === probe);
    assert.equal(by('hooked').length, truth.hooked, 'every call of hooked(), none twice');
    assert.equal(by('looper').length, truth.looper);
    assert.equal(by('tiny').length, truth.tiny);
    assert.equal(new Set(by('hooked').map((e) => e.tid)).size, threads, 'from every thread');
    assert.ok(!by('hooked').some((e) => e.tid === 0));
    // Each width as the target passed it: hooked(-1 - (i & 7), -300, -70000 - id,
    // -5000000000 - id, 250, 0xfedcba9876543210, 123456789, -1234567890123).
    const seenA = new Set<number>();
    for (const e of by('hooked')) {
      const f = e.fields;
      seenA.add(Number(f['a']));
      assert.equal(f['b'], -300);
      assert.ok(Number(f['c']) <= -70000 && Number(f['c']) > -70000 - threads, String(f['c']));
      assert.ok(
        BigInt(f['d']!) <= -5000000000n && BigInt(f['d']!) > -5000000000n - BigInt(threads),
      );
      assert.equal(
        -70000 - Number(f['c']),
        Number(-5000000000n - BigInt(f['d']!)),
        'c and d agree',
      );
      assert.equal(f['e'], 250);
      assert.equal(f['f'], '0xfedcba9876543210');
      assert.equal(f['g'], 123456789);
      assert.equal(String(f['h']), '-1234567890123');
    }
    assert.deepEqual(
      [...seenA].sort((x, y) => x - y),
      [-8, -7, -6, -5, -4, -3, -2, -1],
    );
    // Sites a patch cannot take are said, and served by the int3 path.
    assert.match(
      result.stderr,
      /looper \(0x[0-9a-f]+\) in process \d+: served by an int3 .*: "jg 0x[0-9a-f]+" in its first 5 bytes is a branch/,
    );
    assert.match(result.stderr, /tiny \(0x[0-9a-f]+\) in process \d+: served by an int3 .*"ret"/);
    assert.doesNotMatch(result.stderr, /hooked .*served by an int3/);
    assert.match(result.stderr, /Tracing 3 probes \(inject, process \d+\)/);
    assert.match(result.stderr, new RegExp(`${events.length} events delivered, 0 lost, 0 missed`));
    assert.deepEqual(tracedChildren(), []);
  });
}

test('trace --engine inject -c: the hooks find each thread id in its TCB, not by a gettid(2) per hit (counted by perf)', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'perf'] })) return;
  const app = target(['-O2']);
  // Several hooks are placed before the command runs (each had used up a try to find the
  // thread id's place, before the loader had made a TCB: every hit then made a gettid, 1 us).
  const result = spawnSync(
    'perf',
    [
      'stat',
      '-x,',
      '-e',
      'syscalls:sys_enter_gettid',
      '--',
      process.execPath,
      UPSCOPE,
      'trace',
      '--engine',
      'inject',
      '--command-output',
      'inherit',
      '-c',
      `${app} 4 20000`,
      `${app}:hooked`,
      `${app}:looper`,
      `${app}:tiny`,
    ],
    { encoding: 'utf8', maxBuffer: 256 << 20 },
  );
  assert.equal(result.status, 0, result.stderr);
  const hits = totals(result.stdout);
  const gettids = Number(/^(\d+),,syscalls:sys_enter_gettid/m.exec(result.stderr)?.[1]);
  assert.ok(hits.hooked >= 80_000, `the target made its calls: ${hits.hooked}`);
  // node's own, a few, and the hits before the TCB was read (a few ms on a loaded machine);
  // not one a hit (all 100,000 hits made one before the fix).
  assert.ok(gettids < hits.hooked / 4, `${gettids} gettid calls for ${hits.hooked} hits`);
  assert.deepEqual(tracedChildren(), []);
});

test('count --engine inject -c: exact counts from 16 threads', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} 16 20000`,
    `${app}:hooked`,
    `${app}:looper`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = totals(result.stdout);
  assert.match(result.stdout, new RegExp(`^${truth.hooked}\\s+hooked$`, 'm'));
  assert.match(result.stdout, new RegExp(`^${truth.looper}\\s+looper$`, 'm'));
  assert.match(result.stderr, /Counting 2 probes \(inject, process \d+/);
});

test('count --engine inject -c: counted inside the process, 4,000,000 calls from 2 threads: exact, none lost', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  // Far more calls than the ring holds (64 Ki records): a plain count records none of them.
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} 2 2000000`,
    `${app}:hooked`,
    `${app}:looper`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = totals(result.stdout);
  assert.match(result.stdout, new RegExp(`^${truth.hooked}\\s+hooked$`, 'm'));
  assert.match(result.stdout, new RegExp(`^${truth.looper}\\s+looper$`, 'm'));
  assert.doesNotMatch(result.stderr, /not counted|lost/);
  assert.deepEqual(tracedChildren(), []);
});

test('hist --engine inject -c: values put in histograms inside the process, 800,000 calls from 2 threads: each value of its width and sign, none lost', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  const hist = (value: string, extra: readonly string[] = []) => {
    const result = runCli([
      'hist',
      '--engine',
      'inject',
      '--json',
      ...extra,
      '--command-output',
      'inherit',
      '-c',
      `${app} 2 400000`,
      `${app}:hooked`,
      value,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.doesNotMatch(result.stderr, /not counted|lost/);
    assert.equal(totals(result.stdout).hooked, 800_000);
    const json = result.stdout.split('\n').find((l) => l.startsWith('[{'));
    assert.ok(json, result.stdout.slice(-500));
    const [reading] = JSON.parse(json) as {
      count: number;
      sum: number;
      min: number;
      max: number;
      buckets: { low: number | null; high: number | null; count: number }[];
    }[];
    return reading!;
  };
  // hooked()'s first argument is (int8_t)(-1 - (i & 7)): -1 .. -8, each 50,000 times a thread.
  const a = hist('arg0:s8');
  assert.equal(a.count, 800_000);
  assert.equal(a.sum, -36 * 50_000 * 2);
  assert.equal(a.min, -8);
  assert.equal(a.max, -1);
  // Its fifth is (uint8_t)250 (the register's upper bits are the caller's), in linear buckets.
  const e = hist('arg4:u8', ['--linear', '0,300,100']);
  assert.equal(e.count, 800_000);
  assert.equal(e.sum, 250 * 800_000);
  assert.deepEqual(
    e.buckets.filter((b) => b.count > 0).map((b) => [b.low, b.high, b.count]),
    [[200, 300, 800_000]],
  );
  // Its third is -70000 - the thread's number, as an s32.
  const c = hist('arg2:s32');
  assert.equal(c.sum, (-70_000 - 70_001) * 400_000);
  assert.equal(c.min, -70_001);
  assert.equal(c.max, -70_000);
  assert.deepEqual(tracedChildren(), []);
});

test('count --engine inject --by tid -c: hits the ring had no room for are said, and with those counted make the exact total', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  // Keyed by thread, each hit is recorded: far more calls than the ring holds (64 Ki
  // records) and upscope reads meanwhile.
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--by',
    'tid',
    '--command-output',
    'inherit',
    '-c',
    `${app} 2 2000000`,
    `${app}:hooked`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = totals(result.stdout);
  const rows = [...result.stdout.matchAll(/^(\d+)\s+hooked\s+\d+$/gm)].map((m) => Number(m[1]));
  const counted = rows.reduce((sum, n) => sum + n, 0);
  const lost = Number(
    /(\d+) hits not counted \(the ring buffer the hooks write into was full\)/.exec(
      result.stderr,
    )?.[1],
  );
  assert.ok(lost > 0, `the loss is said:\n${result.stderr}`);
  assert.equal(counted + lost, truth.hooked, 'counted and lost make every call');
  assert.deepEqual(tracedChildren(), []);
});

test('trace --engine inject -p: detach under load restores every byte, unmaps, and leaves the output unchanged', async (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'objdump'] })) return;
  const app = target(['-O2']);
  const threads = 8;
  const calls = 200_000;
  // Rounds of 8 threads until SIGUSR1 (sent once upscope has let go of it).
  const running = spawnCollected(app, [String(threads), String(calls), '300', '0']);
  try {
    await waitFor(running, /^ready \d+$/m, 'stdout');
    // Attach, then detach (after --duration) while its 8 threads call.
    const traced = spawnCollected(process.execPath, [
      new URL('../../bin/upscope.js', import.meta.url).pathname,
      'trace',
      '--engine',
      'inject',
      '-p',
      String(running.pid),
      '--duration',
      '1.5',
      `${app}:hooked a=arg0:s8`,
    ]);
    const done = await ended(traced, 60_000);
    assert.equal(done.code, 0, traced.stderr);
    assert.match(traced.stderr, /Tracing 1 probe \(inject, process \d+\)/);
    const hits = traced.stdout.split('\n').filter((l) => / hooked a=-\d$/.test(l)).length;
    assert.ok(hits > 0, 'it saw calls before the detach');
    // The process runs on, untraced, with the file's bytes and without our pages.
    const status = readFileSync(`/proc/${running.pid}/status`, 'utf8');
    assert.match(status, /^TracerPid:\s+0$/m);
    assert.deepEqual(processBytes(running.pid, app, 'hooked', 16), symbolBytes(app, 'hooked', 16));
    const maps = readFileSync(`/proc/${running.pid}/maps`, 'utf8');
    assert.doesNotMatch(maps, /upscope-inject/);
    running.child.kill('SIGUSR1');
    const exit = await ended(running, 60_000);
    assert.equal(exit.code, 0, `the target ended well: ${JSON.stringify(exit)}`);
    const rounds = Number(/^rounds (\d+)$/m.exec(running.stdout)?.[1]);
    assert.ok(rounds > 0);
    const truth = totals(running.stdout);
    assert.equal(truth.hooked, threads * calls * rounds, 'its own count is untouched');
  } finally {
    running.child.kill('SIGKILL');
  }
  assert.deepEqual(tracedChildren(), []);
});

test('inline hooks added and removed 1,000 times while 8 threads call the function: the target unharmed, its count exact', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  const calls = 50_000;
  // Rounds of 8 threads until SIGUSR1.
  const running = spawnCollected(app, ['8', String(calls), '100', '0']);
  try {
    await waitFor(running, /^ready \d+$/m, 'stdout');
    // A small ring: each round reads at most that many hits (the rest are counted lost), so
    // that a round costs its two stops of every thread, not the reading of 64 Ki hits.
    const tracer = await ProcessTracer.attach(running.pid, {
      inline: Injector.factory({ ringRecords: 1024 }),
      pin: false,
    });
    let hits = 0;
    let inline = 0;
    const rounds = 1000;
    for (let i = 0; i < rounds; i++) {
      const sites = tracer.registerSync({
        id: `h${i}`,
        event: 'breakpoint',
        where: `${app}:hooked`,
        handler: () => {
          hits++;
        },
      });
      assert.equal(sites.length, 1);
      if (!tracer.takeNotices().some((n) => /served by an int3/.test(n))) inline++;
      tracer.poll(2);
      tracer.unregister(`h${i}`);
      tracer.poll(1);
    }
    tracer.detach();
    assert.equal(inline, rounds, 'placed as an inline hook every time');
    assert.ok(hits > 0, 'the hooks saw calls');
    assert.deepEqual(tracedChildren(), []);
    assert.doesNotMatch(readFileSync(`/proc/${running.pid}/maps`, 'utf8'), /upscope-inject/);
    running.child.kill('SIGUSR1');
    const exit = await ended(running, 60_000);
    assert.deepEqual(exit, { code: 0, signal: null }, running.stderr);
    const ran = Number(/^rounds (\d+)$/m.exec(running.stdout)?.[1]);
    assert.ok(ran > 0);
    assert.equal(totals(running.stdout).hooked, 8 * calls * ran, 'every call ran once');
  } finally {
    running.child.kill('SIGKILL');
  }
});

test('attach and detach 100 times while threads start and end all the time: never an error, no thread left traced, the target unharmed, its count exact', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = target(['-O2']);
  const calls = 200;
  // Rounds of 8 short-lived threads, no pause between rounds, until SIGUSR1.
  const running = spawnCollected(app, ['8', String(calls), '100', '0', '0']);
  try {
    await waitFor(running, /^ready \d+$/m, 'stdout');
    let hits = 0;
    for (let i = 0; i < 100; i++) {
      // Seized thread by thread while others start and end; each attach alternates the
      // engines' paths: inline hooks, then int3.
      const tracer = await ProcessTracer.attach(running.pid, {
        ...(i % 2 === 0 ? { inline: Injector.factory() } : {}),
        // As the CLI does: the threads share the tracer's CPU, so that a new thread often
        // runs to its end before its creator's clone event is read.
        pin: true,
      });
      tracer.registerSync({
        id: 'h',
        event: 'breakpoint',
        where: `${app}:hooked`,
        handler: () => {
          hits++;
        },
      });
      tracer.poll(5);
      tracer.detach();
      assert.deepEqual(tracedChildren(), []);
      assert.deepEqual(tracedThreads(running.pid), [], `no thread left traced (round ${i})`);
    }
    assert.ok(hits > 0, 'the probes saw calls');
    assert.doesNotMatch(readFileSync(`/proc/${running.pid}/maps`, 'utf8'), /upscope-inject/);
    running.child.kill('SIGUSR1');
    const exit = await ended(running, 60_000);
    assert.deepEqual(exit, { code: 0, signal: null }, running.stderr);
    const rounds = Number(/^rounds (\d+)$/m.exec(running.stdout)?.[1]);
    assert.ok(rounds > 0);
    assert.equal(totals(running.stdout).hooked, 8 * calls * rounds, 'every call ran once');
  } finally {
    running.child.kill('SIGKILL');
  }
});

// C++ (an exception thrown through the hooked function), Rust and Go: the loop programs whose
// own counts are the truth. A Go function is probed after its stack check (whose slow path,
// the runtime's stack growth, enters the function again at its start): the hook there counts
// each call once, on the goroutine's stack, which the check has just made sure has room.
for (const language of COEXIST_TARGETS) {
  test(`trace --engine inject -p on ${language.language}: every call with its argument, the program's results unchanged`, async (t) => {
    if (!requireHost(t, { commands: language.needs })) return;
    if (language.language === 'Rust' && findRustc() === undefined) {
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
        '-p',
        String(program.pid),
        // arg0: %rdi in C++ and Rust, %rax in Go (its own ABI).
        `${app}:${language.fn} i=arg0:s64`,
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
      assert.ok(calls > 0);
      // The results the program computed are those of an untouched run: step(i) for each i
      // below its count of calls (C++: check() throws for every 128th, unwinding step()).
      let sum = 0n;
      let thrown = 0;
      for (let i = 0n; i < BigInt(calls); i++) {
        if (language.language === 'C++') {
          if ((i & 127n) === 127n) thrown++;
          else sum += 2n * i + 2n;
        } else sum += language.language === 'Rust' ? 2n * i + 1n : 2n * i + 2n;
      }
      assert.equal(done[3], String(sum), 'its sum is that of an untouched run');
      if (language.language === 'C++') assert.equal(Number(done[2]), thrown);
      // Every call once, with its argument: 0, 1, 2 ... calls - 1 in order.
      const seen = traced.stdout
        .split('\n')
        .filter((l) => l.startsWith('{') && l.includes('"probe"'))
        .map((l) => Number((JSON.parse(l) as JsonEvent).fields['i']));
      assert.equal(seen.length, calls, 'one event per call');
      assert.ok(
        seen.every((v, i) => v === i),
        `each call's argument in order (first wrong at ${seen.findIndex((v, i) => v !== i)})`,
      );
      assert.doesNotMatch(traced.stderr, /served by an int3/, 'an inline hook served it');
      assert.match(traced.stderr, new RegExp(`${calls} events delivered, 0 lost`));
    } finally {
      program.child.kill('SIGKILL');
      await ended(program);
      rmSync(dir, { recursive: true, force: true });
    }
    assert.deepEqual(tracedChildren(), []);
    assert.deepEqual(leftovers(), []);
  });
}
