// `upscope doctor` on this machine, as root and as nobody: the bpf engine's features against
// the kernel version uname gives (ring buffers came in 5.8, uprobe_multi links in 6.6).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

interface Check {
  id: string;
  status: string;
  detail: string;
}

function report(asNobody: boolean): Map<string, Check> {
  const result = runCli(['doctor', '--json'], { asNobody });
  const checks: Check[] = JSON.parse(result.stdout).checks;
  return new Map(checks.map((c) => [c.id, c]));
}

test('doctor tries the bpf engine’s handler, ring buffer and uprobe_multi link, as the kernel version says', (t) => {
  if (!requireHost(t, { root: true, commands: ['uname'] })) return;
  const [major, minor] = execFileSync('uname', ['-r'], { encoding: 'utf8' }).split('.').map(Number);
  const version = major! * 1000 + minor!;
  const root = report(false);
  assert.equal(root.get('bpf-program')?.status, 'ok', root.get('bpf-program')?.detail);
  assert.equal(root.get('bpf-ring-buffer')?.status, version >= 5008 ? 'ok' : 'warn');
  assert.equal(root.get('uprobe-multi')?.status, version >= 6006 ? 'ok' : 'warn');
  const nobody = report(true);
  assert.equal(nobody.get('bpf')?.status, 'fail');
  for (const id of ['bpf-program', 'bpf-ring-buffer', 'uprobe-multi']) {
    assert.equal(nobody.get(id)?.status, 'info', id);
  }
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(ownBpfFds(), []);
});
