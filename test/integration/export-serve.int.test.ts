// `upscope serve --config FILE` (YAML) keeps named aggregations attached on a live C target,
// says ready on /ready once they are, serves their live totals on /metrics (the target's own
// counts, and a histogram's _count equal to the calls), and on SIGTERM removes every probe
// and exits 0, leaving nothing behind.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { freePort } from '../helpers/prometheus-server.js';
import { requireHost } from '../helpers/require-host.js';
import { type Spawned, spawnCollected } from '../helpers/spawned.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

async function until(what: string, check: () => Promise<boolean> | boolean, s: Spawned[]) {
  for (let i = 0; i < 300; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${what}:\n${s.map((x) => x.stdout + x.stderr).join('\n')}`);
}

async function get(url: string): Promise<{ status: number; text: string }> {
  try {
    const res = await fetch(url);
    return { status: res.status, text: await res.text() };
  } catch {
    return { status: 0, text: '' };
  }
}

/**
 * `upscope serve` of these aggregations (YAML lines under `aggregations:`) on a free port,
 * once it says it is ready: the process (added to `spawned`) and the endpoint's base URL.
 */
async function serveReady(dir: string, aggregations: readonly string[], spawned: Spawned[]) {
  const port = await freePort();
  const config = join(dir, 'upscope.yaml');
  writeFileSync(config, [`listen: ${port}`, 'aggregations:', ...aggregations, ''].join('\n'));
  const serve = spawnCollected(process.execPath, [BIN, 'serve', '--config', config]);
  spawned.push(serve);
  const base = `http://127.0.0.1:${port}`;
  await until('ready', async () => (await get(`${base}/ready`)).status === 200, spawned);
  return { serve, base };
}

test('serve --config (YAML): ready once attached, live metrics equal the target’s counts, SIGTERM leaves nothing', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const dir = mkdtempSync(join(tmpdir(), 'upscope-serve-'));
  const target = spawnCollected(app, ['901', '5']);
  const spawned: Spawned[] = [target];
  try {
    await until('the target waits', () => target.stdout.includes('waiting'), spawned);
    const { serve, base } = await serveReady(
      dir,
      [
        '  - name: calls',
        '    kind: count',
        `    specs: ["${app}:work", "${app}:other"]`,
        '    by: arg0',
        `    pid: ${target.pid}`,
        '  - name: work_time',
        '    kind: latency',
        `    specs: "${app}:work"`,
        `    pid: ${target.pid}`,
      ],
      spawned,
    );
    assert.match(
      serve.stderr,
      /serving 2 of 2 aggregations: metrics at http:\/\/127\.0\.0\.1:\d+\/metrics/,
    );
    target.child.kill('SIGUSR1');
    await until('the target is done', () => target.stdout.includes('done'), spawned);
    const own = /work0=(\d+) work1=(\d+) work2=(\d+) other=(\d+)/.exec(target.stdout)!;
    const metrics = (await get(`${base}/metrics`)).text;
    const value = (line: RegExp) => line.exec(metrics)?.[1];
    assert.equal(value(/^upscope_calls_probe_hits_total\{probe="work",arg0="0"\} (\d+)$/m), own[1]);
    assert.equal(value(/^upscope_calls_probe_hits_total\{probe="work",arg0="1"\} (\d+)$/m), own[2]);
    assert.equal(value(/^upscope_calls_probe_hits_total\{probe="work",arg0="2"\} (\d+)$/m), own[3]);
    const others = [
      ...metrics.matchAll(/^upscope_calls_probe_hits_total\{probe="other",.*\} (\d+)$/gm),
    ];
    assert.equal(String(others.reduce((s, m) => s + Number(m[1]), 0)), own[4]);
    assert.equal(value(/^upscope_work_time_latency_seconds_count\{probe="work"\} (\d+)$/m), '901');
    assert.equal(value(/^upscope_probes_attached (\d+)$/m), '3');
    assert.equal(value(/^upscope_attach_errors_total (\d+)$/m), '0');
    serve.child.kill('SIGTERM');
    const end = await serve.exited;
    assert.equal(end.code, 0, serve.stderr);
    assert.match(serve.stderr, /SIGTERM: removing the probes/);
    assert.equal((await get(`${base}/ready`)).status, 0, 'the endpoint is closed');
    assert.deepEqual(leftovers(), []);
    // The target ran on unharmed.
    assert.equal(target.child.exitCode, null);
  } finally {
    for (const s of spawned) s.child.kill('SIGKILL');
    await Promise.all(spawned.map((s) => s.exited));
    rmSync(dir, { recursive: true, force: true });
  }
});

// A latency served on a recursion 100 deep times 16 calls of each outer call (the calls it
// keeps open per thread); the 48 nested deeper and the 37 the kernel sets no return
// trampoline for were left out of every metric. They are counted by reason.
test('serve: the calls a latency cannot time are in upscope_hits_not_counted_total, by reason', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('nested', { flags: ['-O1'] });
  const dir = mkdtempSync(join(tmpdir(), 'upscope-serve-'));
  const target = spawnCollected(app, ['recurse', '100', '100000000']);
  const spawned: Spawned[] = [target];
  try {
    const { serve, base } = await serveReady(
      dir,
      [
        '  - name: deep',
        '    kind: latency',
        `    specs: "${app}:recurse"`,
        `    pid: ${target.pid}`,
      ],
      spawned,
    );
    const read = async () => {
      const metrics = (await get(`${base}/metrics`)).text;
      const value = (line: RegExp) => Number(line.exec(metrics)?.[1] ?? Number.NaN);
      return {
        timed: value(/^upscope_deep_latency_seconds_count\{probe="recurse"\} (\d+)$/m),
        deep: value(/^upscope_hits_not_counted_total\{reason="deep"\} (\d+)$/m),
        unreported: value(/^upscope_hits_not_counted_total\{reason="unreported"\} (\d+)$/m),
        metrics,
      };
    };
    await until('calls are timed', async () => (await read()).timed > 1000, spawned);
    const now = await read();
    // 48 and 37 to each 16 timed, but for the calls running when the probes came.
    assert.ok(now.deep > 2 * now.timed && now.unreported > 1.5 * now.timed, now.metrics);
    serve.child.kill('SIGTERM');
    assert.equal((await serve.exited).code, 0, serve.stderr);
    assert.deepEqual(leftovers(), []);
  } finally {
    for (const s of spawned) s.child.kill('SIGKILL');
    await Promise.all(spawned.map((s) => s.exited));
    rmSync(dir, { recursive: true, force: true });
  }
});
