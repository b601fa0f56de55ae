import {
  type CallEnd,
  depthFirst,
  type FunctionStats,
  type GraphNode,
  type ReplayCall,
  type ThreadCalls,
} from '../aggregate/index.js';
import type { ProbeEvent, StackFrame } from '../events/index.js';
import { formatDuration } from './histogram.js';
import { renderTable } from './json.js';
import type { StackCount } from './stacks.js';

/** A function id's name, as the recording's index gives it. */
export type FunctionName = (fn: number) => string;
/**
 * Which of a function's probes the kernel single-steps ('entry', 'return', 'entry and
 * return'; see RecordedFunction.stepped), or undefined.
 */
export type FunctionStepped = (fn: number) => string | undefined;

/** The note of a report on the functions whose probes the kernel single-steps. */
const STEPPED_NOTE =
  "kernel-stepped: the kernel runs that probe's instruction out of line after a trap, where it cannot emulate it (a first instruction such as cmp or mov, or a ret probed in place): each call costs the trap more, and the times include it (record --return-probes trampoline probes no ret)";

const UNTIMED_NOTE =
  "returns not probed: that function's returns cannot be found safely (upscope resolve r:FUNCTION says why), so its calls are counted, not timed, and what it calls is shown under its caller (record --return-probes trampoline times it, if no throw or longjmp passes through it)";

const UNREPORTED_NOTE =
  'returns left out by the kernel: it sets no return trampoline for calls nested more than 64 deep on a thread, so their returns are not seen; such a call is timed to the return of a call below it (record --return-probes sites catches every return: a single-step each)';

export type ReportSort = 'total' | 'self' | 'calls' | 'avg' | 'max' | 'name';
export const REPORT_SORTS: readonly ReportSort[] = ['total', 'self', 'calls', 'avg', 'max', 'name'];

function avgNs(row: FunctionStats): bigint {
  return row.timed === 0 ? 0n : row.sumNs / BigInt(row.timed);
}

/** Rows sorted by `sort`, largest first (names alphabetically). */
export function sortFunctionStats(
  rows: readonly FunctionStats[],
  sort: ReportSort,
  name: FunctionName,
): FunctionStats[] {
  const key = (r: FunctionStats): bigint =>
    sort === 'self'
      ? r.selfNs
      : sort === 'calls'
        ? BigInt(r.calls)
        : sort === 'avg'
          ? avgNs(r)
          : sort === 'max'
            ? r.maxNs
            : r.totalNs;
  return [...rows].sort((a, b) => {
    if (sort === 'name') return name(a.fn).localeCompare(name(b.fn));
    const d = key(b) - key(a);
    return d > 0n ? 1 : d < 0n ? -1 : name(a.fn).localeCompare(name(b.fn));
  });
}

/** How a call ended, when not by its return: said beside it. */
function endNote(end: CallEnd): string {
  return end === 'unwind'
    ? ' [unwound]'
    : end === 'open'
      ? ' [no return: thread ended]'
      : end === 'unreported'
        ? ' [return left out by the kernel]'
        : end === 'untimed'
          ? ' [returns not probed]'
          : '';
}

