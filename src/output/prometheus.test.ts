import assert from 'node:assert/strict';
import { test } from 'node:test';
import { counts, histograms, latency, stackCounts } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { labelName, PrometheusExporter, renderPrometheus } from './prometheus.js';

/** The values bpf-target hammer gave bpf_hit, from its own formula: i * 7919 % 5000 + thread. */
function hammerValues(perThread: number): number[] {
  const values: number[] = [];
  for (let t = 0; t < 2; t++)
    for (let i = 0; i < perThread; i++) values.push(((i * 7919) % 5000) + t);
  return values;
}

/** `metric{labels} value` lines as [labels text, value]. */
function samples(text: string, metric: string): [string, string][] {
  return [...text.matchAll(new RegExp(`^${metric}(\\{[^}]*\\})? (\\S+)$`, 'gm'))].map((m) => [
    m[1] ?? '',
    m[2]!,
  ]);
}

test('renderPrometheus() writes recorded counts, histograms and latencies as exposition text', () => {
  const text = renderPrometheus({
    counts: { by: 'arg0', rows: counts().byArg0 },
    values: { value: 'arg0', rows: histograms().log2 },
    latency: latency().rows,
    health: { eventsLost: 0, probesAttached: 3, attachErrors: 0, notCounted: { map_full: 0n } },
  });
  assertGolden('metrics.prom', text);
  assert.deepEqual(
    samples(text, 'upscope_probe_hits_total'),
    counts().byArg0.map((row) => [`{probe="bpf_key",arg0="${row.key}"}`, String(row.count)]),
  );
});

test("each le bucket counts exactly the values at or below it (the target's own values)", () => {
  const values = hammerValues(5000);
  for (const [rows, value, shift] of [
    [histograms().log2, 'arg0', 0],
    [histograms().linear, 'retval:s64', -2500],
  ] as const) {
    const text = renderPrometheus({ values: { value, rows } });
    const buckets = samples(text, 'upscope_value_bucket');
    assert.ok(buckets.length > 3);
    for (const [labels, count] of buckets) {
      const le = /le="([^"]+)"/.exec(labels)![1]!;
      const bound = le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le);
      const expected = values.filter((v) => v + shift <= bound).length;
      assert.equal(Number(count), expected, `${value} le=${le}`);
    }
    const sum = values.reduce((s, v) => s + v + shift, 0);
    assert.deepEqual(
      samples(text, 'upscope_value_sum').map(([, v]) => Number(v)),
      [sum],
    );
    assert.deepEqual(
      samples(text, 'upscope_value_count').map(([, v]) => Number(v)),
      [values.length],
    );
  }
});

test('latencies are in seconds: buckets by powers of two of the unit, sum exact', () => {
  const { rows } = latency();
  const text = renderPrometheus({ latency: rows });
  for (const row of rows) {
    const own = samples(text, 'upscope_latency_seconds_bucket').filter(([l]) =>
      l.includes(`"${row.probe}"`),
    );
    const counts = own.map(([, v]) => BigInt(v));
    assert.deepEqual(
      [...counts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
      counts,
      'cumulative',
    );
    assert.equal(counts.at(-1), row.histogram.count);
    // A microsecond bucket [512, 1024) us ends at le 0.001024 s.
    assert.ok(own.some(([l]) => l.includes('le="0.001024"')));
    const sum = samples(text, 'upscope_latency_seconds_sum').find(([l]) =>
      l.includes(`"${row.probe}"`),
    )!;
    assert.equal(sum[1], (Number(row.histogram.sum) / 1e9).toFixed(9).replace(/0+$/, ''));
  }
});

test('label names are made valid from key names, and values escaped', () => {
  assert.equal(labelName('comm'), 'comm');
  assert.equal(labelName('arg0'), 'arg0');
  assert.equal(labelName('+0(arg0):string'), 'key_0_arg0_string');
  assert.equal(labelName('req->hdr.len'), 'req_hdr_len');
  assert.equal(labelName('probe'), 'key_probe');
  assert.equal(labelName('ustack'), 'stack');
  const text = renderPrometheus({
    counts: { by: '+0(arg0):string', rows: [{ probe: 'p', key: 'a "b"\\c\nd', count: 1n }] },
  });
  assert.match(
    text,
    /^upscope_probe_hits_total\{probe="p",key_0_arg0_string="a \\"b\\"\\\\c\\nd"\} 1$/m,
  );
});

test('series past the cap go into a counted overflow series per probe, admitted ones stay', () => {
  const exporter = new PrometheusExporter({ maxSeries: 2 });
  const rows = (a: bigint, b: bigint, c: bigint) => [
    { probe: 'p', key: 'a', count: a },
    { probe: 'p', key: 'b', count: b },
    { probe: 'p', key: 'c', count: c },
  ];
  const first = exporter.render({ counts: { by: 'comm', rows: rows(5n, 3n, 1n) } });
  assert.deepEqual(samples(first, 'upscope_probe_hits_total'), [
    ['{probe="p",comm="a"}', '5'],
    ['{probe="p",comm="b"}', '3'],
    ['{probe="p",overflow="true"}', '1'],
  ]);
  assert.deepEqual(samples(first, 'upscope_series_overflow'), [
    ['{metric="upscope_probe_hits_total"}', '1'],
  ]);
  // c overtakes b: b stays (its counter goes on), c stays in the overflow (which only grows).
  const second = exporter.render({ counts: { by: 'comm', rows: rows(6n, 3n, 9n) } });
  assert.deepEqual(samples(second, 'upscope_probe_hits_total'), [
    ['{probe="p",comm="a"}', '6'],
    ['{probe="p",comm="b"}', '3'],
    ['{probe="p",overflow="true"}', '9'],
  ]);
});

test('stacks are labelled by their folded frames', () => {
  const text = renderPrometheus({ counts: { by: 'ustack', rows: stackCounts().rows } });
  assert.match(
    text,
    /\{probe="stack_leaf",stack="libc\.so\.6\+0x2724a;main;via_a;stack_leaf"\} 300/,
  );
});
