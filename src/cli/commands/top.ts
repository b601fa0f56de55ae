import type { Command } from '@commander-js/extra-typings';
import {
  type Aggregate,
  bpfAllowed,
  countHits,
  latencyOf,
  notLoadedNotes,
  type ProbeCount,
  type ProbeHistogram,
  parseSpec,
  percentile,
} from '../../api/index.js';
import { ProbeError, renderWarning } from '../../errors/index.js';
import { formatDuration } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import {
  childrenOption,
  debugDirOption,
  parsePid,
  positive,
  returnProbesOption,
  strictOption,
} from '../options.js';
import { stepsNote } from '../stepped.js';
import { handlerNotes } from './aggregate.js';

/** One probe's line of the table. */
export interface TopRow {
  readonly probe: string;
  readonly count: bigint;
  /** Hits per second over the last second. */
  readonly rate: number;
  /** Nanoseconds, for the functions timed (undefined for other probes). */
  readonly p50?: bigint | undefined;
  readonly p90?: bigint | undefined;
  readonly p99?: bigint | undefined;
  readonly max?: bigint | undefined;
}

export const SORT_KEYS = ['count', 'rate', 'p50', 'p90', 'p99', 'max', 'probe'] as const;
export type SortKey = (typeof SORT_KEYS)[number];

function compare(a: TopRow, b: TopRow, key: SortKey): number {
  if (key === 'probe') return a.probe.localeCompare(b.probe);
  const x = key === 'rate' ? a.rate : Number(a[key] ?? -1n);
  const y = key === 'rate' ? b.rate : Number(b[key] ?? -1n);
  // Largest first; ties by name.
  return y - x || a.probe.localeCompare(b.probe);
}

/** The rows in the order asked: by `key` (largest first, names A to Z), or reversed. */
export function sortRows(rows: readonly TopRow[], key: SortKey, reverse: boolean): TopRow[] {
  const sorted = [...rows].sort((a, b) => compare(a, b, key));
  return reverse ? sorted.reverse() : sorted;
}

const HEADER = ['PROBE', 'COUNT', 'RATE/s', 'P50', 'P90', 'P99', 'MAX'];

/** The table: one line per probe, latency columns `-` for probes that are not timed. */
export function renderTop(rows: readonly TopRow[]): string {
  const time = (ns: bigint | undefined) => (ns === undefined ? '-' : formatDuration(ns));
  const cells = rows.map((r) => [
    r.probe,
    r.count.toString(),
    r.rate.toFixed(1),
    time(r.p50),
    time(r.p90),
    time(r.p99),
    time(r.max),
  ]);
  // Numbers right-aligned: pad each column but the first on the left.
  const widths = HEADER.map((h, i) => Math.max(h.length, ...cells.map((row) => row[i]!.length)));
  const line = (row: readonly string[]) =>
    row
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[0]!) : cell.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(HEADER), ...cells.map(line)].join('\n');
}

/** A spec latency can time: a function's entry (by name or pattern), not an offset or a line. */
function timeable(text: string): boolean {
  const { spec } = parseSpec(text);
  if (spec === undefined || spec.kind !== 'entry') return false;
  const location = spec.location;
  return location.type === 'glob' || (location.type === 'symbol' && location.offset === 0n);
}

interface TopOptions {
  pid: number;
  children?: true;
  unsafe?: true;
  strict?: true;
  debugDir?: string[];
  returnProbes?: 'auto' | 'sites' | 'trampoline';
  duration?: number;
  sort?: SortKey;
}

function parseSort(value: string): SortKey {
  if ((SORT_KEYS as readonly string[]).includes(value)) return value as SortKey;
  throw new ProbeError('ERR_USAGE', `Cannot sort by "${value}": give ${SORT_KEYS.join(', ')}`);
}

