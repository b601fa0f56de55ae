// The inject engine under faults: a signal handler that calls a hooked function while its
// thread is inside it (on the thread's stack, on an alternate signal stack below it or above
// it), a fork (the child followed, int3s in it instead of the hooks), a vfork (posix_spawn:
// the child runs in the parent's memory), an exec, and a SIGKILL of upscope (its helper
// restores the process) or of upscope and its helper together (the hooks stay, writing into
// a ring nobody reads: the program runs on unharmed). The truth is the programs' own counts
// of calls and returns and the results they compute, their exit status, TracerPid, the bytes
// at the hooked function in /proc/PID/mem against objdump's, and /proc/PID/maps.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { processBytes, symbolBytes } from '../helpers/code-bytes.js';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import {
  ended,
  ofThisFile,
  type Spawned,
  spawnCollected,
  spawnUpscope,
  waitFor,
} from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

interface JsonEvent {
  probe: string;
  kind: 'entry' | 'return';
  pid: number;
  fields: Record<string, number | string>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * This file's processes still running this program (none may be left by a test; inject.int
 * and inject-returns.int, which may run beside, run the same programs).
 */
function running(app: string): string[] {
  const out = execFileSync('ps', ['-eo', 'pid=,stat=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((line) => line.includes(app) && ofThisFile(Number.parseInt(line, 10)));
}

function afterwards(app: string): void {
  assert.deepEqual(tracedChildren(), []);
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(running(app), [], 'no target process left running');
}

/** The count `count` printed for a probe (`hooked`, `r:hooked`). */
function counted(stdout: string, probe: string): number {
  const m = new RegExp(`^(\\d+)\\s+${probe.replace(':', '\\:')}$`, 'm').exec(stdout);
  assert.ok(m, `a count for ${probe}:\n${stdout.slice(-800)}`);
  return Number(m[1]);
}

function jsonEvents(stdout: string): JsonEvent[] {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"probe"'))
    .map((l) => JSON.parse(l) as JsonEvent);
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

async function until(what: string, check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The processes whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const line of execFileSync('ps', ['-eo', 'pid=,ppid='], { encoding: 'utf8' }).split('\n')) {
    const [child, parent] = line.trim().split(/\s+/).map(Number);
    if (parent === pid && child !== undefined) found.push(child);
  }
  return found;
}

/** CPU time (user + system, clock ticks) process `pid` has used: it grows while it runs. */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

// ---- a signal handler that calls the hooked function -------------------------------------

/** The signals target (test/programs/inject-signals.c). */
function signalsTarget(): string {
  return compileProgram('inject-signals', { flags: ['-O2'], link: ['-lpthread'] });
}

interface SignalTruth {
  calls: number;
  returns: number;
  handled: number;
  nested: number;
}

/**
 * The target's own counts, checked against what an unharmed run computes: every call
 * returned, and the sums of what hooked() returned to the thread (3i + 1 for i below its
 * calls) and to the handler (3i + 1 for i = 1000000 + k, k below the handler's calls).
 */
function signalTruth(stdout: string, nestedAtLeast: number): SignalTruth {
  const m =
    /^calls (\d+) returns (\d+) handled (\d+) nested (\d+) sum (-?\d+) handler-sum (-?\d+)$/m.exec(
      stdout,
    );
  assert.ok(m, `the target printed its counts:\n${stdout.slice(-500)}`);
  const [calls, returns, handled, nested] = [1, 2, 3, 4].map((i) => Number(m[i]));
  assert.equal(returns, calls, 'every call of hooked() returned');
  const own = BigInt(calls! - handled!);
  assert.equal(
    BigInt(m[5]!),
    (3n * own * (own - 1n)) / 2n + own,
    'the thread got what it would untraced',
  );
  const h = BigInt(handled!);
  assert.equal(
    BigInt(m[6]!),
    3n * (1_000_000n * h + (h * (h - 1n)) / 2n) + h,
    'the handler got what it would untraced',
  );
  assert.ok(nested! >= nestedAtLeast, `the handler interrupted ${nested} calls of hooked()`);
  return { calls: calls!, returns: returns!, handled: handled!, nested: nested! };
}

const SIGNAL_MODES = [
  { mode: 'stack', where: undefined },
  { mode: 'altstack', where: 'below' },
  { mode: 'altstack-above', where: 'above' },
] as const;

// The ptrace engine too: it kept the same calls of the interrupted stack by stack pointer,
// and dropped them as left by a longjmp when the handler ran on a signal stack above the
// thread's (their returns then failed with ERR_INTERNAL).
for (const [engine, { mode, where }] of [
  ...SIGNAL_MODES.map((m) => ['inject', m] as const),
  ['ptrace', SIGNAL_MODES[2]] as const,
]) {
  test(`count --engine ${engine} -c: a signal handler ${where === undefined ? 'on the thread stack' : `on an alternate stack ${where} the thread's`} calls the ${engine === 'inject' ? 'hooked' : 'probed'} function inside itself: every entry and return counted, the program unharmed`, (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = signalsTarget();
    // A stop per entry and per return on ptrace, and the handler calls every 200 us: fewer.
    const [calls, nested] = engine === 'inject' ? [20_000, 200] : [2000, 20];
    const result = runCli(
      [
        'count',
        '--engine',
        engine,
        '--command-output',
        'inherit',
        '-c',
        `${app} ${mode} ${calls} ${nested}`,
        `${app}:hooked`,
        `r:${app}:hooked`,
      ],
      { timeoutMs: 300_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stderr, /the command exited with status 0/);
    if (where !== undefined) assert.match(result.stdout, new RegExp(`^altstack ${where}$`, 'm'));
    const truth = signalTruth(result.stdout, nested);
    assert.equal(counted(result.stdout, 'hooked'), truth.calls, 'every call, the handler’s too');
    assert.equal(counted(result.stdout, 'r:hooked'), truth.returns, 'every return');
    assert.doesNotMatch(result.stderr, /served by|not counted|not tracked|not reported|lost/);
    afterwards(app);
  });
}

for (const { mode, where } of [SIGNAL_MODES[0], SIGNAL_MODES[2]]) {
  test(`trace --engine inject -c: each return of a hooked function a signal handler ${where === undefined ? '' : 'on an alternate stack above the thread '}calls inside itself is paired with its own entry`, (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = signalsTarget();
    const result = runCli([
      'trace',
      '--engine',
      'inject',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} ${mode} 5000 100`,
      `${app}:hooked i=arg0`,
      // arg0 at a return: the argument its call had at the entry it is paired with.
      `r:${app}:hooked i=arg0 r=retval`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    const truth = signalTruth(result.stdout, 100);
    const events = jsonEvents(result.stdout);
    const entries = events.filter((e) => e.kind === 'entry').map((e) => Number(e.fields['i']));
    const returns = events.filter((e) => e.kind === 'return');
    // The thread's calls hooked(0 .. n - 1), the handler's hooked(1000000 + k).
    const own = truth.calls - truth.handled;
    const expected = [
      ...Array.from({ length: own }, (_, i) => i),
      ...Array.from({ length: truth.handled }, (_, k) => 1_000_000 + k),
    ];
    const sorted = (list: number[]) => [...list].sort((a, b) => a - b);
    assert.deepEqual(sorted(entries), expected, 'each call once, with its argument');
    assert.deepEqual(
      sorted(returns.map((e) => Number(e.fields['i']))),
      expected,
      'each return once, paired with its call',
    );
    for (const e of returns) {
      assert.equal(Number(e.fields['r']), 3 * Number(e.fields['i']) + 1, 'its own value');
    }
    assert.match(result.stderr, new RegExp(`${events.length} events delivered, 0 lost`));
    afterwards(app);
  });
}

// ---- fork, vfork, exec ---------------------------------------------------------------------

/** The forks target (test/programs/inject-forks.c). */
function forksTarget(): string {
  return compileProgram('inject-forks', { flags: ['-O2'], link: ['-lpthread'] });
}

/** Its own line: the parent's calls of hooked() (each returned 2i + 1 to it) and forker(). */
function forksTruth(stdout: string): { calls: number; forker: number } {
  const m = /^calls (\d+) mismatches (\d+) forker (\d+)$/m.exec(stdout);
  assert.ok(m, `the target printed its counts:\n${stdout.slice(-500)}`);
  assert.equal(m[2], '0', 'every call of hooked() returned what it does untraced');
  return { calls: Number(m[1]), forker: Number(m[3]) };
}

test('count --engine inject -c: forks while 4 threads call the hooked function: each child followed (int3s in place of the hooks), unharmed; every call counted, parent and children, and each return from the call that forked', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = forksTarget();
  const forks = 5;
  const childCalls = 1000;
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} fork 4 10000 ${forks} ${childCalls}`,
    `${app}:hooked`,
    `${app}:forker`,
    `r:${app}:forker`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const truth = forksTruth(result.stdout);
  assert.equal(truth.forker, forks);
  for (let k = 0; k < forks; k++) {
    // Each child returned from forker() (0), made its calls, and got 2i + 1 from each.
    assert.match(
      result.stdout,
      new RegExp(`^child ${k} calls ${childCalls} sum ${childCalls ** 2}$`, 'm'),
    );
    assert.match(result.stdout, new RegExp(`^child ${k} status exit:0$`, 'm'));
  }
  assert.equal(counted(result.stdout, 'hooked'), truth.calls + forks * childCalls);
  assert.equal(counted(result.stdout, 'forker'), forks, 'the parent’s calls');
  // forker() returns twice per call: in the parent, and in the child it forked.
  assert.equal(counted(result.stdout, 'r:forker'), 2 * forks);
  assert.doesNotMatch(result.stderr, /not counted|lost/);
  afterwards(app);
});

test('count --engine inject -c: posix_spawn (a vfork child in the parent’s memory) while 4 threads call the hooked function: the parent keeps its hooks, every call counted, the program unharmed', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = forksTarget();
  const spawns = 5;
  const result = runCli([
    'count',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} spawn 4 10000 ${spawns}`,
    `${app}:hooked`,
    `${app}:forker`,
    `r:${app}:forker`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stderr, /the command exited with status 0/);
  const truth = forksTruth(result.stdout);
  for (let k = 0; k < spawns; k++) {
    assert.match(result.stdout, new RegExp(`^spawned ${k} status exit:0$`, 'm'));
  }
  assert.equal(counted(result.stdout, 'hooked'), truth.calls, 'every call, after each spawn too');
  assert.equal(counted(result.stdout, 'forker'), spawns);
  assert.equal(counted(result.stdout, 'r:forker'), spawns);
  assert.doesNotMatch(result.stderr, /served by|not counted|lost/);
  afterwards(app);
});

for (const engine of ['inject', 'ptrace'] as const) {
  test(`count --engine ${engine} -c: a Go program runs 200 commands (os/exec: a vfork each, the calling thread waits in the kernel until its child has execed): every call counted, upscope never waits for that thread to stop (it cannot), nothing left`, (t) => {
    const go = findGo();
    if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
    const app = compileGo(go!, 'go-returns');
    // The inject engine stops every thread now and then while it learns where a thread's id
    // is (3 times in a Go program): a stop while a thread waited for its held vfork child
    // waited for ever (8 runs of 8 hung before that thread was left out of the stops).
    const result = runCli(
      [
        'count',
        '--engine',
        engine,
        '--command-output',
        'inherit',
        '-c',
        `${app} spawn 200`,
        `${app}:main.run`,
      ],
      { timeoutMs: 60_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, /^spawn calls=200 sum=19900$/m);
    assert.match(result.stderr, /the command exited with status 0/);
    assert.equal(counted(result.stdout, 'main.run'), 200);
    afterwards(app);
  });
}

test('trace --engine inject -c: an exec while 4 threads call the hooked function: the new program runs unharmed, the trace ends with its status, nothing left', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = forksTarget();
  const result = runCli([
    'trace',
    '--engine',
    'inject',
    '--command-output',
    'inherit',
    '-c',
    `${app} exec 4 20000 0`,
    `${app}:hooked i=arg0`,
    `r:${app}:hooked`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stdout, /^exec$[\s\S]*^after exec$/m, 'the shell it execs ran');
  assert.ok(/ hooked i=\d+$/m.test(result.stdout), 'calls before the exec were traced');
  assert.match(
    result.stderr,
    /\nupscope: \d+ events delivered, \d+ lost, 0 missed\nupscope: the command exited with status 3\n$/,
  );
  assert.doesNotMatch(result.stderr, /error|served by/i);
  afterwards(app);
});

// ---- SIGKILL of upscope ----------------------------------------------------------------------

/** inject-target (test/programs/inject-target.c): THREADS threads call hooked() until SIGUSR1. */
function loadTarget(): { app: string; start: () => Promise<Spawned> } {
  const app = compileProgram('inject-target', { flags: ['-O2'], link: ['-lpthread'] });
  return {
    app,
    start: async () => {
      // 4 threads, rounds of 200,000 calls each, 300 ms first, until SIGUSR1.
      const run = spawnCollected(app, ['4', '200000', '300', '0']);
      await waitFor(run, /^ready \d+$/m, 'stdout');
      return run;
    },
  };
}

/** A target running until SIGUSR1: ended, it says every call ran once (4 threads x 200,000 a round). */
async function finishUnharmed(run: Spawned): Promise<void> {
  run.child.kill('SIGUSR1');
  const exit = await ended(run, 120_000);
  assert.deepEqual(exit, { code: 0, signal: null }, run.stderr);
  const rounds = Number(/^rounds (\d+)$/m.exec(run.stdout)?.[1]);
  assert.ok(rounds > 0, run.stdout);
  const hooked = Number(/^hooked (\d+) /m.exec(run.stdout)?.[1]);
  assert.equal(hooked, 4 * 200_000 * rounds, 'every call ran once');
}

/** upscope under way on `pid`, with its helper (the tracer) found. */
async function underWay(args: readonly string[]): Promise<{ run: Spawned; helper: number }> {
  const run = spawnUpscope(args);
  await waitFor(run, /^(Tracing|Counting) \d+ probes? \(inject, process \d+/m, 'stderr', 60_000);
  const [helper] = childrenOf(run.pid);
  assert.ok(helper !== undefined, 'upscope runs the inject engine in a helper process');
  // Under load: hits being recorded.
  await sleep(500);
  return { run, helper };
}

for (const command of ['trace', 'count'] as const) {
  test(`${command} --engine inject -p: upscope SIGKILLed under load from 4 threads: its helper restores every byte, unmaps its pages, detaches; the program runs on unharmed`, async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'nm', 'objdump'] })) return;
    const { app, start } = loadTarget();
    const target = await start();
    try {
      const { run, helper } = await underWay([
        command,
        '--engine',
        'inject',
        '-p',
        String(target.pid),
        `${app}:hooked`,
      ]);
      assert.notDeepEqual(
        processBytes(target.pid, app, 'hooked', 16),
        symbolBytes(app, 'hooked', 16),
        'hooked',
      );
      run.child.kill('SIGKILL');
      await until('the helper to finish', () => !alive(helper));
      await run.exited;
      assert.ok(alive(target.pid), 'the program runs on');
      assert.equal(statusField(target.pid, 'TracerPid'), '0', 'nothing traces it');
      assert.deepEqual(processBytes(target.pid, app, 'hooked', 16), symbolBytes(app, 'hooked', 16));
      assert.doesNotMatch(readFileSync(`/proc/${target.pid}/maps`, 'utf8'), /upscope-inject/);
      await finishUnharmed(target);
    } finally {
      target.child.kill('SIGKILL');
      await ended(target);
    }
    afterwards(app);
  });
}

test('count --engine inject -p: upscope SIGKILLed while threads are deep in hooked calls whose returns are swapped: its helper puts every return address back; the program runs on unharmed', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('inject-returns', {
    flags: ['-O2', '-fno-optimize-sibling-calls'],
    link: ['-lpthread'],
  });
  // 4 threads: recursion 1,500 deep, longjmp out of call chains, until SIGUSR1.
  const target = spawnCollected(app, ['4', '20000', '1500', '0', '0']);
  try {
    const { run, helper } = await underWay([
      'count',
      '--engine',
      'inject',
      '-p',
      String(target.pid),
      `r:${app}:rec`,
      `r:${app}:deep`,
      `r:${app}:work`,
    ]);
    run.child.kill('SIGKILL');
    await until('the helper to finish', () => !alive(helper));
    await run.exited;
    assert.equal(statusField(target.pid, 'TracerPid'), '0');
    assert.doesNotMatch(readFileSync(`/proc/${target.pid}/maps`, 'utf8'), /upscope-inject/);
    await sleep(300);
    target.child.kill('SIGUSR1');
    const exit = await ended(target, 120_000);
    assert.deepEqual(exit, { code: 0, signal: null }, target.stderr);
    const m = /^rounds (\d+) mismatches (\d+)$/m.exec(target.stdout);
    assert.ok(m && Number(m[1]) > 4, target.stdout);
    assert.equal(m[2], '0', 'every round computed what the first did');
    const counts = /^rec (\d+) (\d+) deep \d+ \d+ work (\d+) (\d+) /m.exec(target.stdout);
    assert.ok(counts, target.stdout);
    assert.equal(counts[1], counts[2], 'every call of rec returned');
    assert.equal(counts[3], counts[4], 'every call of work returned');
  } finally {
    target.child.kill('SIGKILL');
    await ended(target);
  }
  afterwards(app);
});

test('count --engine inject -c: upscope SIGKILLed under load: its helper ends the command as a Ctrl-C would; both SIGKILLed: the kernel ends it with its tracer; nothing left', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const { app } = loadTarget();
  for (const both of [false, true]) {
    const { run, helper } = await underWay([
      'count',
      '--engine',
      'inject',
      '-c',
      `${app} 4 200000 0 0`,
      `${app}:hooked`,
    ]);
    const [command] = childrenOf(helper);
    assert.ok(command !== undefined, 'the helper started the command');
    if (both) process.kill(helper, 'SIGKILL');
    run.child.kill('SIGKILL');
    await until('the helper to finish', () => !alive(helper));
    await run.exited;
    await until('the command to end with the run', () => !alive(command));
    afterwards(app);
  }
});

test('count --engine inject -p: upscope and its helper SIGKILLed together under load: the hooks stay, writing into a ring nobody reads, never waiting; the program runs on unharmed', async (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'objdump'] })) return;
  const { app, start } = loadTarget();
  const target = await start();
  const returns = compileProgram('inject-returns', {
    flags: ['-O2', '-fno-optimize-sibling-calls'],
    link: ['-lpthread'],
  });
  // And one whose threads are deep in hooked calls with their return addresses swapped.
  const deep = spawnCollected(returns, ['4', '20000', '1500', '0', '0']);
  try {
    const runs = [
      await underWay(['count', '--engine', 'inject', '-p', String(target.pid), `${app}:hooked`]),
      await underWay([
        'count',
        '--engine',
        'inject',
        '-p',
        String(deep.pid),
        `r:${returns}:rec`,
        `r:${returns}:deep`,
        `r:${returns}:work`,
      ]),
    ];
    for (const { run, helper } of runs) {
      process.kill(helper, 'SIGKILL');
      run.child.kill('SIGKILL');
    }
    for (const { run, helper } of runs) {
      await until('the helper to die', () => !alive(helper));
      await run.exited;
    }
    for (const pid of [target.pid, deep.pid]) {
      assert.equal(statusField(pid, 'TracerPid'), '0', 'the kernel let it go');
      // As said in the README: the hooks and their pages stay.
      assert.match(readFileSync(`/proc/${pid}/maps`, 'utf8'), /upscope-inject/);
    }
    assert.notDeepEqual(
      processBytes(target.pid, app, 'hooked', 16),
      symbolBytes(app, 'hooked', 16),
    );
    // They run on for a second (using CPU, not stopped, not waiting on the full ring).
    const before = [cpuTicks(target.pid), cpuTicks(deep.pid)];
    await sleep(1000);
    for (const [i, pid] of [target.pid, deep.pid].entries()) {
      assert.ok(alive(pid), `process ${pid} runs on`);
      assert.match(statusField(pid, 'State') ?? '', /^[RS]/, 'not stopped');
      assert.ok(cpuTicks(pid) > before[i]!, `process ${pid} kept running`);
    }
    await finishUnharmed(target);
    deep.child.kill('SIGUSR1');
    const exit = await ended(deep, 120_000);
    assert.deepEqual(exit, { code: 0, signal: null }, deep.stderr);
    const m = /^rounds (\d+) mismatches (\d+)$/m.exec(deep.stdout);
    assert.ok(m && Number(m[1]) > 4, deep.stdout);
    assert.equal(m[2], '0', 'every round computed what the first did');
    const counts = /^rec (\d+) (\d+) deep \d+ \d+ work (\d+) (\d+) /m.exec(deep.stdout);
    assert.ok(counts, deep.stdout);
    assert.equal(counts[1], counts[2], 'every call of rec returned');
    assert.equal(counts[3], counts[4], 'every call of work returned');
  } finally {
    target.child.kill('SIGKILL');
    deep.child.kill('SIGKILL');
    await ended(target);
    await ended(deep);
  }
  afterwards(app);
  afterwards(returns);
});
