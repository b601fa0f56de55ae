// AsyncProcessTracer: the ptrace engine on its own worker thread. The caller's event loop
// runs while the tracer waits; handlers run in the caller's thread with memory served by the
// worker; requests reach a worker blocked in waitpid. No root needed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AsyncProcessTracer } from '../../src/api/index.js';
import { capture } from '../helpers/capture.js';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

test('handlers change a return value and read strings while the event loop goes on', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const untraced = execFileSync(app, ['2000'], { encoding: 'utf8' });

  // check_gate() returns 0 for "guess": the handler makes it 1, and the program says open.
  const gateOut = capture();
  const gate = await AsyncProcessTracer.spawn([app, 'gate'], { stdio: [0, gateOut.fd, 2] });
  const seen: string[] = [];
  await gate.register({
    id: 'gate',
    event: 'return',
    where: `${app}:check_gate`,
    handler: (hit) => {
      seen.push(`${hit.readCString(hit.entry!.get('rdi'))} -> ${hit.retval}`);
      hit.retval = 1n;
    },
  });
  // puts() is in libc, not mapped yet: placed when the loader maps it; no handler, so polled.
  await gate.register({ id: 'puts', event: 'breakpoint', where: 'libc:puts' });
  const polled = await gate.poll(20_000);
  assert.equal(polled?.id, 'puts');
  seen.push(`puts ${polled!.readCString(polled!.regs.get('rdi'))}`);
  assert.equal(await gate.poll(20_000), null);
  assert.deepEqual(seen, ['guess -> 0', 'puts open']);
  assert.equal(gateOut.text(), 'open\n');
  assert.equal(gate.exitCode, 0);
  await gate.detach();

  // 8,000 hits with a handler: timers of this thread fire meanwhile.
  const out = capture();
  const tracer = await AsyncProcessTracer.spawn([app, '2000'], { stdio: [0, out.fd, 2] });
  let hits = 0;
  let sum = 0n;
  await tracer.register({
    id: 'add',
    event: 'breakpoint',
    where: `${app}:probed_add`,
    handler: (hit) => {
      hits++;
      sum += hit.regs.get('rsi');
    },
  });
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  try {
    assert.equal(await tracer.poll(), null);
  } finally {
    clearInterval(timer);
  }
  assert.equal(out.text(), untraced);
  assert.equal(hits, 8000, 'the program counted 4 x 2000 calls');
  assert.equal(sum, 2000n * (0n + 1n + 2n + 3n), 'each thread passes its number as b');
  assert.ok(ticks > 10, `the event loop ran while the process was traced (${ticks} ticks)`);
  assert.equal(tracer.exitCode, 0);
  await tracer.detach();
  assert.deepEqual(tracedChildren([gate.pid, tracer.pid]), []);
});

/**
 * Spawn `argv`, register a breakpoint on `where` `delayMs` after the first poll (while every
 * thread runs, or while they are being made), whose handler removes it at its 100th hit (and
 * then calls `gone`); the program must end as it does untraced: exit 0, the same output.
 */
async function probeComesAndGoes(
  argv: readonly string[],
  where: string,
  delayMs: number,
  gone?: () => void,
) {
  const out = capture();
  const tracer = await AsyncProcessTracer.spawn(argv, { stdio: [0, out.fd, 2] });
  const ended = tracer.poll();
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  let hits = 0;
  await tracer.register({
    id: 'probe',
    event: 'breakpoint',
    where,
    handler: (hit) => {
      assert.equal(hit.readU64(hit.regs.rsp) > 0n, true, 'a return address on the stack');
      if (++hits === 100) {
        tracer.unregister('probe');
        gone?.();
      }
    },
  });
  assert.equal(await ended, null);
  const result = { hits, exitCode: tracer.exitCode, output: out.text(), pid: tracer.pid };
  await tracer.detach();
  return result;
}

