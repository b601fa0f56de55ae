import type { BucketScheme, Histogram } from '../aggregate/index.js';
import {
  type AggregateSite,
  type AttachMode,
  type AttachReport,
  type BpfAggregation,
  BpfCounts,
  BpfLatency,
  BpfValueHistograms,
  type CountKey,
  type AggregateOptions as EngineAggregateOptions,
  type Filters,
  type HandlerErrors,
  SPAN_BUFFER_BYTES,
  type TimedFunction,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import {
  DEFAULT_KILL_AFTER_MS,
  type Exit,
  type LaunchedCommand,
  launchStopped,
  pausePoint,
  processEnded,
} from '../host/index.js';
import {
  attachPoints,
  fetchForSites,
  type OptionFetch,
  type PlannedProbes,
  type ProbeSite,
  planProbes,
  type ResolveOptions,
  type ReturnProbeMode,
  runPlanOptions,
  type SkippedSite,
} from '../plan/index.js';
import { type FetchArg, parseComparisonOrThrow, parseFetchOrThrow } from '../spec/index.js';
import { BpfStacks } from './bpf-stacks.js';
import { type Coverage, type CoverageOptions, coverage } from './coverage.js';
import { ptraceAggregate } from './ptrace-aggregate.js';
import { processFamily, ReplacedFiles } from './replaced-files.js';
import { checkTargetOptions, probeName } from './tracer.js';

export interface AggregateOptions extends CoverageOptions {
  /** Progress of planning a pattern's functions (seconds for every function of a large program). */
  readonly onProgress?: ResolveOptions['onProgress'];
  /**
   * `bpf` (the default: handlers in the kernel; root, or CAP_BPF and CAP_PERFMON) or
   * `ptrace` (one process, `pid` or `command`, each hit served in user space while its thread
   * waits: no privileges for your own processes, far slower per hit).
   */
  readonly engine?: 'bpf' | 'ptrace' | 'inject' | undefined;
  /**
   * Only this process (all its threads) and the children it forks while the aggregation
   * runs; with `children`, also the processes it has forked already.
   */
  readonly pid?: number | undefined;
  /**
   * Start this shell command line stopped, aggregate only it (from its exec on) and the
   * children it forks, then let it run. When the aggregation stops before the command ends,
   * the command's process group gets SIGTERM, and SIGKILL after `killAfterMs`.
   */
  readonly command?: string | undefined;
  /** With `command`: how long it has to end after SIGTERM (default 5000 ms). */
  readonly killAfterMs?: number | undefined;
  /**
   * Where the command's stdout goes (`command`): a file descriptor of this process (this
   * process's stdout by default).
   */
  readonly commandStdout?: number | undefined;
  /** Stops the aggregation when aborted. */
  readonly signal?: AbortSignal | undefined;
  /** Only this thread. */
  readonly tid?: number | undefined;
  /** Only threads of this name. */
  readonly comm?: string | undefined;
  /** Only hits where this holds: `arg0 > 4096`, `retval:s32 < 0`. */
  readonly filter?: string | undefined;
  /** Allow raw addresses no symbol covers. */
  readonly unsafe?: boolean | undefined;
  /** Directories searched for separate debug files (FILE:LINE specs), before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
  /** How probes are attached (default `auto`: uprobe_multi, else one perf event each). */
  readonly attach?: AttachMode | undefined;
  /**
   * Fail when a pattern matches a function that cannot be probed, instead of skipping it
   * (listed in the aggregation's `skipped`).
   */
  readonly strict?: boolean | undefined;
  /**
   * Told of what happens while it runs that a user should know (one line each): a probed
   * file replaced on disk and probed again, calls that may not have been counted.
   */
  readonly onNotice?: ((text: string) => void) | undefined;
  /**
   * How returns are caught (default `auto`): `sites` probes the instructions a function
   * leaves by, `trampoline` replaces its return address (see ReturnProbeMode).
   */
  readonly returnProbes?: ReturnProbeMode | undefined;
}

export interface CountOptions extends AggregateOptions {
  /**
   * Count per `pid`, `tid`, `comm`, `ustack`, or a fetched value (`arg0`, `+0(arg0):string`,
   * a variable by name), or per several of them joined by commas (`comm,pid`: the key is
   * then an array, in that order); ustack goes alone.
   */
  readonly by?: string | undefined;
  /** By `ustack`: functions inlined at a frame are frames of their own (from DWARF). */
  readonly inlines?: boolean | undefined;
}

export interface HistogramOptions extends AggregateOptions {
  /** Linear buckets from min to max (the last may be narrower), else log2. */
  readonly linear?: { readonly min: bigint; readonly max: bigint; readonly step: bigint };
}

export type LatencyUnit = 'ns' | 'us' | 'ms';

export interface LatencyOptions extends AggregateOptions {
  /** The unit of the histogram's buckets (default us). Count, sum, min and max stay in ns. */
  readonly unit?: LatencyUnit | undefined;
  /**
   * Called with each timed call, soon after its return (as spans, e.g. for OpenTelemetry): on
   * the bpf engine the kernel records them in a ring buffer read every 100 ms; one that found
   * the buffer full is counted in errors().spansLost.
   */
  readonly onCall?: ((call: LatencyCall) => void) | undefined;
}

/** One timed call of latencyOf(): its function, its thread, and when it ran. */
export interface LatencyCall {
  readonly probe: string;
  readonly pid: number;
  readonly tid: number;
  /** The thread's name. */
  readonly comm: string;
  /** Entry and return, in nanoseconds of CLOCK_MONOTONIC (process.hrtime.bigint()'s clock). */
  readonly startNs: bigint;
  readonly endNs: bigint;
}

/** How often the kernel's span records of latency's calls are read. */
const SPAN_POLL_MS = 100;

export const UNIT_NS: Readonly<Record<LatencyUnit, number>> = { ns: 1, us: 1000, ms: 1_000_000 };

export interface ProbeCount {
  readonly probe: string;
  /**
   * The key's value with `by`; by `ustack`, the stack folded (outermost frame first, frames
   * joined by `;`, as flame-graph tools read it): function names, `file+0xvaddr` where no
   * symbol names a frame.
   */
  readonly key: bigint | string | readonly (bigint | string)[] | undefined;
  /**
   * By `ustack`: the process, and its frames, innermost first (`symbol+0xoff (file)`); a
   * stack cut short ends with a marked frame (`[stack cut: depth limit]`).
   */
  readonly stack?: { readonly pid: number; readonly frames: readonly string[] } | undefined;
  readonly count: bigint;
  /**
   * `unwind` for the calls of a return probe that an unwind (an exception, a Go panic,
   * pthread_cancel, a longjmp) or their thread's end took away: their return was not seen.
   */
  readonly exit?: 'unwind' | undefined;
}

export interface ProbeHistogram {
  readonly probe: string;
  readonly histogram: Histogram;
}

/** What an Aggregate runs on: an in-kernel aggregation, or the ptrace engine's. */
export interface AggregationEngine {
  readonly attachReport: AttachReport;
  /** Remove the probes (the counts stay readable). */
  detach(): void;
  handlerErrors(): HandlerErrors;
  close(): void;
}

/** An aggregation, and how its readings are presented. */
export interface Opened<R> {
  readonly engine: AggregationEngine;
  /** Which engine it is (`bpf` by default). */
  readonly name?: 'bpf' | 'ptrace' | 'inject' | undefined;
  /** Resolves when the engine ended on its own (the process it served ended). */
  readonly ended?: Promise<void> | undefined;
  /** Why the engine failed while it ran (it then stopped), if it did. */
  readonly error?: (() => unknown) | undefined;
  readonly read: () => R;
  /** Called once the last reading is taken. */
  readonly stopped?: (() => void) | undefined;
}

/**
 * A live aggregation (on the bpf engine in the kernel, or on the ptrace engine): readable at
 * any time, ended by close(), by the abort signal, or when the traced command or process
 * exits (then the probes are removed and the last reading stays available until close()).
 */
export class Aggregate<R> {
  /** The engine that serves the probes. */
  readonly engine: 'bpf' | 'ptrace' | 'inject';
  readonly sites: readonly ProbeSite[];
  /** Sites patterns matched that cannot be probed, left out (see `strict`). */
  readonly skipped: readonly SkippedSite[];
  /** What the user should know of the plan (see PlannedProbes.warnings). */
  readonly warnings: readonly ProbeError[];
  /** Each probe's name, by probe index. */
  readonly probes: readonly string[];
  readonly commandPid: number | undefined;
  /** Resolves when the aggregation has stopped (probes removed). */
  readonly ended: Promise<void>;
  readonly #engine: AggregationEngine;
  readonly #read: () => R;
  readonly #onStopped: (() => void) | undefined;
  readonly #error: (() => unknown) | undefined;
  readonly #launched: LaunchedCommand | undefined;
  readonly #killAfterMs: number;
  readonly #timer: NodeJS.Timeout | undefined;
  /** What the user should know about which processes are covered. */
  readonly notes: readonly string[];
  /**
   * Keeps the process alive while the aggregation runs: nothing else of a system-wide
   * in-kernel aggregation holds Node's event loop, which would end at once (and with it a
   * command-line run, whatever its stdin) when no other timer, socket or stream is pending.
   */
  readonly #alive: NodeJS.Timeout;
  #stopped = false;
  #closed = false;
  /** Whether the command was ended by the aggregation (not by itself), or is gone. */
  #ending = false;
  #commandGone = false;
  #exit: Exit | undefined;
  #targetExited = false;
  #last: { reading: R; errors: HandlerErrors } | undefined;
  #resolveEnded!: () => void;

  /** @internal */
  constructor(
    { sites, skipped, warnings }: PlannedProbes,
    probes: readonly string[],
    opened: Opened<R>,
    options: AggregateOptions,
    launched: LaunchedCommand | undefined,
    notes: readonly string[],
  ) {
    this.sites = sites;
    this.skipped = skipped;
    this.warnings = warnings;
    this.probes = probes;
    this.#engine = opened.engine;
    this.engine = opened.name ?? 'bpf';
    this.#error = opened.error;
    this.#read = opened.read;
    this.#onStopped = opened.stopped;
    this.#launched = launched;
    this.#killAfterMs = options.killAfterMs ?? DEFAULT_KILL_AFTER_MS;
    this.commandPid = launched?.pid;
    this.notes = notes;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
    this.#alive = setInterval(() => {}, 1 << 30);
    options.signal?.addEventListener('abort', () => this.stop(), { once: true });
    launched?.exited.then((exit) => {
      // An end the aggregation caused (SIGTERM at its stop) is not the command's own.
      if (!this.#ending) this.#exit = exit;
      this.stop();
    });
    const pid = options.pid;
    opened.ended?.then(() => {
      if (this.#stopped) return;
      this.#targetExited = pid !== undefined;
      this.stop();
    });
    if (pid !== undefined) {
      this.#timer = setInterval(() => {
        if (this.#stopped || !processEnded(pid)) return;
        this.#targetExited = true;
        this.stop();
      }, 100);
    }
  }

  /** How probes were attached, and how long it took. */
  get attachReport(): AttachReport {
    return this.#engine.attachReport;
  }

  /**
   * How the traced command ended (with `command`), once it has, when it ended by itself
   * (undefined when the aggregation stopped first and ended it).
   */
  get exit(): Exit | undefined {
    return this.#exit;
  }

  /** Why the engine failed while it ran (which stopped the aggregation), if it did. */
  get error(): unknown {
    return this.#error?.();
  }

  /** Whether the process aggregated (`pid`) ended, which stopped the aggregation. */
  get targetExited(): boolean {
    return this.#targetExited;
  }

  /** The totals now (after stop(), the last ones). */
  read(): R {
    return this.#last?.reading ?? this.#read();
  }

  /** Hits the handlers could not aggregate. */
  errors(): HandlerErrors {
    return this.#last?.errors ?? this.#engine.handlerErrors();
  }

  /**
   * Remove the probes and keep the last totals; and the command, if any, is ended as a user
   * would end it: its process group gets SIGTERM (also what is left of it once the command
   * has exited by itself; before the probes are removed), and SIGKILL after `killAfterMs`.
   * `ended` resolves once it is gone.
   */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearInterval(this.#timer);
    clearInterval(this.#alive);
    // The command's SIGTERM first: removing the probes may wait on it (see Attachment.close()).
    const ending = this.#endCommand();
    try {
      this.#engine.detach();
      this.#last = { reading: this.#read(), errors: this.#engine.handlerErrors() };
    } finally {
      this.#onStopped?.();
      void ending.then(
        () => this.#resolveEnded(),
        () => this.#resolveEnded(),
      );
    }
  }

  async #endCommand(): Promise<void> {
    const launched = this.#launched;
    if (launched === undefined) return;
    this.#ending = true;
    try {
      await launched.terminate(this.#killAfterMs);
    } finally {
      this.#commandGone = true;
    }
  }

  /**
   * Stop, and release every map and program (the last totals stay readable). A command that
   * stop() has not finished ending yet is killed (SIGKILL). Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    try {
      this.stop();
    } finally {
      this.#closed = true;
      if (!this.#commandGone) this.#launched?.kill();
      this.#engine.close();
    }
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/** Probe names, made unique with the file when two sites share one. */
export function probeNames(sites: readonly ProbeSite[]): string[] {
  const names = sites.map((site) => (site.kind === 'return' ? 'r:' : '') + probeName(site));
  const seen = new Map<string, number>();
  for (const name of names) seen.set(name, (seen.get(name) ?? 0) + 1);
  return names.map((name, i) =>
    (seen.get(name) ?? 0) > 1 ? `${name} (${sites[i]!.target.displayPath})` : name,
  );
}

/**
 * The uprobes of the sites, each with the index of its site: one per site, or for a return
 * probe caught at its exits one per exit and one at the entry that opens a call's frame.
 */
function aggregateSites(sites: readonly ProbeSite[]): AggregateSite[] {
  return sites.flatMap((site, probe): AggregateSite[] => {
    const returns = site.returns;
    if (site.kind === 'return' && returns?.mode === 'trampoline') {
      // Calls paired by frame (see frame-programs.ts): the kernel sets no return trampoline
      // for a call nested over 64 deep on a thread, and such a call is said, not counted as
      // never made. The frame opens on the same breakpoint the trampoline is set from.
      const path = site.target.path;
      return [
        { path, offset: site.fileOffset, kind: 'return', probe, role: 'return' },
        {
          path,
          offset: returns.entry.fileOffset,
          kind: 'entry',
          probe,
          role: 'frame-entry',
          chains: true,
        },
      ];
    }
    return attachPoints(site).map((point) => ({
      path: site.target.path,
      offset: point.fileOffset,
      kind: point.attach === 'uretprobe' ? ('return' as const) : ('entry' as const),
      refCtrOffset: site.usdt?.semaphoreFileOffset,
      probe,
      role: point.role === 'probe' ? undefined : point.role,
      goroutine: site.returns?.frames === 'goroutine',
      loops: point.role === 'frame-entry' && site.returns?.loopsAtEntry === true,
      tailCall: point.exit === 'tail-call',
    }));
  });
}

/** Functions to time: each entry, and how its returns are caught. */
function timedFunctions(sites: readonly ProbeSite[]): TimedFunction[] {
  return sites.map((site) => {
    const returns = site.returns;
    return {
      path: site.target.path,
      offset: site.fileOffset,
      kind: 'entry',
      exits:
        returns?.mode === 'sites'
          ? {
              entryOffset: returns.entry.fileOffset,
              offsets: returns.sites.map((exit) => exit.fileOffset),
              goroutine: returns.frames === 'goroutine',
              loops: returns.loopsAtEntry === true,
            }
          : undefined,
    };
  });
}

function filtersOf(options: AggregateOptions): Omit<Filters, 'pid'> {
  return {
    tid: options.tid,
    comm: options.comm,
    predicate:
      options.filter === undefined ? undefined : parseComparisonOrThrow(options.filter, '--filter'),
  };
}

/**
 * The fetches given apart from the specs, to be lowered at each site as a spec's own are
 * (variables by name): the filter's first (index 0, when there is one), then `more`.
 */
function optionFetches(
  options: AggregateOptions,
  filters: Omit<Filters, 'pid'>,
  more: readonly OptionFetch[] = [],
): OptionFetch[] {
  const predicate = filters.predicate;
  return [
    ...(predicate === undefined ? [] : [{ text: options.filter!, fetch: predicate.fetch }]),
    ...more,
  ];
}

/** The filters with `argN` read as the note's argument at USDT probes, variables lowered. */
function filtersAt(filters: Omit<Filters, 'pid'>, sites: readonly ProbeSite[]) {
  const predicate = filters.predicate;
  if (predicate === undefined) return filters;
  return {
    ...filters,
    predicate: { ...predicate, fetch: fetchForSites(predicate.fetch, sites, '--filter', 0) },
  };
}

/** Which processes the engine takes: followed in the kernel, or the one process as a fallback. */
interface Processes {
  readonly follow: EngineAggregateOptions['follow'];
  /** The one process (-p, or -c's command): the fallback where following is not possible. */
  readonly pid: number | undefined;
  /** Processes never taken (upscope's own, in a run over every process). */
  readonly exclude: readonly number[];
}

function processesOf(covered: Coverage, pid: number | undefined): Processes {
  const following = covered.pids !== undefined || covered.startAtExecOf !== undefined;
  return {
    follow: following
      ? { pids: covered.pids ?? [], startAtExecOf: covered.startAtExecOf }
      : undefined,
    pid,
    exclude: covered.exclude,
  };
}

/** The line saying why the processes asked for are not followed (only the one process is). */
function followNote(
  engine: BpfAggregation,
  pid: number | undefined,
  command: boolean,
): string | undefined {
  const error = engine.followError;
  if (error === undefined) return undefined;
  const who = command
    ? "only the command's own process is counted, from its launcher's start (before its exec)"
    : `only process ${pid} itself is counted`;
  return `${who}, not the children it forks: ${error.message}`;
}

/** Opened on the bpf engine: files replaced on disk are probed again through it. */
export type BpfOpened<R> = Opened<R> & { readonly engine: BpfAggregation };

/**
 * Plan `specs`, start the command (held), open the aggregation on the sites (`open`), watch
 * for probed files replaced on disk, then let the command run: the life cycle every in-kernel
 * aggregation shares (count, hist, latency, leaks).
 */
export async function startAggregate<R>(
  specs: string | readonly string[],
  options: AggregateOptions,
  open: (
    sites: readonly ProbeSite[],
    names: readonly string[],
    processes: Processes,
  ) => BpfOpened<R>,
  check?: (sites: readonly ProbeSite[]) => void,
  /** The aggregation times calls to their returns (latency): plan the returns of entries. */
  timesCalls = false,
  /** Fetches of the options (see optionFetches()), lowered at each site before anything runs. */
  fetches: readonly OptionFetch[] = [],
): Promise<Aggregate<R>> {
  checkTargetOptions(options, 'aggregate');
  // A pattern that fetches nothing is planned lean, and its plan kept (see ResolveOptions.lean):
  // written once the probes are live, not before (the kernel links them on this thread).
  const planWrites: (() => void)[] = [];
  const writePlans = () => {
    for (const write of planWrites.splice(0)) write();
  };
  const { sites, skipped, warnings } = await planProbes(
    typeof specs === 'string' ? [specs] : specs,
    {
      ...runPlanOptions(options),
      lean: true,
      planWrites,
      onProgress: options.onProgress,
      returnsOfEntries: timesCalls,
      optionFetches: fetches,
    },
  );
  let launched: Awaited<ReturnType<typeof launchStopped>> | undefined;
  try {
    check?.(sites);
    launched =
      options.command === undefined
        ? undefined
        : await launchStopped(options.command, { stdout: options.commandStdout });
    const names = probeNames(sites);
    const pid = launched?.pid ?? options.pid;
    const covered = coverage(options, launched?.pid);
    const opened = open(sites, names, processesOf(covered, pid));
    const note = followNote(opened.engine, options.pid, launched !== undefined);
    const notes = note === undefined ? covered.notes : [...covered.notes, note];
    // Files replaced on disk while it runs are probed again (kernel probes are on inodes).
    const replaced = ReplacedFiles.watch(sites, {
      attach: (move) => opened.engine.attachMoved(move),
      notice: options.onNotice ?? (() => {}),
      processes: pid === undefined ? undefined : () => processFamily(pid),
      unsafe: options.unsafe,
      debugDirs: options.debugDirs,
    });
    const stopped = opened.stopped;
    const aggregate = new Aggregate(
      { sites, skipped, warnings },
      names,
      {
        ...opened,
        stopped: () => {
          writePlans();
          replaced.close();
          stopped?.();
        },
      },
      options,
      launched,
      notes,
    );
    launched?.resume();
    // Fault tests stop here: probes live, the kernel counting.
    pausePoint('tracing');
    // After the caller has said the probes are live; at the latest when they stop.
    setImmediate(writePlans);
    return aggregate;
  } catch (err) {
    writePlans();
    launched?.kill();
    throw err;
  }
}

/** One key of `by`: a property of the hit's thread, its stack, or a value fetched there. */
export type CountKeyPart =
  | { readonly kind: 'pid' | 'tid' | 'comm' | 'ustack' }
  | { readonly kind: 'value'; readonly text: string; readonly fetch: FetchArg };

/**
 * The keys of a count's `by`: one, or several joined by commas (`comm,pid`), each a thread
 * property or a fetch; throws ProbeError ERR_USAGE for an empty key, a key given twice, or
 * ustack with another.
 */
export function parseCountBy(by: string): CountKeyPart[] {
  // Each key with where it starts in `by` (errors point into the whole text).
  let at = 0;
  const keys = by.split(',').map((raw) => {
    const offset = at + (raw.length - raw.trimStart().length);
    at += raw.length + 1;
    return { text: raw.trim(), offset };
  });
  const texts = keys.map((key) => key.text);
  if (texts.some((text) => text === '')) {
    throw new ProbeError('ERR_USAGE', `Cannot count by "${by}": a key is empty`, {
      hints: ['Give keys joined by commas, e.g. --by comm,pid'],
    });
  }
  const seen = new Set<string>();
  const parts = keys.map(({ text, offset }): CountKeyPart => {
    if (seen.has(text)) {
      throw new ProbeError('ERR_USAGE', `Cannot count by "${by}": "${text}" is given twice`);
    }
    seen.add(text);
    if (text === 'pid' || text === 'tid' || text === 'comm' || text === 'ustack') {
      return { kind: text };
    }
    return { kind: 'value', text, fetch: parseFetchOrThrow(text, '--by', { text: by, offset }) };
  });
  if (parts.length > 1 && parts.some((part) => part.kind === 'ustack')) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot count by "${by}": ustack is a key of its own (each stack is listed with its frames)`,
      { hints: ['Count by ustack alone, or by the other keys without it'] },
    );
  }
  return parts;
}

/** The in-kernel key of `parts`, with the value fetches lowered at the sites. */
function countKeyAt(
  parts: readonly CountKeyPart[],
  sites: readonly ProbeSite[],
  firstFetch: number,
): CountKey {
  let index = firstFetch;
  const keys = parts.map((part): CountKey => {
    if (part.kind !== 'value') return { kind: part.kind };
    return { kind: 'value', fetch: fetchForSites(part.fetch, sites, '--by', index++) };
  });
  if (keys.length === 0) return { kind: 'none' };
  return keys.length === 1 ? keys[0]! : { kind: 'tuple', parts: keys };
}

/** The rows of probes with no hits: every probe is listed, with 0 where it had none. */
function withZeros(rows: ProbeCount[], names: readonly string[]): ProbeCount[] {
  const counted = new Set(rows.map((row) => row.probe));
  for (const probe of names) {
    if (!counted.has(probe)) rows.push({ probe, key: undefined, count: 0n });
  }
  return rows;
}

/** Hits per probe (and key), counted in the kernel, or on the ptrace engine. */
export async function countHits(
  specs: string | readonly string[],
  options: CountOptions = {},
): Promise<Aggregate<ProbeCount[]>> {
  const parts = options.by === undefined ? [] : parseCountBy(options.by);
  const filters = filtersOf(options);
  // Errors in a key point into the whole --by text.
  const values = parts.flatMap((part) =>
    part.kind === 'value' ? [{ text: options.by!, fetch: part.fetch }] : [],
  );
  const fetches = optionFetches(options, filters, values);
  if (options.engine === 'ptrace' || options.engine === 'inject') {
    return ptraceAggregate(specs, { kind: 'count', parts }, options, fetches);
  }
  const firstValue = fetches.length - values.length;
  const ustack = parts.some((part) => part.kind === 'ustack');
  return startAggregate(
    specs,
    options,
    (sites, names, processes) => {
      const siteKey = countKeyAt(parts, sites, firstValue);
      const stacks = ustack
        ? new BpfStacks({
            pid: processes.pid,
            command: options.command,
            sites,
            inlines: options.inlines,
          })
        : undefined;
      let counts: BpfCounts;
      try {
        counts = BpfCounts.open(aggregateSites(sites), siteKey, {
          ...processes,
          filters: { ...filtersAt(filters, sites), exclude: processes.exclude },
          readsResult: values.some((part) => readsResult(part.fetch.expr)),
          mode: options.attach,
          purpose: `counting ${sites.length} probe${sites.length === 1 ? '' : 's'}`,
          stacks: stacks?.stackOptions(),
        });
      } catch (err) {
        stacks?.close();
        throw err;
      }
      stacks?.start(options.command !== undefined);
      return {
        engine: counts,
        read: () => {
          stacks?.loadMissing();
          const rows = counts.read().map((row): ProbeCount => {
            const probe = names[row.probe] ?? `#${row.probe}`;
            if (row.exit !== undefined) {
              return { probe, key: undefined, count: row.count, exit: row.exit };
            }
            if (row.stack === undefined || stacks === undefined) {
              return { probe, key: row.key, count: row.count };
            }
            const named = stacks.name(row.stack.pid, row.stack.frames);
            const frames = named.map((frame) => frame.text);
            const key =
              named.length === 0
                ? '[no user stack]'
                : named
                    .map((frame) => frame.key)
                    .toReversed()
                    .join(';');
            return { probe, key, stack: { pid: row.stack.pid, frames }, count: row.count };
          });
          return withZeros(rows, names).sort(byCount);
        },
        stopped: () => stacks?.close(),
      };
    },
    undefined,
    false,
    fetches,
  );
}

