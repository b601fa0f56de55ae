import type { CallRecord, CallRecordKind } from './call-records.js';

/**
 * How a call ended: `return` (its return was seen), `unwind` (a longjmp, an exception or a
 * cancellation took it away: the engine said so, or a return of a caller below it on its
 * thread's stack came first), `open` (its thread ended in it, e.g. a callee called exit(), or
 * the recording ended first), `unreported` (its function's returns come through the kernel's
 * return trampoline, which the kernel did not set for it: see KERNEL_TRAMPOLINE_DEPTH; it
 * ended, at the latest, when a call below it returned), `untimed` (its function's returns are
 * not probed: a `call` record, a call of no duration and no callees, its callees its caller's).
 */
export type CallEnd = 'return' | 'unwind' | 'open' | 'unreported' | 'untimed';

/**
 * The kernel sets a return trampoline (a uretprobe's) for at most this many calls at once on
 * a thread, and none for a call nested deeper (MAX_URETPROBE_DEPTH, kernel/events/uprobes.c):
 * the returns of such calls are never reported.
 */
export const KERNEL_TRAMPOLINE_DEPTH = 64;

/** One call of a function on one thread, with the calls it made. */
export interface CallNode {
  readonly fn: number;
  readonly startNs: bigint;
  endNs: bigint;
  end: CallEnd;
  readonly children: CallNode[];
}

/** A thread's calls: its outermost calls in time order, each with its callees. */
export interface ThreadCalls {
  readonly tid: number;
  readonly pid: number;
  /** Empty when the tree was not kept (a CallTreeBuilder with `keep: false`). */
  readonly roots: CallNode[];
  /** Time of the thread's first and last record. */
  readonly firstNs: bigint;
  readonly lastNs: bigint;
  /** Returns with no entry on the thread's stack (the call began before the recording). */
  readonly unmatched: number;
}

/** A thread as a CallObserver is told of it. */
export interface ObservedThread {
  readonly tid: number;
  readonly pid: number;
}

/**
 * What is told of each thread's calls as they begin and end, in the order they do: a report
 * or a graph made as a recording is read, without its tree kept (see CallTreeBuilder), or by
 * walking a tree (see walkCalls()).
 */
export interface CallObserver {
  /** A call of `fn` began on `thread` at `startNs`, inside the thread's open calls. */
  enter(thread: ObservedThread, fn: number, startNs: bigint): void;
  /**
   * The innermost open call of `thread` (a call of `fn`) ended: how long it took, how long
   * the calls it made took (added up), and how it ended.
   */
  leave(
    thread: ObservedThread,
    fn: number,
    durationNs: bigint,
    calleesNs: bigint,
    end: CallEnd,
  ): void;
}

interface Building {
  readonly tid: number;
  readonly pid: number;
  readonly roots: CallNode[];
  /** The open calls, outermost first: their functions and start times. */
  readonly fns: number[];
  readonly starts: bigint[];
  /** Per open call: whether a return is to come (false: the kernel left it out). */
  readonly awaited: boolean[];
  /** Per open call: how long the calls it made and that ended took, added up. */
  readonly callees: bigint[];
  /** Per open call, when the tree is kept: its node. */
  readonly nodes: CallNode[];
  readonly firstNs: bigint;
  lastNs: bigint;
  unmatched: number;
}

/**
 * Builds each thread's call tree from entry and return records, in the order a thread made
 * them. A return closes the innermost open call of its function on that thread (recursion
 * nests), and the calls above it, which never returned through their own return, as
 * unwound (a longjmp or an exception left them). A return the engine marked as an unwind
 * closes its call as unwound. Calls still open when a thread's records end are closed as
 * `open` at the thread's last record (exit() in a callee, a thread killed).
 *
 * A `lone-entry` (a call the kernel set no return trampoline for) gets no return: a return is
 * not paired with it (in a recursion it is one of the calls further out), and it is closed
 * as `unreported`. A `call` (of a function whose returns are not probed) is ended as it
 * begins, `untimed`: no call is put inside it, nor is one above it taken for unwound.
 *
 * `observers` are told of each call as it begins and ends. With `keep: false` the tree is
 * not kept (each thread's `roots` stay empty): memory is then each thread's open calls, not
 * every call, for a report or a graph of a recording of any size.
 */
