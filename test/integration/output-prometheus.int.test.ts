// Prometheus's exposition text as Prometheus itself reads it: `promtool check metrics` (its
// parser and linter) accepts every rendering, and refuses a broken one; a real Prometheus
// server (Debian's), started on a loopback port with a generated config, scrapes a rendering
// served over HTTP, and its query API gives back the recorded counts, and from the histogram
// the count and the quantile its buckets imply.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { renderPrometheus } from '../../src/output/index.js';
import { counts, histograms, latency, stackCounts } from '../fixtures/output/load.js';
import { requireHost } from '../helpers/require-host.js';

const dir = mkdtempSync(join(tmpdir(), 'upscope-prometheus-'));
const cleanups: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  rmSync(dir, { recursive: true, force: true });
});

function promtool(text: string) {
  return spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
}

const renderings = () => ({
  'counts by value, histograms, latencies, health': renderPrometheus({
    counts: { by: 'arg0', rows: counts().byArg0 },
    values: { value: 'arg0', rows: histograms().log2 },
    latency: latency().rows,
    health: {
      eventsLost: 0,
      probesAttached: 3,
      attachErrors: 0,
      notCounted: { map_full: 0n, fault: 2n },
    },
  }),
  'counts by thread name': renderPrometheus({ counts: { by: 'comm', rows: counts().byComm } }),
  'counts by stack, capped': renderPrometheus(
    { counts: { by: 'ustack', rows: stackCounts().rows } },
    { maxSeries: 2 },
  ),
  'linear histogram of a signed value': renderPrometheus({
    values: { value: 'retval:s64', rows: histograms().linear },
  }),
  'a key that is no identifier': renderPrometheus({
    counts: {
      by: '+0(arg0):string',
      rows: [{ probe: 'p', key: 'a "quoted"\\ line\nbreak', count: 3n }],
    },
  }),
});

for (const [name, text] of Object.entries(renderings())) {
  test(`promtool check metrics accepts ${name}`, (t) => {
    if (!requireHost(t, { commands: ['promtool'] })) return;
    const run = promtool(text);
    assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
    assert.equal(run.stdout + run.stderr, '');
  });
}

test('promtool check metrics refuses what breaks the format (the check can fail)', (t) => {
  if (!requireHost(t, { commands: ['promtool'] })) return;
  const text = renderPrometheus({ counts: { by: 'comm', rows: counts().byComm } });
  assert.notEqual(promtool(text.replace('probe=', 'probe-name=')).status, 0);
  assert.notEqual(promtool(text + text).status, 0);
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function query(
  base: string,
  expr: string,
): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const res = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = (await res.json()) as { status: string; data: { result: never[] } };
  assert.equal(body.status, 'success');
  return body.data.result;
}

test('a Prometheus server scrapes the metrics and its queries give the recorded values', async (t) => {
  if (!requireHost(t, { commands: ['prometheus'] })) return;
  const text = renderPrometheus({
    counts: { by: 'arg0', rows: counts().byArg0 },
    values: { value: 'arg0', rows: histograms().log2 },
    latency: latency().rows,
  });
  const target = createHttpServer((req, res) => {
    res.writeHead(req.url === '/metrics' ? 200 : 404, {
      'content-type': 'text/plain; version=0.0.4; charset=utf-8',
    });
    res.end(req.url === '/metrics' ? text : '');
  });
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise((resolve) => target.close(() => resolve())));
  const targetPort = (target.address() as AddressInfo).port;
  const port = await freePort();
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      '  - job_name: upscope',
      `    static_configs: [{ targets: ['127.0.0.1:${targetPort}'] }]`,
      '',
    ].join('\n'),
  );
  const server: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  server.stderr!.on('data', (chunk) => {
    log += chunk;
  });
  const exited = new Promise((resolve) => server.once('exit', resolve));
  cleanups.push(async () => {
    server.kill('SIGTERM');
    await exited;
  });
  const base = `http://127.0.0.1:${port}`;
  // Wait (bounded) until the target has been scraped once.
  let up: { value: [number, string] }[] = [];
  for (let i = 0; i < 120 && up[0]?.value[1] !== '1'; i++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    try {
      up = await query(base, 'up{job="upscope"}');
    } catch {
      up = [];
    }
  }
  assert.equal(up[0]?.value[1], '1', `the target was not scraped:\n${log}`);

  const hits = await query(base, 'upscope_probe_hits_total');
  assert.deepEqual(
    new Map(hits.map((r) => [r.metric['arg0'], r.value[1]])),
    new Map(counts().byArg0.map((row) => [String(row.key), String(row.count)])),
  );
  const [histogram] = histograms().log2;
  const count = await query(base, 'upscope_value_count');
  assert.equal(count[0]!.value[1], String(histogram!.histogram.count));
  // The median the buckets imply: within the power of two that holds the true median (2500).
  const median = await query(base, 'histogram_quantile(0.5, upscope_value_bucket)');
  const p50 = Number(median[0]!.value[1]);
  assert.ok(p50 >= 2047 && p50 <= 4095, `p50 ${p50}`);
  const calls = await query(base, 'sum(upscope_latency_seconds_count)');
  assert.equal(
    calls[0]!.value[1],
    String(latency().rows.reduce((s, r) => s + r.histogram.count, 0n)),
  );
});
