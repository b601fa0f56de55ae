import type { ProbeEvent } from '../events/index.js';
import { type Call, CallPairer, type Instant } from './calls.js';
import { type HexFields, jsonFields } from './fields.js';
import type { Sink, Write } from './sink.js';

export interface ChromeTraceOptions {
  /**
   * The probes that have a return probe (by name): entries of the others are not held for a
   * return. Default: every entry waits for one (at most 256 per thread).
   */
  readonly returning?: ReadonlySet<string> | undefined;
  /** Time zero, CLOCK_MONOTONIC in nanoseconds (the trace's start); default the first event's. */
  readonly startNs?: bigint | undefined;
  /** Fields that print in hex, per probe. */
  readonly hexFields?: HexFields | undefined;
  /** Said in the trace's metadata (`otherData`): the command line, the engine... */
  readonly metadata?: Readonly<Record<string, string>> | undefined;
  /**
   * Write each slice's `dur` so that slices that end at one time (calls an unwind or a
   * thread's end closed together, and their callee that returned then) still end together
   * once read as doubles, and so nest. speedscope takes a slice's end as `(ts - first) + dur`,
   * `first` the earliest `ts` of its thread's slices, each step rounded to a double: `dur` is
   * chosen so that this is, for every slice, the double of `end - first`. Such a `dur` may be
   * written with more than three decimals. For slices written in order of their start on each
   * thread (a replay's calls; `first` is then its thread's first slice). Default off.
   */
  readonly exactEnds?: boolean | undefined;
}

/** `ns` as microseconds with three decimals, exactly (JSON number text). */
function micros(ns: bigint): string {
  const negative = ns < 0n;
  const n = negative ? -ns : ns;
  return `${negative ? '-' : ''}${n / 1000n}.${(n % 1000n).toString().padStart(3, '0')}`;
}

/** The double next to `x` (x >= 0), up or down. */
function nextDouble(x: number, up: boolean): number {
  const value = new Float64Array([x]);
  const bits = new BigInt64Array(value.buffer);
  bits[0] = bits[0]! + (up ? 1n : -1n);
  return value[0]!;
}

/**
 * `dur` as text such that a reader that subtracts `first` from `ts` and adds `dur` (each step
 * rounded to a double, as speedscope finds where a slice ends) gets the double of
 * `end - first`: the exact decimal when it does, else the double nearest to it that does. So
 * slices that end together (calls an unwind closed at once, a caller and the callee whose end
 * ended it) still end together once read, and nest. With `first` 0, `ts + dur` is the end.
 */
function durationText(tsText: string, durNs: bigint, endText: string, first: number): string {
  const exact = micros(durNs);
  const ts = Number(tsText) - first;
  const end = Number(endText) - first;
  if (ts + Number(exact) === end) return exact;
  let d = end - ts;
  for (let i = 0; i < 4 && ts + d !== end && d > 0; i++) d = nextDouble(d, ts + d < end);
  return ts + d === end ? String(d) : exact;
}

const FLUSH_AT = 1 << 16;

/**
 * Chrome's trace-event format (JSON object form), which Perfetto's UI, chrome://tracing and
 * speedscope open. Each entry with its return on the same thread is a complete event ("X")
 * with its duration and the fetched values of both as args; every other hit is an instant
 * event ("i", thread scoped) with its values; each process and thread is named by metadata
 * events ("M") from the command names seen (a process by its main thread's). Events are
 * written as they are paired, 64 KiB at a time; entries wait for their return (at most 256
 * per thread). Times are microseconds since `startNs`, to the nanosecond.
 */
export class ChromeTraceSink implements Sink<ProbeEvent> {
  readonly #write: Write;
  readonly #options: ChromeTraceOptions;
  readonly #pairer: CallPairer;
  /** tid -> [pid, last command name]. */
  readonly #threads = new Map<number, [number, string]>();
  /** exactEnds: tid -> the start of its first slice (as a reader reads its ts). */
  readonly #firstSlice = new Map<number, number>();
  #origin: bigint | undefined;
  #text = '';
  #first = true;
  #lost = 0;

