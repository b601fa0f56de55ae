// The library API: Tracer.attach() and what an Attachment gives (events(), batches(), on()
// consumers with filters, stats(), close() from a consumer, AbortSignal, `await using`),
// against the C target that counts its own calls. Every test ends with nothing of this
// process left in tracefs and no child left running.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, test } from 'node:test';
import { type ProbeEvent, Tracer } from '../../src/api/index.js';
import { compileProgram, compileTraceTarget } from '../helpers/compile.js';
import { leftovers, ownBpfFds, ownLeftovers, TRACEFS } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';

const CALLS = 30;

afterEach(() => {
  assert.deepEqual(ownLeftovers(), [], 'nothing of this process is left in tracefs');
  assert.deepEqual(leftovers(), [], 'nothing of a dead upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
});

function target(): string {
  return compileTraceTarget().app;
}

/** The command line that runs the target with its report written to a file; the report. */
function command(app: string): {
  line: string;
  report: () => Map<string, number>;
  remove: () => void;
} {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-tracer-'));
  const file = join(dir, 'report');
  const remove = () => rmSync(dir, { recursive: true, force: true });
  return {
    line: `${app} ${CALLS} > ${file}`,
    remove,
    report: () => {
      const text = readFileSync(file, 'utf8');
      remove();
      return new Map(
        [...text.matchAll(/^(\w+) pid=\d+ f_ints=(\d+)/gm)].map((m) => [m[1]!, Number(m[2])]),
      );
    },
  };
}

/** f_ints calls the target says it made: its threads, the forked child and the exec. */
function totalCalls(report: Map<string, number>): number {
  assert.deepEqual([...report.keys()].sort(), ['exec', 'fork', 'main']);
  return [...report.values()].reduce((sum, n) => sum + n, 0);
}

test('events() gives every call with typed fields; stats() counts them; nothing is left', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = target();
  const run = command(app);
  const started = process.hrtime.bigint();
  const attachment = await new Tracer().attach(
    [`${app}:f_ints c=arg2:s32 d=arg3:s64`, `r:${app}:f_ints ret=retval:s32`],
    { command: run.line },
  );
  const events: ProbeEvent[] = [];
  for await (const event of attachment.events()) events.push(event);
  const report = run.report();
  const calls = totalCalls(report);
  assert.equal(attachment.exit?.code, 0);
  const entries = events.filter((e) => e.kind === 'entry');
  const returns = events.filter((e) => e.kind === 'return');
  assert.equal(entries.length, calls);
  assert.equal(returns.length, calls);
  for (const e of entries) {
    assert.equal(e.probe, 'f_ints');
    assert.equal(typeof e.fields['c'], 'number');
    // d = -i * 10^10 where c = -3i.
    assert.equal((e.fields['d'] as bigint) * 3n, BigInt(e.fields['c'] as number) * 10n ** 10n);
    assert.ok(e.timestampNs > started, 'timestamps are CLOCK_MONOTONIC, after the attach began');
  }
  // comm is the kernel's name of the thread: the program's, then `exe` after its exec of
  // /proc/self/exe.
  const byComm = (comm: string) => entries.filter((e) => e.comm === comm).length;
  assert.equal(byComm('exe'), report.get('exec'));
  assert.equal(byComm(basename(app).slice(0, 15)), calls - report.get('exec')!);
  for (const e of returns) assert.ok(e.latencyNs !== undefined && e.latencyNs > 0n);
  const stats = attachment.stats();
  assert.equal(stats.delivered, 2 * calls);
  assert.equal(stats.lost, 0);
  assert.deepEqual(
    stats.perProbe.map((p) => p.delivered),
    [calls, calls],
  );
});

test('on() consumers: several on one probe, each with its filter; batches() sees the same', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = target();
  const run = command(app);
  const attachment = await new Tracer().attach([`${app}:f_ints c=arg2:s32`, `${app}:f_str`], {
    command: run.line,
  });
  const even = (e: ProbeEvent) => (e.fields['c'] as number) % 2 === 0;
  const seen = { even: 0, odd: 0, all: 0, str: 0 };
  attachment.on('f_ints', () => seen.even++, { filter: even });
  attachment.on('f_ints', () => seen.odd++, { filter: (e) => !even(e) });
  attachment.on('*', () => seen.all++);
  const stop = attachment.on('f_str', () => seen.str++);
  stop();
  let batched = 0;
  for await (const batch of attachment.batches()) batched += batch.length;
  const calls = totalCalls(run.report());
  // c = -3i: even exactly when the call index is.
  assert.equal(seen.even + seen.odd, calls);
  assert.ok(seen.even > 0 && seen.odd > 0);
  assert.equal(seen.all, 2 * calls, 'the * consumer gets both probes');
  assert.equal(seen.str, 0, 'a removed consumer gets nothing');
  assert.equal(batched, 2 * calls, 'the iterator started after on() still gets every event');
});

