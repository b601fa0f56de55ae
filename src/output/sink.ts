/** Where a renderer's output goes, in order: text, or bytes for binary formats (pprof). */
export type Write = (chunk: string | Uint8Array) => void;

/**
 * A renderer fed values as they come (bpftrace's output, uftrace's dump ops): begin() once,
 * value() for each value (an event of a trace; a reading of an aggregation, every --interval
 * and the last), lost() with the events lost so far in all, end() once after the last value.
 * Streaming formats write as values come; whole-document formats write at end().
 */
export interface Sink<V> {
  begin(): void;
  value(value: V): void;
  lost(count: number): void;
  end(): void;
  /** Streaming sinks: write what waits in their buffer now (after each poll of a trace). */
  flush?(): void;
}
