import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type BucketScheme,
  bucketIndex,
  bucketRange,
  type Histogram,
  HistogramAccumulator,
  histogramRows,
  NEGATIVE_BUCKETS,
  percentile,
} from './histogram.js';

/** The bucket of a value by the scheme's own words (the BPF handler computes the same). */
function log2Bucket(value: bigint): number {
  const magnitude = value < 0n ? -value : value;
  let index: number;
  if (magnitude < 8n) index = Number(magnitude);
  else {
    const k = magnitude.toString(2).length - 1;
    const sub = Number((magnitude >> BigInt(k - 3)) & 7n);
    index = 8 + (k - 3) * 8 + sub;
  }
  return value < 0n ? index + NEGATIVE_BUCKETS : index;
}

function histogram(values: bigint[], scheme: BucketScheme = { kind: 'log2' }): Histogram {
  const buckets = new Map<number, bigint>();
  for (const v of values) {
    const index =
      scheme.kind === 'log2'
        ? log2Bucket(v)
        : v < scheme.min
          ? 0
          : v >= scheme.max
            ? Number((scheme.max - scheme.min + scheme.step - 1n) / scheme.step) + 1
            : Number((v - scheme.min) / scheme.step) + 1;
    buckets.set(index, (buckets.get(index) ?? 0n) + 1n);
  }
  const sorted = [...values].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return {
    scheme,
    buckets,
    count: BigInt(values.length),
    sum: values.reduce((a, b) => a + b, 0n),
    min: sorted[0],
    max: sorted.at(-1),
    signed: values.some((v) => v < 0n),
  };
}

test('every value lies in the range of its log2 bucket, negatives included', () => {
  const values = [0n, 1n, 2n, 7n, 8n, 9n, 15n, 16n, 100n, 1000n, 4095n, 4096n, 123456789n];
  values.push((1n << 63n) - 1n, -1n, -8n, -9n, -1000n, -(1n << 63n));
  for (const v of values) {
    const { low, high } = bucketRange(log2Bucket(v), { kind: 'log2' });
    assert.ok(low! <= v && v < high!, `${v} in [${low}, ${high})`);
  }
  // Each power of two from 8 on has 8 steps of equal width.
  assert.deepEqual(bucketRange(8, { kind: 'log2' }), { low: 8n, high: 9n });
  assert.deepEqual(bucketRange(16, { kind: 'log2' }), { low: 16n, high: 18n });
  assert.deepEqual(bucketRange(23, { kind: 'log2' }), { low: 30n, high: 32n });
});

test('rows are powers of two from the lowest to the highest bucket, empty ones between', () => {
  const rows = histogramRows(histogram([0n, 1n, 3n, 5n, 100n, 120n]));
  assert.deepEqual(
    rows.map((r) => [r.low, r.high, r.count]),
    [
      [0n, 1n, 1n],
      [1n, 2n, 1n],
      [2n, 4n, 1n],
      [4n, 8n, 1n],
      [8n, 16n, 0n],
      [16n, 32n, 0n],
      [32n, 64n, 0n],
      [64n, 128n, 2n],
    ],
  );
  const negative = histogramRows(histogram([-5n, -1n, 2n]));
  assert.deepEqual(
    negative.map((r) => [r.low, r.high, r.count]),
    [
      [-7n, -3n, 1n],
      [-3n, -1n, 0n],
      [-1n, 0n, 1n],
      [0n, 1n, 0n],
      [1n, 2n, 0n],
      [2n, 4n, 1n],
    ],
  );
});

test('linear buckets: below min, each step (the last may be narrower), from max on', () => {
  const scheme: BucketScheme = { kind: 'linear', min: 0n, max: 25n, step: 10n };
  assert.deepEqual(bucketRange(0, scheme), { low: undefined, high: 0n });
  assert.deepEqual(bucketRange(1, scheme), { low: 0n, high: 10n });
  assert.deepEqual(bucketRange(3, scheme), { low: 20n, high: 25n });
  assert.deepEqual(bucketRange(4, scheme), { low: 25n, high: undefined });
  const rows = histogramRows(histogram([-1n, 5n, 24n, 30n], scheme));
  assert.deepEqual(
    rows.map((r) => r.count),
    [1n, 1n, 0n, 1n, 1n],
  );
});

test('percentiles fall in the right bucket and within min and max', () => {
  const values = Array.from({ length: 1000 }, (_, i) => BigInt(i));
  const h = histogram(values);
  for (const [p, exact] of [
    [0.5, 499],
    [0.9, 899],
    [0.99, 989],
  ] as const) {
    const got = Number(percentile(h, p));
    // Within one eighth of its power of two.
    assert.ok(Math.abs(got - exact) <= exact / 8, `p${p * 100} = ${got}, about ${exact}`);
  }
  assert.equal(percentile(histogram([42n]), 0.99), 42n);
  assert.equal(percentile(histogram([]), 0.5), undefined);
  // Buckets counted in microseconds, stats in nanoseconds.
  const scaled: Histogram = {
    ...histogram([3000n]),
    min: 3_000_100n,
    max: 3_000_100n,
    bucketScale: 1000n,
  };
  assert.equal(percentile(scaled, 0.5), 3_000_100n);
});

test('bucketIndex() puts each value in the bucket whose range holds it (log2, signed, scaled, linear)', () => {
  const values = [0n, 1n, 7n, 8n, 9n, 15n, 16n, 1000n, 4095n, 4096n, (1n << 62n) + 5n];
  const log2 = { kind: 'log2' } as const;
  for (const v of [...values, ...values.map((x) => -x)]) {
    const range = bucketRange(bucketIndex(v, log2, true), log2);
    assert.ok(range.low! <= v && v < range.high!, `${v} in [${range.low}, ${range.high})`);
  }
  // Scaled (latency in us from ns): the bucket of the scaled value.
  assert.equal(bucketIndex(2_100_000n, log2, false, 1000n), bucketIndex(2100n, log2, false));
  const linear = { kind: 'linear', min: 0n, max: 5000n, step: 500n } as const;
  assert.equal(bucketIndex(-1n, linear, true), 0);
  assert.equal(bucketIndex(499n, linear, false), 1);
  assert.equal(bucketIndex(500n, linear, false), 2);
  assert.equal(bucketIndex(5000n, linear, false), 11);
  const acc = new HistogramAccumulator(log2, true);
  for (const v of [3n, -9n, 100n]) acc.add(v);
  const h = acc.read();
  assert.deepEqual([h.count, h.sum, h.min, h.max], [3n, 94n, -9n, 100n]);
  assert.equal(h.buckets.get(bucketIndex(-9n, log2, true)), 1n);
});
