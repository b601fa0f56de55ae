import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatBound, formatDuration, renderHistogram } from './histogram.js';

test('bucket bounds read in powers of 1024, as log2 histograms are', () => {
  assert.equal(formatBound(0n), '0');
  assert.equal(formatBound(1000n), '1000');
  assert.equal(formatBound(2048n), '2K');
  assert.equal(formatBound(3n << 20n), '3M');
  assert.equal(formatBound(-4096n), '-4K');
});

test('a histogram prints one row per power of two, bars scaled to the fullest', () => {
  const text = renderHistogram(
    {
      scheme: { kind: 'log2' },
      buckets: new Map([
        [0, 2n],
        [4, 4n],
        [16, 1n],
      ]),
      count: 7n,
      sum: 0n,
      min: 0n,
      max: 16n,
      signed: false,
    },
    8,
  );
  assert.equal(
    text,
    [
      '[0]      2 |@@@@    |',
      '[1]      0 |        |',
      '[2, 4)   0 |        |',
      '[4, 8)   4 |@@@@@@@@|',
      '[8, 16)  0 |        |',
      '[16, 32) 1 |@@      |',
    ].join('\n'),
  );
});

test('durations print in the largest unit that keeps them above one', () => {
  assert.equal(formatDuration(999), '999 ns');
  assert.equal(formatDuration(3_052_000), '3.052 ms');
  assert.equal(formatDuration(2_500_000_000n), '2.500 s');
});
