import type { Histogram } from '../aggregate/index.js';
import type { Stack } from './stacks.js';

/** A count of hits of a probe, per key when counted by one (as `count` reads them). */
export interface CountRow {
  readonly probe: string;
  /** The key's value (several, with several keys); absent without `by`. */
  readonly key?: bigint | string | readonly (bigint | string)[] | undefined;
  /** By `ustack`: the stack (its folded frames are the label). */
  readonly stack?: Stack | undefined;
  readonly count: bigint;
  /**
   * `unwind` for the calls of a return probe that an unwind (an exception, a Go panic,
   * pthread_cancel, a longjmp) or their thread's end took away: no return, key or stack seen.
   */
  readonly exit?: 'unwind' | undefined;
}

/** A histogram of a probe (as `hist` and `latency` read them). */
export interface HistogramRow {
  readonly probe: string;
  readonly histogram: Histogram;
}

/** A reading of an aggregation: its rows, whether it is the last, and when it was taken. */
export interface Reading<R> {
  readonly rows: R;
  /** The last reading (at the end), rather than one of every --interval. */
  readonly final: boolean;
  /** When it was taken (printed before an interval's reading). */
  readonly time?: Date | undefined;
}
