// Faults of the ptrace engine: the target killed, forking, execing or its file deleted or
// replaced while probed, and upscope itself SIGKILLed at each phase of a run (its helper
// process then restores and detaches the target). Truth comes from the target: its own count
// of calls and the sum of what a probed function returned (CALLS squared when every call ran
// right), its exit status, TracerPid in /proc, and the bytes at each probed address in
// /proc/PID/mem against the file's (addresses from nm, file offsets from readelf).
// UPSCOPE_FAULT_ROUNDS sets the rounds of each case (default 1); later rounds vary the timing.
import assert from 'node:assert/strict';
import {
  closeSync,
  copyFileSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  unlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { ofThisFile, pausedAt, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const ROUNDS = Math.max(1, Number(process.env['UPSCOPE_FAULT_ROUNDS'] ?? 1));
const SYMBOLS = ['fault_tick', 'fault_tock'] as const;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** 0 ms in the first round, then 0-500 ms: rounds after the first vary the timing. */
const jitter = (round: number) => (round === 0 ? 0 : Math.floor(Math.random() * 500));

function build(): string {
  // Not PIE: the addresses nm gives are the addresses in the process.
  return compileProgram('fault-target', { flags: ['-O1', '-g', '-no-pie'] });
}

/** Each probed function's address (nm) and its first 16 bytes in the file (readelf's offset). */
function fileBytes(app: string): Map<string, { vaddr: bigint; bytes: Buffer }> {
  const nm = tool('nm', [app]);
  const file = readFileSync(app);
  const found = new Map<string, { vaddr: bigint; bytes: Buffer }>();
  for (const name of SYMBOLS) {
    const m = new RegExp(`^([0-9a-f]+) T ${name}$`, 'm').exec(nm);
    assert.ok(m, `nm lists ${name}`);
    const vaddr = BigInt(`0x${m[1]}`);
    const offset = Number(readelfFileOffset(app, vaddr));
    found.set(name, { vaddr, bytes: file.subarray(offset, offset + 16) });
  }
  return found;
}

/** The bytes at each probed address in the live process equal the file's: no int3 left. */
function assertCodeIntact(pid: number, expected: Map<string, { vaddr: bigint; bytes: Buffer }>) {
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  try {
    for (const [name, { vaddr, bytes }] of expected) {
      const live = Buffer.alloc(bytes.length);
      readSync(fd, live, 0, live.length, Number(vaddr));
      assert.deepEqual(live, bytes, `the code of ${name} in process ${pid} is the file's`);
    }
  } finally {
    closeSync(fd);
  }
}

function statusField(pid: number, key: string): string | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return new RegExp(`^${key}:\\s+(.*)$`, 'm').exec(status)?.[1];
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  const state = statusField(pid, 'State');
  return state !== undefined && !state.startsWith('Z');
}

async function until(what: string, check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The processes whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Processes of this file (the target program or upscope) traced, stopped or zombie. */
function strayProcesses(app: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (!cmdline.includes(app) && !cmdline.includes(BIN)) continue;
    if (!ofThisFile(Number(name))) continue;
    const state = statusField(Number(name), 'State') ?? '';
    if (/^[tTZ]/.test(state)) found.push(`${name} ${state} ${cmdline.replaceAll('\0', ' ')}`);
  }
  return found;
}

/** The target running `calls` turns (0: until SIGUSR1), once it has printed its pid. */
async function target(program: string, calls: number, usec: number, mode = 'plain') {
  const run = spawnCollected(program, [String(calls), String(usec), mode]);
  await until('the target to start', () => /pid=\d+/.test(run.stdout));
  return run;
}

/** The target's own line: `calls` calls made, the sum of fault_tick's results right. */
function assertCounted(out: string, prefix: string, calls?: number): number {
  const m = new RegExp(`^${prefix}calls=(\\d+) sum=(\\d+) tocks=(\\d+)$`, 'm').exec(out);
  assert.ok(m, `the target printed its ${prefix}count: ${out.slice(-300)}`);
  const n = Number(m[1]);
  if (calls !== undefined) assert.equal(n, calls, 'calls made');
  assert.equal(BigInt(m[2]!), BigInt(n) * BigInt(n), 'sum of fault_tick(i) = calls squared');
  assert.equal(Number(m[3]), n, 'fault_tock called as often');
  return n;
}

/** A target running until SIGUSR1: ends it and checks it finished unharmed. */
async function finishUnharmed(t: Awaited<ReturnType<typeof target>>): Promise<void> {
  assert.ok(alive(t.pid), `target ${t.pid} still runs`);
  assert.equal(statusField(t.pid, 'TracerPid'), '0', 'nothing traces the target');
  t.child.kill('SIGUSR1');
  const { code, signal } = await t.exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, t.stdout.slice(-300));
  assertCounted(t.stdout, '');
}