/** `upscope report`: one line per function (per thread and function with tids). */
export function renderFunctionReportText(
  rows: readonly FunctionStats[],
  name: FunctionName,
  stepped: FunctionStepped = () => undefined,
  tidText: (tid: number) => string = String,
): string {
  const perThread = rows.some((r) => r.tid !== undefined);
  const header = [
    ...(perThread ? ['TID'] : []),
    'TOTAL',
    'SELF',
    'CALLS',
    'MIN',
    'AVG',
    'MAX',
    'FUNCTION',
  ];
  const body = rows.map((r) => {
    const steps = stepped(r.fn);
    const notes = [
      r.unwound > 0 ? `${r.unwound} unwound` : '',
      r.open > 0 ? `${r.open} not returned` : '',
      r.unreported > 0
        ? `${r.unreported} return${r.unreported === 1 ? '' : 's'} left out by the kernel`
        : '',
      r.untimed > 0 ? 'returns not probed' : '',
      steps === undefined ? '' : `kernel-stepped ${steps}`,
    ].filter((n) => n !== '');
    // A function whose returns are not probed has no times, not times of 0.
    const time = (ns: bigint) => (r.untimed === r.calls ? '-' : formatDuration(ns));
    return [
      ...(perThread ? [tidText(r.tid!)] : []),
      time(r.totalNs),
      time(r.selfNs),
      String(r.calls),
      time(r.minNs),
      time(avgNs(r)),
      time(r.maxNs),
      `${name(r.fn)}${notes.length === 0 ? '' : ` (${notes.join(', ')})`}`,
    ];
  });
  const notes = [
    ...(rows.some((r) => stepped(r.fn) !== undefined) ? [STEPPED_NOTE] : []),
    ...(rows.some((r) => r.unreported > 0) ? [UNREPORTED_NOTE] : []),
    ...(rows.some((r) => r.untimed > 0) ? [UNTIMED_NOTE] : []),
  ];
  const note = notes.map((n) => `\n${n}\n`).join('');
  return `${renderTable(header, body)}\n${note}`;
}

/** `upscope report --json`: one object per row, times in ns. */
export function renderFunctionReportJson(
  rows: readonly FunctionStats[],
  name: FunctionName,
  stepped: FunctionStepped = () => undefined,
): string {
  return `${JSON.stringify(functionReportRows(rows, name, stepped), null, 1)}\n`;
}

/** The rows of `upscope report --json` (times in ns). */
export function functionReportRows(
  rows: readonly FunctionStats[],
  name: FunctionName,
  stepped: FunctionStepped = () => undefined,
) {
  return rows.map((r) => ({
    function: name(r.fn),
    ...(r.tid === undefined ? {} : { tid: r.tid }),
    calls: r.calls,
    totalNs: Number(r.totalNs),
    selfNs: Number(r.selfNs),
    minNs: Number(r.minNs),
    avgNs: Number(avgNs(r)),
    maxNs: Number(r.maxNs),
    unwound: r.unwound,
    notReturned: r.open,
    unreported: r.unreported,
    untimed: r.untimed,
    ...(stepped(r.fn) === undefined ? {} : { kernelStepped: stepped(r.fn) }),
  }));
}

/**
 * Levels of a call tree drawn (indented) in text and JSON: a recursion thousands of calls
 * deep would take as many columns on each of its lines (gigabytes in all). A deeper call is
 * drawn at this level, with its depth said (`[depth 5000]`).
 */
export const MAX_DRAWN_DEPTH = 64;

function depthLabel(depth: number): string {
  return depth > MAX_DRAWN_DEPTH ? `[depth ${depth}] ` : '';
}

/** `upscope graph`: the merged call tree, one line per path, to `depth` levels. */
export function renderCallGraphText(
  roots: readonly GraphNode[],
  name: FunctionName,
  options: { depth?: number | undefined } = {},
): string {
  const maxDepth = options.depth ?? Number.POSITIVE_INFINITY;
  const lines: string[] = ['  TOTAL        SELF         CALLS  FUNCTION'];
  // Depth first on a stack of its own (a recursion can be thousands of calls deep), each
  // path with whether it is the last of its siblings; prefixes[d]: the lines' prefix at d.
  const stack = roots.map((node) => ({ node, depth: 0, last: true })).reverse();
  const prefixes: string[] = [''];
  while (stack.length > 0) {
    const { node, depth, last } = stack.pop()!;
    const level = Math.min(depth, MAX_DRAWN_DEPTH);
    const branch = depth === 0 ? '' : `${prefixes[level]}${last ? '└─ ' : '├─ '}`;
    // A function whose returns are not probed has no times, not times of 0.
    const untimed = node.untimed === node.calls;
    const time = (ns: bigint) => (untimed ? '-' : formatDuration(ns)).padEnd(11);
    lines.push(
      `  ${time(node.totalNs)}  ${time(node.selfNs)}  ${String(node.calls).padStart(5)}  ${branch}${depthLabel(depth)}${name(node.fn)}${untimed ? endNote('untimed') : ''}`,
    );
    if (depth + 1 >= maxDepth) continue;
    if (depth < MAX_DRAWN_DEPTH) {
      prefixes[depth + 1] = depth === 0 ? '' : `${prefixes[depth]}${last ? '   ' : '│  '}`;
    }
    const children = node.children;
    for (let i = children.length - 1; i >= 0; i--) {
      stack.push({ node: children[i]!, depth: depth + 1, last: i === children.length - 1 });
    }
  }
  return `${lines.join('\n')}\n`;
}