export function registerTop(program: Command, io: Io, result: CommandResult): void {
  program
    .command('top')
    .summary('a live table of the probes of a process: counts, rates, latency percentiles')
    .description(
      'Show a table of the probes of process PID, refreshed every second: calls, calls per ' +
        'second, and for functions (entries by name or pattern) p50, p90, p99 and max of ' +
        'their time from entry to return, measured in the kernel as latency does (the ' +
        'functions whose first instruction the kernel single-steps, that trap in their times, ' +
        "are said before the table; the calls a function's COUNT leaves out, not timed, are said " +
        'at the end: nested over 16 deep, ended by an unwind, or left out by the kernel); other ' +
        'probes (returns, offsets, lines, USDT) are counted as count does. On a terminal, ' +
        'keys: s sorts by the next column, r reverses the order, p (or space) pauses the ' +
        'display (the probes keep counting), q (or Ctrl-C) quits and removes the probes. When ' +
        'stdout is not a terminal, the table is printed every second, plain. Ends at q, ' +
        'Ctrl-C, --duration or the end of the process. Needs root, or CAP_BPF and CAP_PERFMON.',
    )
    .argument('<spec...>', "probe specs, e.g. './app:parse_*' 'libc:malloc'")
    .requiredOption(
      '-p, --pid <pid>',
      'the process (all its threads, and the children it forks from now on)',
      parsePid,
    )
    .option(...childrenOption)
    .option('--unsafe', 'allow raw addresses no symbol covers')
    .option(...strictOption)
    .option(...debugDirOption)
    .option(...returnProbesOption)
    .option('--duration <seconds>', 'stop after this many seconds', positive('--duration'))
    .option(
      '--sort <key>',
      `sort by ${SORT_KEYS.join(', ')} (default count; largest first)`,
      parseSort,
    )
    .action(async (specs, options) => {
      await top(specs, options, io);
      result.status = 0;
    });
}