/** The next run on the same target works: 20 events traced, then a clean exit. */
function assertNextRunWorks(app: string, pid: number): Promise<void> {
  const next = spawnUpscope([
    'trace',
    '--engine',
    'ptrace',
    '-p',
    String(pid),
    '--max-events',
    '20',
    `${app}:fault_tick i=arg0`,
    `${app}:fault_tock`,
  ]);
  return next.exited.then(({ code }) => {
    assert.equal(code, 0, next.stderr);
    assert.equal(next.stdout.trim().split('\n').length, 20, next.stdout);
    assert.match(next.stderr, /20 events printed \(--max-events 20\) of 20 delivered/);
  });
}

function assertNothingLeft(app: string): void {
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(strayProcesses(app), []);
}

const SPECS = (app: string) => [`${app}:fault_tock`, `r:${app}:fault_tick ret=retval`];

test('ptrace: the target SIGKILLed mid-trace: upscope ends by itself with its status, nothing left', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = build();
  for (let round = 0; round < ROUNDS; round++) {
    // -p: the process attached to is killed.
    const victim = await target(app, 0, 2000);
    const run = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-p',
      String(victim.pid),
      ...SPECS(app),
    ]);
    await until('the trace to start', () => /Tracing 2 probes/.test(run.stderr));
    await sleep(200 + jitter(round));
    victim.child.kill('SIGKILL');
    const ended = await run.exited;
    // The trace ended with the process, as asked: upscope's status is 0, the end said.
    assert.equal(ended.code, 0, run.stderr);
    const lines = run.stderr.trim().split('\n');
    assert.equal(lines.length, 3, run.stderr);
    assert.equal(lines[1], `upscope: process ${victim.pid} exited, ending the trace`);
    assert.match(lines[2]!, /^upscope: \d+ events delivered, 0 lost, 0 missed$/);
    assert.deepEqual((await victim.exited).signal, 'SIGKILL');
    // -c: the command started is killed.
    const command = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-c',
      `${app} 0 2000`,
      ...SPECS(app),
    ]);
    await until('the command to start', () => /pid=\d+/.test(command.stdout));
    const pid = Number(/pid=(\d+)/.exec(command.stdout)![1]);
    await until('the trace to start', () => /Tracing 2 probes/.test(command.stderr));
    await sleep(200 + jitter(round));
    process.kill(pid, 'SIGKILL');
    const status = await command.exited;
    // The command's status is said, not taken as upscope's.
    assert.equal(status.code, 0, command.stderr);
    assert.match(
      command.stderr,
      /\nupscope: \d+ events delivered, 0 lost, 0 missed\nupscope: the command was killed by SIGKILL\n$/,
    );
    assert.doesNotMatch(command.stderr, /error/i);
    assertNothingLeft(app);
  }
});

test('ptrace: the target forks while probed: the child runs its half unharmed (-c follows it, -p too)', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = build();
  for (let round = 0; round < ROUNDS; round++) {
    const command = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-c',
      `${app} 200 1000 fork`,
      ...SPECS(app),
    ]);
    const ended = await command.exited;
    assert.equal(ended.code, 0, command.stderr);
    assert.match(command.stdout, /^child status=exit:0$/m);
    assertCounted(command.stdout, 'child ', 200);
    assertCounted(command.stdout, '', 200);
    // Each of the 200 calls of each function in the parent, and the child's 100: traced.
    const lines = command.stdout.split('\n');
    assert.equal(lines.filter((l) => / fault_tock$/.test(l)).length, 300);
    assert.equal(lines.filter((l) => / r:fault_tick ret=/.test(l)).length, 300);

    // 3 s of calls: upscope must find it running even on a loaded machine (1.2 s was not
    // always enough for it to start).
    const forking = await target(app, 1500, 2000, 'fork');
    const run = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-p',
      String(forking.pid),
      ...SPECS(app),
    ]);
    const status = await run.exited;
    assert.equal(status.code, 0, run.stderr);
    const own = await forking.exited;
    assert.deepEqual({ code: own.code, signal: own.signal }, { code: 0, signal: null });
    assert.match(forking.stdout, /^child status=exit:0$/m);
    assertCounted(forking.stdout, 'child ', 1500);
    assertCounted(forking.stdout, '', 1500);
    assertNothingLeft(app);
  }
});

