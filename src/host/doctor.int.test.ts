// runDoctor() on this machine, as root: the truth is the kernel's own files and uname.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { runFreshProcess } from '../../test/helpers/fresh-process.js';
import { requireHost } from '../../test/helpers/require-host.js';
import { runDoctor } from './doctor.js';

test('runDoctor({ mount: true }) leaves tracefs mounted, finds uprobe_events writable and BPF working, as root', async (t) => {
  if (!requireHost(t, { root: true, commands: ['uname', 'grep'] })) return;
  const started = performance.now();
  const report = await runDoctor({ mount: true });
  const durationMs = performance.now() - started;
  t.diagnostic(`runDoctor() took ${durationMs.toFixed(1)} ms`);
  const byId = new Map(report.checks.map((c) => [c.id, c]));

  const tracefs = byId.get('tracefs')!;
  assert.equal(tracefs.status, 'ok', tracefs.detail);
  const mounted = execFileSync('grep', ['tracefs', '/proc/self/mountinfo'], { encoding: 'utf8' });
  const place = /(\/sys\/kernel(?:\/debug)?\/tracing)/.exec(tracefs.detail)![1]!;
  assert.ok(
    mounted.split('\n').some((line) => line.split(' ')[4] === place),
    `${place} in mountinfo`,
  );

  const events = byId.get('uprobe-events')!;
  assert.equal(events.status, 'ok', events.detail);
  accessSync(`${place}/uprobe_events`, constants.W_OK);

  assert.equal(byId.get('bpf')!.status, 'ok', byId.get('bpf')!.detail);

  const release = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  assert.ok(byId.get('kernel')!.detail.startsWith(`${release} (`), byId.get('kernel')!.detail);

  const capEff = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]!;
  if ((BigInt(`0x${capEff}`) >> 21n) & 1n) assert.equal(byId.get('capabilities')!.status, 'ok');
});

test('the doctor loads the native layer for its BPF check only', () => {
  // In a fresh process: the tracefs, kernel and capability helpers never load koffi.
  const printed = runFreshProcess([
    "const host = await import('./src/host/index.ts');",
    "const native = await import('./src/native/index.ts');",
    'host.findTracefs(); host.kernelVersion(); host.effectiveCapabilities(); host.isRoot();',
    'console.log(JSON.stringify(native.isNativeLoaded()));',
  ]);
  assert.equal(printed, false);
});
