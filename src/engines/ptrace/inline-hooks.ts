import type { Registers } from './registers.js';
import type { Tracee } from './tracee.js';

/** A hit an inline hook recorded in the process, read back by the tracer. */
export interface InlineHit {
  /** The hooked function's address. */
  readonly vaddr: bigint;
  readonly tid: number;
  /** CLOCK_MONOTONIC when the thread ran the hook, in ns. */
  readonly timeNs: bigint;
  /** The thread's registers at the function's entry (%rip is the entry). */
  readonly regs: Registers;
  /** The first words of its stack from %rsp (the return address, stack-passed arguments). */
  readonly stack: Uint8Array;
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
   * why it cannot be (the int3 path then serves the site).
   */
  place(
    vaddr: bigint,
    jumpTargets: readonly bigint[] | undefined,
    tid: number,
    pcs: readonly bigint[],
  ): string | undefined;
  /** Whether `vaddr` is hooked. */
  has(vaddr: bigint): boolean;
  /** Put the function's bytes back (its trampoline stays until release()). */
  remove(vaddr: bigint): void;
  /** Hand every hit recorded and not read yet to `visit`, oldest first. */
  drain(visit: (hit: InlineHit) => void): void;
  /** Hits each hooked address could not record since the last call (its ring was full). */
  takeLost(): Map<bigint, number>;
  /** Whether it asks to see every thread stopped once (see stopped()). */
  wantsStop(): boolean;
  /** Every thread is stopped (their ids): what it wanted to learn from them. */
  stopped(threads: readonly number[]): void;
  /**
   * Every thread stopped (`tid` one of them): remove every hook, bring every thread out of
   * the trampolines (hits they were recording are recorded), unmap what was mapped.
   */
  release(tid: number): void;
  /** The bytes a forked child must get back: its copy of each hook. */
  originals(): { vaddr: bigint; bytes: Uint8Array }[];
  /** The process exec'd: its memory (and every hook) is gone. */
  forget(): void;
}

/** Makes the inline hooks of one traced process. */
export type InlineHooksFactory = (tracee: Tracee) => InlineHooks;