test('a probe registered while the worker waits in waitpid takes hits; its handler removes it', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  // probed_add() starts with `lock addq` (guarded: the probe's int3 and the guard's after
  // it). Its 4 threads call it until the probe is gone (`until FILE`), then 100,000 times
  // more each: running when the probe comes and when it goes, and no longer. Ten times, the
  // probe coming at once (while the threads are being made) or 10 ms later.
  const dir = mkdtempSync(join(tmpdir(), 'upscope-async-'));
  const pids: number[] = [];
  try {
    for (let run = 0; run < 10; run++) {
      const stop = join(dir, `stop-${run}`);
      const got = await probeComesAndGoes(
        [app, 'until', stop],
        `${app}:probed_add`,
        (run % 2) * 10,
        () => writeFileSync(stop, ''),
      );
      pids.push(got.pid);
      assert.equal(got.exitCode, 0, `run ${run}: the program exits 0 (${got.hits} hits)`);
      assert.equal(got.hits, 100, `run ${run}`);
      // The program's count and checksum against those of its threads' own loops.
      const made = /^calls=(\d+) checksum=(\d+)$/m.exec(got.output);
      const looped = /^loops=(\d+) expected=(\d+)$/m.exec(got.output);
      assert.ok(made !== null && looped !== null, `run ${run}: ${got.output}`);
      assert.equal(made[1], looped[1], `run ${run}: every call ran once`);
      assert.equal(made[2], looped[2], `run ${run}: and returned its sum`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(tracedChildren(pids), []);
  assert.deepEqual(leftovers(), []);
});

test('a probe that comes and goes while C++ (throwing), Go and Rust threads run changes nothing', async (t) => {
  if (!requireHost(t, { commands: ['gcc', 'g++'] })) return;
  // Each program's threads call its function until the probe is gone (`until FILE`), then
  // 100,000 times more each; it prints the calls its threads counted and what those calls
  // made, which must agree.
  const targets: { name: string; app: string; where: string; agrees: (out: string) => void }[] = [];
  /** `calls=N added=M`: each call added 2. */
  const addedTwice = (out: string) => {
    const m = /^calls=(\d+) added=(\d+)$/m.exec(out);
    assert.ok(m !== null, out);
    assert.equal(BigInt(m[2]!), 2n * BigInt(m[1]!), `every call ran once: ${out}`);
  };
  // ns::Counter::add() starts with `lock add`; its callers throw every 100 calls.
  const cxx = compileProgram('lock-insns-cxx', { flags: ['-O2'], link: ['-lpthread'] });
  targets.push({ name: 'C++', app: cxx, where: `${cxx}:ns::Counter::add`, agrees: addedTwice });
  const go = findGo();
  const rustc = findRustc();
  for (const [tool, missing] of [
    [go, 'go is not installed (golang-go)'],
    [rustc, 'rustc is not installed (looked on PATH and in ~/.cargo/bin)'],
  ] as const) {
    if (tool !== undefined) continue;
    if (STRICT) throw new Error(`Cannot run test under CI: ${missing}`);
    console.log(`# "${t.name}" leaves a language out: ${missing}`);
  }
  if (go !== undefined) {
    // main.step() starts with Go's stack check (a compare and a conditional jump), 4 goroutines.
    const app = compileGo(go, 'race-loop');
    targets.push({
      name: 'Go',
      app,
      where: `${app}:main.step`,
      agrees: (out) => {
        const made = /^calls=(\d+) checksum=(\d+)$/m.exec(out);
        const looped = /^loops=(\d+) expected=(\d+)$/m.exec(out);
        assert.ok(made !== null && looped !== null, out);
        assert.equal(made[1], looped[1], `every call ran once: ${out}`);
        assert.equal(made[2], looped[2], `and returned its value: ${out}`);
      },
    });
  }
  if (rustc !== undefined) {
    const app = compileRust(rustc, 'lock-insns', ['-C', 'opt-level=2']);
    targets.push({
      name: 'Rust',
      app,
      where: `${app}:lock_insns::locked_add`,
      agrees: addedTwice,
    });
  }
  const dir = mkdtempSync(join(tmpdir(), 'upscope-async-'));
  const pids: number[] = [];
  try {
    for (const target of targets) {
      for (const delayMs of [0, 10]) {
        const stop = join(dir, `stop-${target.name}-${delayMs}`);
        const got = await probeComesAndGoes(
          [target.app, 'until', stop],
          target.where,
          delayMs,
          () => writeFileSync(stop, ''),
        );
        pids.push(got.pid);
        const what = `${target.name}, probe after ${delayMs} ms`;
        assert.equal(got.exitCode, 0, `${what}: the program exits 0 (${got.hits} hits)`);
        assert.equal(got.hits, 100, what);
        target.agrees(got.output);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(tracedChildren(pids), []);
  assert.deepEqual(leftovers(), []);
});

test('poll() with a timeout resolves null; detach leaves the process running untraced', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('tgt-sleeper');
  const out = capture();
  const tracer = await AsyncProcessTracer.spawn([app], { stdio: [0, out.fd, 2] });
  const started = performance.now();
  assert.equal(await tracer.poll(100), null);
  assert.ok(performance.now() - started >= 99);
  assert.equal(tracer.ended, false);
  await assert.rejects(
    tracer.register({ id: 'x', event: 'breakpoint', where: `${app}:no_such_function` }),
    { code: 'ERR_SYMBOL_NOT_FOUND' },
  );
  const pid = tracer.pid;
  await tracer.detach();
  assert.match(execFileSync('ps', ['-o', 'stat=', '-p', String(pid)], { encoding: 'utf8' }), /S/);
  const status = execFileSync('grep', ['TracerPid', `/proc/${pid}/status`], { encoding: 'utf8' });
  assert.match(status, /TracerPid:\s+0/);
  process.kill(pid, 'SIGKILL');
  out.text();
});

test('detach() and kill() resolve though this thread was busy while the worker answered and ended', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('tgt-sleeper');
  const busy = () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
  for (const op of ['detach', 'kill'] as const) {
    const out = capture();
    const tracer = await AsyncProcessTracer.spawn([app], { stdio: [0, out.fd, 2] });
    const pid = tracer.pid;
    const closing = op === 'detach' ? tracer.detach() : tracer.kill();
    // The worker replies and its thread ends meanwhile: both are seen at once after this,
    // the end first (its reply was taken for lost: "the tracer thread has ended").
    busy();
    await closing;
    if (op === 'detach') {
      const status = execFileSync('grep', ['TracerPid', `/proc/${pid}/status`], {
        encoding: 'utf8',
      });
      assert.match(status, /TracerPid:\s+0/);
      process.kill(pid, 'SIGKILL');
    }
    // Not traced; killed by the tracer, reaped (detached and killed here, this process's
    // zombie: nothing reaps a detached child but its parent, as ProcessTracer.reap() says).
    assert.deepEqual(tracedChildren(op === 'kill' ? [pid] : []), []);
    out.text();
  }
});

test('the built package runs its tracer thread from dist/ (the compiled worker module)', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const dist = new URL('../../dist/api/index.js', import.meta.url).href;
  const script = `
    const { AsyncProcessTracer } = await import(${JSON.stringify(dist)});
    const tracer = await AsyncProcessTracer.spawn([${JSON.stringify(app)}, 'gate'], { stdio: [0, 2, 2] });
    await tracer.register({ id: 'gate', event: 'return', where: ${JSON.stringify(`${app}:check_gate`)},
      handler: (hit) => { hit.retval = 1n; } });
    await tracer.register({ id: 'exit', event: 'exit', handler: (hit) => console.log('exit', hit.detail) });
    console.log(await tracer.poll(), tracer.exitCode);
    await tracer.detach();`;
  const file = join(mkdtempSync(join(tmpdir(), 'upscope-dist-')), 'use.mjs');
  writeFileSync(file, script);
  const result = execFileSync(process.execPath, [file], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  assert.equal(result, 'exit 0\nnull 0\n');
});
