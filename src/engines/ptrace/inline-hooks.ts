import type { EntryRead } from '../../arch/index.js';
import type { Registers } from './registers.js';
import type { Tracee } from './tracee.js';

/**
 * A read of the process's memory an inline hook makes at each entry for its fetches (see
 * planInlineReads()): arch's EntryRead.
 */
export type InlineRead = EntryRead;

/**
 * The memory an inline hook copies: at each entry (with the registers there), and at each
 * return of its calls whose return address it swaps (with the registers after the return).
 */
export interface InlineReads {
  readonly entry: readonly InlineRead[];
  readonly return: readonly InlineRead[];
}

export const NO_INLINE_READS: InlineReads = { entry: [], return: [] };

/**
 * Memory an inline hook copied at an entry: `bytes` from `vaddr`, of the `asked` it tried
 * (fewer when a page on the way could not be read; none when the first could not).
 */
export interface InlineMemory {
  readonly vaddr: bigint;
  readonly bytes: Uint8Array;
  readonly asked: number;
}

/**
 * A time in CLOCK_MONOTONIC ns: a number where it is exact, else a bigint. A BigInt made for
 * each hit was a fifth of reading a recording's records (BigInt(time) gives the bigint).
 */
export type HookTimeNs = number | bigint;

/** A hit an inline hook recorded in the process, read back by the tracer. */
export interface InlineHit {
  /**
   * `entry`: the function was entered; `return`: a call whose return address the hook
   * swapped (`returns` at its entry) returned.
   */
  readonly kind: 'entry' | 'return';
  /** The hooked function's address. */
  readonly vaddr: bigint;
  /** For an entry: whether its return was swapped (a `return` hit follows, same thread). */
  readonly returns: boolean;
  /**
   * For an entry whose return was swapped: how many calls of its thread the hook took for
   * left by a longjmp or an unwind, the innermost ones at or below its stack pointer
   * (fewer than that test alone finds where a signal handler runs on a stack of its own
   * above the calls it interrupted, or where those calls' entries were read before the
   * hook could see them).
   */
  readonly dropped: number;
  /**
   * For a return: the stack pointer its call had at the entry (where its return address
   * was), which pairs it with its entry. Stack pointers are numbers: a thread's stack is
   * below 2^47 (where the kernel puts stacks and mappings unless a program asks for higher
   * ones), exact as a number, and a BigInt made for each was a third of a record's reading.
   */
  readonly entrySp: number | undefined;
  readonly tid: number;
  /** The stack pointer at the entry, or just after the return. */
  readonly sp: number;
  /**
   * CLOCK_MONOTONIC when the thread ran the hook, in ns: a number while one holds it exactly
   * (below 2^53 ns, a clock's first 104 days), a bigint after (HookTimeNs).
   */
  readonly timeNs: HookTimeNs;
  /**
   * The thread's registers at the function's entry (%rip is the entry), or just after its
   * return (%rip is the address returned to); all zero where the hook is bare (setBare()).
   */
  readonly regs: Registers;
  /**
   * At an entry, the first words of its stack from %rsp (the return address, stack-passed
   * arguments); at a return, the words from %rsp after it.
   */
  readonly stack: Uint8Array;
  /** The memory the hook copied for the fetches there (InlineReads), in order. */
  readonly memory: readonly InlineMemory[];
}

/**
 * What inline hooks aggregated in the process for one hooked function (see
 * InlineHooks.setAggregate()), since they were placed.
 */
export interface InlineAggregate {
  /** Entries counted. */
  readonly entries: bigint;
  /** Calls timed (their returns came through the hook), or values counted (InlineValue). */
  readonly calls: bigint;
  /** Their total, shortest and longest times, in ns (or the values'). */
  readonly sumNs: bigint;
  readonly minNs: bigint | undefined;
  readonly maxNs: bigint | undefined;
  /**
   * Timed calls by log2 bucket of their time (aggregate/histogram.ts), in the unit asked; or
   * values by bucket of the scheme asked (negative log2 ones at NEGATIVE_BUCKETS + bucket).
   */
  readonly buckets: ReadonlyMap<number, bigint>;
  /** Timed calls a longjmp or an unwind left: no return came. */
  readonly unwound: bigint;
}

/**
 * A value an inline hook puts in its histogram at each entry (InlineHooks.setAggregate()):
 * a register as the entry has it, cut to `bits` and read signed or not.
 */
export interface InlineValue {
  readonly register: string;
  readonly bits: 8 | 16 | 32 | 64;
  readonly signed: boolean;
}