/** `upscope graph --json`: the merged call tree, times in ns. */
export function renderCallGraphJson(
  roots: readonly GraphNode[],
  name: FunctionName,
  options: { depth?: number | undefined } = {},
): string {
  const maxDepth = options.depth ?? Number.POSITIVE_INFINITY;
  // Written out rather than by JSON.stringify, which recurses: a recursion thousands of
  // calls deep nests as deep. As JSON.stringify(..., 1) writes it, indented to
  // MAX_DRAWN_DEPTH levels.
  const parts: string[] = [];
  const indent = (level: number) => ' '.repeat(Math.min(level, 2 * MAX_DRAWN_DEPTH + 1));
  /** Each path to write (its node, depth, and whether it is the first of its siblings), or
   * the end of a node's children. */
  const stack: (
    | { readonly node: GraphNode; readonly depth: number; readonly first: boolean }
    | { readonly close: number }
  )[] = roots.map((node, i) => ({ node, depth: 0, first: i === 0 })).reverse();
  parts.push('[');
  while (stack.length > 0) {
    const item = stack.pop()!;
    if ('close' in item) {
      const level = 2 * item.close + 1;
      parts.push(`\n${indent(level + 1)}]\n${indent(level)}}`);
      continue;
    }
    const { node, depth, first } = item;
    const level = 2 * depth + 1;
    const key = indent(level + 1);
    parts.push(
      `${first ? '\n' : ',\n'}${indent(level)}{\n${key}"function": ${JSON.stringify(name(node.fn))},\n${key}"calls": ${node.calls},\n${key}"untimed": ${node.untimed},\n${key}"totalNs": ${Number(node.totalNs)},\n${key}"selfNs": ${Number(node.selfNs)},\n${key}"children": [`,
    );
    const children = depth + 1 >= maxDepth ? [] : node.children;
    if (children.length === 0) {
      parts.push(`]\n${indent(level)}}`);
      continue;
    }
    stack.push({ close: depth });
    for (let i = children.length - 1; i >= 0; i--) {
      stack.push({ node: children[i]!, depth: depth + 1, first: i === 0 });
    }
  }
  parts.push(roots.length === 0 ? ']' : '\n]');
  return `${parts.join('')}\n`;
}

/**
 * `upscope replay`: each call on a line, in time order per thread, indented by depth, with
 * its duration and, when not ended by its return, how it ended.
 */
export function renderReplayText(
  calls: Iterable<ReplayCall>,
  name: FunctionName,
  write: (text: string) => void,
  options: {
    startNs: bigint;
    /** A thread's heading, `thread 4707` by default (a recording's goroutines are named). */
    thread?: ((tid: number) => string) | undefined;
  },
): void {
  let tid: number | undefined;
  let buffer = '';
  for (const call of calls) {
    if (call.tid !== tid) {
      tid = call.tid;
      buffer += `# ${options.thread?.(tid) ?? `thread ${tid}`}\n`;
    }
    const at = formatDuration(call.startNs - options.startNs);
    const indent = '  '.repeat(Math.min(call.depth, MAX_DRAWN_DEPTH));
    buffer += `${at.padStart(12)}  ${(call.end === 'untimed' ? '-' : formatDuration(call.durationNs)).padStart(12)}  ${indent}${depthLabel(call.depth)}${name(call.fn)}${endNote(call.end)}\n`;
    if (buffer.length > 1 << 16) {
      write(buffer);
      buffer = '';
    }
  }
  if (buffer !== '') write(buffer);
}