  constructor(write: Write, options: ChromeTraceOptions = {}) {
    this.#write = write;
    this.#options = options;
    this.#origin = options.startNs;
    this.#pairer = new CallPairer(options.returning);
  }

  begin(): void {
    this.#text += '{"displayTimeUnit":"ns","traceEvents":[\n';
  }

  value(event: ProbeEvent): void {
    this.#origin ??= event.timestampNs;
    this.#threads.set(event.tid, [event.pid, event.comm]);
    for (const done of this.#pairer.push(event)) this.#emit(done);
    if (this.#text.length >= FLUSH_AT) this.#flush();
  }

  lost(count: number): void {
    this.#lost = count;
  }

  end(): void {
    for (const done of this.#pairer.flush()) this.#emit(done);
    const processes = new Map<number, string>();
    for (const [tid, [pid, comm]] of this.#threads) {
      if (tid === pid || !processes.has(pid)) processes.set(pid, comm);
    }
    for (const [pid, name] of processes) {
      this.#event({ name: 'process_name', ph: 'M', pid, tid: pid, args: { name } });
    }
    for (const [tid, [pid, name]] of this.#threads) {
      this.#event({ name: 'thread_name', ph: 'M', pid, tid, args: { name } });
    }
    const other = { ...this.#options.metadata, lostEvents: this.#lost };
    this.#text += `\n],"otherData":${JSON.stringify(other)}}\n`;
    this.#flush();
  }

  #flush(): void {
    if (this.#text.length > 0) this.#write(this.#text);
    this.#text = '';
  }

  #event(fields: Record<string, unknown>, ts?: bigint, dur?: bigint, tid?: number): void {
    let json = JSON.stringify(fields);
    // ts and dur are written as exact decimal text, not through a float.
    const at = ts === undefined ? undefined : micros(ts - this.#origin!);
    if (dur !== undefined && at !== undefined) {
      let text: string;
      if (this.#options.exactEnds === true) {
        let first = this.#firstSlice.get(tid!);
        if (first === undefined) {
          first = Number(at);
          this.#firstSlice.set(tid!, first);
        }
        text = durationText(at, dur, micros(ts! + dur - this.#origin!), first);
      } else {
        text = micros(dur);
      }
      json = `{"dur":${text},${json.slice(1)}`;
    }
    if (at !== undefined) json = `{"ts":${at},${json.slice(1)}`;
    this.#text += this.#first ? json : `,\n${json}`;
    this.#first = false;
  }

  #emit(done: Call | Instant): void {
    const hex = this.#options.hexFields;
    if (done.kind === 'instant') {
      const e = done.event;
      const name = e.kind === 'return' ? `r:${e.probe}` : e.probe;
      const args = jsonFields(e.fields, hex?.get(e.probe));
      this.#event(
        { name, cat: e.kind, ph: 'i', s: 't', pid: e.pid, tid: e.tid, args },
        e.timestampNs,
      );
      return;
    }
    const { entry, ret } = done;
    const args = entry === undefined ? {} : jsonFields(entry.fields, hex?.get(entry.probe));
    for (const [name, value] of Object.entries(jsonFields(ret.fields, hex?.get(ret.probe)))) {
      args[name in args ? `r:${name}` : name] = value;
    }
    this.#event(
      { name: ret.probe, cat: 'call', ph: 'X', pid: ret.pid, tid: ret.tid, args },
      done.startNs,
      done.endNs - done.startNs,
      ret.tid,
    );
  }
}

/** A whole trace as Chrome trace-event JSON (see ChromeTraceSink). */
export function renderChromeTrace(
  events: Iterable<ProbeEvent>,
  options: ChromeTraceOptions & { readonly lost?: number | undefined } = {},
): string {
  let text = '';
  const sink = new ChromeTraceSink((chunk) => {
    text += chunk;
  }, options);
  sink.begin();
  for (const event of events) sink.value(event);
  sink.lost(options.lost ?? 0);
  sink.end();
  return text;
}
