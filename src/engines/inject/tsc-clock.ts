import type { NativeBinding } from '../../native/index.js';

/** One reading of the TSC and CLOCK_MONOTONIC taken together. */
interface Pair {
  readonly tsc: bigint;
  readonly ns: bigint;
}

/** The two clocks the TscClock reads (the process's own, or a test's). */
interface ClockSources {
  readonly readTsc: NativeBinding['readTsc'];
  /** CLOCK_MONOTONIC in ns (process.hrtime.bigint()). */
  readonly monotonicNs: () => bigint;
}

/** How long the first calibration waits between its two readings. */
const FIRST_SPAN_MS = 10;
/**
 * Readings taken for one pair: the one whose TSC readings lie closest around the clock's is
 * kept (a thread preempted between them, on a loaded machine, made a pair milliseconds off).
 */
const TRIES = 5;
/** A pair this close (in TSC ticks, about a microsecond) is taken at once. */
const TIGHT_TICKS = 4096n;
/**
 * How fast the conversion is steered back to the clock after an update: it closes the gap
 * it finds over about this span, changing its rate by at most MAX_SLEW.
 */
const CATCH_UP_NS = 1e9;
const MAX_SLEW = 1e-3;

/**
 * Segments kept: a record older than the oldest (many polls behind) takes the oldest's; the
 * oldest's reading is where the rate is measured from.
 */
const SEGMENTS = 64;
/** Updates closer than this to the last one are not taken. */
const UPDATE_EVERY_NS = 20_000_000n;

/**
 * From `tsc` on (until the next segment), `ns` plus `slope` ns per tick; `read` is the
 * reading of both clocks taken there.
 */
interface Segment {
  readonly tsc: bigint;
  /** `tsc`'s high and low 32 bits (see toNsOfWords()). */
  readonly high: number;
  readonly low: number;
  readonly ns: bigint;
  /** `ns` as a number: exact (a monotonic clock's first 104 days), else undefined. */
  readonly nsNumber: number | undefined;
  readonly slope: number;
  readonly read: Pair;
}

/** `ns` as a number where one holds it exactly. */
function exactNumber(ns: bigint): number | undefined {
  return ns <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(ns) : undefined;
}

/**
 * Turns TSC values (what the inject engine's trampolines record: rdtsc costs no system
 * call) into CLOCK_MONOTONIC nanoseconds, the clock of every other event. The rate comes
 * from two readings of both clocks taken in this process, the oldest kept and the latest
 * (at each update()): the longer the span, the closer the rate. The conversion
 * is a line per update, each going on from where the last one was at that moment (steered
 * toward the clock by a slightly faster or slower rate): what a TSC value converts to never
 * changes once its time has passed, and a later value is never given an earlier time (a
 * call's return is never before its entry, however their records fall between updates).
 * Needs a TSC that runs at one rate on every CPU (constant_tsc, nonstop_tsc), as every x86-64
 * processor of the last fifteen years has.
 */
export class TscClock {
  readonly #sources: ClockSources;
  /** The lines of the conversion, oldest first. */
  readonly #segments: Segment[];
  /** The rate as measured over the longest span so far. */
  #nsPerTick: number;

