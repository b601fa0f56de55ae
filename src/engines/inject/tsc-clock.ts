import type { NativeBinding } from '../../native/index.js';

/** One reading of the TSC and CLOCK_MONOTONIC taken together. */
interface Pair {
  readonly tsc: bigint;
  readonly ns: bigint;
}

/** How long the first calibration waits between its two readings. */
const FIRST_SPAN_MS = 10;

/**
 * Turns TSC values (what the inject engine's trampolines record: rdtsc costs no system
 * call) into CLOCK_MONOTONIC nanoseconds, the clock of every other event. The rate comes
 * from two readings of both clocks taken in this process, the first when the clock is made
 * and the latest at each update(): the longer the span, the closer the rate. Needs a TSC
 * that runs at one rate on every CPU (constant_tsc, nonstop_tsc), as every x86-64 processor
 * of the last fifteen years has.
 */
export class TscClock {
  readonly #native: NativeBinding;
  readonly #first: Pair;
  #last: Pair;
  #nsPerTick: number;

  constructor(native: NativeBinding) {
    this.#native = native;
    this.#first = this.#read();
    const until = performance.now() + FIRST_SPAN_MS;
    const nap = new Int32Array(new SharedArrayBuffer(4));
    while (performance.now() < until) Atomics.wait(nap, 0, 0, 1);
    this.#last = this.#read();
    this.#nsPerTick = this.#rate();
  }

  /** A reading of both clocks: the TSC read on both sides of the clock, halfway between. */
  #read(): Pair {
    const before = this.#native.readTsc();
    const ns = process.hrtime.bigint();
    const after = this.#native.readTsc();
    return { tsc: before + (after - before) / 2n, ns };
  }

  #rate(): number {
    const ticks = Number(this.#last.tsc - this.#first.tsc);
    return ticks > 0 ? Number(this.#last.ns - this.#first.ns) / ticks : 1;
  }

  /** Take a new reading: later conversions count from it, at a rate over a longer span. */
  update(): void {
    this.#last = this.#read();
    this.#nsPerTick = this.#rate();
  }

  /** Nanoseconds per TSC tick, as far as known now. */
  get nsPerTick(): number {
    return this.#nsPerTick;
  }

  /** CLOCK_MONOTONIC, in ns, when the TSC read `tsc`. */
  toNs(tsc: bigint): bigint {
    return this.#last.ns + BigInt(Math.round(Number(tsc - this.#last.tsc) * this.#nsPerTick));
  }
}