export class CallTreeBuilder {
  readonly #threads = new Map<number, Building>();
  readonly #keep: boolean;
  readonly #observers: readonly CallObserver[];

  constructor(
    options: { readonly keep?: boolean; readonly observers?: readonly CallObserver[] } = {},
  ) {
    this.#keep = options.keep ?? true;
    this.#observers = options.observers ?? [];
  }

  push(record: CallRecord): void {
    this.pushFields(record.kind, record.tid, record.pid, record.fn, record.timeNs);
  }

  /** push() of a record given by its fields (no object: the reading of a recording). */
  pushFields(kind: CallRecordKind, tid: number, pid: number, fn: number, timeNs: bigint): void {
    let thread = this.#threads.get(tid);
    if (thread === undefined) {
      thread = {
        tid,
        pid,
        roots: [],
        fns: [],
        starts: [],
        awaited: [],
        callees: [],
        nodes: [],
        firstNs: timeNs,
        lastNs: timeNs,
        unmatched: 0,
      };
      this.#threads.set(tid, thread);
    }
    if (timeNs > thread.lastNs) thread.lastNs = timeNs;
    const { fns, awaited } = thread;
    if (kind === 'call') {
      if (this.#keep) {
        const node: CallNode = { fn, startNs: timeNs, endNs: timeNs, end: 'untimed', children: [] };
        (thread.nodes.at(-1)?.children ?? thread.roots).push(node);
      }
      for (const observer of this.#observers) {
        observer.enter(thread, fn, timeNs);
        observer.leave(thread, fn, 0n, 0n, 'untimed');
      }
      return;
    }
    if (kind === 'entry' || kind === 'lone-entry') {
      if (this.#keep) {
        const node: CallNode = { fn, startNs: timeNs, endNs: timeNs, end: 'open', children: [] };
        (thread.nodes.at(-1)?.children ?? thread.roots).push(node);
        thread.nodes.push(node);
      }
      fns.push(fn);
      thread.starts.push(timeNs);
      awaited.push(kind === 'entry');
      thread.callees.push(0n);
      for (const observer of this.#observers) observer.enter(thread, fn, timeNs);
      return;
    }
    let i = fns.length - 1;
    while (i >= 0 && (fns[i] !== fn || !awaited[i])) i--;
    if (i < 0) {
      thread.unmatched++;
      return;
    }
    while (fns.length > i + 1) this.#pop(thread, timeNs, 'unwind');
    this.#pop(thread, timeNs, kind === 'unwind' ? 'unwind' : 'return');
  }

  /** Close the thread's innermost open call (`unreported` when no return was to come). */
  #pop(thread: Building, endNs: bigint, how: CallEnd): void {
    const fn = thread.fns.pop()!;
    const duration = endNs - thread.starts.pop()!;
    const callees = thread.callees.pop()!;
    const end = thread.awaited.pop()! ? how : 'unreported';
    if (this.#keep) {
      const node = thread.nodes.pop()!;
      node.endNs = endNs;
      node.end = end;
    }
    const top = thread.callees.length - 1;
    if (top >= 0) thread.callees[top]! += duration;
    for (const observer of this.#observers) observer.leave(thread, fn, duration, callees, end);
  }

  /** Each thread's calls, by tid; calls still open are closed as `open`. */
  finish(): ThreadCalls[] {
    const out: ThreadCalls[] = [];
    for (const thread of [...this.#threads.values()].sort((a, b) => a.tid - b.tid)) {
      while (thread.fns.length > 0) this.#pop(thread, thread.lastNs, 'open');
      out.push({
        tid: thread.tid,
        pid: thread.pid,
        roots: thread.roots,
        firstNs: thread.firstNs,
        lastNs: thread.lastNs,
        unmatched: thread.unmatched,
      });
    }
    return out;
  }
}
