import type { CallEnd, CallNode, CallObserver, ObservedThread, ThreadCalls } from './call-tree.js';

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
  /**
   * The calls minNs, maxNs and sumNs are of: those that ended (returned, unwound, or whose
   * return the kernel left out), or every call when none did (a main still running).
   */
  timed: number;
  /** The timed calls' own durations added up (nested calls of a recursion each count). */
  sumNs: bigint;
  minNs: bigint;
  maxNs: bigint;
  /** Calls an unwind ended, calls still open when their thread ended. */
  unwound: number;
  open: number;
  /** Calls whose return the kernel did not report (see CallEnd `unreported`). */
  unreported: number;
  /** Calls of a function whose returns are not probed (see CallEnd `untimed`): not timed. */
  untimed: number;
}

function durationOf(node: CallNode): bigint {
  return node.endNs - node.startNs;
}

/**
 * Tells `observers` of every call of `threads` (each thread in turn, its calls in the order
 * they began and ended), as a CallTreeBuilder tells them while it reads the records.
 */
export function walkCalls(
  threads: readonly ThreadCalls[],
  observers: readonly CallObserver[],
): void {
  for (const thread of threads) {
    const enter = (node: CallNode) => {
      for (const observer of observers) observer.enter(thread, node.fn, node.startNs);
    };
    const leave = (node: CallNode) => {
      const duration = durationOf(node);
      let callees = 0n;
      for (const child of node.children) callees += durationOf(child);
      for (const observer of observers) {
        observer.leave(thread, node.fn, duration, callees, node.end);
      }
    };
    for (const root of thread.roots) depthFirst(root, enter, leave);
  }
}

/**
 * Per function (per thread with `perThread`), over every call it is told of: a recursion's
 * time counts once in `totalNs` (its outermost call), each call in `sumNs`.
 */
export class FunctionStatsBuilder implements CallObserver {
  readonly #perThread: boolean;
  /** Rows by thread (0 for all, unless per thread), then function. */
  readonly #rows = new Map<number, Map<number, FunctionStats>>();
  /** Per thread: how many calls of each function are open (its recursion's depth). */
  readonly #open = new Map<number, Map<number, number>>();

  constructor(options: { readonly perThread?: boolean | undefined } = {}) {
    this.#perThread = options.perThread === true;
  }

  enter(thread: ObservedThread, fn: number): void {
    let open = this.#open.get(thread.tid);
    if (open === undefined) {
      open = new Map();
      this.#open.set(thread.tid, open);
    }
    open.set(fn, (open.get(fn) ?? 0) + 1);
  }

  leave(thread: ObservedThread, fn: number, duration: bigint, callees: bigint, end: CallEnd): void {
    const open = this.#open.get(thread.tid)!;
    const outer = open.get(fn)! - 1;
    open.set(fn, outer);
    const key = this.#perThread ? thread.tid : 0;
    let rows = this.#rows.get(key);
    if (rows === undefined) {
      rows = new Map();
      this.#rows.set(key, rows);
    }
    let row = rows.get(fn);
    if (row === undefined) {
      row = {
        fn,
        tid: this.#perThread ? thread.tid : undefined,
        calls: 0,
        totalNs: 0n,
        selfNs: 0n,
        timed: 0,
        sumNs: 0n,
        minNs: duration,
        maxNs: duration,
        unwound: 0,
        open: 0,
        unreported: 0,
        untimed: 0,
      };
      rows.set(fn, row);
    }
    row.calls++;
    if (end === 'untimed') {
      row.untimed++;
      return;
    }
    // A call still open when its thread ended is timed only until then (as little as 0 ns
    // for one entered at the end): a function's times are of its calls that ended, once one
    // has (every call is timed until then).
    const endedBefore = row.calls - 1 - row.open;
    if (end !== 'open') {
      if (endedBefore === 0) row.timed = 0;
      timeCall(row, duration);
    } else if (endedBefore === 0) {
      timeCall(row, duration);
    }
    if (end === 'unwind') row.unwound++;
    else if (end === 'open') row.open++;
    else if (end === 'unreported') row.unreported++;
    if (outer === 0) row.totalNs += duration;
    row.selfNs += duration - callees;
  }

