// What upscope graph and replay write of a recording in the stack and trace formats, shared by
// those commands and by the recording view of `upscope ui` (its export buttons).
import type { CallGraphs, ReplayCall } from '../aggregate/index.js';
import { type Recording, threadLabel } from '../api/index.js';
import { ProbeError } from '../errors/index.js';
import { closest, didYouMean } from '../internal/index.js';
import {
  callEvents,
  callStacks,
  firstCallNs,
  renderStacks,
  type StackFormat,
  traceSink,
  type Write,
} from '../output/index.js';
import { globToRegExp, isGlob } from '../spec/index.js';

/** A recording's function ids as names. */
export function namer(recording: Recording): (fn: number) => string {
  return (fn) => recording.index.functions[fn]?.name ?? `#${fn}`;
}

/** Which of a recorded function's probes the kernel single-steps, if any. */
export function steppedOf(recording: Recording): (fn: number) => string | undefined {
  return (fn) => recording.index.functions[fn]?.stepped;
}

/** The ids of the functions `func` (a name or glob) names; throws when none. */
export function functionIds(
  recording: Pick<Recording, 'dir' | 'index'>,
  func: string,
): Set<number> {
  const names = recording.index.functions.map((f) => f.name);
  const pattern = isGlob(func) ? globToRegExp(func) : undefined;
  const ids = new Set<number>();
  names.forEach((n, i) => {
    if (pattern === undefined ? n === func : pattern.test(n)) ids.add(i);
  });
  if (ids.size === 0) {
    const hint = didYouMean(closest(func, names));
    throw new ProbeError(
      'ERR_NO_MATCH',
      `Cannot find function "${func}" in the recording "${recording.dir}": none of its ${names.length} functions has that name`,
      { hints: hint === undefined ? ['List them with: upscope report DIR'] : [hint] },
    );
  }
  return ids;
}

/** What the recording is of: `Calls of "./app 5"`, `Calls of process 1234`. */
export function recordingTitle(recording: Recording, func?: string): string {
  const { index } = recording;
  const what = index.command === undefined ? `process ${index.pid}` : `"${index.command}"`;
  return `Calls of ${what}${func === undefined ? '' : ` from ${func}`}`;
}

/**
 * `upscope graph --format folded|flamegraph|pprof|speedscope`: each process's merged call tree
 * as stacks weighed by time (a frame's width is its inclusive time).
 */
export function renderGraphStacks(
  recording: Recording,
  format: StackFormat,
  options: {
    /** Made as the recording was read. */
    graphs: CallGraphs;
    func?: string | undefined;
    depth?: number | undefined;
  },
): string | Uint8Array {
  const { index } = recording;
  const { graphs } = options;
  const name = namer(recording);
  const title = recordingTitle(recording, options.func);
  const pids = new Set(recording.threads.map((t) => t.pid));
  const rows = [...pids].flatMap((pid) =>
    callStacks(graphs.graph(pid), {
      pid,
      probe: title,
      depth: options.depth,
      frame: (fn) => ({ function: name(fn), object: index.functions[fn]?.object }),
    }),
  );
  const first = firstCallNs(recording.threads);
  let last = first;
  for (const t of recording.threads) if (t.lastNs > last) last = t.lastNs;
  const started = Date.parse(index.startedAt);
  return renderStacks(format, rows, {
    weight: 'time',
    title,
    subtitle: `time in each call path (ns), ${index.engine} engine, recorded ${index.startedAt}`,
    timeNanos: Number.isNaN(started) ? undefined : BigInt(started) * 1_000_000n,
    durationNanos: last - first,
  });
}

/**
 * `upscope replay --format chrome|speedscope`: a track (chrome) or profile (speedscope) per
 * thread, each call of `calls` (replayCalls() of the recording's timeline) a nested slice.
 */
export function writeReplayTrace(
  recording: Recording,
  format: 'chrome' | 'speedscope',
  write: Write,
  calls: Iterable<ReplayCall>,
): void {
  // A goroutine's track is named for it (its calls may have run on several threads).
  const comms = new Map(
    recording.index.threads.map((t) => [
      t.tid,
      t.goroutine === undefined ? t.comm : threadLabel(t, t.tid),
    ]),
  );
  const pids = new Map(recording.threads.map((t) => [t.tid, t.pid]));
  const sink = traceSink(format, write, {
    startNs: firstCallNs(recording.threads),
    metadata: {
      ...(recording.index.command === undefined ? {} : { command: recording.index.command }),
      recording: recording.dir,
      engine: recording.index.engine,
    },
    exactEnds: true,
    // Every call is its return event but those of functions whose returns are not probed:
    // their entries, instants.
    returning: new Set(),
  });
  sink.begin();
  const thread = (tid: number) => ({ pid: pids.get(tid) ?? tid, comm: comms.get(tid) ?? '' });
  for (const event of callEvents(calls, namer(recording), thread)) sink.value(event);
  sink.lost(recording.index.lost);
  sink.end();
}
