import type { CallEnd, CallNode, ThreadCalls } from './call-tree.js';

/** A function's calls, on one thread or all: counts and times in ns. */
export interface FunctionStats {
  readonly fn: number;
  /** The thread, when per thread. */
  readonly tid: number | undefined;
  calls: number;
  /** Time inside the function, a recursive call counted once (its outermost call). */
  totalNs: bigint;
  /** Time inside the function but not in the calls it made. */
  selfNs: bigint;
  /** Every call's own duration added up (nested calls of a recursion each count). */
  sumNs: bigint;
  minNs: bigint;
  maxNs: bigint;
  /** Calls an unwind ended, calls still open when their thread ended. */
  unwound: number;
  open: number;
  /** Calls whose return the kernel did not report (see CallEnd `unreported`). */
  unreported: number;
}

function durationOf(node: CallNode): bigint {
  return node.endNs - node.startNs;
}

/** Per function (per thread with `perThread`), over every call of every thread. */
export function functionStats(
  threads: readonly ThreadCalls[],
  options: { perThread?: boolean | undefined } = {},
): FunctionStats[] {
  const rows = new Map<string, FunctionStats>();
  for (const thread of threads) {
    const active = new Map<number, number>();
    const visit = (node: CallNode) => {
      const key = options.perThread ? `${thread.tid}:${node.fn}` : `${node.fn}`;
      const duration = durationOf(node);
      let row = rows.get(key);
      if (row === undefined) {
        row = {
          fn: node.fn,
          tid: options.perThread ? thread.tid : undefined,
          calls: 0,
          totalNs: 0n,
          selfNs: 0n,
          sumNs: 0n,
          minNs: duration,
          maxNs: duration,
          unwound: 0,
          open: 0,
          unreported: 0,
        };
        rows.set(key, row);
      }
      row.calls++;
      row.sumNs += duration;
      if (duration < row.minNs) row.minNs = duration;
      if (duration > row.maxNs) row.maxNs = duration;
      if (node.end === 'unwind') row.unwound++;
      if (node.end === 'open') row.open++;
      if (node.end === 'unreported') row.unreported++;
      const depth = active.get(node.fn) ?? 0;
      if (depth === 0) row.totalNs += duration;
      let children = 0n;
      for (const child of node.children) children += durationOf(child);
      row.selfNs += duration - children;
      active.set(node.fn, depth + 1);
      for (const child of node.children) visit(child);
      active.set(node.fn, depth);
    };
    for (const root of thread.roots) visit(root);
  }
  return [...rows.values()];
}

/** A path of the merged call tree: a function reached by one chain of callers. */
export interface GraphNode {
  readonly fn: number;
  calls: number;
  totalNs: bigint;
  selfNs: bigint;
  readonly children: GraphNode[];
}

/**
 * The call tree of every thread merged by path (the same chain of callers is one node), from
 * the outermost calls, or from every call of `from` (merged under one node).
 */
export function callGraph(
  threads: readonly ThreadCalls[],
  options: { from?: number | undefined } = {},
): GraphNode[] {
  const roots: GraphNode[] = [];
  const add = (into: GraphNode[], node: CallNode) => {
    let merged = into.find((g) => g.fn === node.fn);
    if (merged === undefined) {
      merged = { fn: node.fn, calls: 0, totalNs: 0n, selfNs: 0n, children: [] };
      into.push(merged);
    }
    const duration = durationOf(node);
    merged.calls++;
    merged.totalNs += duration;
    let children = 0n;
    for (const child of node.children) children += durationOf(child);
    merged.selfNs += duration - children;
    for (const child of node.children) add(merged.children, child);
  };
  const from = options.from;
  const find = (node: CallNode) => {
    if (node.fn === from) add(roots, node);
    else for (const child of node.children) find(child);
  };
  for (const thread of threads) {
    for (const root of thread.roots) {
      if (from === undefined) add(roots, root);
      else find(root);
    }
  }
  return roots;
}

/** One call in a replay: its thread, depth, function, start and duration, and how it ended. */
export interface ReplayCall {
  readonly tid: number;
  readonly depth: number;
  readonly fn: number;
  readonly startNs: bigint;
  readonly durationNs: bigint;
  readonly end: CallEnd;
}

export interface ReplayOptions {
  /** Only calls at most this deep (1: the outermost). */
  readonly depth?: number | undefined;
  /** Hide calls shorter than this (and what they called). */
  readonly minDurationNs?: bigint | undefined;
  /** Only calls of these functions and what they called (depth counts from them). */
  readonly only?: ReadonlySet<number> | undefined;
  /** Hide calls of these functions and what they called. */
  readonly hide?: ReadonlySet<number> | undefined;
  /** Only these threads. */
  readonly tids?: ReadonlySet<number> | undefined;
}

/** Each thread's calls in time order, depth first, as uftrace's replay filters choose them. */
export function* replayCalls(
  threads: readonly ThreadCalls[],
  options: ReplayOptions = {},
): Generator<ReplayCall> {
  const maxDepth = options.depth ?? Number.POSITIVE_INFINITY;
  function* walk(
    tid: number,
    node: CallNode,
    depth: number,
    inside: boolean,
  ): Generator<ReplayCall> {
    if (options.hide?.has(node.fn)) return;
    const duration = durationOf(node);
    if (options.minDurationNs !== undefined && duration < options.minDurationNs) return;
    const shown = inside || options.only === undefined || options.only.has(node.fn);
    if (shown) {
      if (depth >= maxDepth) return;
      yield { tid, depth, fn: node.fn, startNs: node.startNs, durationNs: duration, end: node.end };
    }
    for (const child of node.children) yield* walk(tid, child, shown ? depth + 1 : depth, shown);
  }
  for (const thread of threads) {
    if (options.tids !== undefined && !options.tids.has(thread.tid)) continue;
    for (const root of thread.roots) yield* walk(thread.tid, root, 0, false);
  }
}
