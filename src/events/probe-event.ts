/** A value fetched when a probe fired: integers by width (bigint for 64-bit), strings. */
export type FieldValue = number | bigint | string | Uint8Array | null;

/** One hit of a probe, as every engine delivers it. */
export interface ProbeEvent {
  /** The probe's name: the function and offset (`parse_request`, `main+0x1a`), or an address. */
  readonly probe: string;
  /** The spec the probe came from. */
  readonly spec: string;
  readonly kind: 'entry' | 'return' | 'instruction' | 'usdt';
  /** Process (thread group) and thread ids. */
  readonly pid: number;
  readonly tid: number;
  readonly cpu: number;
  /** CLOCK_MONOTONIC, in nanoseconds: comparable with process.hrtime.bigint(). */
  readonly timestampNs: bigint;
  readonly comm: string;
  /** The fetched values, by the names the spec gave them. */
  readonly fields: Readonly<Record<string, FieldValue>>;
  /** For a return: the time since the matching entry of the same thread, when it was seen. */
  readonly latencyNs?: bigint | undefined;
  /**
   * How a return left the function, when not by its own `ret` through the probe: a
   * `tail-call` (a jump to another function, which returns for it: its result is not known
   * at the probe), or an `unwind` (an exception, a Go panic, pthread_cancel or a longjmp
   * took the call away, or its thread ended in it: no result, no latency; seen when a later
   * event of its thread or goroutine, or the end of the trace, showed it).
   */
  readonly exit?: 'tail-call' | 'unwind' | undefined;
  /**
   * For an entry of a function whose returns come through the kernel's return trampoline:
   * the kernel set none for this call (it sets at most 64 on a thread at once), so no return
   * of it will come.
   */
  readonly noReturn?: true | undefined;
  /**
   * For the entry and return of a Go function whose calls are paired per goroutine (a
   * recording, latency): the goroutine (its g), which may run on another thread at its return
   * than at its entry.
   */
  readonly goroutine?: bigint | undefined;
}

/** What a stream delivered and what it lost, per probe and in all. */
export interface StreamStats {
  readonly delivered: number;
  /** Events the kernel dropped (ring buffer full) before upscope could read them. */
  readonly lost: number;
  /** Probe hits the kernel could not record at all (uprobe_profile misses), when it says. */
  readonly missed: number | undefined;
  readonly perProbe: readonly {
    readonly probe: string;
    readonly delivered: number;
    readonly hits: number | undefined;
  }[];
}