/** Largest count first. */
function byCount(a: ProbeCount, b: ProbeCount): number {
  return a.count < b.count ? 1 : a.count > b.count ? -1 : 0;
}

/** A histogram of a fetched value (`arg0`, `retval:s64`, `+8(arg0):u32`) per probe. */
export async function histogramOf(
  specs: string | readonly string[],
  value: string,
  options: HistogramOptions = {},
): Promise<Aggregate<ProbeHistogram[]>> {
  const fetch = parseFetchOrThrow(value, 'the histogram value');
  const scheme: BucketScheme =
    options.linear === undefined ? { kind: 'log2' } : { kind: 'linear', ...options.linear };
  const filters = filtersOf(options);
  const fetches = optionFetches(options, filters, [{ text: value, fetch }]);
  if (options.engine === 'ptrace' || options.engine === 'inject') {
    return ptraceAggregate(specs, { kind: 'hist', value: fetch, scheme }, options, fetches);
  }
  return startAggregate(
    specs,
    options,
    (sites, names, processes) => {
      const siteFetch = fetchForSites(fetch, sites, 'the histogram value', fetches.length - 1);
      const hist = BpfValueHistograms.open(aggregateSites(sites), siteFetch, scheme, {
        ...processes,
        filters: { ...filtersAt(filters, sites), exclude: processes.exclude },
        readsResult: readsResult(fetch.expr),
        mode: options.attach,
        purpose: `a histogram of ${value}`,
      });
      return {
        engine: hist,
        read: () => hist.read().map((histogram, i) => ({ probe: names[i]!, histogram })),
      };
    },
    undefined,
    false,
    fetches,
  );
}