/** Two aggregates of the same function added up (two processes', or before and after an exec). */
export function addInlineAggregates(a: InlineAggregate, b: InlineAggregate): InlineAggregate {
  const buckets = new Map(a.buckets);
  for (const [index, count] of b.buckets) buckets.set(index, (buckets.get(index) ?? 0n) + count);
  const pick = (x: bigint | undefined, y: bigint | undefined, min: boolean) =>
    x === undefined ? y : y === undefined ? x : min === x < y ? x : y;
  return {
    entries: a.entries + b.entries,
    calls: a.calls + b.calls,
    sumNs: a.sumNs + b.sumNs,
    minNs: pick(a.minNs, b.minNs, true),
    maxNs: pick(a.maxNs, b.maxNs, false),
    buckets,
    unwound: a.unwound + b.unwound,
  };
}

/**
 * Hooks patched into the code of one traced process that record their hits without a trap
 * (the `inject` engine, in engines/inject/), for ProcessProbes to place instead of an int3
 * where they can. Every call that changes code is made with every thread of the process
 * stopped.
 */
export interface InlineHooks {
  /**
   * Hook the function at `vaddr`. `tid` is a stopped thread to run system calls through;
   * `pcs` are where the process's threads are. `jumpTargets`: the addresses near `vaddr` a
   * jump of the function lands on (undefined: unknown). Returns undefined once hooked, or
   * why it cannot be (the int3 path then serves the site). `reads`: the memory it copies (a
   * hooked address placed again with reads it lacks gets a new trampoline that makes them
   * too, keeping what it was set to do).
   */
  place(
    vaddr: bigint,
    jumpTargets: readonly bigint[] | undefined,
    tid: number,
    pcs: readonly bigint[],
    reads?: InlineReads,
  ): string | undefined;
  /** Whether `vaddr` is hooked. */
  has(vaddr: bigint): boolean;
  /** Whether `vaddr` is hooked with a trampoline that makes every one of `reads`. */
  covers(vaddr: bigint, reads: InlineReads): boolean;
  /**
   * Whether the hook at `vaddr` swaps return addresses, to record the returns of its calls
   * (a per-thread shadow stack keeps the real ones). Calls already swapped still return
   * through the hook when it is turned off.
   */
  setReturns(vaddr: bigint, on: boolean): void;
  /**
   * Whether the hook at `vaddr` aggregates in the process instead of recording: each entry
   * counted, each call whose return it swaps timed into a histogram (aggregates() reads
   * them), or, with `value`, each entry's value put in the histogram instead; no hit is
   * recorded for it meanwhile. Calls in flight keep how they began.
   */
  setAggregate(vaddr: bigint, on: boolean, value?: InlineValue | undefined): void;
  /**
   * Whether the hits of the hook at `vaddr` are read bare: kind, thread, time and stack
   * pointer, no registers, stack words or memory (what a recording of calls needs: reading
   * the rest cost more than the hit).
   */
  setBare(vaddr: bigint, on: boolean): void;
  /** What the hooks aggregated in the process, by hooked address (only those with any). */
  aggregates(): Map<bigint, InlineAggregate>;
  /**
   * Stopped thread `tid` is about to unwind its stack (a C++ throw): its swapped return
   * addresses are put back (an unwinder cannot read the hook's), and those calls give no
   * return hit.
   */
  restoreReturns(tid: number): void;
  /**
   * The swapped return addresses of stopped thread `tid`, as they are to be put back in a
   * copy of its stack (a forked child's): where each is, and the real address; only those
   * whose place still holds the hook's (not those of calls a longjmp left, whose place the
   * stack may use for something else now).
   */
  returnsOf(tid: number): { vaddr: bigint; returnAddress: bigint }[];
  /** Thread `tid` has ended: what the hooks kept for it goes. */
  threadEnded(tid: number): void;
  /** Calls whose return could not be tracked since the last call (see the engine). */
  takeUntracked(): number;
  /** Put the function's bytes back (its trampoline stays until release()). */
  remove(vaddr: bigint): void;
  /**
   * Hand the hits recorded and not read yet to `visit`, oldest first: those recorded before
   * the call, up to one a thread is still writing. True when it read every one of those.
   */
  drain(visit: (hit: InlineHit) => void): boolean;
  /** Hits each hooked address could not record since the last call (its ring was full). */
  takeLost(): Map<bigint, number>;
  /** Whether it asks to see every thread stopped once (see stopped()). */
  wantsStop(): boolean;
  /**
   * Every thread is stopped (their ids): what it wanted to learn from them. False when it
   * could not look yet (a command held before its loader ran): ask again soon.
   */
  stopped(threads: readonly number[]): boolean;
  /**
   * Every thread stopped (`tid` one of them): remove every hook, bring every thread out of
   * the trampolines (hits they were recording are recorded), put back every swapped return
   * address, unmap what was mapped.
   */
  release(tid: number): void;
  /** The bytes a forked child must get back: its copy of each hook. */
  originals(): { vaddr: bigint; bytes: Uint8Array }[];
  /** The process exec'd: its memory (and every hook) is gone. */
  forget(): void;
}

/** Makes the inline hooks of one traced process. */
export type InlineHooksFactory = (tracee: Tracee) => InlineHooks;