test('close() from a consumer ends the attachment after the read under way', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = target();
  const run = command(app);
  const attachment = await new Tracer().attach(`${app}:f_ints`, { command: run.line });
  let seen = 0;
  attachment.on('*', () => {
    if (++seen === 5) void attachment.close();
  });
  await attachment.ended;
  assert.equal(attachment.error, undefined);
  assert.ok(seen >= 5);
  assert.equal(attachment.stats().delivered, seen);
  // The command is killed with the attachment: its report may be partial or missing.
  run.remove();
});

test('an AbortSignal and `await using` end the attachment; the traced process is unharmed', async (t) => {
  if (!requireHost(t, { root: true })) return;
  const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
  try {
    const controller = new AbortController();
    {
      await using attachment = await new Tracer().attach('libc:nanosleep', {
        pid: sleeper.pid!,
        signal: controller.signal,
      });
      setTimeout(() => controller.abort(), 100);
      await attachment.ended;
      assert.deepEqual(ownLeftovers(), [], 'the abort removed everything');
    }
    assert.equal(sleeper.exitCode, null, 'sleep still runs');
    assert.equal(sleeper.signalCode, null);
  } finally {
    sleeper.kill('SIGKILL');
  }
});

test('attach() rejects a pid and a command together, and a pid that does not exist', async (t) => {
  if (!requireHost(t, { root: true })) return;
  await assert.rejects(new Tracer().attach('libc:malloc', { pid: 1, command: 'true' }), {
    code: 'ERR_USAGE',
  });
  await assert.rejects(new Tracer().attach('libc:malloc', { pid: 2 ** 22 + 1 }), {
    code: 'ERR_PROCESS_NOT_FOUND',
  });
});

/** The burst target, started: it calls burst_call() `calls` times once sent SIGUSR1. */
function burst(calls: number) {
  const app = compileProgram('burst', { flags: ['-O2'] });
  const child = spawn(app, [String(calls)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  const printed = (text: string) =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (output.includes(text)) resolve();
      };
      child.stdout!.on('data', (chunk) => {
        output += chunk;
        check();
      });
      check();
    });
  return { app, child, printed };
}

test("lost events match the kernel's overrun counters, and delivered + lost = the calls made", async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const calls = 200_000;
  const { app, child, printed } = burst(calls);
  try {
    await printed('ready');
    // A small buffer read rarely: the burst overruns it.
    const attachment = await new Tracer().attach(`${app}:burst_call`, {
      pid: child.pid!,
      bufferSizeKb: 64,
      pollIntervalMs: 60_000,
    });
    child.kill('SIGUSR1');
    await printed(`calls=${calls}`);
    // The kernel's own count of events overwritten, read before upscope removes its instance.
    const instances = readdirSync(`${TRACEFS}/instances`).filter((name) =>
      name.startsWith(`upscope_${process.pid}`),
    );
    // The probes' instance, and the one that keeps the kernel's task and exec events apart.
    assert.deepEqual(instances.sort(), [`upscope_${process.pid}`, `upscope_${process.pid}_2`]);
    let overrun = 0;
    const perCpu = join(TRACEFS, 'instances', `upscope_${process.pid}`, 'per_cpu');
    for (const cpu of readdirSync(perCpu)) {
      const stats = readFileSync(join(perCpu, cpu, 'stats'), 'utf8');
      overrun += Number(/^overrun: (\d+)/m.exec(stats)?.[1] ?? Number.NaN);
    }
    await attachment.close();
    const stats = attachment.stats();
    assert.ok(overrun > 0, 'the burst overran the buffer');
    assert.equal(stats.lost, overrun);
    assert.equal(stats.delivered + stats.lost, calls);
  } finally {
    child.kill('SIGKILL');
  }
});

test('bpf engine: a full ring buffer loses hits, and delivered + lost = the calls made', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const calls = 200_000;
  const { app, child, printed } = burst(calls);
  try {
    await printed('ready');
    // 64 KiB per CPU: one small buffer, read rarely, which the burst fills.
    const attachment = await new Tracer().attach(`${app}:burst_call i=arg0:s64`, {
      pid: child.pid!,
      engine: 'bpf',
      bufferSizeKb: 64,
      pollIntervalMs: 60_000,
    });
    child.kill('SIGUSR1');
    await printed(`calls=${calls}`);
    const seen = new Set<bigint>();
    attachment.on('*', (event) => {
      assert.equal(event.pid, child.pid);
      seen.add(event.fields['i'] as bigint);
    });
    await attachment.close();
    const stats = attachment.stats();
    assert.ok(stats.lost > 0, 'the burst filled the buffer');
    assert.equal(stats.delivered, seen.size, 'each delivered call once');
    assert.equal(stats.delivered + stats.lost, calls);
    assert.deepEqual(stats.perProbe, [
      { probe: 'burst_call', delivered: stats.delivered, hits: calls },
    ]);
    // The first calls fit in the buffer, in the order made.
    assert.ok(seen.has(0n) && seen.has(999n));
  } finally {
    child.kill('SIGKILL');
  }
});
