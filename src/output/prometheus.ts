import { bucketRange, type Histogram } from '../aggregate/index.js';
import { frameLabel, rootFirst } from './stacks.js';
import type { CountRow, HistogramRow } from './values.js';
import { xmlChars } from './xml.js';

/** How the aggregation went: exported as upscope's own metrics. */
export interface Health {
  /** Events the kernel dropped before upscope read them. */
  readonly eventsLost?: number | bigint | undefined;
  readonly probesAttached?: number | undefined;
  readonly attachErrors?: number | undefined;
  /** Hits the handlers could not count, per reason (map_full, fault, unmatched, deep). */
  readonly notCounted?: Readonly<Record<string, number | bigint>> | undefined;
}

/** What one scrape shows. */
export interface PrometheusInput {
  /** Hits per probe, and per key with `by` (`comm`, `pid`, `arg0`, `ustack`; or several). */
  readonly counts?:
    | { readonly by?: string | readonly string[] | undefined; readonly rows: readonly CountRow[] }
    | undefined;
  /** Histograms of a fetched value (`value`: the fetch, e.g. `arg0`). */
  readonly values?: { readonly value: string; readonly rows: readonly HistogramRow[] } | undefined;
  /** Entry-to-return times: histograms whose sum, min and max are nanoseconds. */
  readonly latency?: readonly HistogramRow[] | undefined;
  readonly health?: Health | undefined;
}

export interface PrometheusOptions {
  /** The metric names' prefix (default `upscope`). */
  readonly prefix?: string | undefined;
  /**
   * The most series of hits kept per probe and key (default 1000): keys past it are added
   * into one overflow series per probe, `{probe="...",overflow="true"}`, and counted in
   * `upscope_series_overflow`.
   */
  readonly maxSeries?: number | undefined;
}