async function top(specs: string[], options: TopOptions, io: Io): Promise<void> {
  if (!bpfAllowed()) {
    throw new ProbeError(
      'ERR_PRIVILEGES',
      'Cannot run top: it counts in the kernel (BPF), which this user may not use',
      {
        hints: [
          'Run as root, or with CAP_BPF and CAP_PERFMON',
          `Without them: upscope count --engine ptrace --interval 1 -p ${options.pid} SPEC...`,
        ],
      },
    );
  }
  const timed = specs.filter(timeable);
  const counted = specs.filter((s) => !timed.includes(s));
  const common = {
    engine: 'bpf' as const,
    pid: options.pid,
    children: options.children,
    unsafe: options.unsafe,
    strict: options.strict,
    debugDirs: options.debugDir,
    returnProbes: options.returnProbes,
    onNotice: (text: string) => io.err(`upscope: ${text}\n`),
  };
  const aggregates: (Aggregate<ProbeHistogram[]> | Aggregate<ProbeCount[]>)[] = [];
  let latency: Aggregate<ProbeHistogram[]> | undefined;
  let count: Aggregate<ProbeCount[]> | undefined;
  // Reading symbols and attaching can take a while (a large binary, many functions).
  io.err(`upscope: resolving and attaching ${specs.length} specs to process ${options.pid}\n`);
  try {
    if (timed.length > 0) {
      latency = await latencyOf(timed, { ...common, unit: 'us' });
      aggregates.push(latency);
    }
    if (counted.length > 0) {
      count = await countHits(counted, common);
      aggregates.push(count);
    }
  } catch (err) {
    for (const a of aggregates) a.close();
    throw err;
  }
  // What the plans warn of (IFUNC resolvers a pattern left out, overloads), and what the run
  // does not cover (children started before it, files not loaded yet), before the table.
  for (const warning of aggregates.flatMap((a) => a.warnings)) {
    io.err(`${renderWarning(warning)}\n`);
  }
  const notes = new Set(aggregates.flatMap((a) => a.notes));
  for (const a of aggregates)
    for (const note of notLoadedNotes(a.sites, options.pid)) notes.add(note);
  for (const note of notes) io.err(`upscope: ${note}\n`);
  // Its times are latency's, with the same caveat.
  const stepped = latency === undefined ? undefined : stepsNote(latency.sites, 'calls');
  if (stepped !== undefined) io.err(`upscope: ${stepped}\n`);
  const probes = aggregates.reduce((n, a) => n + a.sites.length, 0);
  const previous = new Map<string, { count: bigint; atMs: number }>();
  const read = (): TopRow[] => {
    const now = Date.now();
    const rate = (probe: string, n: bigint) => {
      const last = previous.get(probe);
      previous.set(probe, { count: n, atMs: now });
      return last === undefined || now <= last.atMs
        ? 0
        : (Number(n - last.count) * 1000) / (now - last.atMs);
    };
    const rows: TopRow[] = [];
    for (const { probe, histogram: h } of latency?.read() ?? []) {
      rows.push({
        probe,
        count: h.count,
        rate: rate(probe, h.count),
        p50: percentile(h, 0.5),
        p90: percentile(h, 0.9),
        p99: percentile(h, 0.99),
        max: h.max,
      });
    }
    for (const row of count?.read() ?? []) {
      const probe = row.exit === 'unwind' ? `${row.probe} (unwound)` : row.probe;
      rows.push({ probe, count: row.count, rate: rate(probe, row.count) });
    }
    return rows;
  };
  const terminal = process.stdout.isTTY === true && process.stdin.isTTY === true;
  const state = { sort: options.sort ?? ('count' as SortKey), reverse: false, paused: false };
  let stopping = false;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const stop = () => {
    if (stopping) return;
    stopping = true;
    finish();
  };
  for (const a of aggregates) void a.ended.then(stop);
  const header = () =>
    `upscope top: process ${options.pid}, ${probes} probe${probes === 1 ? '' : 's'} (bpf), ` +
    `sorted by ${state.sort}${state.reverse ? ' (reversed)' : ''}` +
    (terminal
      ? `${state.paused ? '  PAUSED' : ''}\n  s: sort  r: reverse  p: pause  q: quit\n`
      : `, ${new Date().toISOString()}\n`);
  let last: TopRow[] = [];
  const draw = () => {
    if (!state.paused) last = read();
    const table = renderTop(sortRows(last, state.sort, state.reverse));
    if (terminal) {
      // Home, then each line cleared to its end, then everything below.
      const text = `${header()}\n${table}`.replace(/\n/g, '\x1b[K\n');
      io.out(`\x1b[H${text}\x1b[K\n\x1b[J`);
    } else {
      io.out(`${header()}${table}\n\n`);
    }
  };
  const onKey = (data: Buffer) => {
    for (const key of data.toString('latin1')) {
      if (key === 'q' || key === 'Q' || key === '\x03' || key === '\x04') stop();
      else if (key === 's') {
        state.sort = SORT_KEYS[(SORT_KEYS.indexOf(state.sort) + 1) % SORT_KEYS.length]!;
      } else if (key === 'r') state.reverse = !state.reverse;
      else if (key === 'p' || key === ' ') state.paused = !state.paused;
      else continue;
      if (!stopping) draw();
    }
  };
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const s of signals) process.on(s, stop);
  const onExit = () => {
    for (const a of aggregates) a.close();
    if (terminal) process.stdout.write('\x1b[?25h\x1b[?1049l');
  };
  process.on('exit', onExit);
  if (terminal) {
    // The alternate screen, the cursor hidden, keys one at a time.
    io.out('\x1b[?1049h\x1b[?25l\x1b[2J');
    process.stdin.setRawMode(true);
    process.stdin.on('data', onKey);
    process.stdin.resume();
  } else {
    io.err(
      `upscope: showing ${probes} probes of process ${options.pid} every second. Ctrl-C to end.\n`,
    );
  }
  draw();
  const ticker = setInterval(draw, 1000);
  const timer =
    options.duration === undefined ? undefined : setTimeout(stop, options.duration * 1000);
  try {
    await finished;
  } finally {
    clearInterval(ticker);
    clearTimeout(timer);
    for (const a of aggregates) a.stop();
    await Promise.all(aggregates.map((a) => a.ended));
    const final = read();
    for (const a of aggregates) a.close();
    if (terminal) {
      process.stdin.off('data', onKey);
      process.stdin.setRawMode(false);
      process.stdin.pause();
      io.out('\x1b[?25h\x1b[?1049l');
    }
    process.off('exit', onExit);
    for (const s of signals) process.off(s, stop);
    // What was measured stays on the terminal (or ends the plain output).
    state.paused = false;
    io.out(`${renderTop(sortRows(final, state.sort, state.reverse))}\n`);
    // The calls of a timed function its COUNT leaves out (as latency says them), and the
    // hits the counts could not take.
    const timing = latency === undefined ? [] : handlerNotes(latency, 'Timing', true);
    if (timing.length > 0) {
      io.err(`upscope: ${timing.join(', ')} (a timed function's COUNT is of its calls timed)\n`);
    }
    const counting = count === undefined ? [] : handlerNotes(count, 'Counting', true);
    if (counting.length > 0) io.err(`upscope: ${counting.join(', ')}\n`);
    const gone = aggregates.some((a) => a.targetExited);
    io.err(`upscope: ${gone ? `process ${options.pid} exited; ` : ''}probes removed\n`);
  }
}
