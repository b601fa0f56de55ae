import { type Histogram, histogramRows } from '../aggregate/index.js';

const SUFFIXES = ['', 'K', 'M', 'G', 'T', 'P', 'E'];

/** A bucket bound: powers of 1024 with a suffix (`4K`, `2M`), as log2 histograms are read. */
export function formatBound(value: bigint): string {
  const negative = value < 0n;
  let n = negative ? -value : value;
  let suffix = 0;
  while (n >= 1024n && n % 1024n === 0n && suffix < SUFFIXES.length - 1) {
    n /= 1024n;
    suffix++;
  }
  return `${negative ? '-' : ''}${n}${SUFFIXES[suffix]}`;
}

/**
 * The histogram as text, one row per bucket in the familiar log2 layout:
 * `[4K, 8K)   12 |@@@@@@      |`, bars scaled to the fullest bucket.
 */
export function renderHistogram(histogram: Histogram, barWidth = 40): string {
  const rows = histogramRows(histogram);
  if (rows.length === 0) return '(no hits)';
  const labels = rows.map(({ low, high }) => {
    if (low === undefined) return `(..., ${formatBound(high!)})`;
    if (high === undefined) return `[${formatBound(low)}, ...)`;
    if (high === low + 1n) return `[${formatBound(low)}]`;
    return `[${formatBound(low)}, ${formatBound(high)})`;
  });
  const labelWidth = Math.max(...labels.map((l) => l.length));
  const counts = rows.map((row) => row.count.toString());
  const countWidth = Math.max(...counts.map((c) => c.length));
  let most = 0n;
  for (const row of rows) if (row.count > most) most = row.count;
  return rows
    .map((row, i) => {
      const bar = most === 0n ? 0 : Number((row.count * BigInt(barWidth) + most - 1n) / most);
      return `${labels[i]!.padEnd(labelWidth)} ${counts[i]!.padStart(countWidth)} |${'@'.repeat(bar).padEnd(barWidth)}|`;
    })
    .join('\n');
}

/** A duration in nanoseconds, in the largest unit that keeps it above 1 (`3.052 ms`). */
export function formatDuration(ns: number | bigint): string {
  const n = Number(ns);
  if (Math.abs(n) < 1e3) return `${n} ns`;
  if (Math.abs(n) < 1e6) return `${(n / 1e3).toFixed(3)} us`;
  if (Math.abs(n) < 1e9) return `${(n / 1e6).toFixed(3)} ms`;
  return `${(n / 1e9).toFixed(3)} s`;
}
