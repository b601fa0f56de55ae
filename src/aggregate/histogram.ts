/**
 * Histograms as the bpf engine keeps them, and what can be read from them. Pure: bucket
 * indexes in, ranges, rows and percentiles out.
 *
 * Log2 buckets have 8 linear steps in each power of two, so percentiles are within 1/8 of
 * their power of two: a magnitude m below 8 has bucket m; one with floor(log2 m) = k >= 3 has
 * bucket 8 + (k - 3) * 8 + (the 3 bits after its top one). A negative value has the bucket of
 * its magnitude plus NEGATIVE_BUCKETS. Linear buckets are 0 below `min`, 1..n for the steps,
 * n + 1 from `max` on.
 */

export const NEGATIVE_BUCKETS = 0x10000;

export type BucketScheme =
  | { readonly kind: 'log2' }
  | { readonly kind: 'linear'; readonly min: bigint; readonly max: bigint; readonly step: bigint };

export interface Histogram {
  readonly scheme: BucketScheme;
  /** Hits per bucket index (only buckets with hits). */
  readonly buckets: ReadonlyMap<number, bigint>;
  readonly count: bigint;
  /** Sum of the values (as signed when `signed`). */
  readonly sum: bigint;
  readonly min: bigint | undefined;
  readonly max: bigint | undefined;
  readonly signed: boolean;
  /**
   * What one unit of a bucket bound is worth in the units of sum, min and max (a latency's
   * buckets count microseconds while its stats keep nanoseconds: 1000). Default 1.
   */
  readonly bucketScale?: bigint | undefined;
}

/** The values a bucket holds: `low` <= v < `high` (undefined for an open end). */
export interface BucketRange {
  readonly low: bigint | undefined;
  readonly high: bigint | undefined;
}

/** Number of linear steps between min and max. */
export function linearSteps(scheme: Extract<BucketScheme, { kind: 'linear' }>): number {
  return Number((scheme.max - scheme.min + scheme.step - 1n) / scheme.step);
}

function magnitudeRange(index: number): [bigint, bigint] {
  if (index < 8) return [BigInt(index), BigInt(index + 1)];
  const k = 3n + BigInt((index - 8) >> 3);
  const sub = BigInt((index - 8) & 7);
  const width = 1n << (k - 3n);
  const low = (1n << k) + sub * width;
  return [low, low + width];
}

/** The range of values in bucket `index`. */
export function bucketRange(index: number, scheme: BucketScheme): BucketRange {
  if (scheme.kind === 'linear') {
    const steps = linearSteps(scheme);
    if (index === 0) return { low: undefined, high: scheme.min };
    if (index > steps) return { low: scheme.max, high: undefined };
    const low = scheme.min + BigInt(index - 1) * scheme.step;
    const high = low + scheme.step;
    return { low, high: high > scheme.max ? scheme.max : high };
  }
  if (index >= NEGATIVE_BUCKETS) {
    const [low, high] = magnitudeRange(index - NEGATIVE_BUCKETS);
    // Magnitudes low <= m < high are values -high < v <= -low.
    return { low: -high + 1n, high: -low + 1n };
  }
  const [low, high] = magnitudeRange(index);
  return { low, high };
}

/** A row of a displayed histogram: the values low <= v < high and how many hits fell there. */
export interface HistogramRow {
  readonly low: bigint | undefined;
  readonly high: bigint | undefined;
  readonly count: bigint;
}

/** The power-of-two group of a log2 bucket (magnitudes 0, 1, 2-3, 4-7, then 2^k..2^(k+1)). */
function log2Group(index: number): number {
  const negative = index >= NEGATIVE_BUCKETS;
  const magnitude = negative ? index - NEGATIVE_BUCKETS : index;
  let group: number;
  if (magnitude < 2) group = magnitude;
  else if (magnitude < 4) group = 2;
  else if (magnitude < 8) group = 3;
  else group = 4 + ((magnitude - 8) >> 3);
  // A negative value's magnitude is at least 1: group -g holds the magnitudes of group g.
  return negative ? -group : group;
}

function groupRange(group: number): BucketRange {
  if (group < 0) {
    const positive = groupRange(-group);
    return { low: -positive.high! + 1n, high: -positive.low! + 1n };
  }
  if (group < 2) return { low: BigInt(group), high: BigInt(group + 1) };
  return { low: 1n << BigInt(group - 1), high: 1n << BigInt(group) };
}

/**
 * The rows to show: log2 histograms in powers of two, linear ones per step; from the lowest
 * bucket with hits to the highest, empty rows between included.
 */
export function histogramRows(histogram: Histogram): HistogramRow[] {
  if (histogram.buckets.size === 0) return [];
  const counts = new Map<number, bigint>();
  for (const [index, count] of histogram.buckets) {
    const row = histogram.scheme.kind === 'log2' ? log2Group(index) : index;
    counts.set(row, (counts.get(row) ?? 0n) + count);
  }
  const rows = [...counts.keys()];
  const first = Math.min(...rows);
  const last = Math.max(...rows);
  const out: HistogramRow[] = [];
  for (let row = first; row <= last; row++) {
    const range =
      histogram.scheme.kind === 'log2' ? groupRange(row) : bucketRange(row, histogram.scheme);
    out.push({ ...range, count: counts.get(row) ?? 0n });
  }
  return out;
}

