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
  type Filters,
  type HandlerErrors,
  type TimedFunction,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import {
  type Exit,
  type LaunchedCommand,
  launchStopped,
  pausePoint,
  processEnded,
} from '../host/index.js';
import {
  attachPoints,
  commandSearchOptions,
  fetchForSites,
  type PlannedProbes,
  type ProbeSite,
  planProbes,
  type ReturnProbeMode,
  type SkippedSite,
} from '../plan/index.js';
import { type FetchArg, parseComparisonOrThrow, parseFetchOrThrow } from '../spec/index.js';
import { BpfStacks } from './bpf-stacks.js';
import { processFamily, ReplacedFiles } from './replaced-files.js';
import { checkTargetOptions, probeName } from './tracer.js';

export interface AggregateOptions {
  /** Only this process (all its threads). */
  readonly pid?: number | undefined;
  /** Start this shell command line stopped, aggregate only it, then let it run. */
  readonly command?: string | undefined;
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
  /** Count per `pid`, `tid`, `comm`, `ustack`, or a fetched value (`arg0`, `+0(arg0):string`). */
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
}

export const UNIT_NS: Readonly<Record<LatencyUnit, number>> = { ns: 1, us: 1000, ms: 1_000_000 };

export interface ProbeCount {
  readonly probe: string;
  /**
   * The key's value with `by`; by `ustack`, the stack folded (outermost frame first, frames
   * joined by `;`, as flame-graph tools read it): function names, `file+0xvaddr` where no
   * symbol names a frame.
   */
  readonly key: bigint | string | undefined;
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

/** An in-kernel aggregation, and how its readings are presented. */
interface Opened<R> {
  readonly engine: BpfAggregation;
  readonly read: () => R;
  /** Called once the last reading is taken. */
  readonly stopped?: (() => void) | undefined;
}

/**
 * A live in-kernel aggregation (bpf engine): readable at any time, ended by close(), by the
 * abort signal, or when the traced command or process exits (then the probes are removed
 * and the last reading stays available until close()).
 */
export class Aggregate<R> {
  readonly sites: readonly ProbeSite[];
  /** Sites patterns matched that cannot be probed, left out (see `strict`). */
  readonly skipped: readonly SkippedSite[];
  /** Each probe's name, by probe index. */
  readonly probes: readonly string[];
  readonly commandPid: number | undefined;
  /** Resolves when the aggregation has stopped (probes removed). */
  readonly ended: Promise<void>;
  readonly #engine: BpfAggregation;
  readonly #read: () => R;
  readonly #onStopped: (() => void) | undefined;
  readonly #launched: LaunchedCommand | undefined;
  readonly #timer: NodeJS.Timeout | undefined;
  /**
   * Keeps the process alive while the aggregation runs: nothing else of a system-wide
   * in-kernel aggregation holds Node's event loop, which would end at once (and with it a
   * command-line run, whatever its stdin) when no other timer, socket or stream is pending.
   */
  readonly #alive: NodeJS.Timeout;
  #stopped = false;
  #closed = false;
  #exit: Exit | undefined;
  #targetExited = false;
  #last: { reading: R; errors: HandlerErrors } | undefined;
  #resolveEnded!: () => void;

