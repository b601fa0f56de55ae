import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

interface Check {
  id: string;
  status: string;
  detail: string;
  fix?: string;
}

test('upscope doctor --json, as root, finds what this machine allows', (t) => {
  if (!requireHost(t, { root: true })) return;
  const result = runCli(['doctor', '--json']);
  const checks = new Map((JSON.parse(result.stdout).checks as Check[]).map((c) => [c.id, c]));
  // tracefs is mounted (by doctor itself when it was not) where /proc/self/mountinfo says.
  const mountinfo = readFileSync('/proc/self/mountinfo', 'utf8');
  const tracefs = mountinfo.split('\n').find((l) => l.includes(' - tracefs '));
  assert.ok(tracefs, 'tracefs is mounted after doctor');
  assert.equal(checks.get('tracefs')!.status, 'ok');
  assert.ok(checks.get('tracefs')!.detail.includes(tracefs.split(' ')[4]!));
  assert.equal(checks.get('uprobe-events')!.status, 'ok');
  assert.equal(checks.get('bpf')!.status, 'ok');
  const release = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  assert.ok(checks.get('kernel')!.detail.startsWith(release));
  assert.equal(result.status, 0, 'nothing upscope needs is missing');
});

test('upscope doctor, without capabilities, says what is missing and how to fix it', (t) => {
  if (!requireHost(t, { root: true, commands: ['setpriv'] })) return;
  // uid 0 with an empty capability bounding set: what an unprivileged user's BPF call gets.
  const out = execFileSync(
    'sh',
    [
      '-c',
      `setpriv --bounding-set=-all --inh-caps=-all -- ${process.execPath} bin/upscope.js doctor; echo "exit=$?"`,
    ],
    { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname },
  );
  assert.match(out, /exit=1\n$/);
  assert.match(out, /warn\s+Capabilities\s+missing CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON/);
  assert.match(out, /FAIL\s+BPF\s+.*EPERM/);
  assert.match(out, /fix: .*grant CAP_BPF and CAP_PERFMON/);
});
