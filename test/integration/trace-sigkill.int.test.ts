// upscope-tests: alone (it SIGKILLs upscope, leaving a group of a dead owner until the next start cleans it).
// The rest of `upscope trace` is in trace.int.test.ts; this test is apart from it to run alone.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { appendFileSync, readFileSync } from 'node:fs';
import { afterEach, test } from 'node:test';
import { compileProgram, compileTraceTarget } from '../helpers/compile.js';
import { leftovers, TRACEFS } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
});

test('after upscope is killed with SIGKILL, the next start removes what it left, and only that', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const { app } = compileTraceTarget();
  const foreign = `othertool_${process.pid}`;
  appendFileSync(`${TRACEFS}/uprobe_events`, `p:${foreign}/probe ${app}:0x1000\n`);
  try {
    const child = spawn(process.execPath, [BIN, 'trace', '-c', `${app} 100000`, `${app}:f_str`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    while (!err.includes('Tracing')) await new Promise((r) => setTimeout(r, 20));
    assert.ok(leftovers(true).length > 0, 'the trace has defined its probes');
    child.kill('SIGKILL');
    await once(child, 'exit');
    // The target lives on without its tracer; end it.
    spawnSync('pkill', ['-KILL', '-f', `${app} 100000`]);
    assert.ok(leftovers().length > 0, 'a SIGKILL leaves the probes behind');
    const next = runCli(['clean']);
    assert.equal(next.status, 0, next.stderr);
    assert.deepEqual(leftovers(), []);
    assert.ok(
      readFileSync(`${TRACEFS}/uprobe_events`, 'utf8').includes(`${foreign}/probe`),
      "another tool's event is kept",
    );
  } finally {
    appendFileSync(`${TRACEFS}/uprobe_events`, `-:${foreign}/probe\n`);
  }
});

// tracefs removes enabled probes one at a time, about 50 ms each: the next start after a
// killed trace of many probes waited for their removal, saying nothing.
test('the next start says that removing what a killed trace left takes seconds', async (t) => {
  if (!requireHost(t, { root: true, commands: ['g++'] })) return;
  const app = compileProgram('cxx-many', { flags: ['-O2'] });
  // many::f1000 to many::f1039: 40 probes, nothing runs them.
  const child = spawn(
    process.execPath,
    [BIN, 'trace', '--engine', 'tracefs', `${app}:many::f10[0-3]*`],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let err = '';
  child.stderr.on('data', (chunk) => {
    err += chunk;
  });
  while (!err.includes('Tracing')) await new Promise((r) => setTimeout(r, 20));
  assert.match(err, /^Tracing 40 probes \(tracefs\)/m);
  child.kill('SIGKILL');
  await once(child, 'exit');
  assert.ok(leftovers().length > 0, 'a SIGKILL leaves the probes behind');
  const next = runCli(['trace', '--engine', 'tracefs', '-c', `${app} 1`, `${app}:many::f3499`]);
  assert.equal(next.status, 0, next.stderr);
  assert.match(
    next.stderr,
    new RegExp(
      `^upscope: removing 40 probes an upscope killed before its end \\(pid ${child.pid}\\) left enabled: tracefs removes them one at a time, about 2 s$`,
      'm',
    ),
  );
  assert.deepEqual(leftovers(), []);
});