  /** The rows, by thread then function id. */
  rows(): FunctionStats[] {
    return [...this.#rows]
      .sort(([a], [b]) => a - b)
      .flatMap(([, rows]) => [...rows.values()].sort((a, b) => a.fn - b.fn));
  }
}

/** `duration` added to the calls `row`'s times are of (the first of them sets them). */
function timeCall(row: FunctionStats, duration: bigint): void {
  if (row.timed === 0) {
    row.sumNs = 0n;
    row.minNs = duration;
    row.maxNs = duration;
  }
  row.timed++;
  row.sumNs += duration;
  if (duration < row.minNs) row.minNs = duration;
  if (duration > row.maxNs) row.maxNs = duration;
}

/** Per function (per thread with `perThread`), over every call of every thread. */
export function functionStats(
  threads: readonly ThreadCalls[],
  options: { perThread?: boolean | undefined } = {},
): FunctionStats[] {
  const stats = new FunctionStatsBuilder(options);
  walkCalls(threads, [stats]);
  return stats.rows();
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
  /** Of the calls, those of a function whose returns are not probed (not timed). */
  untimed: number;
  totalNs: bigint;
  selfNs: bigint;
  readonly children: GraphNode[];
}

/** Children past which a graph node finds its child by a map, not by looking through them. */
const MAPPED_CHILDREN = 8;

/** Where `fn` is among `siblings` (made when missing), `index` kept for long lists. */
function childOf(
  siblings: GraphNode[],
  fn: number,
  index: Map<GraphNode[], Map<number, GraphNode>>,
): GraphNode {
  let found: GraphNode | undefined;
  const byFn = index.get(siblings);
  if (byFn !== undefined) found = byFn.get(fn);
  else found = siblings.find((g) => g.fn === fn);
  if (found !== undefined) return found;
  const made: GraphNode = { fn, calls: 0, untimed: 0, totalNs: 0n, selfNs: 0n, children: [] };
  siblings.push(made);
  if (byFn !== undefined) byFn.set(fn, made);
  else if (siblings.length > MAPPED_CHILDREN) {
    index.set(siblings, new Map(siblings.map((g) => [g.fn, g])));
  }
  return made;
}

/**
 * The calls it is told of merged by path (the same chain of callers is one node), the
 * outermost of them as roots: per thread, merged when asked. (CallGraphs tells one the calls
 * of a function and what they made.)
 */
class CallGraphBuilder implements CallObserver {
  /** Per thread: its process, its graph, and the node of each of its open calls. */
  readonly #threads = new Map<
    number,
    { readonly pid: number; readonly roots: GraphNode[]; readonly path: GraphNode[] }
  >();
  /** The children lists that are long, by function. */
  readonly #index = new Map<GraphNode[], Map<number, GraphNode>>();

