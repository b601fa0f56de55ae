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
    const enter = (node: CallNode) => {
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
    };
    const leave = (node: CallNode) => active.set(node.fn, active.get(node.fn)! - 1);
    for (const root of thread.roots) depthFirst(root, enter, leave);
  }
  return [...rows.values()];
}

/**
 * Visit a tree depth first, `enter` before a node's children and `leave` after them, on a
 * stack of its own: a recursion tens of thousands of calls deep is as deep a tree, deeper
 * than a recursive walk can go on the JavaScript stack.
 */
export function depthFirst<T extends { readonly children: readonly T[] }>(
  root: T,
  enter: (node: T, depth: number) => unknown,
  leave?: (node: T, depth: number) => void,
): void {
  // Each entry: a node, and the index of its next child to visit (-1: not entered yet).
  const nodes: T[] = [root];
  const next: number[] = [-1];
  while (nodes.length > 0) {
    const top = nodes.length - 1;
    const node = nodes[top]!;
    let at = next[top]!;
    if (at === -1) {
      // false from enter: its children are not visited.
      if (enter(node, top) === false) at = node.children.length;
      else at = 0;
    }
    if (at < node.children.length) {
      next[top] = at + 1;
      nodes.push(node.children[at]!);
      next.push(-1);
      continue;
    }
    leave?.(node, top);
    nodes.pop();
    next.pop();
  }
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
  const add = (into: GraphNode[], top: CallNode) => {
    // The path's node each call is merged into, by the depth of the call under `top`.
    const path: GraphNode[][] = [into];
    depthFirst(top, (node, depth) => {
      const siblings = path[depth]!;
      let merged = siblings.find((g) => g.fn === node.fn);
      if (merged === undefined) {
        merged = { fn: node.fn, calls: 0, totalNs: 0n, selfNs: 0n, children: [] };
        siblings.push(merged);
      }
      const duration = durationOf(node);
      merged.calls++;
      merged.totalNs += duration;
      let children = 0n;
      for (const child of node.children) children += durationOf(child);
      merged.selfNs += duration - children;
      path[depth + 1] = merged.children;
    });
  };
  const from = options.from;
  const find = (root: CallNode) =>
    depthFirst(root, (node) => {
      if (node.fn !== from) return true;
      add(roots, node);
      return false;
    });
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
  for (const thread of threads) {
    if (options.tids !== undefined && !options.tids.has(thread.tid)) continue;
    for (const root of thread.roots) {
      // On a stack of its own (see depthFirst()): each call with the depth it is shown at,
      // and whether it is inside a call of `only`; its children pushed in reverse.
      const stack: { node: CallNode; depth: number; inside: boolean }[] = [
        { node: root, depth: 0, inside: false },
      ];
      while (stack.length > 0) {
        const { node, depth, inside } = stack.pop()!;
        if (options.hide?.has(node.fn)) continue;
        const duration = durationOf(node);
        if (options.minDurationNs !== undefined && duration < options.minDurationNs) continue;
        const shown = inside || options.only === undefined || options.only.has(node.fn);
        if (shown) {
          if (depth >= maxDepth) continue;
          yield {
            tid: thread.tid,
            depth,
            fn: node.fn,
            startNs: node.startNs,
            durationNs: duration,
            end: node.end,
          };
        }
        for (let i = node.children.length - 1; i >= 0; i--) {
          stack.push({ node: node.children[i]!, depth: shown ? depth + 1 : depth, inside: shown });
        }
      }
    }
  }
}