/**
 * Time from each function's entry to its return, per function: a log2 histogram in `unit`,
 * with count, sum, min and max in nanoseconds. Specs name functions (entry probes).
 */
export async function latencyOf(
  specs: string | readonly string[],
  options: LatencyOptions = {},
): Promise<Aggregate<ProbeHistogram[]>> {
  const unit = options.unit ?? 'us';
  const filters = filtersOf(options);
  const fetches = optionFetches(options, filters);
  if (options.engine === 'ptrace' || options.engine === 'inject') {
    return ptraceAggregate(
      specs,
      { kind: 'latency', unitNs: UNIT_NS[unit], onCall: options.onCall },
      options,
      fetches,
    );
  }
  const { onCall } = options;
  return startAggregate(
    specs,
    options,
    (sites, names, processes) => {
      const latency = BpfLatency.open(
        timedFunctions(sites),
        UNIT_NS[unit],
        {
          ...processes,
          filters: { ...filtersAt(filters, sites), exclude: processes.exclude },
          mode: options.attach,
          purpose: `timing ${sites.length} function${sites.length === 1 ? '' : 's'}`,
        },
        onCall === undefined ? undefined : SPAN_BUFFER_BYTES,
      );
      const readCalls = () =>
        latency.readCalls((call) => onCall?.({ ...call, probe: names[call.probe]! }));
      const timer = onCall === undefined ? undefined : setInterval(readCalls, SPAN_POLL_MS);
      return {
        engine: latency,
        read: () => latency.read().map((histogram, i) => ({ probe: names[i]!, histogram })),
        stopped: () => {
          clearInterval(timer);
          readCalls();
        },
      };
    },
    checkTimed,
    true,
    fetches,
  );
}

/** Throws ProbeError ERR_USAGE unless every site is a function's entry (what latency times). */
export function checkTimed(sites: readonly ProbeSite[]): void {
  if (sites.some((site) => site.kind !== 'entry' || site.symbolOffset !== 0n)) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot time these probes: latency needs function entries (e.g. app:parse or libc:mall*), not return probes, offsets or USDT probes',
    );
  }
}

/** Whether a fetch reads a function's result (`retval`, `retvalN`), anywhere in it. */
function readsResult(expr: FetchArg['expr']): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}
