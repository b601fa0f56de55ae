// --otlp on a live C target, received here by an OTLP/HTTP receiver that decodes each request
// with the protobuf definitions of opentelemetry-proto (the decoders the OpenTelemetry project
// generates from them, shipped in @opentelemetry/otlp-transformer 0.57): trace sends one span
// per call, parent-less, timed as the kernel's entry and return events of the same run (their
// JSON lines written with -o), with the fetched values as attributes and the process as the
// resource; count sends metric points equal to the target's own counts. An unreachable
// receiver is one line, the spans are dropped and counted, and the target runs unharmed.
// (No OpenTelemetry Collector is packaged in Debian or npm here: the receiver is this test's.)
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { freePort } from '../helpers/prometheus-server.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { type Spawned, spawnCollected, spawnUpscope } from '../helpers/spawned.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const require = createRequire(import.meta.url);
// biome-ignore lint/suspicious/noExplicitAny: the generated protobufjs module is untyped here
const proto = (require('otlp-proto/build/src/generated/root.js') as any).opentelemetry.proto;

const dir = mkdtempSync(join(tmpdir(), 'upscope-otlp-'));
after(() => rmSync(dir, { recursive: true, force: true }));

interface Received {
  traces: unknown[];
  metrics: unknown[];
  contentTypes: Set<string>;
}

