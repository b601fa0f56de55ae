import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  counts,
  hexFieldsOf,
  histograms,
  latency,
  stackCounts,
  stackFrames,
  traceEvents,
} from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { isProbeError } from '../errors/index.js';
import { countSink, FORMATS, histogramSink, parseFormat, traceSink } from './formats.js';
import type { Sink } from './sink.js';

function collect<V>(
  make: (write: (chunk: string | Uint8Array) => void) => Sink<V>,
  values: V[],
  lost = 0,
) {
  const chunks: (string | Uint8Array)[] = [];
  const sink = make((chunk) => chunks.push(chunk));
  sink.begin();
  for (const value of values) sink.value(value);
  sink.lost(lost);
  const before = chunks.length;
  sink.end();
  return { chunks, before, text: chunks.map((c) => (typeof c === 'string' ? c : '')).join('') };
}

test('parseFormat() takes the formats of each kind of result and names them otherwise', () => {
  assert.equal(parseFormat('stacks', 'flamegraph'), 'flamegraph');
  assert.throws(
    () => parseFormat('count', 'folded'),
    (err) =>
      isProbeError(err) &&
      err.code === 'ERR_USAGE' &&
      err.message === 'Cannot write counts as folded: give --format text, json or prometheus' &&
      err.hints[0] === 'folded is written for counts by stack: add --by ustack',
  );
  assert.throws(
    () => parseFormat('trace', 'perfetto'),
    (err) =>
      isProbeError(err) &&
      err.message === 'Cannot use --format "perfetto": give text, json, chrome or speedscope',
  );
  for (const formats of Object.values(FORMATS)) assert.ok(formats.length > 0);
});

test('a trace in text and JSON lines, as trace prints it', () => {
  const { events, hexFields } = traceEvents();
  const options = { startNs: events[0]!.timestampNs, hexFields: hexFieldsOf(hexFields) };
  const text = collect((w) => traceSink('text', w, options), events).text;
  assertGolden('trace.txt', text);
  assert.equal(text.split('\n').length - 1, events.length);
  assert.match(text, /^0\.000000 \S+ \d+\/\d+ f_ints c=0 d=0 e=0x0$/m);
  const json = collect((w) => traceSink('json', w, options), events).text;
  assertGolden('trace.jsonl', json);
  const first = JSON.parse(json.split('\n')[0]!);
  assert.equal(first.timeNs, String(events[0]!.timestampNs));
});

test('streaming sinks write 64 KiB at a time, the rest at the end', () => {
  const { events } = traceEvents();
  const many = Array.from({ length: 20 }, () => events).flat();
  const { chunks, before } = collect((w) => traceSink('json', w, { startNs: 0n }), many);
  assert.ok(before >= 1);
  for (const chunk of chunks.slice(0, before)) assert.ok(chunk.length >= 1 << 16);
  assert.equal(chunks.length, before + 1);
});

test('counts: text and JSON every reading, documents once at the end', () => {
  const rows = counts().byComm;
  const time = new Date('2026-01-02T08:15:02Z');
  const readings = [
    { rows, final: false, time },
    { rows, final: true },
  ];
  const text = collect((w) => countSink('text', w, { by: 'comm' }), readings);
  assertGolden('counts-by-comm.txt', text.text);
  assert.ok(text.text.startsWith('08:15:02\nCOUNT'));
  assert.equal(text.before, 2);
  const json = collect((w) => countSink('json', w, { by: 'comm' }), readings);
  assert.equal(json.text.split('\n').length - 1, 2);
  assertGolden('counts-by-comm.json', json.text);
  const prom = collect((w) => countSink('prometheus', w, { by: 'comm' }), readings);
  assert.equal(prom.before, 0);
  assert.equal(prom.chunks.length, 1);
  assert.throws(() => countSink('pprof', () => {}, { by: 'comm' }), /Cannot write counts as pprof/);
});

test('counts by stack: text as bpftrace prints stacks, and every stack format', () => {
  const rows = stackCounts().rows;
  const reading = [{ rows, final: true }];
  assertGolden('ustack.txt', collect((w) => countSink('text', w, { by: 'ustack' }), reading).text);
  assertGolden('ustack.json', collect((w) => countSink('json', w, { by: 'ustack' }), reading).text);
  // Structured frames print as the text frames they stand for.
  const structured = [{ rows: stackFrames().rows, final: true }];
  assert.equal(
    collect((w) => countSink('text', w, { by: 'ustack' }), structured).text,
    collect((w) => countSink('text', w, { by: 'ustack' }), reading).text,
  );
  for (const format of FORMATS.stacks) {
    const { chunks } = collect((w) => countSink(format, w, { by: 'ustack', title: 't' }), reading);
    assert.equal(chunks.length, 1, format);
    assert.ok(chunks[0]!.length > 0, format);
  }
  // Nothing read: the documents are still whole (a flame graph that says so).
  const empty = collect((w) => countSink('flamegraph', w, { by: 'ustack' }), []);
  assert.match(empty.text, /No samples/);
});

test('histograms and latencies in text, with bcc-style bars, and JSON', () => {
  const reading = [{ rows: histograms().log2, final: true }];
  assertGolden('hist.txt', collect((w) => histogramSink('hist', 'text', w), reading).text);
  assertGolden('hist.json', collect((w) => histogramSink('hist', 'json', w), reading).text);
  const timing = [{ rows: latency().rows, final: true }];
  const text = collect((w) => histogramSink('latency', 'text', w, { unit: 'usecs' }), timing).text;
  assertGolden('latency.txt', text);
  assert.match(text, /^usecs:$/m);
  assertGolden(
    'latency.json',
    collect((w) => histogramSink('latency', 'json', w, { unit: 'usecs' }), timing).text,
  );
  const prom = collect((w) => histogramSink('latency', 'prometheus', w), timing).text;
  assert.match(prom, /^upscope_latency_seconds_count\{probe="bpf_nap"\} \d+$/m);
});
