import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { processEnded } from './launch.js';

test('processEnded(): a running process has not ended; a zombie and a pid nobody has have', async () => {
  assert.equal(processEnded(process.pid), false);
  // A child that exits and is not reaped yet is a zombie (state Z in /proc/PID/stat).
  const child = spawn('sh', ['-c', 'exit 0'], { stdio: 'ignore' });
  const pid = child.pid!;
  const exited = once(child, 'exit');
  for (let i = 0; i < 200 && !processEnded(pid); i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(processEnded(pid), true);
  await exited;
  assert.equal(processEnded(2 ** 22 + 1), true, 'above pid_max');
});

test('processEnded(): failing to read /proc for want of descriptors (EMFILE) is not an end', () => {
  const src = new URL('./launch.ts', import.meta.url).pathname;
  const script = `
    import { openSync } from 'node:fs';
    import { processEnded } from ${JSON.stringify(src)};
    let full = false;
    try { for (;;) openSync('/dev/null', 'r'); } catch (err) { full = err.code === 'EMFILE'; }
    console.log(JSON.stringify({ full, ended: processEnded(process.pid) }));
  `;
  const run = spawnSync(
    'prlimit',
    ['--nofile=64:64', process.execPath, '--import', 'tsx', '--input-type=module', '-e', script],
    { encoding: 'utf8' },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.deepEqual(JSON.parse(run.stdout.trim().split('\n').at(-1)!), { full: true, ended: false });
});