/** Buckets in order of their values. */
function ordered(histogram: Histogram): [number, bigint][] {
  const low = (index: number) => bucketRange(index, histogram.scheme).low ?? -(1n << 64n);
  return [...histogram.buckets].sort(([a], [b]) => {
    const d = low(a) - low(b);
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  });
}

/**
 * The value below which a fraction `p` (0..1) of the hits fall, interpolated within its
 * bucket and kept within the histogram's min and max. Undefined for an empty histogram.
 */
export function percentile(histogram: Histogram, p: number): bigint | undefined {
  if (histogram.count === 0n) return undefined;
  const total = Number(histogram.count);
  const rank = Math.max(1, Math.ceil(p * total));
  let seen = 0;
  for (const [index, count] of ordered(histogram)) {
    const n = Number(count);
    if (seen + n >= rank) {
      const range = bucketRange(index, histogram.scheme);
      const scale = histogram.bucketScale ?? 1n;
      const low = range.low === undefined ? (histogram.min ?? 0n) : range.low * scale;
      const high =
        range.high === undefined
          ? histogram.max === undefined
            ? low
            : histogram.max + 1n
          : range.high * scale;
      const fraction = (rank - seen) / n;
      let value = low + BigInt(Math.floor(Number(high - 1n - low) * fraction));
      if (histogram.min !== undefined && value < histogram.min) value = histogram.min;
      if (histogram.max !== undefined && value > histogram.max) value = histogram.max;
      return value;
    }
    seen += n;
  }
  return histogram.max;
}

/** The mean, or undefined for an empty histogram. */
export function mean(histogram: Histogram): number | undefined {
  if (histogram.count === 0n) return undefined;
  return Number(histogram.sum) / Number(histogram.count);
}

/**
 * The bucket of `value`, as the bpf engine's handler computes it (for aggregating in user
 * space, with the same buckets); `scale` divides a log2 value's magnitude first.
 */
export function bucketIndex(
  value: bigint,
  scheme: BucketScheme,
  signed: boolean,
  scale = 1n,
): number {
  if (scheme.kind === 'linear') {
    if (value < scheme.min) return 0;
    if (value >= scheme.max) return linearSteps(scheme) + 1;
    return Number((value - scheme.min) / scheme.step) + 1;
  }
  let magnitude = value / scale;
  let base = 0;
  if (signed && magnitude < 0n) {
    magnitude = -magnitude;
    base = NEGATIVE_BUCKETS;
  }
  if (magnitude < 8n) return base + Number(magnitude);
  const k = magnitude.toString(2).length - 1;
  return base + 8 + (k - 3) * 8 + Number((magnitude >> BigInt(k - 3)) & 7n);
}

/** A histogram kept in user space: add() each value, read() a Histogram of them now. */
/** Values counted elsewhere into a histogram's own buckets (the inject engine's, in the process). */
export interface HistogramPart {
  readonly buckets: ReadonlyMap<number, bigint>;
  readonly count: bigint;
  readonly sum: bigint;
  readonly min: bigint | undefined;
  readonly max: bigint | undefined;
}

/** `histogram` with `part` added (same scheme and scale). */
export function addToHistogram(histogram: Histogram, part: HistogramPart): Histogram {
  if (part.count === 0n) return histogram;
  const buckets = new Map(histogram.buckets);
  for (const [index, count] of part.buckets) buckets.set(index, (buckets.get(index) ?? 0n) + count);
  const min =
    histogram.min === undefined || (part.min !== undefined && part.min < histogram.min)
      ? part.min
      : histogram.min;
  const max =
    histogram.max === undefined || (part.max !== undefined && part.max > histogram.max)
      ? part.max
      : histogram.max;
  return {
    ...histogram,
    buckets,
    count: histogram.count + part.count,
    sum: histogram.sum + part.sum,
    min,
    max,
  };
}

export class HistogramAccumulator {
  readonly #buckets = new Map<number, bigint>();
  readonly #scheme: BucketScheme;
  readonly #signed: boolean;
  readonly #scale: bigint;
  #count = 0n;
  #sum = 0n;
  #min: bigint | undefined;
  #max: bigint | undefined;

  constructor(scheme: BucketScheme, signed: boolean, bucketScale = 1n) {
    this.#scheme = scheme;
    this.#signed = signed;
    this.#scale = bucketScale;
  }

  add(value: bigint): void {
    const index = bucketIndex(value, this.#scheme, this.#signed, this.#scale);
    this.#buckets.set(index, (this.#buckets.get(index) ?? 0n) + 1n);
    this.#count++;
    this.#sum += value;
    if (this.#min === undefined || value < this.#min) this.#min = value;
    if (this.#max === undefined || value > this.#max) this.#max = value;
  }

  read(): Histogram {
    return {
      scheme: this.#scheme,
      buckets: new Map(this.#buckets),
      count: this.#count,
      sum: this.#sum,
      min: this.#min,
      max: this.#max,
      signed: this.#signed,
      ...(this.#scale === 1n ? {} : { bucketScale: this.#scale }),
    };
  }
}
