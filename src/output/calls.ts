import type { ProbeEvent } from '../events/index.js';

/** A call: an entry and its return on one thread, or a return whose entry time is known. */
export interface Call {
  readonly kind: 'call';
  /** The entry event, when it was traced (else the start comes from the return's latency). */
  readonly entry: ProbeEvent | undefined;
  readonly ret: ProbeEvent;
  readonly startNs: bigint;
  readonly endNs: bigint;
}

/** An event that is not part of a call: an instruction or USDT probe, an unmatched entry. */
export interface Instant {
  readonly kind: 'instant';
  readonly event: ProbeEvent;
}

/** Entries held per thread before the oldest is given up as an instant. */
const MAX_OPEN = 256;

/**
 * Pairs each return with the entry of the same probe on the same thread, the most recent one
 * (calls nest). Entries between them on that thread's stack never returned through a probe
 * (no return probe, or unwound by longjmp or an exception) and become instants. Memory is
 * bounded: at most MAX_OPEN entries wait per thread; older ones become instants.
 */
export class CallPairer {
  readonly #open = new Map<number, ProbeEvent[]>();
  readonly #returning: ReadonlySet<string> | undefined;

  /**
   * `returning`: the probes that have a return probe, when known (a trace's sites say):
   * entries of the others are instants at once instead of waiting for a return.
   */
  constructor(returning?: ReadonlySet<string>) {
    this.#returning = returning;
  }

  /** What the event completes, in order: instants given up, then the call or the instant. */
  push(event: ProbeEvent): (Call | Instant)[] {
    if (event.kind === 'entry' && this.#returning?.has(event.probe) === false) {
      return [{ kind: 'instant', event }];
    }
    if (event.kind === 'entry') {
      let stack = this.#open.get(event.tid);
      if (stack === undefined) {
        stack = [];
        this.#open.set(event.tid, stack);
      }
      stack.push(event);
      if (stack.length > MAX_OPEN) return [{ kind: 'instant', event: stack.shift()! }];
      return [];
    }
    if (event.kind !== 'return') return [{ kind: 'instant', event }];
    const stack = this.#open.get(event.tid) ?? [];
    let i = stack.length - 1;
    while (i >= 0 && stack[i]!.probe !== event.probe) i--;
    if (i < 0) {
      if (event.latencyNs === undefined) return [{ kind: 'instant', event }];
      const startNs = event.timestampNs - event.latencyNs;
      return [{ kind: 'call', entry: undefined, ret: event, startNs, endNs: event.timestampNs }];
    }
    const out: (Call | Instant)[] = stack
      .splice(i + 1)
      .map((e): Instant => ({ kind: 'instant', event: e }));
    const entry = stack.pop()!;
    if (stack.length === 0) this.#open.delete(event.tid);
    out.push({
      kind: 'call',
      entry,
      ret: event,
      startNs: entry.timestampNs,
      endNs: event.timestampNs,
    });
    return out;
  }

  /** The entries still waiting for their return, as instants; none wait after this. */
  flush(): Instant[] {
    const out: Instant[] = [];
    for (const stack of this.#open.values()) {
      for (const event of stack) out.push({ kind: 'instant', event });
    }
    this.#open.clear();
    return out.sort((a, b) => (a.event.timestampNs < b.event.timestampNs ? -1 : 1));
  }
}