  constructor(
    native: Pick<NativeBinding, 'readTsc'>,
    monotonicNs: () => bigint = () => process.hrtime.bigint(),
  ) {
    this.#sources = { readTsc: () => native.readTsc(), monotonicNs };
    const first = this.#read();
    const until = performance.now() + FIRST_SPAN_MS;
    const nap = new Int32Array(new SharedArrayBuffer(4));
    while (performance.now() < until) Atomics.wait(nap, 0, 0, 1);
    this.#nsPerTick = rate(first, this.#read());
    this.#segments = [
      {
        ...first,
        ...words(first.tsc),
        nsNumber: exactNumber(first.ns),
        slope: this.#nsPerTick,
        read: first,
      },
    ];
  }

  /**
   * A reading of both clocks: the TSC read on both sides of the clock, halfway between, from
   * the closest of a few tries.
   */
  #read(): Pair {
    let best: { pair: Pair; gap: bigint } | undefined;
    for (let i = 0; i < TRIES; i++) {
      const before = this.#sources.readTsc();
      const ns = this.#sources.monotonicNs();
      const after = this.#sources.readTsc();
      const gap = after - before;
      if (best === undefined || gap < best.gap) {
        best = { pair: { tsc: before + gap / 2n, ns }, gap };
      }
      if (gap <= TIGHT_TICKS) break;
    }
    return best!.pair;
  }

  /**
   * Take a new reading: from now on the conversion counts at the rate measured over the
   * longer span, from where it is, closing the distance to the clock over about a second.
   */
  update(): void {
    const now = this.#read();
    const last = this.#segments[this.#segments.length - 1]!;
    // Polls can come far more often than that (a busy ring): the segments kept then still
    // span a second or so, which the rate is measured over.
    if (now.tsc <= last.tsc || now.ns - last.read.ns < UPDATE_EVERY_NS) return;
    this.#nsPerTick = rate(this.#segments[0]!.read, now);
    const given = this.toNs(now.tsc);
    const behind = Number(now.ns - given);
    const slew = Math.max(-MAX_SLEW, Math.min(MAX_SLEW, behind / CATCH_UP_NS));
    this.#segments.push({
      tsc: now.tsc,
      ...words(now.tsc),
      ns: given,
      nsNumber: exactNumber(given),
      slope: this.#nsPerTick * (1 + slew),
      read: now,
    });
    if (this.#segments.length > SEGMENTS) this.#segments.shift();
  }

  /** Nanoseconds per TSC tick, as far as known now (for durations). */
  get nsPerTick(): number {
    return this.#nsPerTick;
  }

  /** CLOCK_MONOTONIC, in ns, when the TSC read `tsc`. */
  toNs(tsc: bigint): bigint {
    const segments = this.#segments;
    let i = segments.length - 1;
    while (i > 0 && segments[i]!.tsc > tsc) i--;
    const line = segments[i]!;
    return line.ns + BigInt(Math.round(Number(tsc - line.tsc) * line.slope));
  }

  /**
   * toNs() of the TSC value whose high and low 32 bits are `high` and `low`, as a record
   * holds it: the same value, as a number while one holds it exactly (below 2^53 ns), else a
   * bigint. No BigInt is made of the TSC, nor of its distance to the segment, nor of the time
   * while it is a number (they were a third of the time to read an inject ring's record).
   */
  toNsOfWords(high: number, low: number): number | bigint {
    const segments = this.#segments;
    let i = segments.length - 1;
    let line = segments[i]!;
    while (i > 0 && (line.high > high || (line.high === high && line.low > low))) {
      line = segments[--i]!;
    }
    // Exact while the distance is below 2^53 ticks (a month at 3 GHz), as toNs()'s Number().
    const ticks = (high - line.high) * 2 ** 32 + (low - line.low);
    const distance = Math.round(ticks * line.slope);
    // A number while the sum is exact (no BigInt made: two were a third of reading a record).
    const sum = line.nsNumber === undefined ? Number.NaN : line.nsNumber + distance;
    return sum <= Number.MAX_SAFE_INTEGER ? sum : line.ns + BigInt(distance);
  }
}

/** A TSC value's high and low 32 bits. */
function words(tsc: bigint): { high: number; low: number } {
  return { high: Number(tsc >> 32n), low: Number(tsc & 0xffffffffn) };
}

/** Nanoseconds per tick between two readings (1 where the TSC did not move on). */
function rate(from: Pair, to: Pair): number {
  const ticks = Number(to.tsc - from.tsc);
  return ticks > 0 ? Number(to.ns - from.ns) / ticks : 1;
}
