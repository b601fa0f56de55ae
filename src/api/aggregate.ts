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
  commandSearchOptions,
  type ProbeSite,
  planProbes,
  usdtFetchForSites,
} from '../plan/index.js';
import { parseComparisonOrThrow, parseFetchOrThrow } from '../spec/index.js';
import { BpfStacks } from './bpf-stacks.js';
import { checkTargetOptions, probeName } from './tracer.js';

export interface AggregateOptions {
  /** Only this process (all its threads). */
  readonly pid?: number | undefined;
  /** Start this shell command line stopped, aggregate only it, then let it run. */
  readonly command?: string | undefined;
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
  #stopped = false;
  #closed = false;
  #exit: Exit | undefined;
  #targetExited = false;
  #last: { reading: R; errors: HandlerErrors } | undefined;
  #resolveEnded!: () => void;

  /** @internal */
  constructor(
    sites: readonly ProbeSite[],
    probes: readonly string[],
    opened: Opened<R>,
    options: AggregateOptions,
    launched: LaunchedCommand | undefined,
  ) {
    this.sites = sites;
    this.probes = probes;
    this.#engine = opened.engine;
    this.#read = opened.read;
    this.#onStopped = opened.stopped;
    this.#launched = launched;
    this.commandPid = launched?.pid;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
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

function aggregateSites(sites: readonly ProbeSite[]): AggregateSite[] {
  return sites.map((site) => ({
    path: site.target.path,
    offset: site.fileOffset,
    kind: site.kind === 'return' ? 'return' : 'entry',
    refCtrOffset: site.usdt?.semaphoreFileOffset,
  }));
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
    predicate: { ...predicate, fetch: usdtFetchForSites(predicate.fetch, sites, '--filter') },
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
): Promise<Aggregate<R>> {
  checkTargetOptions(options, 'aggregate');
  const sites = await planProbes(typeof specs === 'string' ? [specs] : specs, {
    pid: options.pid,
    unsafe: options.unsafe,
    debugDirs: options.debugDirs,
    // The command's libraries are searched for as its dynamic linker will.
    ...(options.command === undefined ? {} : commandSearchOptions(options.command)),
  });
  check?.(sites);
  const launched = options.command === undefined ? undefined : await launchStopped(options.command);
  try {
    const names = probeNames(sites);
    const opened = open(sites, names, launched?.pid ?? options.pid);
    const aggregate = new Aggregate(sites, names, opened, options, launched);
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
      key.kind === 'value' ? { ...key, fetch: usdtFetchForSites(key.fetch, sites, '--by') } : key;
    const stacks =
      key.kind === 'ustack'
        ? new BpfStacks({ pid, command: options.command, sites, inlines: options.inlines })
        : undefined;
    let counts: BpfCounts;
    try {
      counts = BpfCounts.open(aggregateSites(sites), siteKey, {
        pid,
        filters: filtersAt(filters, sites),
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
    const siteFetch = usdtFetchForSites(fetch, sites, 'the histogram value');
    const hist = BpfValueHistograms.open(aggregateSites(sites), siteFetch, scheme, {
      pid,
      filters: filtersAt(filters, sites),
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
      const latency = BpfLatency.open(aggregateSites(sites), UNIT_NS[unit], {
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
  );
}
