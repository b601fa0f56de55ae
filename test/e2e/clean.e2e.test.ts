// upscope-tests: alone (it makes groups of dead owners, which other files would take for leftovers).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import { test } from 'node:test';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

const TRACEFS = '/sys/kernel/tracing';
const EVENTS = `${TRACEFS}/uprobe_events`;
const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';

function groups(): string[] {
  return readFileSync(EVENTS, 'utf8')
    .split('\n')
    .map((line) => /^[pr]:([^/]+)\//.exec(line)?.[1])
    .filter((g): g is string => g !== undefined);
}

test('upscope clean removes a dead session group and instance, and nothing else', (t) => {
  if (!requireHost(t, { root: true })) return;
  runCli(['doctor']); // mounts tracefs when it is missing
  const dead = spawnSync('true').pid!; // a pid whose process is gone
  assert.equal(existsSync(`/proc/${dead}`), false);
  const stale = `upscope_${dead}`;
  const live = `upscope_${process.pid}`;
  const foreign = `othertool_${process.pid}`;
  try {
    for (const group of [stale, live, foreign])
      appendFileSync(EVENTS, `p:${group}/probe ${LIBC}:0x1000\n`);
    mkdirSync(`${TRACEFS}/instances/${stale}`);
    const result = runCli(['clean']);
    assert.equal(result.status, 0, result.stderr);
    assert.ok(!groups().includes(stale), 'the dead session group is gone');
    assert.ok(!existsSync(`${TRACEFS}/instances/${stale}`), 'its instance is gone');
    assert.ok(groups().includes(live), "a live session's group is kept");
    assert.ok(groups().includes(foreign), "another tool's group is kept");
    assert.match(result.stdout, /removed stale|nothing to clean/);
    const again = runCli(['clean']);
    assert.match(again.stdout, /^nothing to clean/);
  } finally {
    for (const group of [stale, live, foreign]) {
      if (groups().includes(group)) appendFileSync(EVENTS, `-:${group}/probe\n`);
    }
    if (existsSync(`${TRACEFS}/instances/${stale}`)) rmdirSync(`${TRACEFS}/instances/${stale}`);
  }
  for (const group of [stale, live, foreign])
    assert.ok(!groups().includes(group), `${group} removed`);
});

test('upscope clean without capabilities says what is missing', (t) => {
  if (!requireHost(t, { root: true, commands: ['setpriv'] })) return;
  const out = runCli(['clean'], { asNobody: true });
  // Either tracefs itself or uprobe_events is out of reach of uid 65534: one clear line.
  assert.notEqual(out.status, 0);
  assert.match(out.stderr, /^error\[ERR_(PRIVILEGES|TRACEFS_NOT_MOUNTED)\]: Cannot /);
  assert.doesNotMatch(out.stderr, /\n\s+at /);
});
