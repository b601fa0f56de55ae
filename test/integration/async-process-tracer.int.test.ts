// AsyncProcessTracer: the ptrace engine on its own worker thread. The caller's event loop
// runs while the tracer waits; handlers run in the caller's thread with memory served by the
// worker; requests reach a worker blocked in waitpid. No root needed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AsyncProcessTracer } from '../../src/api/index.js';
import { capture } from '../helpers/capture.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
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

test('a probe registered while the worker waits in waitpid takes hits; its handler removes it', async (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const out = capture();
  // 4 x 50,000,000 calls: long enough to be running when the probe comes.
  const tracer = await AsyncProcessTracer.spawn([app, '50000000'], { stdio: [0, out.fd, 2] });
  const ended = tracer.poll();
  await new Promise((resolve) => setTimeout(resolve, 10));
  let hits = 0;
  await tracer.register({
    id: 'add',
    event: 'breakpoint',
    where: `${app}:probed_add`,
    handler: (hit) => {
      assert.equal(hit.readU64(hit.regs.rsp) > 0n, true, 'a return address on the stack');
      if (++hits === 100) tracer.unregister('add');
    },
  });
  assert.equal(await ended, null);
  assert.equal(hits, 100);
  assert.match(out.text(), /^calls=200000000 /);
  await tracer.detach();
  assert.deepEqual(tracedChildren([tracer.pid]), []);
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
