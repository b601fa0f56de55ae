/**
 * Reports of outstanding allocations (`leaks`): text for reading and a JSON line per report;
 * the stack formats (folded, flame graph, pprof) weigh stacks by bytes through the count
 * sinks (see leakStackCounts()).
 */
import type { StackFrame } from '../events/index.js';
import { formatDuration } from './histogram.js';
import { frameText, type StackCount } from './stacks.js';

/** One call path's blocks not freed yet. */
export interface LeakStackRow {
  readonly pid: number;
  /** Innermost first (the allocator's own frame first). */
  readonly frames: readonly StackFrame[];
  /** Blocks outstanding, and their bytes. */
  readonly count: bigint;
  readonly bytes: bigint;
  /** How long the oldest of them has been outstanding. */
  readonly oldestAgeMs: number;
}

/** What a leak report counts besides the stacks. */
export interface LeakCounterValues {
  readonly allocations: bigint;
  readonly frees: bigint;
  readonly unknownFrees: bigint;
  readonly failed: bigint;
  readonly dropped: bigint;
  readonly stacksFull: bigint;
  /** Blocks an exec released (the image it replaced had not freed them): not shown. */
  readonly releasedByExec: bigint;
}

export interface LeakReport {
  readonly final: boolean;
  /** Since the run began. */
  readonly elapsedMs: number;
  /** Every block shown (with `olderThanMs`, the old enough ones), over every stack. */
  readonly outstanding: { readonly count: bigint; readonly bytes: bigint; readonly stacks: number };
  /** The largest stacks by bytes, largest first. */
  readonly stacks: readonly LeakStackRow[];
  readonly counters: LeakCounterValues;
  readonly olderThanMs?: number | undefined;
  /**
   * Per stack that was among the top ones at some report: its outstanding bytes at each
   * report so far ([elapsedMs, bytes]).
   */
  readonly growth?: readonly LeakGrowth[] | undefined;
}

export interface LeakGrowth {
  readonly pid: number;
  /** The stack, folded (root first, `;` between frames). */
  readonly folded: string;
  readonly series: readonly (readonly [number, bigint])[];
}

/** A frame as a report shows it: `fn+0x1a (app) at app.c:42`. */
export function leakFrameText(frame: StackFrame): string {
  const text = frameText(frame);
  return frame.file === undefined || frame.line === undefined
    ? text
    : `${text} at ${frame.file}:${frame.line}`;
}

function grouped(value: bigint): string {
  return value.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

function plural(n: bigint, one: string, many: string): string {
  return `${grouped(n)} ${n === 1n ? one : many}`;
}

/** The report as text: a line of totals, then each stack with its frames. */
export function renderLeaksText(report: LeakReport): string {
  const { outstanding } = report;
  const older =
    report.olderThanMs === undefined
      ? ''
      : `, older than ${formatDuration(report.olderThanMs * 1e6)}`;
  const head = `${report.final ? 'Outstanding at the end' : 'Outstanding'}: ${plural(outstanding.bytes, 'byte', 'bytes')} in ${plural(outstanding.count, 'block', 'blocks')} from ${outstanding.stacks} stack${outstanding.stacks === 1 ? '' : 's'}${older}`;
  const shown = report.stacks.length < outstanding.stacks ? ` (top ${report.stacks.length})` : '';
  const stacks = report.stacks.map((row) => {
    const frames = row.frames.length === 0 ? ['[no user stack]'] : row.frames.map(leakFrameText);
    return `${plural(row.bytes, 'byte', 'bytes')} in ${plural(row.count, 'block', 'blocks')}, oldest ${formatDuration(Math.round(row.oldestAgeMs * 1e6))} (pid ${row.pid}):\n${frames.map((f) => `    ${f}`).join('\n')}`;
  });
  return `${[head + shown, ...stacks].join('\n\n')}\n`;
}

function jsonFrame(frame: StackFrame) {
  return {
    function: frame.function,
    symbolOffset: frame.symbolOffset === undefined ? undefined : Number(frame.symbolOffset),
    object: frame.object,
    file: frame.file,
    line: frame.line,
    inlined: frame.inlined,
  };
}

/** The report as one JSON document (a line): numbers as JSON numbers. */
export function renderLeaksJson(report: LeakReport): string {
  const n = (v: bigint) => (v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString());
  return JSON.stringify({
    final: report.final,
    elapsedMs: Math.round(report.elapsedMs),
    olderThanMs: report.olderThanMs,
    outstanding: {
      count: n(report.outstanding.count),
      bytes: n(report.outstanding.bytes),
      stacks: report.outstanding.stacks,
    },
    stacks: report.stacks.map((row) => ({
      pid: row.pid,
      count: n(row.count),
      bytes: n(row.bytes),
      oldestAgeMs: Math.round(row.oldestAgeMs),
      frames: row.frames.map(jsonFrame),
    })),
    counters: Object.fromEntries(Object.entries(report.counters).map(([k, v]) => [k, n(v)])),
    growth: report.growth?.map((g) => ({
      pid: g.pid,
      stack: g.folded,
      series: g.series.map(([t, bytes]) => [Math.round(t), n(bytes)]),
    })),
  });
}

/** The stacks as rows the stack formats weigh by bytes (folded, flame graph, pprof). */
export function leakStackCounts(report: LeakReport): StackCount[] {
  return report.stacks.map((row) => ({
    probe: 'leaks',
    stack: { pid: row.pid, frames: row.frames },
    count: row.count,
    bytes: row.bytes,
  }));
}