/** An OTLP/HTTP receiver on loopback: decodes each request and answers 200. */
async function receiver() {
  const got: Received = { traces: [], metrics: [], contentTypes: new Set() };
  const server = createServer(async (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    got.contentTypes.add(String(req.headers['content-type']));
    if (req.url === '/v1/traces') {
      got.traces.push(
        proto.collector.trace.v1.ExportTraceServiceRequest.toObject(
          proto.collector.trace.v1.ExportTraceServiceRequest.decode(body),
          { longs: String, bytes: String },
        ),
      );
    } else if (req.url === '/v1/metrics') {
      got.metrics.push(
        proto.collector.metrics.v1.ExportMetricsServiceRequest.toObject(
          proto.collector.metrics.v1.ExportMetricsServiceRequest.decode(body),
          { longs: String, bytes: String },
        ),
      );
    }
    res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return { got, url: `http://127.0.0.1:${port}`, close: () => server.close() };
}

async function until(what: string, check: () => boolean, spawned: Spawned[]): Promise<void> {
  for (let i = 0; i < 600 && !check(); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(check(), `${what}:\n${spawned.map((s) => s.stdout + s.stderr).join('\n')}`);
}

// biome-ignore lint/suspicious/noExplicitAny: decoded protobuf objects
type Any = any;
const attrs = (list: Any[] = []) =>
  Object.fromEntries(
    list.map((a: Any) => [
      a.key,
      a.value.intValue ?? a.value.stringValue ?? a.value.doubleValue ?? a.value.boolValue,
    ]),
  );

test('trace --otlp sends one parent-less span per call, timed and attributed as traced; count --otlp sends the target’s counts', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const otlp = await receiver();
  const target = spawnCollected(app, ['301', '7']);
  const spawned: Spawned[] = [target];
  const jsonFile = join(dir, 'events.json');
  try {
    await until('the target waits', () => target.stdout.includes('waiting'), spawned);
    const before = BigInt(Date.now()) * 1_000_000n;
    const trace = spawnCollected(process.execPath, [
      BIN,
      'trace',
      '--otlp',
      otlp.url,
      '--format',
      'json',
      '-o',
      jsonFile,
      '-p',
      String(target.pid),
      `${app}:work k=arg0`,
      `r:${app}:work ret=retval`,
    ]);
    const count = spawnCollected(process.execPath, [
      BIN,
      'count',
      '--by',
      'arg0',
      '--otlp',
      otlp.url,
      '-p',
      String(target.pid),
      `${app}:work`,
      `${app}:other`,
    ]);
    spawned.push(trace, count);
    await until(
      'both run',
      () => /Tracing/.test(trace.stderr) && /Counting/.test(count.stderr),
      spawned,
    );
    target.child.kill('SIGUSR1');
    await until('the target is done', () => target.stdout.includes('done'), spawned);
    const own = /work0=(\d+) work1=(\d+) work2=(\d+) other=(\d+)/.exec(target.stdout)!;
    trace.child.kill('SIGINT');
    count.child.kill('SIGINT');
    await Promise.all([trace.exited, count.exited]);
    const after = BigInt(Date.now()) * 1_000_000n;
    assert.equal(trace.child.exitCode, 0, trace.stderr);
    assert.equal(count.child.exitCode, 0, count.stderr);

    // Spans: one per call, each the time from its entry event to its return event.
    const events = readFileSync(jsonFile, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Any);
    assert.equal(events.length, 602);
    const durations = events
      .filter((e) => e.kind === 'return')
      .map((e) => String(e.latencyNs))
      .sort();
    const spans: Any[] = [];
    const resources: Any[] = [];
    for (const request of otlp.got.traces as Any[]) {
      for (const rs of request.resourceSpans) {
        resources.push(attrs(rs.resource.attributes));
        for (const ss of rs.scopeSpans) spans.push(...ss.spans);
      }
    }
    assert.equal(spans.length, 301, trace.stderr);
    assert.match(trace.stderr, /OTLP to http:\/\/127\.0\.0\.1:\d+: 301 spans sent, 0 dropped/);
    for (const resource of resources) {
      assert.equal(resource['process.pid'], String(target.pid));
      assert.equal(resource['service.name'], 'upscope');
    }
    const perKind = [0, 0, 0];
    for (const span of spans) {
      assert.equal(span.name, 'work');
      assert.ok(span.parentSpanId === undefined || span.parentSpanId === '', 'no parent');
      const a = attrs(span.attributes);
      assert.equal(a['thread.id'], String(target.pid));
      assert.equal(a['ret'], String(Number(a['k']) * 2));
      perKind[Number(a['k'])]!++;
      const start = BigInt(span.startTimeUnixNano);
      const end = BigInt(span.endTimeUnixNano);
      assert.ok(start >= before - 1_000_000_000n && end <= after + 1_000_000_000n);
    }
    assert.deepEqual(perKind.map(String), [own[1], own[2], own[3]]);
    assert.deepEqual(
      spans.map((s) => String(BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano))).sort(),
      durations,
    );

    // Metrics: the last export's points are the target's counts.
    const last = (otlp.got.metrics as Any[]).at(-1);
    assert.ok(last !== undefined, count.stderr);
    const metrics = last.resourceMetrics[0].scopeMetrics[0].metrics as Any[];
    const hits = metrics.find((m) => m.name === 'upscope_probe_hits');
    assert.equal(hits.sum.isMonotonic, true);
    const points = new Map<string, number>();
    for (const p of hits.sum.dataPoints) {
      const a = attrs(p.attributes);
      const key = a['probe'] === 'other' ? 'other' : `work ${a['arg0']}`;
      points.set(key, (points.get(key) ?? 0) + Number(p.asDouble));
    }
    assert.deepEqual(
      points,
      new Map([
        ['work 0', Number(own[1])],
        ['work 1', Number(own[2])],
        ['work 2', Number(own[3])],
        ['other', Number(own[4])],
      ]),
    );
    const attached = metrics.find((m) => m.name === 'upscope_probes_attached');
    assert.equal(attached.gauge.dataPoints[0].asDouble, 2);
    assert.deepEqual([...otlp.got.contentTypes], ['application/x-protobuf']);
  } finally {
    for (const s of spawned) s.child.kill('SIGKILL');
    await Promise.all(spawned.map((s) => s.exited));
    otlp.close();
  }
  assert.deepEqual(leftovers(), []);
});

test('an unreachable OTLP receiver: one line, spans dropped and counted, the target unharmed', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const port = await freePort(); // nothing listens there
  const run = runCli([
    'trace',
    '--otlp',
    `http://127.0.0.1:${port}`,
    '-o',
    join(dir, 'unreachable.txt'),
    '-c',
    `${app} 200 0 now`,
    `${app}:work`,
    `r:${app}:work`,
  ]);
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /done work0=67 work1=67 work2=66 other=0/);
  const notes = run.stderr.split('\n').filter((l) => /OTLP/.test(l));
  assert.equal(notes.length, 2, run.stderr);
  assert.match(
    notes[0]!,
    new RegExp(
      `^upscope: cannot send (spans|data) to the OTLP receiver at http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED.*retrying, and counting what is dropped`,
    ),
  );
  assert.match(notes[1]!, /: 0 spans sent, 200 dropped$/);
  assert.doesNotMatch(run.stderr, /error\[| {4}at /);
  assert.deepEqual(leftovers(), []);
});