/** A label name from a key's name: `comm`, `arg0`; `+0(arg0):string` -> `key_0_arg0_string`. */
export function labelName(name: string): string {
  if (name === 'ustack') return 'stack';
  let label = name
    .replace(/[^A-Za-z0-9_]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .replace(/__+/g, '_');
  if (label === '' || /^[0-9]/.test(label) || label === 'probe' || label === 'overflow') {
    label = `key_${label}`.replace(/_$/, '');
  }
  return label;
}

/** A label value as the text format writes it: `\`, `"` and line feeds escaped, valid UTF-8. */
function labelValue(value: string): string {
  return xmlChars(value)
    .replace(/\r/g, '\ufffd')
    .replace(/\\/g, '\\\\')
    .replace(/"/g, '\\"')
    .replace(/\n/g, '\\n');
}

function labels(pairs: readonly (readonly [string, string])[]): string {
  if (pairs.length === 0) return '';
  return `{${pairs.map(([k, v]) => `${k}="${labelValue(v)}"`).join(',')}}`;
}

/** Nanoseconds as seconds, exactly (`1024000` -> `0.001024`). */
function seconds(ns: bigint): string {
  const negative = ns < 0n;
  const n = negative ? -ns : ns;
  const fraction = (n % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${n / 1_000_000_000n}${fraction === '' ? '' : `.${fraction}`}`;
}

function keyValues(row: CountRow, names: readonly string[]): string[] {
  if (row.stack !== undefined && names.length === 1 && names[0] === 'ustack') {
    return [
      rootFirst(row)
        .map((f) => frameLabel(f))
        .join(';'),
    ];
  }
  const key = row.key;
  const values = key === undefined ? [] : Array.isArray(key) ? key : [key];
  return names.map((_, i) => String(values[i] ?? ''));
}

/**
 * The upper bounds of a histogram's Prometheus buckets, as exclusive highs in bucket units:
 * log2 histograms by powers of two, from the lowest bucket with hits (or from 0) to the
 * highest, so that the layout only grows; linear ones every step. The last bucket is +Inf.
 */
function bucketHighs(histogram: Histogram): bigint[] {
  const scheme = histogram.scheme;
  if (scheme.kind === 'linear') {
    const highs: bigint[] = [];
    for (let v = scheme.min; v < scheme.max; v += scheme.step) highs.push(v);
    highs.push(scheme.max);
    return highs;
  }
  let lowest: bigint | undefined;
  let highest: bigint | undefined;
  for (const index of histogram.buckets.keys()) {
    const { low, high } = bucketRange(index, scheme);
    if (lowest === undefined || low! < lowest) lowest = low!;
    if (highest === undefined || high! > highest) highest = high!;
  }
  if (lowest === undefined || highest === undefined) return [];
  // Groups of negative values: group k holds [-2^k + 1, -2^(k-1) + 1), down to [-1, 0).
  const highs: bigint[] = [];
  if (lowest < 0n) {
    let k = 1n;
    while (-(1n << k) + 1n > lowest) k++;
    for (; k >= 1n; k--) highs.push(-(1n << (k - 1n)) + 1n);
  }
  // Then [0, 1), [1, 2), [2, 4), ... up to the highest bucket's end.
  for (let h = 1n; ; h *= 2n) {
    highs.push(h);
    if (h >= highest) break;
  }
  return highs;
}

interface HistogramLines {
  readonly le: string[];
  readonly cumulative: bigint[];
}

/**
 * The cumulative bucket counts at each bound. An integer value v is in `le=B` when v <= B,
 * so a bucket whose values are below H is counted from `le=H-1`; durations are continuous,
 * so there a bucket below H is counted from `le=H` (in seconds).
 */
function cumulative(histogram: Histogram, duration: boolean): HistogramLines {
  const highs = bucketHighs(histogram);
  const scale = histogram.bucketScale ?? 1n;
  const counts = highs.map(() => 0n);
  for (const [index, count] of histogram.buckets) {
    const high = bucketRange(index, histogram.scheme).high;
    if (high === undefined) continue;
    for (let i = 0; i < highs.length; i++) if (high <= highs[i]!) counts[i]! += count;
  }
  return {
    le: highs.map((h) => (duration ? seconds(h * scale) : String(h - 1n))),
    cumulative: counts,
  };
}

/** One line of a metric family: its name (with `_bucket`, `_sum`...), labels and value. */
export interface MetricSample {
  readonly name: string;
  /** Label names and values as they are (valid names, values not escaped). */
  readonly labels: readonly (readonly [string, string])[];
  /** The value, exactly (counts as integers, durations as decimal seconds). */
  readonly value: string;
}

/** A metric family: `# HELP`, `# TYPE` and its samples. */
export interface MetricFamily {
  readonly name: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly help: string;
  readonly samples: readonly MetricSample[];
}

/** A label value made valid UTF-8, with no carriage return (escaping is the writer's). */
function cleanValue(value: string): string {
  return xmlChars(value).replace(/\r/g, '\ufffd');
}

/**
 * Metrics in Prometheus's text exposition format (0.0.4), for a scrape of `/metrics` or a
 * file: hits as counters per probe and key, histograms with cumulative `le` buckets, `_sum` and
 * `_count` (latencies in seconds), and upscope's health. Label names are made valid from key
 * names, label values escaped. Series of hits are capped per metric (`maxSeries`); to keep
 * counters monotonic across scrapes, keep one PrometheusExporter for the whole run.
 */
export class PrometheusExporter {
  readonly #prefix: string;
  readonly #maxSeries: number;
  /** Series of hits admitted so far (their label text): they stay, others overflow. */
  readonly #admitted = new Set<string>();

  constructor(options: PrometheusOptions = {}) {
    this.#prefix = options.prefix ?? 'upscope';
    this.#maxSeries = options.maxSeries ?? 1000;
  }

  /** The text of a scrape. */
  render(input: PrometheusInput): string {
    let text = '';
    for (const family of this.families(input)) {
      text += `# HELP ${family.name} ${family.help}\n# TYPE ${family.name} ${family.type}\n`;
      for (const sample of family.samples) {
        text += `${sample.name}${labels(sample.labels)} ${sample.value}\n`;
      }
    }
    return text;
  }

  /** The metric families of a scrape, in order (what render() writes, for other writers). */
  families(input: PrometheusInput): MetricFamily[] {
    const p = this.#prefix;
    const out: MetricFamily[] = [];
    const family = (name: string, type: MetricFamily['type'], help: string) => {
      const samples: MetricSample[] = [];
      out.push({ name, type, help, samples });
      return samples;
    };

    if (input.counts !== undefined) {
      const by = input.counts.by;
      const names = by === undefined ? [] : typeof by === 'string' ? [by] : [...by];
      const labelNames = names.map(labelName);
      const series = new Map<string, { pairs: [string, string][]; count: bigint }>();
      for (const row of input.counts.rows) {
        const values = keyValues(row, names);
        const pairs: [string, string][] = [
          ['probe', cleanValue(row.probe)],
          ...labelNames.map((n, i): [string, string] => [n, cleanValue(values[i]!)]),
        ];
        const key = labels(pairs);
        const found = series.get(key);
        if (found === undefined) series.set(key, { pairs, count: row.count });
        else found.count += row.count;
      }
      // Larger counts are admitted first; once admitted a series stays.
      const order = [...series].sort(([a, x], [b, y]) =>
        x.count !== y.count ? (x.count > y.count ? -1 : 1) : a < b ? -1 : 1,
      );
      for (const [key] of order) {
        if (this.#admitted.size >= this.#maxSeries) break;
        this.#admitted.add(key);
      }
      const overflow = new Map<string, bigint>();
      let folded = 0;
      const metric = `${p}_probe_hits_total`;
      const hits = family(metric, 'counter', 'Probe hits, per probe and key');
      for (const [key, { pairs, count }] of [...series].sort(([a], [b]) =>
        a < b ? -1 : a > b ? 1 : 0,
      )) {
        if (this.#admitted.has(key)) {
          hits.push({ name: metric, labels: pairs, value: String(count) });
          continue;
        }
        const probe = pairs[0]![1];
        overflow.set(probe, (overflow.get(probe) ?? 0n) + count);
        folded++;
      }
      for (const [probe, count] of overflow) {
        hits.push({
          name: metric,
          labels: [
            ['probe', probe],
            ['overflow', 'true'],
          ],
          value: String(count),
        });
      }
      family(
        `${p}_series_overflow`,
        'gauge',
        'Series past the cap on series per metric, added into its overflow series',
      ).push({ name: `${p}_series_overflow`, labels: [['metric', metric]], value: String(folded) });
    }

    const histograms = (
      metric: string,
      help: string,
      rows: readonly HistogramRow[],
      extra: readonly (readonly [string, string])[],
      duration: boolean,
    ) => {
      const samples = family(metric, 'histogram', help);
      for (const row of [...rows].sort((a, b) =>
        a.probe < b.probe ? -1 : a.probe > b.probe ? 1 : 0,
      )) {
        const base: (readonly [string, string])[] = [['probe', cleanValue(row.probe)], ...extra];
        const h = row.histogram;
        const { le, cumulative: counts } = cumulative(h, duration);
        for (let i = 0; i < le.length; i++) {
          samples.push({
            name: `${metric}_bucket`,
            labels: [...base, ['le', le[i]!]],
            value: String(counts[i]),
          });
        }
        samples.push({
          name: `${metric}_bucket`,
          labels: [...base, ['le', '+Inf']],
          value: String(h.count),
        });
        samples.push({
          name: `${metric}_sum`,
          labels: base,
          value: duration ? seconds(h.sum) : String(h.sum),
        });
        samples.push({ name: `${metric}_count`, labels: base, value: String(h.count) });
      }
    };
    if (input.values !== undefined) {
      histograms(
        `${p}_value`,
        'Values fetched at probe hits',
        input.values.rows,
        [['value', cleanValue(input.values.value)]],
        false,
      );
    }
    if (input.latency !== undefined) {
      histograms(
        `${p}_latency_seconds`,
        'Time from function entry to return',
        input.latency,
        [],
        true,
      );
    }

    const health = input.health;
    const single = (
      name: string,
      type: MetricFamily['type'],
      help: string,
      value: number | bigint | undefined,
    ) => {
      if (value !== undefined)
        family(name, type, help).push({ name, labels: [], value: String(value) });
    };
    single(
      `${p}_events_lost_total`,
      'counter',
      'Events the kernel dropped before upscope read them',
      health?.eventsLost,
    );
    single(`${p}_probes_attached`, 'gauge', 'Probes attached', health?.probesAttached);
    single(
      `${p}_attach_errors_total`,
      'counter',
      'Probes that could not be attached',
      health?.attachErrors,
    );
    if (health?.notCounted !== undefined) {
      const samples = family(
        `${p}_hits_not_counted_total`,
        'counter',
        'Hits the handlers could not count, per reason',
      );
      for (const [reason, count] of Object.entries(health.notCounted)) {
        samples.push({
          name: `${p}_hits_not_counted_total`,
          labels: [['reason', reason]],
          value: String(count),
        });
      }
    }
    return out;
  }
}

/** One scrape's worth of metrics, on its own (see PrometheusExporter). */
export function renderPrometheus(input: PrometheusInput, options: PrometheusOptions = {}): string {
  return new PrometheusExporter(options).render(input);
}
