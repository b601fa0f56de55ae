import type { CallRecord } from './call-records.js';

/**
 * How a call ended: `return` (its return was seen), `unwind` (a longjmp, an exception or a
 * cancellation took it away: the engine said so, or a return of a caller below it on its
 * thread's stack came first), `open` (its thread ended in it, e.g. a callee called exit(), or
 * the recording ended first).
 */
export type CallEnd = 'return' | 'unwind' | 'open';

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
        firstNs: record.timeNs,
        lastNs: record.timeNs,
        unmatched: 0,
      };
      this.#threads.set(record.tid, thread);
    }
    if (record.timeNs > thread.lastNs) thread.lastNs = record.timeNs;
    const { stack } = thread;
    if (record.kind === 'entry') {
      const node: CallNode = {
        fn: record.fn,
        startNs: record.timeNs,
        endNs: record.timeNs,
        end: 'open',
        children: [],
      };
      (stack.at(-1)?.children ?? thread.roots).push(node);
      stack.push(node);
      return;
    }
    let i = stack.length - 1;
    while (i >= 0 && stack[i]!.fn !== record.fn) i--;
    if (i < 0) {
      thread.unmatched++;
      return;
    }
    while (stack.length > i + 1) close(stack.pop()!, record.timeNs, 'unwind');
    close(stack.pop()!, record.timeNs, record.kind === 'unwind' ? 'unwind' : 'return');
  }

  /** Each thread's calls, by tid; calls still open are closed as `open`. */
  finish(): ThreadCalls[] {
    const out: ThreadCalls[] = [];
    for (const thread of [...this.#threads.values()].sort((a, b) => a.tid - b.tid)) {
      while (thread.stack.length > 0) close(thread.stack.pop()!, thread.lastNs, 'open');
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