/** `upscope replay --json`: one JSON line per call. */
export function renderReplayJson(
  calls: Iterable<ReplayCall>,
  name: FunctionName,
  write: (text: string) => void,
): void {
  let buffer = '';
  for (const c of calls) {
    buffer += `${JSON.stringify({
      tid: c.tid,
      depth: c.depth,
      function: name(c.fn),
      startNs: Number(c.startNs),
      durationNs: Number(c.durationNs),
      end: c.end,
    })}\n`;
    if (buffer.length > 1 << 16) {
      write(buffer);
      buffer = '';
    }
  }
  if (buffer !== '') write(buffer);
}

/** The earliest record of any thread (time zero of a replay). */
export function firstCallNs(threads: readonly ThreadCalls[]): bigint {
  let first: bigint | undefined;
  for (const t of threads) if (first === undefined || t.firstNs < first) first = t.firstNs;
  return first ?? 0n;
}

/**
 * Calls (a replay's, in time order per thread, depth first) as events that any sink over
 * events (a Chrome trace, a speedscope trace) makes complete calls of: each call is its return
 * event, at its end, carrying its duration (`latencyNs`), so no entry has to wait for its
 * return however deep the calls nest. A call an unwind ended, or that never returned, says so
 * in its `ended` field. A call of a function whose returns are not probed is its entry alone
 * (give the sink no `returning` probe: it is an instant).
 */
export function* callEvents(
  calls: Iterable<ReplayCall>,
  name: FunctionName,
  thread: (tid: number) => { readonly pid: number; readonly comm: string },
): Generator<ProbeEvent> {
  let tid: number | undefined;
  let of = { pid: 0, comm: '' };
  for (const call of calls) {
    if (call.tid !== tid) {
      tid = call.tid;
      of = thread(tid);
    }
    const ended = call.end === 'return' ? undefined : endNote(call.end).slice(2, -1);
    // A call of no duration is its entry alone, which a sink that knows no return comes
    // (`returning` empty) makes an instant.
    const untimed = call.end === 'untimed';
    // Every field written out (a spread of the thread's would make each event slowly).
    yield {
      spec: '',
      pid: of.pid,
      tid,
      cpu: 0,
      comm: of.comm,
      probe: name(call.fn),
      kind: untimed ? 'entry' : 'return',
      timestampNs: untimed ? call.startNs : call.startNs + call.durationNs,
      fields: ended === undefined ? {} : { ended },
      latencyNs: untimed ? undefined : call.durationNs,
      exit: call.end === 'return' || untimed ? undefined : 'unwind',
    };
  }
}

/**
 * Levels of the stacks made of a call tree without `depth`: each path is a stack of every
 * call above it, so a recursion n deep makes n stacks of up to n frames (a thousand levels
 * are half a million frames); a deeper call's time is its caller's at the last level.
 */
export const MAX_STACK_DEPTH = 1024;

export interface CallStacksOptions {
  /** A function id's frame: its name and object. */
  readonly frame: (fn: number) => StackFrame;
  /** The process the calls were made in. */
  readonly pid: number;
  /** What the rows are of (a speedscope profile's name, a pprof label). */
  readonly probe: string;
  /** Only this many levels: a deeper call's time is its caller's at the last level. */
  readonly depth?: number | undefined;
}

/**
 * The merged call tree as stacks for the stack formats (folded, flame graph, pprof,
 * speedscope): a row per call path, weighing the time spent in its last function itself
 * (`timeNs`, so that a frame's width adds up to its inclusive time) with its calls (`count`).
 */
export function callStacks(roots: readonly GraphNode[], options: CallStacksOptions): StackCount[] {
  const maxDepth = options.depth ?? MAX_STACK_DEPTH;
  const rows: StackCount[] = [];
  // Each path's stack, innermost first, is its caller's with its own frame before it.
  const stackAt: StackFrame[][] = [[]];
  for (const root of roots) {
    depthFirst(root, (node, depth) => {
      const frames = [options.frame(node.fn), ...stackAt[depth]!];
      const last = depth + 1 >= maxDepth;
      rows.push({
        probe: options.probe,
        stack: { pid: options.pid, frames },
        count: BigInt(node.calls),
        timeNs: last ? node.totalNs : node.selfNs,
      });
      stackAt[depth + 1] = frames;
      return !last;
    });
  }
  return rows;
}