test('ptrace: the target execs while probed: the new image runs unharmed, probed again', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = build();
  for (let round = 0; round < ROUNDS; round++) {
    const command = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-c',
      `${app} 200 1000 exec`,
      ...SPECS(app),
    ]);
    const ended = await command.exited;
    assert.equal(ended.code, 0, command.stderr);
    assertCounted(command.stdout, 'before-exec ', 100);
    assertCounted(command.stdout, '', 100);
    assert.equal(command.stdout.split('\n').filter((l) => / fault_tock$/.test(l)).length, 200);

    const execing = await target(app, 1500, 2000, 'exec');
    const run = spawnUpscope([
      'trace',
      '--engine',
      'ptrace',
      '-p',
      String(execing.pid),
      ...SPECS(app),
    ]);
    const status = await run.exited;
    assert.equal(status.code, 0, run.stderr);
    const own = await execing.exited;
    assert.deepEqual({ code: own.code, signal: own.signal }, { code: 0, signal: null });
    assertCounted(execing.stdout, 'before-exec ', 750);
    assertCounted(execing.stdout, '', 750);
    assertNothingLeft(app);
  }
});

test('ptrace: the probed file deleted, or replaced by rename, while probed: the target is restored', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = build();
  const expected = fileBytes(app);
  const dir = mkdtempSync(join(tmpdir(), 'upscope-faults-'));
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const change of ['delete', 'replace'] as const) {
        const copy = join(dir, `app-${change}-${round}`);
        copyFileSync(app, copy);
        const victim = await target(copy, 0, 2000);
        const run = spawnUpscope([
          'trace',
          '--engine',
          'ptrace',
          '-p',
          String(victim.pid),
          ...SPECS(copy),
        ]);
        await until('the trace to start', () => /Tracing 2 probes/.test(run.stderr));
        await until('a hit', () => / fault_tock$/m.test(run.stdout));
        if (change === 'delete') unlinkSync(copy);
        else {
          const other = `${copy}.new`;
          copyFileSync('/bin/true', other);
          renameSync(other, copy);
        }
        await sleep(100 + jitter(round));
        run.child.kill('SIGTERM');
        const ended = await run.exited;
        // Ended as asked (SIGTERM, once): status 0.
        assert.equal(ended.code, 0, run.stderr);
        assertCodeIntact(victim.pid, expected);
        await finishUnharmed(victim);
      }
    }
    assertNothingLeft(app);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

for (const phase of ['resolving', 'attaching', 'tracing', 'detaching'] as const) {
  test(`ptrace: upscope SIGKILLed while paused at ${phase}: its helper restores and detaches the target`, {
    timeout: 60_000,
  }, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
    const app = build();
    const expected = fileBytes(app);
    for (let round = 0; round < ROUNDS; round++) {
      const victim = await target(app, 0, 2000);
      // The detaching phase needs a run that ends by itself.
      const extra = phase === 'detaching' ? ['--duration', '1'] : [];
      const run = spawnUpscope(
        ['trace', '--engine', 'ptrace', '-p', String(victim.pid), ...extra, ...SPECS(app)],
        { UPSCOPE_PAUSE_AT: phase },
      );
      const helper = await pausedAt(run, phase);
      assert.notEqual(helper, run.child.pid, 'the tracer is a helper process');
      await sleep(jitter(round));
      run.child.kill('SIGKILL');
      await until('upscope to die', () => !alive(run.child.pid!));
      process.kill(helper, 'SIGCONT');
      await until('the helper to finish', () => !alive(helper));
      await run.exited;
      assert.match(run.stderr, /upscope: \d+ events delivered/);
      assert.equal(statusField(victim.pid, 'TracerPid'), '0');
      assertCodeIntact(victim.pid, expected);
      await assertNextRunWorks(app, victim.pid);
      assertCodeIntact(victim.pid, expected);
      await finishUnharmed(victim);
      assertNothingLeft(app);
    }
  });
}

test('ptrace: upscope SIGKILLed while paused tracing a command (-c): the helper kills it, nothing left', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = build();
  for (let round = 0; round < ROUNDS; round++) {
    const run = spawnUpscope(
      ['trace', '--engine', 'ptrace', '-c', `${app} 0 2000`, ...SPECS(app)],
      {
        UPSCOPE_PAUSE_AT: 'tracing',
      },
    );
    const helper = await pausedAt(run, 'tracing');
    const [pid] = childrenOf(helper);
    assert.ok(pid !== undefined, 'the helper started the command');
    run.child.kill('SIGKILL');
    await until('upscope to die', () => !alive(run.child.pid!));
    process.kill(helper, 'SIGCONT');
    await until('the helper to finish', () => !alive(helper));
    await run.exited;
    await until('the command to end with the run', () => !alive(pid));
    assertNothingLeft(app);
  }
});

