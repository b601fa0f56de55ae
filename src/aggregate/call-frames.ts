/**
 * Calls not returned from yet, per owner (a thread, or a goroutine), each at its depth in
 * the owner's stack, so that a return is paired with the call it ends and calls that an
 * unwind (a C++ exception, a Go panic, pthread_cancel) or a longjmp left without returning
 * are closed: a call at a depth a later call or return has reached again has ended. Pure.
 *
 * Depth grows with the stack: for a thread, the distance of the stack pointer at the call's
 * entry below 2^64 (stacks grow down); for a goroutine, from the top of its stack, which a
 * copy of the stack to a larger one keeps.
 */
export class PendingCalls<T> {
  // Made at the first call: a recording has one of these per function, most never called.
  #ownersMap: Map<string, { depth: bigint; value: T }[]> | undefined;
  readonly #limit: number;

  get #owners(): Map<string, { depth: bigint; value: T }[]> {
    this.#ownersMap ??= new Map();
    return this.#ownersMap;
  }

  /** At most `limit` calls are kept per owner (deeper ones are not paired). */
  constructor(limit = 1024) {
    this.#limit = limit;
  }

  /** How many calls are pending, in all. */
  get size(): number {
    let size = 0;
    for (const stack of this.#ownersMap?.values() ?? []) size += stack.length;
    return size;
  }

  /**
   * A call begins at `depth`: it is kept (unless its owner already has `limit`), and the
   * calls at that depth or deeper, which can no longer be running, are returned (unwound).
   */
  enter(owner: string, depth: bigint, value: T): T[] {
    let stack = this.#owners.get(owner);
    if (stack === undefined) {
      stack = [];
      this.#owners.set(owner, stack);
    }
    const unwound = popWhile(stack, (frame) => frame.depth >= depth);
    if (stack.length < this.#limit) stack.push({ depth, value });
    return unwound;
  }

  /**
   * Whether an entry at `depth` goes on with the owner's call pending there (its function
   * jumped back to its entry: see ReturnPlan.loopsAtEntry), rather than beginning one: the
   * calls deeper than it, which an unwind left, are taken out and returned; undefined when no
   * call is pending at `depth` (enter() it then).
   */
  goesOn(owner: string, depth: bigint): T[] | undefined {
    const stack = this.#ownersMap?.get(owner);
    if (stack === undefined) return undefined;
    let at = stack.length - 1;
    while (at >= 0 && stack[at]!.depth > depth) at--;
    if (at < 0 || stack[at]!.depth !== depth) return undefined;
    return popWhile(stack, (frame) => frame.depth > depth);
  }

  /**
   * A call returns at `depth`: the call it ends, when one was kept there, and the deeper
   * ones, which an unwind left.
   */
  leave(owner: string, depth: bigint): { call: T | undefined; unwound: T[] } {
    const stack = this.#owners.get(owner);
    if (stack === undefined) return { call: undefined, unwound: [] };
    const unwound = popWhile(stack, (frame) => frame.depth > depth);
    const top = stack.at(-1);
    const call = top !== undefined && top.depth === depth ? stack.pop()!.value : undefined;
    if (stack.length === 0) this.#owners.delete(owner);
    return { call, unwound };
  }

  /** Remove and return the pending calls of the owners `gone` says have ended. */
  drop(gone: (owner: string) => boolean): T[] {
    const dropped: T[] = [];
    for (const [owner, stack] of this.#ownersMap ?? []) {
      if (!gone(owner)) continue;
      dropped.push(...stack.reverse().map((frame) => frame.value));
      this.#owners.delete(owner);
    }
    return dropped;
  }
}

/** Pop from the top while `dead` holds; innermost first. */
function popWhile<T>(
  stack: { depth: bigint; value: T }[],
  dead: (frame: { depth: bigint; value: T }) => boolean,
): T[] {
  const popped: T[] = [];
  while (stack.length > 0 && dead(stack.at(-1)!)) popped.push(stack.pop()!.value);
  return popped;
}

/** The depth of a thread's call whose entry had the stack pointer at `sp`. */
export function threadDepth(sp: bigint): bigint {
  return (1n << 64n) - sp;
}

/** The depth of a goroutine's call: how far below the top of its stack (`stackTop`) it is. */
export function goroutineDepth(stackTop: bigint, sp: bigint): bigint {
  return stackTop - sp;
}
