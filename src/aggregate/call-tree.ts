import type { CallRecord } from './call-records.js';

/**
 * How a call ended: `return` (its return was seen), `unwind` (a longjmp, an exception or a
 * cancellation took it away: the engine said so, or a return of a caller below it on its
 * thread's stack came first), `open` (its thread ended in it, e.g. a callee called exit(), or
 * the recording ended first), `unreported` (its function's returns come through the kernel's
 * return trampoline, which the kernel did not set for it: see KERNEL_TRAMPOLINE_DEPTH; it
 * ended, at the latest, when a call below it returned).
 */
export type CallEnd = 'return' | 'unwind' | 'open' | 'unreported';

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
  readonly roots: CallNode[];
  /** Time of the thread's first and last record. */
  readonly firstNs: bigint;
  readonly lastNs: bigint;
  /** Returns with no entry on the thread's stack (the call began before the recording). */
  readonly unmatched: number;
}

interface Building {
  readonly tid: number;
  readonly pid: number;
  readonly roots: CallNode[];
  readonly stack: CallNode[];
  /** Per call of `stack`: whether a return is to come (false: the kernel left it out). */
  readonly awaited: boolean[];
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
 * as `unreported`.
 */
export class CallTreeBuilder {
  readonly #threads = new Map<number, Building>();

  push(record: CallRecord): void {
    let thread = this.#threads.get(record.tid);
    if (thread === undefined) {
      thread = {
        tid: record.tid,
        pid: record.pid,
        roots: [],
        stack: [],
        awaited: [],
        firstNs: record.timeNs,
        lastNs: record.timeNs,
        unmatched: 0,
      };
      this.#threads.set(record.tid, thread);
    }
    if (record.timeNs > thread.lastNs) thread.lastNs = record.timeNs;
    const { stack } = thread;
    if (record.kind === 'entry' || record.kind === 'lone-entry') {
      const node: CallNode = {
        fn: record.fn,
        startNs: record.timeNs,
        endNs: record.timeNs,
        end: 'open',
        children: [],
      };
      (stack.at(-1)?.children ?? thread.roots).push(node);
      stack.push(node);
      thread.awaited.push(record.kind === 'entry');
      return;
    }
    const { awaited } = thread;
    let i = stack.length - 1;
    while (i >= 0 && (stack[i]!.fn !== record.fn || !awaited[i])) i--;
    if (i < 0) {
      thread.unmatched++;
      return;
    }
    while (stack.length > i + 1) this.#pop(thread, record.timeNs, 'unwind');
    this.#pop(thread, record.timeNs, record.kind === 'unwind' ? 'unwind' : 'return');
  }

  /** Close the thread's innermost open call (`unreported` when no return was to come). */
  #pop(thread: Building, endNs: bigint, end: CallEnd): void {
    const node = thread.stack.pop()!;
    close(node, endNs, thread.awaited.pop()! ? end : 'unreported');
  }

  /** Each thread's calls, by tid; calls still open are closed as `open`. */
  finish(): ThreadCalls[] {
    const out: ThreadCalls[] = [];
    for (const thread of [...this.#threads.values()].sort((a, b) => a.tid - b.tid)) {
      while (thread.stack.length > 0) this.#pop(thread, thread.lastNs, 'open');
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

function close(node: CallNode, endNs: bigint, end: CallEnd): void {
  node.endNs = endNs;
  node.end = end;
}