test('ptrace: upscope SIGKILLed mid-flood of hits, no pause: the target is restored, several rounds', {
  timeout: 60_000,
}, async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = build();
  const expected = fileBytes(app);
  for (let round = 0; round < 3 * ROUNDS; round++) {
    const victim = await target(app, 0, 0);
    const run = spawnUpscope([
      'count',
      '--engine',
      'ptrace',
      '-p',
      String(victim.pid),
      ...SPECS(app),
    ]);
    await until('the count to start', () => /Counting 2 probes/.test(run.stderr));
    const [helper] = childrenOf(run.child.pid!);
    assert.ok(helper !== undefined, 'upscope started its helper');
    await sleep(100 + (round === 0 ? 0 : Math.floor(Math.random() * 500)));
    run.child.kill('SIGKILL');
    await until('the helper to finish', () => !alive(helper));
    await run.exited;
    assert.equal(statusField(victim.pid, 'TracerPid'), '0');
    assertCodeIntact(victim.pid, expected);
    await finishUnharmed(victim);
  }
  assertNothingLeft(app);
});

for (const engine of ['ptrace', 'inject'] as const) {
  test(`${engine}: the program exits while its threads stop for their clone events (exit_group kills them in the stop): upscope ends with the program, its counts said, several rounds`, {
    timeout: 120_000,
  }, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram('clone-churn', { flags: ['-O1'], link: ['-lpthread'] });
    // 16 threads making threads: 9 of 20 ptrace runs, 1 of 10 inject ones, failed before
    // (Cannot read the event of thread N: ESRCH, and no count said).
    for (let round = 0; round < 8; round++) {
      const run = spawnUpscope([
        'count',
        '--json',
        '--engine',
        engine,
        '-c',
        `${app} 16 30`,
        `${app}:mark`,
      ]);
      const { code } = await run.exited;
      const what = `round ${round}: ${run.stderr.slice(-400)}`;
      assert.equal(code, 0, what);
      assert.doesNotMatch(run.stderr, /error/, what);
      // With --json to a pipe, the command's stdout is upscope's stderr.
      assert.match(run.stderr, /^marks=10$/m, 'the program ran to its exit');
      const counts = JSON.parse(run.stdout) as {
        probe: string;
        count: number;
      }[];
      assert.deepEqual(counts, [{ probe: 'mark', count: 10 }], what);
    }
    assertNothingLeft(app);
  });
}

for (const engine of ['ptrace', 'inject'] as const) {
  test(`${engine}: a process whose seccomp filter kills at, or refuses, executable memory: refused before any call, the process unharmed; a filter that refuses something else: probed`, {
    timeout: 60_000,
  }, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram('seccomp-target', { flags: ['-O1'] });
    for (const [mode, verdict] of [
      ['kill', 'kill the process'],
      ['errno', 'fail it \\(EPERM\\)'],
    ] as const) {
      const target = spawnCollected(app, [mode]);
      await waitFor(target, /^ready$/m, 'stdout');
      assert.match(readFileSync(`/proc/${target.pid}/status`, 'utf8'), /^Seccomp:\s+2$/m);
      const run = spawnUpscope([
        'count',
        '--engine',
        engine,
        '-p',
        String(target.pid),
        '--duration',
        '1',
        `${app}:tick`,
      ]);
      const { code } = await run.exited;
      assert.notEqual(code, 0, `${mode}: ${run.stderr}`);
      assert.match(
        run.stderr,
        new RegExp(
          `^error\\[ERR_SECCOMP\\]: Cannot place probes in process ${target.pid} with this engine: it needs to run mmap\\(\\) there, and its seccomp filter would ${verdict} at that call$`,
          'm',
        ),
        mode,
      );
      assert.match(
        run.stderr,
        /^ {2}hint: Use --engine bpf: kernel probes make no system call in the process$/m,
      );
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
      // Unharmed: running, untraced, and it ends as it does.
      assert.equal(target.child.exitCode, null, `${mode}: the target is running`);
      assert.match(readFileSync(`/proc/${target.pid}/status`, 'utf8'), /^TracerPid:\s+0$/m);
      target.child.kill('SIGTERM');
      const end = await target.exited;
      assert.deepEqual(end, { code: 0, signal: null }, `${mode}: ${target.stderr}`);
      assert.match(target.stdout, /^ticks=\d+$/m);
    }
    // A filter that leaves upscope's calls alone: probed as any process.
    const target = spawnCollected(app, ['other']);
    await waitFor(target, /^ready$/m, 'stdout');
    const run = spawnUpscope([
      'count',
      '--json',
      '--engine',
      engine,
      '-p',
      String(target.pid),
      '--duration',
      '1',
      `${app}:tick`,
    ]);
    const { code } = await run.exited;
    assert.equal(code, 0, run.stderr);
    const counts = JSON.parse(run.stdout) as { probe: string; count: number }[];
    assert.equal(counts[0]?.probe, 'tick');
    assert.ok(counts[0]!.count > 0, run.stdout);
    target.child.kill('SIGTERM');
    assert.deepEqual(await target.exited, { code: 0, signal: null }, target.stderr);
    assertNothingLeft(app);
  });
}
