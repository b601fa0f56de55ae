// `count --prometheus` and `latency --prometheus` on a live C target, scraped by a real
// Prometheus server (Debian's) started here on a loopback port: its query API gives back the
// target's own counts of calls, per key, and a histogram's _count equals the calls. A port in
// use is one line, before anything is attached. Nothing is left behind: no probes, no
// Prometheus process, no data directory.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { freePort, startPrometheus } from '../helpers/prometheus-server.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { type Spawned, spawnCollected } from '../helpers/spawned.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

async function until(what: string, check: () => boolean, spawned: Spawned[]): Promise<void> {
  for (let i = 0; i < 600 && !check(); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(check(), `${what}:\n${spawned.map((s) => s.stdout + s.stderr).join('\n')}`);
}

test('Prometheus scrapes count --prometheus and latency --prometheus: the series are the target’s counts', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'prometheus'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['3001', '17']);
  const [countPort, latencyPort] = [await freePort(), await freePort()];
  const prometheus = await startPrometheus({
    count: `127.0.0.1:${countPort}`,
    latency: `127.0.0.1:${latencyPort}`,
  });
  const started: Spawned[] = [target];
  try {
    await until('the target waits', () => target.stdout.includes('waiting'), started);
    const count = spawnCollected(process.execPath, [
      BIN,
      'count',
      '--by',
      'arg0',
      '--prometheus',
      String(countPort),
      '-p',
      String(target.pid),
      `${app}:work`,
      `${app}:other`,
    ]);
    const latency = spawnCollected(process.execPath, [
      BIN,
      'latency',
      '--prometheus',
      `127.0.0.1:${latencyPort}`,
      '-p',
      String(target.pid),
      `${app}:work`,
    ]);
    started.push(count, latency);
    await until(
      'both serve their metrics',
      () =>
        [count, latency].every((s) => /serving metrics at http:\/\/127\.0\.0\.1:/.test(s.stderr)),
      started,
    );
    target.child.kill('SIGUSR1');
    await until('the target is done', () => target.stdout.includes('done'), started);
    const own = /work0=(\d+) work1=(\d+) work2=(\d+) other=(\d+)/.exec(target.stdout)!;
    assert.ok(await prometheus.scraped(['count', 'latency']), prometheus.log());
    // Scrapes every second: wait (bounded) until one taken after the calls is stored.
    const expected = new Map([
      ['work 0', own[1]],
      ['work 1', own[2]],
      ['work 2', own[3]],
      ['other 0', own[4]],
    ]);
    let hits = new Map<string, string>();
    for (let i = 0; i < 60; i++) {
      const rows = await prometheus.query('upscope_probe_hits_total{job="count"}');
      hits = new Map(rows.map((r) => [`${r.metric['probe']} ${r.metric['arg0']}`, r.value[1]]));
      if (hits.get('work 0') === own[1] && hits.size >= 4) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    // other's argument runs 0..16: its keys summed.
    const others = (
      await prometheus.query('sum(upscope_probe_hits_total{job="count",probe="other"})')
    )[0]!.value[1];
    hits.set('other 0', others);
    for (const [key, value] of expected) assert.equal(hits.get(key), value, key);
    const calls = await prometheus.query('upscope_latency_seconds_count{job="latency"}');
    assert.equal(calls[0]?.metric['probe'], 'work');
    assert.equal(calls[0]?.value[1], String(3001));
    const buckets = await prometheus.query(
      'upscope_latency_seconds_bucket{job="latency",le="+Inf"}',
    );
    assert.equal(buckets[0]?.value[1], '3001');
    const attached = await prometheus.query('upscope_probes_attached{job="count"}');
    assert.equal(attached[0]?.value[1], '2');
    const lost = await prometheus.query('upscope_events_lost_total{job="count"}');
    assert.equal(lost[0]?.value[1], '0');

    for (const s of [count, latency]) s.child.kill('SIGINT');
    const ends = await Promise.all([count.exited, latency.exited]);
    for (const end of ends) assert.equal(end.code, 0, count.stderr + latency.stderr);
    // The text totals still print at the end, as without --prometheus.
    assert.match(count.stdout, /work/);
  } finally {
    for (const s of started) s.child.kill('SIGKILL');
    await Promise.all(started.map((s) => s.exited));
    await prometheus.stop();
  }
  assert.equal(
    prometheus.process.exitCode !== null || prometheus.process.signalCode !== null,
    true,
  );
  assert.equal(existsSync(prometheus.dataDir), false);
  assert.deepEqual(leftovers(), []);
});

test('--prometheus on a port in use: one line, nothing attached', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const busy = createServer();
  await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
  const port = (busy.address() as { port: number }).port;
  try {
    const run = runCli(['count', '--prometheus', String(port), '-c', `${app} 5 5`, `${app}:work`]);
    assert.equal(run.status, 5);
    const lines = run.stderr.trim().split('\n');
    assert.match(
      lines[0]!,
      new RegExp(
        `^error\\[ERR_LISTEN\\]: Cannot listen on 127\\.0\\.0\\.1:${port} for --prometheus: the port is in use by another program \\(EADDRINUSE\\)$`,
      ),
    );
    assert.equal(lines.filter((l) => l.startsWith('error')).length, 1);
    assert.doesNotMatch(run.stderr, /Counting| {4}at /);
  } finally {
    busy.close();
  }
  assert.deepEqual(leftovers(), []);
});