  enter(thread: ObservedThread, fn: number): void {
    let t = this.#threads.get(thread.tid);
    if (t === undefined) {
      t = { pid: thread.pid, roots: [], path: [] };
      this.#threads.set(thread.tid, t);
    }
    const siblings = t.path.at(-1)?.children ?? t.roots;
    t.path.push(childOf(siblings, fn, this.#index));
  }

  leave(
    thread: ObservedThread,
    _fn: number,
    duration: bigint,
    callees: bigint,
    end: CallEnd,
  ): void {
    const node = this.#threads.get(thread.tid)!.path.pop()!;
    node.calls++;
    if (end === 'untimed') node.untimed++;
    node.totalNs += duration;
    node.selfNs += duration - callees;
  }

  /** The threads' graphs (of process `pid`'s threads only, when given) merged, by tid. */
  graph(pid?: number): GraphNode[] {
    const threads = [...this.#threads]
      .filter(([, t]) => pid === undefined || t.pid === pid)
      .sort(([a], [b]) => a - b);
    if (threads.length === 1) return threads[0]![1].roots;
    const roots: GraphNode[] = [];
    const index = new Map<GraphNode[], Map<number, GraphNode>>();
    for (const [, thread] of threads) {
      // On a stack of its own (see depthFirst()): each list merged into the one it joins.
      const lists: [GraphNode[], GraphNode[]][] = [[thread.roots, roots]];
      while (lists.length > 0) {
        const [from, into] = lists.pop()!;
        for (const node of from) {
          const merged = childOf(into, node.fn, index);
          merged.calls += node.calls;
          merged.untimed += node.untimed;
          merged.totalNs += node.totalNs;
          merged.selfNs += node.selfNs;
          if (node.children.length > 0) lists.push([node.children, merged.children]);
        }
      }
    }
    return roots;
  }
}

/**
 * The merged call tree from the outermost calls, or one from every call of each function of
 * `from` (a graph each, in its order; a call of it inside another is part of that one's path),
 * each graph told only of the calls inside a call of its function: a glob of hundreds of
 * functions costs each call the graphs it is inside of.
 */
export class CallGraphs implements CallObserver {
  readonly #graphs: CallGraphBuilder[];
  /** With `from`: each function's graph. */
  readonly #byFn: Map<number, CallGraphBuilder> | undefined;
  /** Per thread: its depth, and the graphs it is inside of with the depth each began at. */
  readonly #threads = new Map<
    number,
    { depth: number; inside: { graph: CallGraphBuilder; at: number }[] }
  >();

  constructor(options: { readonly from?: Iterable<number> | undefined } = {}) {
    if (options.from === undefined) {
      this.#graphs = [new CallGraphBuilder()];
      return;
    }
    this.#byFn = new Map([...options.from].map((fn) => [fn, new CallGraphBuilder()]));
    this.#graphs = [...this.#byFn.values()];
  }

  enter(thread: ObservedThread, fn: number): void {
    if (this.#byFn === undefined) {
      this.#graphs[0]!.enter(thread, fn);
      return;
    }
    let t = this.#threads.get(thread.tid);
    if (t === undefined) {
      t = { depth: 0, inside: [] };
      this.#threads.set(thread.tid, t);
    }
    t.depth++;
    for (const { graph } of t.inside) graph.enter(thread, fn);
    const graph = this.#byFn.get(fn);
    if (graph !== undefined && !t.inside.some((i) => i.graph === graph)) {
      t.inside.push({ graph, at: t.depth });
      graph.enter(thread, fn);
    }
  }

  leave(thread: ObservedThread, fn: number, duration: bigint, callees: bigint, end: CallEnd): void {
    if (this.#byFn === undefined) {
      this.#graphs[0]!.leave(thread, fn, duration, callees, end);
      return;
    }
    const t = this.#threads.get(thread.tid)!;
    for (const { graph } of t.inside) graph.leave(thread, fn, duration, callees, end);
    while (t.inside.length > 0 && t.inside[t.inside.length - 1]!.at === t.depth) t.inside.pop();
    t.depth--;
  }

  /** The graphs (of process `pid`'s threads only, when given), one after another. */
  graph(pid?: number): GraphNode[] {
    return this.#graphs.flatMap((graph) => graph.graph(pid));
  }
}

/**
 * The call tree of every thread merged by path (the same chain of callers is one node), from
 * the outermost calls, or from every call of `from` (merged under one node).
 */
export function callGraph(
  threads: readonly ThreadCalls[],
  options: { from?: number | undefined } = {},
): GraphNode[] {
  const graphs = new CallGraphs({ from: options.from === undefined ? undefined : [options.from] });
  walkCalls(threads, [graphs]);
  return graphs.graph();
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
  /**
   * Hide calls shorter than this (and what they called); a call whose returns are not probed
   * (untimed) is kept.
   */
  readonly minDurationNs?: bigint | undefined;
  /** Only calls of these functions and what they called (depth counts from them). */
  readonly only?: ReadonlySet<number> | undefined;
  /** Hide calls of these functions and what they called. */
  readonly hide?: ReadonlySet<number> | undefined;
  /** Only these threads. */
  readonly tids?: ReadonlySet<number> | undefined;
}

/** How a call ended, as a number (CallTimeline's column), and back. */
const END_CODES: readonly CallEnd[] = ['return', 'unwind', 'open', 'unreported', 'untimed'];
const END_CODE = Object.fromEntries(END_CODES.map((end, code) => [end, code])) as Readonly<
  Record<CallEnd, number>
>;

/** A thread's calls in the order they began, a column per field. */
class TimelineThread {
  readonly tid: number;
  count = 0;
  fn = new Int32Array(256);
  depth = new Int32Array(256);
  startNs = new BigInt64Array(256);
  durationNs = new BigInt64Array(256);
  end = new Uint8Array(256);
  /** The index of each open call, outermost first. */
  readonly open: number[] = [];

  constructor(tid: number) {
    this.tid = tid;
  }

  /** Room for one more call. */
  grow(): void {
    if (this.count < this.fn.length) return;
    const size = this.fn.length * 2;
    const fn = new Int32Array(size);
    const depth = new Int32Array(size);
    const startNs = new BigInt64Array(size);
    const durationNs = new BigInt64Array(size);
    const end = new Uint8Array(size);
    fn.set(this.fn);
    depth.set(this.depth);
    startNs.set(this.startNs);
    durationNs.set(this.durationNs);
    end.set(this.end);
    this.fn = fn;
    this.depth = depth;
    this.startNs = startNs;
    this.durationNs = durationNs;
    this.end = end;
  }
}

/**
 * Each thread's calls in the order they began (a depth-first walk of its tree: a replay's
 * order), each with its depth, duration and end, in columns: about 25 bytes a call, a tenth
 * of a kept tree's, for a replay of a large recording.
 */
export class CallTimeline implements CallObserver {
  readonly #threads = new Map<number, TimelineThread>();

  enter(thread: ObservedThread, fn: number, startNs: bigint): void {
    let t = this.#threads.get(thread.tid);
    if (t === undefined) {
      t = new TimelineThread(thread.tid);
      this.#threads.set(thread.tid, t);
    }
    t.grow();
    const i = t.count++;
    t.fn[i] = fn;
    t.depth[i] = t.open.length;
    t.startNs[i] = startNs;
    t.open.push(i);
  }

  leave(
    thread: ObservedThread,
    _fn: number,
    duration: bigint,
    _callees: bigint,
    end: CallEnd,
  ): void {
    const t = this.#threads.get(thread.tid)!;
    const i = t.open.pop()!;
    t.durationNs[i] = duration;
    t.end[i] = END_CODE[end];
  }

  /** The threads' calls, a thread after another by tid, as uftrace's replay filters choose them. */
  *calls(options: ReplayOptions = {}): Generator<ReplayCall> {
    const maxDepth = options.depth ?? Number.POSITIVE_INFINITY;
    const threads = [...this.#threads.values()].sort((a, b) => a.tid - b.tid);
    for (const t of threads) {
      if (options.tids !== undefined && !options.tids.has(t.tid)) continue;
      // Per depth in the tree, the depth its callees are shown at and whether they are
      // inside a call of `only`; calls deeper than `skipBelow` are under one left out.
      const shownAt: number[] = [];
      const inside: boolean[] = [];
      let skipBelow = Number.POSITIVE_INFINITY;
      for (let i = 0; i < t.count; i++) {
        const level = t.depth[i]!;
        if (level > skipBelow) continue;
        skipBelow = Number.POSITIVE_INFINITY;
        const fn = t.fn[i]!;
        const duration = t.durationNs[i]!;
        const depth = level === 0 ? 0 : shownAt[level - 1]!;
        const within = level === 0 ? false : inside[level - 1]!;
        // A call whose returns are not probed has no time: not known to be short, it is kept.
        if (
          options.hide?.has(fn) === true ||
          (options.minDurationNs !== undefined &&
            duration < options.minDurationNs &&
            t.end[i] !== END_CODE.untimed)
        ) {
          skipBelow = level;
          continue;
        }
        const shown = within || options.only === undefined || options.only.has(fn);
        if (shown) {
          if (depth >= maxDepth) {
            skipBelow = level;
            continue;
          }
          yield {
            tid: t.tid,
            depth,
            fn,
            startNs: t.startNs[i]!,
            durationNs: duration,
            end: END_CODES[t.end[i]!]!,
          };
        }
        shownAt[level] = shown ? depth + 1 : depth;
        inside[level] = shown;
      }
    }
  }
}

/**
 * Each thread's calls in time order, depth first, as uftrace's replay filters choose them:
 * from a timeline, or from threads whose trees were kept.
 */
export function replayCalls(
  calls: readonly ThreadCalls[] | CallTimeline,
  options: ReplayOptions = {},
): Generator<ReplayCall> {
  let timeline: CallTimeline;
  if (calls instanceof CallTimeline) timeline = calls;
  else {
    timeline = new CallTimeline();
    walkCalls(calls, [timeline]);
  }
  return timeline.calls(options);
}