for (const engine of ['bpf', 'ptrace'] as const) {
  test(`latency --otlp on ${engine}: one span per timed call, the target’s count, durations summing to latency’s own`, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram('export-target');
    const otlp = await receiver();
    try {
      const out = join(dir, `latency-${engine}.json`);
      const before = BigInt(Date.now()) * 1_000_000n;
      // Spawned, not run synchronously: the receiver answers from this process's event loop.
      const run = spawnUpscope([
        'latency',
        '--engine',
        engine,
        '--otlp',
        otlp.url,
        '--format',
        'json',
        '-o',
        out,
        '-c',
        `${app} 120 0 now`,
        `${app}:work`,
      ]);
      const { code } = await run.exited;
      const after = BigInt(Date.now()) * 1_000_000n;
      assert.equal(code, 0, run.stderr);
      const own = /work0=(\d+) work1=(\d+) work2=(\d+)/.exec(run.stdout)!;
      const calls = Number(own[1]) + Number(own[2]) + Number(own[3]);
      assert.equal(calls, 120);
      const [row] = JSON.parse(readFileSync(out, 'utf8')) as Any[];
      assert.equal(row.count, calls);
      const spans: Any[] = [];
      const pids = new Set<string>();
      for (const request of otlp.got.traces as Any[]) {
        for (const rs of request.resourceSpans) {
          const resource = attrs(rs.resource.attributes);
          assert.equal(resource['process.executable.name'], basename(app).slice(0, 15));
          pids.add(resource['process.pid']);
          for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        }
      }
      assert.equal(pids.size, 1);
      assert.equal(spans.length, calls, run.stderr);
      assert.match(
        run.stderr,
        new RegExp(
          `OTLP to http://127\\.0\\.0\\.1:\\d+: ${calls} spans sent, 0 dropped, \\d+ metric exports sent`,
        ),
      );
      const durations = spans.map((s) => BigInt(s.endTimeUnixNano) - BigInt(s.startTimeUnixNano));
      for (const span of spans) {
        assert.equal(span.name, 'work');
        assert.ok(span.parentSpanId === undefined || span.parentSpanId === '', 'no parent');
        assert.equal(attrs(span.attributes)['thread.id'], [...pids][0]);
        assert.ok(BigInt(span.startTimeUnixNano) >= before - 1_000_000_000n);
        assert.ok(BigInt(span.endTimeUnixNano) <= after + 1_000_000_000n);
      }
      // The spans are the very calls the histogram holds: same sum, min and max.
      assert.equal(String(durations.reduce((a, b) => a + b, 0n)), String(row.sumNs));
      const sorted = [...durations].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      assert.equal(String(sorted[0]), String(row.minNs));
      assert.equal(String(sorted.at(-1)), String(row.maxNs));
    } finally {
      otlp.close();
    }
    assert.deepEqual(leftovers(), []);
  });
}