  /** @internal */
  constructor(
    { sites, skipped }: PlannedProbes,
    probes: readonly string[],
    opened: Opened<R>,
    options: AggregateOptions,
    launched: LaunchedCommand | undefined,
  ) {
    this.sites = sites;
    this.skipped = skipped;
    this.probes = probes;
    this.#engine = opened.engine;
    this.#read = opened.read;
    this.#onStopped = opened.stopped;
    this.#launched = launched;
    this.commandPid = launched?.pid;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
    this.#alive = setInterval(() => {}, 1 << 30);
    options.signal?.addEventListener('abort', () => this.stop(), { once: true });
    launched?.exited.then((exit) => {
      this.#exit = exit;
      this.stop();
    });
    const pid = options.pid;
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

  /** How the traced command ended (with `command`), once it has. */
  get exit(): Exit | undefined {
    return this.#exit;
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

  /** Remove the probes and keep the last totals; the command, if any, is killed if it runs. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearInterval(this.#timer);
    clearInterval(this.#alive);
    try {
      this.#engine.detach();
      this.#last = { reading: this.#read(), errors: this.#engine.handlerErrors() };
    } finally {
      this.#onStopped?.();
      this.#launched?.kill();
      this.#resolveEnded();
    }
  }

  /** Stop, and release every map and program (the last totals stay readable). Idempotent. */
  close(): void {
    if (this.#closed) return;
    try {
      this.stop();
    } finally {
      this.#closed = true;
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
function probeNames(sites: readonly ProbeSite[]): string[] {
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
  return sites.flatMap((site, probe) =>
    attachPoints(site).map((point) => ({
      path: site.target.path,
      offset: point.fileOffset,
      kind: point.attach === 'uretprobe' ? ('return' as const) : ('entry' as const),
      refCtrOffset: site.usdt?.semaphoreFileOffset,
      probe,
      role: point.role === 'probe' ? undefined : point.role,
      goroutine: site.returns?.frames === 'goroutine',
      tailCall: point.exit === 'tail-call',
    })),
  );
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

/** The filters with `argN` read as the note's argument at USDT probes. */
function filtersAt(filters: Omit<Filters, 'pid'>, sites: readonly ProbeSite[]) {
  const predicate = filters.predicate;
  if (predicate === undefined) return filters;
  return {
    ...filters,
    predicate: { ...predicate, fetch: fetchForSites(predicate.fetch, sites, '--filter') },
  };
}

async function start<R>(
  specs: string | readonly string[],
  options: AggregateOptions,
  open: (
    sites: readonly ProbeSite[],
    names: readonly string[],
    pid: number | undefined,
  ) => Opened<R>,
  check?: (sites: readonly ProbeSite[]) => void,
  /** The aggregation times calls to their returns (latency): plan the returns of entries. */
  timesCalls = false,
): Promise<Aggregate<R>> {
  checkTargetOptions(options, 'aggregate');
  const { sites, skipped } = await planProbes(typeof specs === 'string' ? [specs] : specs, {
    pid: options.pid,
    unsafe: options.unsafe,
    debugDirs: options.debugDirs,
    strict: options.strict,
    returnProbes: options.returnProbes,
    returnsOfEntries: timesCalls,
    // The command's libraries are searched for as its dynamic linker will.
    ...(options.command === undefined ? {} : commandSearchOptions(options.command)),
  });
  check?.(sites);
  const launched =
    options.command === undefined
      ? undefined
      : await launchStopped(options.command, { stdout: options.commandStdout });
  try {
    const names = probeNames(sites);
    const pid = launched?.pid ?? options.pid;
    const opened = open(sites, names, pid);
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
      { sites, skipped },
      names,
      {
        ...opened,
        stopped: () => {
          replaced.close();
          stopped?.();
        },
      },
      options,
      launched,
    );
    launched?.resume();
    // Fault tests stop here: probes live, the kernel counting.
    pausePoint('tracing');
    return aggregate;
  } catch (err) {
    launched?.kill();
    throw err;
  }
}

function countKey(by: string | undefined): CountKey {
  if (by === undefined) return { kind: 'none' };
  if (by === 'pid' || by === 'tid' || by === 'comm' || by === 'ustack') return { kind: by };
  return { kind: 'value', fetch: parseFetchOrThrow(by, '--by') };
}

/** Hits per probe (and key), counted in the kernel. */
export async function countHits(
  specs: string | readonly string[],
  options: CountOptions = {},
): Promise<Aggregate<ProbeCount[]>> {
  const key = countKey(options.by);
  const filters = filtersOf(options);
  return start(specs, options, (sites, names, pid) => {
    const siteKey: CountKey =
      key.kind === 'value' ? { ...key, fetch: fetchForSites(key.fetch, sites, '--by') } : key;
    const stacks =
      key.kind === 'ustack'
        ? new BpfStacks({ pid, command: options.command, sites, inlines: options.inlines })
        : undefined;
    let counts: BpfCounts;
    try {
      counts = BpfCounts.open(aggregateSites(sites), siteKey, {
        pid,
        filters: filtersAt(filters, sites),
        readsResult: key.kind === 'value' && readsResult(key.fetch.expr),
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
        return counts
          .read()
          .map((row) => {
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
          })
          .sort((a, b) => (a.count < b.count ? 1 : a.count > b.count ? -1 : 0));
      },
      stopped: () => stacks?.close(),
    };
  });
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
  return start(specs, options, (sites, names, pid) => {
    const siteFetch = fetchForSites(fetch, sites, 'the histogram value');
    const hist = BpfValueHistograms.open(aggregateSites(sites), siteFetch, scheme, {
      pid,
      filters: filtersAt(filters, sites),
      readsResult: readsResult(fetch.expr),
      mode: options.attach,
      purpose: `a histogram of ${value}`,
    });
    return {
      engine: hist,
      read: () => hist.read().map((histogram, i) => ({ probe: names[i]!, histogram })),
    };
  });
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
  return start(
    specs,
    options,
    (sites, names, pid) => {
      const latency = BpfLatency.open(timedFunctions(sites), UNIT_NS[unit], {
        pid,
        filters: filtersAt(filters, sites),
        mode: options.attach,
        purpose: `timing ${sites.length} function${sites.length === 1 ? '' : 's'}`,
      });
      return {
        engine: latency,
        read: () => latency.read().map((histogram, i) => ({ probe: names[i]!, histogram })),
      };
    },
    (sites) => {
      if (sites.some((site) => site.kind !== 'entry' || site.symbolOffset !== 0n)) {
        throw new ProbeError(
          'ERR_USAGE',
          'Cannot time these probes: latency needs function entries (e.g. app:parse or libc:mall*), not return probes, offsets or USDT probes',
        );
      }
    },
    true,
  );
}

/** Whether a fetch reads a function's result (`retval`, `retvalN`), anywhere in it. */
function readsResult(expr: FetchArg['expr']): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}
