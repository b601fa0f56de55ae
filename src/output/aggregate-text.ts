import { type Histogram, histogramRows, mean, percentile } from '../aggregate/index.js';
import { formatDuration, renderHistogram } from './histogram.js';
import { renderTable } from './json.js';
import { frameText } from './stacks.js';
import type { CountRow, HistogramRow } from './values.js';

/** A bigint as a JSON number where it is exact, else as a string of its digits. */
export function jsonNumber(value: bigint): number | string {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= -BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(value)
    : value.toString();
}

export interface CountsTextOptions {
  /** The key counted by (`comm`, `arg0`, `ustack`), if any. */
  readonly by?: string | undefined;
  /** Only the N largest counts. */
  readonly top?: number | undefined;
}

/**
 * Counts as text: a table COUNT PROBE [KEY]; by `ustack`, each stack with its count, innermost
 * frame first, as bpftrace prints @[ustack].
 */
export function renderCountsText(
  rows: readonly CountRow[],
  options: CountsTextOptions = {},
): string {
  const { by, top } = options;
  const shown = top === undefined ? rows : rows.slice(0, top);
  if (by === 'ustack') {
    return shown
      .map((row) => {
        // Calls an unwind took away: no return was seen, so no stack either.
        if (row.exit === 'unwind') return `${row.probe} (unwound): ${row.count}`;
        // A probe with no hits has no stack (and no process) to show.
        if (row.stack === undefined) return `${row.probe}: ${row.count}`;
        const frames = (row.stack?.frames ?? []).map(frameText);
        const lines = frames.length === 0 ? ['[no user stack]'] : frames;
        return `${row.probe} (pid ${row.stack.pid}): ${row.count}\n${lines.map((f) => `    ${f}`).join('\n')}`;
      })
      .join('\n\n');
  }
  // Several keys (`comm,pid`): a column each.
  const keys = by === undefined ? [] : by.split(',').map((key) => key.trim());
  const header = ['COUNT', 'PROBE', ...keys.map((key) => key.toUpperCase())];
  return renderTable(
    header,
    shown.map((row) => {
      const cells = [
        row.count.toString(),
        row.exit === 'unwind' ? `${row.probe} (unwound)` : row.probe,
      ];
      const values = row.key === undefined ? [] : Array.isArray(row.key) ? row.key : [row.key];
      // A probe with no hits (count 0), or calls an unwind took away, have no key.
      keys.forEach((_, i) => {
        const value = row.exit === 'unwind' ? undefined : values[i];
        cells.push(value === undefined ? '-' : String(value));
      });
      return cells;
    }),
  );
}

/** A key's value as JSON: numbers where exact, strings as they are; several as an array. */
function keyJson(key: CountRow['key']): unknown {
  if (Array.isArray(key)) return key.map(keyJson);
  return typeof key === 'bigint' ? jsonNumber(key) : key;
}

/** Counts as a JSON array: probe, key (with `by`), pid and frames (by ustack), count. */
export function renderCountsJson(rows: readonly CountRow[], by: string | undefined): string {
  return JSON.stringify(
    rows.map((row) => ({
      probe: row.probe,
      ...(row.exit === undefined ? {} : { exit: row.exit }),
      ...(by === undefined || row.exit !== undefined ? {} : { key: keyJson(row.key) }),
      ...(row.stack === undefined
        ? {}
        : { pid: row.stack.pid, frames: row.stack.frames.map(frameText) }),
      count: jsonNumber(row.count),
    })),
  );
}

export interface HistogramsTextOptions {
  /** Values are durations in nanoseconds (latency): printed in time units, no sum. */
  readonly duration?: boolean | undefined;
  /** The unit line above each histogram (`usecs`). */
  readonly unit?: string | undefined;
}

/** Count, sum, mean, min, max and percentiles; `duration` formats values (latency in ns). */
function summary(histogram: Histogram, duration: boolean): Record<string, string> {
  const format = (v: bigint | number | undefined) =>
    v === undefined ? '-' : duration ? formatDuration(v) : String(v);
  const avg = mean(histogram);
  return {
    count: histogram.count.toString(),
    ...(duration ? {} : { sum: histogram.sum.toString() }),
    avg: avg === undefined ? '-' : duration ? formatDuration(Math.round(avg)) : avg.toFixed(2),
    min: format(histogram.min),
    p50: format(percentile(histogram, 0.5)),
    p90: format(percentile(histogram, 0.9)),
    p99: format(percentile(histogram, 0.99)),
    max: format(histogram.max),
  };
}

/** Each probe's statistics line, then its histogram in bcc's log2 layout, then a blank line. */
export function renderHistogramsText(
  rows: readonly HistogramRow[],
  options: HistogramsTextOptions = {},
): string {
  let text = '';
  for (const probe of rows) {
    const stats = Object.entries(summary(probe.histogram, options.duration === true))
      .map(([name, value]) => `${name} ${value}`)
      .join(', ');
    text += `${probe.probe}: ${stats}\n`;
    if (probe.histogram.count > 0n) {
      if (options.unit !== undefined) text += `${options.unit}:\n`;
      text += `${renderHistogram(probe.histogram)}\n`;
    }
    text += '\n';
  }
  return text;
}

function histogramJson(
  probe: HistogramRow,
  duration: boolean,
  unit: string | undefined,
): Record<string, unknown> {
  const h = probe.histogram;
  const value = (v: bigint | undefined) => (v === undefined ? null : jsonNumber(v));
  const avg = mean(h);
  return {
    probe: probe.probe,
    count: jsonNumber(h.count),
    ...(duration ? { sumNs: jsonNumber(h.sum) } : { sum: jsonNumber(h.sum) }),
    [duration ? 'avgNs' : 'avg']: avg ?? null,
    [duration ? 'minNs' : 'min']: value(h.min),
    [duration ? 'p50Ns' : 'p50']: value(percentile(h, 0.5)),
    [duration ? 'p90Ns' : 'p90']: value(percentile(h, 0.9)),
    [duration ? 'p99Ns' : 'p99']: value(percentile(h, 0.99)),
    [duration ? 'maxNs' : 'max']: value(h.max),
    ...(unit === undefined ? {} : { unit }),
    buckets: histogramRows(h).map((row) => ({
      low: row.low === undefined ? null : jsonNumber(row.low),
      high: row.high === undefined ? null : jsonNumber(row.high),
      count: jsonNumber(row.count),
    })),
  };
}

/** Histograms as a JSON array: statistics (in ns for durations) and the displayed buckets. */
export function renderHistogramsJson(
  rows: readonly HistogramRow[],
  options: HistogramsTextOptions = {},
): string {
  return JSON.stringify(rows.map((p) => histogramJson(p, options.duration === true, options.unit)));
}
