import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import {
  goroutineDepth,
  KERNEL_TRAMPOLINE_DEPTH,
  PendingCalls,
  threadDepth,
} from '../aggregate/index.js';
import {
  type AttachMode,
  BpfStream,
  CUT_MARK,
  cleanStaleGroups,
  isStringType,
  MAX_STREAM_FETCHES,
  type MovedProbe,
  probeBpfFeatures,
  type RingBuffer,
  removalTime,
  SAY_REMOVAL_FROM,
  STREAM_STRING_BYTES,
  type StreamSite,
  TracefsStream,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import type { FieldValue, ProbeEvent, StreamStats } from '../events/index.js';
import {
  DEFAULT_KILL_AFTER_MS,
  type Exit,
  ensureTracefs,
  type LaunchedCommand,
  launchStopped,
  pausePoint,
  processEnded,
  threadsOf,
} from '../host/index.js';
import { grouped } from '../internal/index.js';
import {
  excludeSites,
  exitFetches,
  exitsByIndex,
  FRAME_FIELDS,
  frameFetches,
  type PlannedProbes,
  type ProbeSite,
  planProbes,
  qualifyNames,
  type ResolveOptions,
  type ReturnPlan,
  type ReturnProbeMode,
  returnAddressFetch,
  runPlanOptions,
  type SkippedSite,
  siteName,
  stackPointerFetch,
} from '../plan/index.js';
import {
  type Aggregate,
  type CountOptions,
  countHits,
  type HistogramOptions,
  histogramOf,
  type LatencyOptions,
  latencyOf,
  type ProbeCount,
  type ProbeHistogram,
} from './aggregate.js';
import { type CoverageOptions, coverage } from './coverage.js';
import { processFamily, ReplacedFiles } from './replaced-files.js';

export interface AttachOptions extends CoverageOptions {
  /** Progress of planning a pattern's functions (seconds for every function of a large program). */
  readonly onProgress?: ResolveOptions['onProgress'];
  /**
   * Trace only this process (all its threads, and the threads and children it creates); with
   * `children`, also the processes it has forked already.
   */
  readonly pid?: number | undefined;
  /**
   * Start this command (a shell command line) stopped, trace only it (from its exec on) and
   * what it starts, then let it run; the stream ends when it exits. Exclusive with `pid`.
   * When the attachment closes before the command ends, the command's process group gets
   * SIGTERM, and SIGKILL after `killAfterMs`.
   */
  readonly command?: string | undefined;
  /** With `command`: how long it has to end after SIGTERM (default 5000 ms). */
  readonly killAfterMs?: number | undefined;
  /**
   * Where the command's stdout goes (`command`): a file descriptor of this process (this
   * process's stdout by default).
   */
  readonly commandStdout?: number | undefined;
  /** Ends the attachment when aborted. */
  readonly signal?: AbortSignal | undefined;
  /** Ring-buffer size per CPU (default 4096 KiB); bpf: one buffer of twice this times the CPUs. */
  readonly bufferSizeKb?: number | undefined;
  /** How often the ring buffer is read (default 25 ms). */
  readonly pollIntervalMs?: number | undefined;
  /** Allow raw addresses no symbol covers. */
  readonly unsafe?: boolean | undefined;
  /** Directories searched for separate debug files (FILE:LINE specs), before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
  /**
   * `tracefs` (uprobe_events and the tracing ring buffer; the default), `bpf` (a BPF handler
   * per hit writing to a BPF ring buffer; root, or CAP_BPF and CAP_PERFMON), or `auto`:
   * tracefs, or bpf from SAY_REMOVAL_FROM (40) probes when it can run here (see
   * chooseEngine). `Attachment.engine` says which.
   */
  readonly engine?: 'tracefs' | 'bpf' | 'auto' | undefined;
  /** With the bpf engine: how probes are attached (uprobe_multi links, perf events, or auto). */
  readonly attachMode?: AttachMode | undefined;
  /**
   * Fail when a pattern matches a function that cannot be probed, instead of skipping it
   * (listed in the attachment's `skipped`).
   */
  readonly strict?: boolean | undefined;
  /**
   * Told of what happens while it runs that a user should know (one line each): a probed
   * file replaced on disk and probed again, hits that may have been missed.
   */
  readonly onNotice?: ((text: string) => void) | undefined;
  /**
   * How returns are caught (default `auto`): `sites` probes the instructions a function
   * leaves by, `trampoline` replaces its return address (see ReturnProbeMode).
   */
  readonly returnProbes?: ReturnProbeMode | undefined;
  /**
   * Work to do once the attachment is made, before a command is let run and attach()
   * resolves (a recording's writer is made then); if it fails, the attachment is closed and
   * attach() fails with it.
   */
  readonly whileAttaching?: ((attachment: Attachment) => Promise<void> | void) | undefined;
  /**
   * Work on what was planned that can be done while the kernel attaches the probes (the bpf
   * engine makes its links on another thread meanwhile); run once, before onLive.
   */
  readonly whileLinking?: ((sites: readonly ProbeSite[]) => void) | undefined;
  /**
   * Called once the probes are live (the kernel has every link or event made), with what was
   * planned, before the attachment's own set-up, whileAttaching and a command let run: what
   * is hit from then on is kept in the kernel's buffer until it is read (a recording says it
   * is recording then). Not called if attaching fails before.
   */
  readonly onLive?:
    | ((planned: Readonly<PlannedProbes> & { readonly notes: readonly string[] }) => void)
    | undefined;
  /**
   * Plan lean sites where nothing is fetched (a recording): see ResolveOptions.lean; the bpf
   * engine then counts lost events in all, not per probe.
   */
  readonly lean?: boolean | undefined;
  /**
   * The events' fields are not read (a recording): an entry of a function timed through the
   * kernel's trampoline keeps the stack pointer it fetched for that (see #time()), rather
   * than being copied without it.
   */
  readonly readsNoFields?: boolean | undefined;
  /**
   * Calls (of functions whose returns are caught at their exits) still open when their
   * thread has ended are left so, not delivered as returns marked `unwound` at the end: a
   * recording's tree closes them as not returned (a process's exit ends its threads in the
   * calls they wait in, which no unwind left).
   */
  readonly openAtThreadEnd?: boolean | undefined;
  /**
   * Leave out the functions whose name (as stored, or demangled) matches one of these globs,
   * e.g. `_*` (fails when that leaves nothing).
   */
  readonly exclude?: readonly string[] | undefined;
}

/** What an attachment reads events from: a tracefs or a BPF ring-buffer stream. */
interface EventStream {
  poll(onEvent: (event: ProbeEvent) => void): number;
  /** Copies of the probes in a file replaced on disk (see ReplacedFiles). */
  attachMoved(move: (path: string, offset: bigint) => MovedProbe | undefined): number;
  stop(): void;
  stats(): StreamStats;
  close(): void;
}

export interface ConsumerOptions {
  /** Only events this returns true for reach the handler. */
  readonly filter?: ((event: ProbeEvent) => boolean) | undefined;
}

type Handler = (event: ProbeEvent) => void;

interface Consumer {
  readonly probe: string;
  readonly handler: Handler;
  readonly filter: ((event: ProbeEvent) => boolean) | undefined;
}

/** What a hidden entry probe's name adds to its function's. */
const HIDDEN_SUFFIX = ' (entry)';

interface Timing {
  readonly hidden: boolean;
  /**
   * Entry times not yet matched by a return, per thread (NO_RETURN for a call whose return
   * the kernel will not report, CONTINUED for a return of a call that went on).
   */
  readonly calls: Map<number, bigint[]>;
  /** The function's returns are paired by frame (caught at its exits), not here. */
  readonly byFrame: boolean;
  /** Its returns come through the kernel's return trampoline (see KERNEL_TRAMPOLINE_DEPTH). */
  readonly trampolined: boolean;
}

/** The entry time kept for a call the kernel sets no return trampoline for. */
const NO_RETURN = -1n;

/**
 * What is kept for an entry that goes on with a call (see #setsTrampoline()): the kernel set a
 * trampoline for it, whose return is the call's own, reported once.
 */
const CONTINUED = -2n;

/**
 * A thread's return trampolines as the kernel keeps them, newest last: the stack pointer at
 * each call's entry, and its function's pending calls (Timing.calls).
 */
interface KernelTrampolines {
  /** Low 32 bits of the stack pointer. */
  readonly sps: number[];
  readonly of: Map<number, bigint[]>[];
  /** Low 32 bits of the return address the call's entry found (the one the kernel replaced). */
  readonly returnAddresses: number[];
}

/** A call whose frame is open: who made it, and when. */
interface OpenCall {
  readonly pid: number;
  readonly tid: number;
  readonly comm: string;
  readonly timestampNs: bigint;
  /** The goroutine it was made on, for a goroutine's frames. */
  readonly goroutine: bigint | undefined;
}

/** The open calls of one function whose returns are caught at its exits. */
interface FunctionFrames {
  readonly calls: PendingCalls<OpenCall>;
  /** Its return probe's name and spec, for the events of calls an unwind ended. */
  probe: string;
  spec: string;
  /** Frames are kept per goroutine (else per thread). */
  readonly goroutine: boolean;
  /**
   * The function jumps back to its entry (ReturnPlan.loopsAtEntry): an entry at its call's
   * frame goes on with that call.
   */
  loops: boolean;
}

/** Return instances kept per thread and function: deeper recursion than this is not paired. */
const MAX_PENDING_CALLS = 1024;

/**
 * Traces probe specs: on tracefs by default (kernel uprobes through uprobe_events and the
 * ring buffer; root or write access to tracefs), on bpf with `engine: 'bpf'`, or on whichever
 * suits the number of probes with `engine: 'auto'` (what the CLI does as root).
 *
 * ```ts
 * const tracer = new Tracer();
 * await using attachment = await tracer.attach(['libc:malloc size=arg0:u64'], { pid: 1234 });
 * for await (const event of attachment.events()) console.log(event.fields.size);
 * ```
 */
export class Tracer {
  /**
   * Count hits per probe (and per key with `by`) in the kernel (bpf engine: root, or
   * CAP_BPF and CAP_PERFMON). The result is live: `read()` it at any time, `close()` it.
   */
  count(
    specs: string | readonly string[],
    options?: CountOptions,
  ): Promise<Aggregate<ProbeCount[]>> {
    return countHits(specs, options);
  }

  /** A histogram of a fetched value per probe, in the kernel (bpf engine). */
  histogram(
    specs: string | readonly string[],
    value: string,
    options?: HistogramOptions,
  ): Promise<Aggregate<ProbeHistogram[]>> {
    return histogramOf(specs, value, options);
  }

  /** Entry-to-return time of each function, histogrammed in the kernel (bpf engine). */
  latency(
    specs: string | readonly string[],
    options?: LatencyOptions,
  ): Promise<Aggregate<ProbeHistogram[]>> {
    return latencyOf(specs, options);
  }

  /** Resolve the specs, define and enable their probes, and start streaming. */
  async attach(
    specs: string | readonly string[],
    options: AttachOptions = {},
  ): Promise<Attachment> {
    checkTargetOptions(options, 'trace');
    // The bpf engine keeps the plans while the kernel attaches the probes (written before
    // they are live all the same).
    const planWrites: (() => void)[] = [];
    const writePlans = () => {
      for (const write of planWrites.splice(0)) write();
    };
    let linking: (() => void) | undefined;
    /** What is done while the kernel attaches: the plans kept, the caller's whileLinking. */
    const meanwhile = () => {
      writePlans();
      const work = linking;
      linking = undefined;
      work?.();
    };
    const bufferSizeKb = options.bufferSizeKb ?? 4096;
    // One buffer for all CPUs, twice tracefs's per-CPU ones together: a record of the bpf
    // engine (who, when, the thread's name) is about twice the size.
    const bufferBytes = bufferSizeKb * 1024 * availableParallelism() * 2;
    // The bpf engine's ring buffer made first, while the heap is small (see
    // BpfStreamOptions.ring); one that cannot be made is made again, and said, by the stream.
    let ring = options.engine === 'bpf' ? ringAhead(bufferBytes) : undefined;
    const closeRing = () => {
      ring?.close();
      ring = undefined;
    };
    let planned: PlannedProbes;
    let sites: ProbeSite[];
    try {
      planned = await planProbes(typeof specs === 'string' ? [specs] : specs, {
        ...runPlanOptions(options),
        planWrites: options.engine === 'bpf' || options.engine === 'auto' ? planWrites : undefined,
        onProgress: options.onProgress,
        lean: options.lean,
        // Named while the kernel attaches them: the kernel needs no name.
        qualified: false,
      });
      sites = excludeSites(planned.sites, options.exclude);
    } catch (err) {
      closeRing();
      throw err;
    }
    const { skipped, warnings } = planned;
    const toStream = streamSitesFor(sites);
    const { streamSites, hidden } = toStream;
    let named = false;
    /** The sites and stream sites named (once): before the probes are defined, or meanwhile. */
    const name = () => {
      if (named) return;
      named = true;
      sites = qualifyLater(planned.sites, sites, toStream);
    };
    const whileLinking = options.whileLinking;
    linking = () => {
      name();
      whileLinking?.(sites);
    };
    const engine = chooseEngine(options.engine, streamSites, options.onNotice);
    // tracefs defines each probe by its name.
    if (engine === 'tracefs') name();
    // The tracefs engine defines its probes in tracefs (and first removes what a killed
    // upscope left there); the bpf engine never reads it (it follows processes on raw
    // tracepoints), so CAP_BPF and CAP_PERFMON are enough for it.
    const following = options.pid !== undefined || options.command !== undefined;
    const tracefs = engine === 'tracefs' ? ensureTracefs() : undefined;
    if (engine === 'tracefs') cleanStaleGroups(tracefs!, { notice: options.onNotice });
    let launched: Awaited<ReturnType<typeof launchStopped>> | undefined;
    try {
      launched =
        options.command === undefined
          ? undefined
          : await launchStopped(options.command, { stdout: options.commandStdout });
    } catch (err) {
      closeRing();
      writePlans();
      throw err;
    }
    try {
      const covered = coverage(options, launched?.pid);
      // The stream owns the ring from here (and closes it when it cannot open).
      const given = ring;
      ring = undefined;
      const opened =
        engine === 'bpf'
          ? await BpfStream.openAsync(
              streamSites,
              {
                follow: following
                  ? { pids: covered.pids ?? [], startAtExecOf: covered.startAtExecOf }
                  : undefined,
                filters: { exclude: covered.exclude },
                bufferBytes,
                ring: given,
                mode: options.attachMode,
                lostInAll: options.lean,
              },
              meanwhile,
            )
          : undefined;
      const stream: EventStream =
        opened ??
        TracefsStream.open(streamSites, {
          tracefs: tracefs!,
          // The kernel filters by thread: every thread of the processes, and with -c the
          // command's one.
          pids:
            launched !== undefined
              ? [launched.pid]
              : covered.pids?.flatMap((pid) => threadsOrNone(pid, pid === options.pid)),
          followForks: true,
          excludePids: covered.exclude.flatMap((pid) => threadsOrNone(pid, false)),
          bufferSizeKb,
          startAtExecOf: launched?.pid,
          onDefined:
            options.onProgress === undefined
              ? undefined
              : (done, total) =>
                  options.onProgress?.({ done, total, target: 'tracefs', attaching: true }),
        });
      meanwhile();
      options.onLive?.({ sites, skipped, warnings, notes: covered.notes });
      const attachment = new Attachment(
        stream,
        engine,
        { sites, skipped, warnings },
        streamSites,
        hidden,
        options,
        launched,
        covered.notes,
      );
      const pid = launched?.pid ?? options.pid;
      // Files replaced on disk while it runs are probed again (kernel probes are on inodes).
      attachment.watchReplaced(
        ReplacedFiles.watch(sites, {
          attach: (move) => stream.attachMoved(move),
          notice: options.onNotice ?? (() => {}),
          processes: pid === undefined ? undefined : () => processFamily(pid),
          unsafe: options.unsafe,
          debugDirs: options.debugDirs,
        }),
      );
      try {
        await options.whileAttaching?.(attachment);
      } catch (err) {
        await attachment.close();
        throw err;
      }
      launched?.resume();
      return attachment;
    } catch (err) {
      closeRing();
      launched?.kill();
      throw err;
    } finally {
      writePlans();
    }
  }
}

/**
 * The engine to run `streamSites` on: the one asked for, or with `auto` tracefs unless there
 * are SAY_REMOVAL_FROM of them or more (tracefs removes them one at a time: 2 s and more, see
 * removalTime; the bpf engine puts a file's probes in one uprobe_multi link, removed with one
 * wait) and the bpf engine can take them all here (a handler loads, a ring buffer and a
 * uprobe_multi link can be made: without uprobe_multi each probe is a perf event, removed one
 * at a time as well; at most MAX_STREAM_FETCHES fetches a probe). Either way, what tracefs
 * will cost to remove is said when it is over the limit.
 */
function chooseEngine(
  asked: AttachOptions['engine'],
  streamSites: readonly StreamSite[],
  notice: ((text: string) => void) | undefined,
): 'tracefs' | 'bpf' {
  if (asked === 'bpf') return 'bpf';
  const events = streamSites.length;
  if (events < SAY_REMOVAL_FROM) return 'tracefs';
  const removal = `tracefs removes these ${grouped(events)} probes one at a time, about ${removalTime(events)} at the end`;
  if (asked !== 'auto') {
    notice?.(`${removal}; the bpf engine (--engine bpf) removes them at once`);
    return 'tracefs';
  }
  const features = probeBpfFeatures();
  if (features.program !== 0 || features.ringBuffer !== 0 || features.uprobeMulti !== 0) {
    notice?.(
      `${removal}; the bpf engine would remove them at once, but cannot run here (upscope doctor says why)`,
    );
    return 'tracefs';
  }
  const many = streamSites.find((site) => site.fetches.length > MAX_STREAM_FETCHES);
  if (many !== undefined) {
    notice?.(
      `${removal}; the bpf engine would remove them at once, but streams at most ${MAX_STREAM_FETCHES} fetches a probe (${many.probe} has ${many.fetches.length})`,
    );
    return 'tracefs';
  }
  // A string is cut shorter there: said, as what the choice costs.
  const strings = streamSites.some((site) => site.fetches.some(isStringType))
    ? ` (strings are cut at ${STREAM_STRING_BYTES - 1} bytes there, and end with "${CUT_MARK}"; tracefs reads up to 4,095)`
    : '';
  notice?.(`using the bpf engine${strings}: ${removal}; --engine tracefs to use it anyway`);
  return 'bpf';
}

/**
 * The threads of a process (none when it is gone, unless `required`: then the error that it
 * does not exist).
 */
function threadsOrNone(pid: number, required: boolean): number[] {
  try {
    return threadsOf(pid);
  } catch (err) {
    if (required) throw err;
    return [];
  }
}

/**
 * Throws ProbeError when both a process and a command are given, `children` without a
 * process, `includeSelf` with one, or the process does not exist: before anything is resolved
 * or attached.
 */
export function checkTargetOptions(
  options: {
    readonly pid?: number | undefined;
    readonly command?: string | undefined;
    readonly children?: boolean | undefined;
    readonly includeSelf?: boolean | undefined;
  },
  verb: string,
): void {
  if (options.pid !== undefined && options.command !== undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot ${verb} both a process and a command: give -p or -c, not both`,
    );
  }
  if (options.children === true && options.pid === undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot take the children of a process without one: --children goes with -p PID`,
      { hints: ['A command given with -c is followed with every child it starts anyway'] },
    );
  }
  if (
    options.includeSelf === true &&
    (options.pid !== undefined || options.command !== undefined)
  ) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot take upscope's own process in a run over one process: --include-self goes with a run over every process (no -p or -c)`,
    );
  }
  if (options.pid !== undefined && !existsSync(`/proc/${options.pid}`)) {
    throw new ProbeError(
      'ERR_PROCESS_NOT_FOUND',
      `Cannot find process ${options.pid}: no such process`,
      { hints: ['List running processes with: ps -e'] },
    );
  }
}

/** A site to stream, and what its events mean for pairing calls with their returns. */
type NamedSite = StreamSite & { readonly role: StreamRole };

const NO_FETCHES: NamedSite['fetches'] = [];

/**
 * What a streamed probe's events are: the user's own (`probe`); a return caught at one of
 * the function's exits (`return`, paired by frame); or a hidden entry that opens a call's
 * frame (`frame-entry`, for returns caught at exits) or times it (`timing-entry`, for returns
 * through the kernel's trampoline, paired by thread).
 */
type StreamRole =
  | { readonly kind: 'probe' }
  | { readonly kind: 'return'; readonly function: string; readonly exit: 'ret' | 'tail-call' }
  /** `loops`: the function jumps back to its entry (ReturnPlan.loopsAtEntry). */
  | { readonly kind: 'frame-entry'; readonly function: string; readonly loops: boolean }
  /** A probe's own entry that also opens its function's frames (one uprobe, not two). */
  | { readonly kind: 'entry-frame'; readonly function: string; readonly loops: boolean }
  | { readonly kind: 'timing-entry' };

/**
 * A stream site of `site`: the fields the engines and the attachment read, no more (a copy of
 * the whole site per attach point was most of the time to attach every function of a large
 * program).
 */
function namedSite(
  site: ProbeSite,
  fields: Pick<NamedSite, 'kind' | 'fetches' | 'attach' | 'probe' | 'role'> &
    Partial<Pick<NamedSite, 'fileOffset' | 'vaddr' | 'exit'>>,
): NamedSite {
  return {
    kind: fields.kind,
    target: site.target,
    fileOffset: fields.fileOffset ?? site.fileOffset,
    vaddr: fields.vaddr ?? site.vaddr,
    usdt: site.usdt,
    fetches: fields.fetches,
    attach: fields.attach,
    symbol: site.symbol,
    symbolOffset: site.symbolOffset,
    spec: site.spec,
    probe: fields.probe,
    exit: fields.exit,
    role: fields.role,
  };
}

/** The role of a probe's own site: one object for them all. */
const PROBE_ROLE: StreamRole = Object.freeze({ kind: 'probe' });

/**
 * Sites to stream: each site's uprobes (see attachPoints(): one, or one per exit of a return
 * probe caught in place plus the entry that opens its frame), and a hidden entry for each
 * return probe through the trampoline, to time its calls.
 */
function streamSitesFor(sites: readonly ProbeSite[]): {
  streamSites: NamedSite[];
  hidden: Set<string>;
  /** Per stream site, the site it is of (see qualifyLater()). */
  sources: ProbeSite[];
} {
  const key = (site: { readonly target: { readonly path: string }; readonly fileOffset: bigint }) =>
    `${site.target.path}:${site.fileOffset}`;
  const streamSites: NamedSite[] = [];
  const hidden = new Set<string>();
  const sources: ProbeSite[] = [];
  /**
   * Sites by file and offset, the offset as a number (a string key per site was a part of
   * attaching every function of a large program).
   */
  const places = <V>() => {
    const byFile = new Map<string, Map<number, V>>();
    return {
      in(path: string): Map<number, V> {
        let at = byFile.get(path);
        if (at === undefined) {
          at = new Map();
          byFile.set(path, at);
        }
        return at;
      },
      get: (path: string, offset: number): V | undefined => byFile.get(path)?.get(offset),
    };
  };
  /**
   * A return probe through the trampoline is timed from its entry, probed or hidden, which
   * fetches the stack pointer and the return address: the kernel's trampolines are followed by
   * them (see #time() and #setsTrampoline()).
   */
  const timed = (site: ProbeSite) => site.kind === 'return' && site.returns?.mode !== 'sites';
  const timedAt = places<true>();
  for (const site of sites) {
    if (timed(site)) timedAt.in(site.target.path).set(Number(site.fileOffset), true);
  }
  /**
   * A site's fetches with the stack pointer's and the return address's after them: one array
   * for the sites that fetch the same (every entry of a recording fetches nothing), whose
   * record layout the stream then works out once, not once per site. `unjoined` gives an
   * array's fetches without them.
   */
  const withStackPointer = new Map<NamedSite['fetches'], NamedSite['fetches']>();
  const unjoined = new Map<NamedSite['fetches'], NamedSite['fetches']>();
  const timedFetches = (fetches: NamedSite['fetches']) => {
    let joined = withStackPointer.get(fetches);
    if (joined === undefined) {
      joined = [...fetches, stackPointerFetch(), returnAddressFetch()];
      withStackPointer.set(fetches, joined);
      unjoined.set(joined, fetches);
    }
    return joined;
  };
  /** The stream sites of plain entry probes, by file and offset: frames open there too. */
  const entryAt = places<number>();
  // Each kind of site made by a function of its own, called from a loop: one loop doing both
  // was optimized, by V8, for the entries before it met the first return, and then
  // deoptimized and optimized again at each new branch (four times for node's functions).
  /** An entry, or a return through the trampoline: one uprobe at the site. */
  const addPlain = (site: ProbeSite, probe: string) => {
    // attachPoints()'s one point, without the array and the point made for it; an entry
    // that times a return through the trampoline fetches what follows the trampolines too.
    let fetches = site.fetches;
    if (site.kind === 'entry') {
      const offset = Number(site.fileOffset);
      entryAt.in(site.target.path).set(offset, streamSites.length);
      if (timedAt.get(site.target.path, offset) === true) fetches = timedFetches(fetches);
    }
    sources.push(site);
    streamSites.push(
      namedSite(site, {
        kind: site.kind,
        fetches,
        attach: site.kind === 'return' ? 'uretprobe' : 'uprobe',
        probe,
        role: PROBE_ROLE,
      }),
    );
  };
  /** A return caught at its exits: an uprobe at each, and the entry that opens its frames. */
  const addExits = (site: ProbeSite, probe: string, returns: ReturnPlan) => {
    // One key and one role of each kind for all of a site's points (a function may have tens
    // of exits): a string and an object per point were a part of attaching a large program.
    let functionKey: string | undefined;
    let retRole: StreamRole | undefined;
    let tailCallRole: StreamRole | undefined;
    // attachPoints()'s points (the exits, then the entry that opens the frame), without an
    // object for each, the exits read by index (see exitsByIndex()).
    const frame = frameFetches(returns.frames);
    const exits = exitsByIndex(returns);
    for (let e = 0; e < exits.exitCount; e++) {
      const exit = exits.exitKind(e);
      let returnRole = exit === 'ret' ? retRole : tailCallRole;
      if (returnRole === undefined) {
        functionKey ??= key(site);
        returnRole = { kind: 'return', function: functionKey, exit };
        if (exit === 'ret') retRole = returnRole;
        else tailCallRole = returnRole;
      }
      sources.push(site);
      streamSites.push(
        namedSite(site, {
          kind: site.kind,
          fileOffset: exits.exitFileOffset(e),
          vaddr: exits.exitVaddr(e),
          fetches: exitFetches(site, exit, frame),
          attach: 'uprobe',
          probe,
          exit: exit === 'tail-call' ? 'tail-call' : undefined,
          role: returnRole,
        }),
      );
    }
    functionKey ??= key(site);
    const loops = returns.loopsAtEntry === true;
    // The function's entry is probed already (entry and return asked for, as a recording
    // does): that probe opens the frames as well, with the frame's fields fetched there.
    const at = entryAt.get(site.target.path, Number(returns.entry.fileOffset));
    const entry = at === undefined ? undefined : streamSites[at]!;
    if (entry !== undefined && entry.role.kind === 'probe') {
      // Its own fetches (not those a trampoline's return has it fetch).
      const own = unjoined.get(entry.fetches) ?? entry.fetches;
      // The entry's own fields, written out (a spread of each was a part of attaching
      // every function of a large program).
      streamSites[at!] = {
        kind: entry.kind,
        target: entry.target,
        fileOffset: entry.fileOffset,
        vaddr: entry.vaddr,
        usdt: entry.usdt,
        // The frame's fields alone, shared, where the entry fetches nothing (a recording):
        // the stream works out a record's layout once per array.
        fetches: own.length === 0 ? frame : [...own, ...frame],
        attach: entry.attach,
        symbol: entry.symbol,
        symbolOffset: entry.symbolOffset,
        spec: entry.spec,
        probe: entry.probe,
        exit: entry.exit,
        role: { kind: 'entry-frame', function: functionKey, loops },
      };
      return;
    }
    const name = `${probe}${HIDDEN_SUFFIX}`;
    hidden.add(name);
    sources.push(site);
    streamSites.push(
      namedSite(site, {
        kind: 'entry',
        fileOffset: returns.entry.fileOffset,
        vaddr: returns.entry.vaddr,
        fetches: frame,
        attach: 'uprobe',
        probe: name,
        role: { kind: 'frame-entry', function: functionKey, loops },
      }),
    );
  };
  for (const site of sites) {
    const returns = site.returns;
    if (site.kind !== 'return' || returns === undefined || returns.mode === 'trampoline') {
      addPlain(site, probeName(site));
    } else {
      addExits(site, probeName(site), returns);
    }
  }
  // A return through the trampoline whose entry is not probed is timed from a hidden one.
  for (const site of sites) {
    if (!timed(site)) continue;
    const at = entryAt.in(site.target.path);
    const offset = Number(site.fileOffset);
    if (at.has(offset)) continue;
    at.set(offset, streamSites.length);
    const probe = `${probeName(site)}${HIDDEN_SUFFIX}`;
    hidden.add(probe);
    sources.push(site);
    streamSites.push(
      namedSite(site, {
        kind: 'entry',
        fetches: timedFetches(NO_FETCHES),
        attach: 'uprobe',
        probe,
        role: { kind: 'timing-entry' },
      }),
    );
  }
  return { streamSites, hidden, sources };
}

/** A bpf stream's ring buffer made ahead, or undefined where it cannot be (said by the stream). */
function ringAhead(bytes: number): RingBuffer | undefined {
  try {
    return BpfStream.ring(bytes);
  } catch {
    return undefined;
  }
}

/**
 * The names qualifyNames() gives `planned` (planned without them), put on `sites` (those of
 * them not excluded) and, in place, on the stream sites made of them; returns the sites
 * named. Done while the kernel attaches the probes, which need no name: for every function
 * of a large program it took a tenth of a second before them.
 */
function qualifyLater(
  planned: readonly ProbeSite[],
  sites: ProbeSite[],
  stream: { streamSites: NamedSite[]; hidden: Set<string>; sources: readonly ProbeSite[] },
): ProbeSite[] {
  const renamed = new Map<ProbeSite, ProbeSite>();
  qualifyNames(planned).forEach((site, index) => {
    if (site !== planned[index]) renamed.set(planned[index]!, site);
  });
  if (renamed.size === 0) return sites;
  const { streamSites, hidden, sources } = stream;
  for (let index = 0; index < streamSites.length; index++) {
    const source = sources[index]!;
    const site = renamed.get(source);
    if (site === undefined) continue;
    const old = streamSites[index]!;
    // A hidden entry's name is its site's with HIDDEN_SUFFIX (see streamSitesFor()).
    const unseen = old.probe === `${probeName(source)}${HIDDEN_SUFFIX}`;
    const probe = unseen ? `${probeName(site)}${HIDDEN_SUFFIX}` : probeName(site);
    if (unseen) {
      hidden.delete(old.probe);
      hidden.add(probe);
    }
    streamSites[index] = { ...old, probe };
  }
  return sites.map((site) => renamed.get(site) ?? site);
}

/**
 * A probe's name in events: `parse_request`, `main+0x1a`, `ns::Class::method(int)` (demangled),
 * the address without a symbol, or `provider:name` for a USDT probe; followed by what tells it
 * from another site of the same name (`rust_vars::twice (0x14650)`: qualifyNames()).
 */
export function probeName(site: ProbeSite): string {
  const name = siteName(site);
  return site.nameQualifier === undefined ? name : `${name} (${site.nameQualifier})`;
}

/**
 * Live probes. Events go to consumers registered with on() as they are read, and to one
 * events() iterator. The attachment ends (and removes everything it defined) on close(), on
 * the abort signal, or when the traced command or process exits.
 */
export class Attachment {
  /** The engine the probes run on (`auto` chose one). */
  readonly engine: 'tracefs' | 'bpf';
  readonly sites: readonly ProbeSite[];
  /** Sites patterns matched that cannot be probed, left out (see `strict`). */
  readonly skipped: readonly SkippedSite[];
  /** What the user should know of the plan (see PlannedProbes.warnings). */
  readonly warnings: readonly ProbeError[];
  /** The traced command's pid, with `-c`. */
  readonly commandPid: number | undefined;
  /** Resolves when the attachment has ended and everything is removed. */
  readonly ended: Promise<void>;
  readonly #stream: EventStream;
  readonly #hidden: Set<string>;
  readonly #consumers: Consumer[] = [];
  /** Per probe name: the entry times waiting for their return, per thread (shared by a
   * function's entry, hidden or not, and its return). */
  readonly #timing = new Map<string, Timing>();
  /**
   * Per thread: the return trampolines the kernel has set, newest last, as it keeps them:
   * the stack pointer at the call's entry, and the function's pending calls.
   */
  readonly #trampolines = new Map<number, KernelTrampolines>();
  #returnsLeftOut = 0;
  /** The events keep their frame fields (AttachOptions.readsNoFields). */
  readonly #keepFrameFields: boolean;
  /** AttachOptions.openAtThreadEnd. */
  readonly #openAtThreadEnd: boolean;
  /** Per function whose returns are caught at its exits: its open calls. */
  readonly #frames = new Map<string, FunctionFrames>();
  /** Per probe name: the function whose frames its events open (hidden entries) or close. */
  readonly #frameRoles = {
    /** Hidden entries, by probe name: they open calls. */
    entry: new Map<string, FunctionFrames>(),
    /** Returns caught at exits, by probe name: they close them. */
    return: new Map<string, FunctionFrames>(),
  };
  /** Entry probes of the user's that open their function's frames too: delivered as well. */
  readonly #opensAndDelivers = new Set<string>();
  readonly #launched: LaunchedCommand | undefined;
  readonly #killAfterMs: number;
  readonly #watchedPid: number | undefined;
  readonly #timer: NodeJS.Timeout;
  /** What the user should know about which processes are covered. */
  readonly notes: readonly string[];
  /** Whether the attachment is ending the command (so its end is not its own), or it is gone. */
  #ending = false;
  #commandGone = false;
  #queue: ProbeEvent[] = [];
  #iterating = false;
  #draining = false;
  #wake: (() => void) | undefined;
  #closed = false;
  #error: unknown;
  #finalStats: StreamStats | undefined;
  #exit: Exit | undefined;
  #targetExited = false;
  #replaced: ReplacedFiles | undefined;
  #resolveEnded!: () => void;
  /** Says what removing the probes will take, when it is long enough to be noticed. */
  readonly #removal: (() => void) | undefined;

  constructor(
    stream: EventStream,
    engine: 'tracefs' | 'bpf',
    { sites, skipped, warnings }: PlannedProbes,
    streamSites: readonly (StreamSite & { readonly role?: StreamRole })[],
    hidden: Set<string>,
    options: AttachOptions,
    launched: LaunchedCommand | undefined,
    notes: readonly string[] = [],
  ) {
    this.#stream = stream;
    this.engine = engine;
    this.#removal =
      engine === 'tracefs' && streamSites.length >= SAY_REMOVAL_FROM
        ? () =>
            options.onNotice?.(
              `removing ${grouped(streamSites.length)} probes: tracefs removes them one at a time, about ${removalTime(streamSites.length)}`,
            )
        : undefined;
    this.notes = notes;
    this.#killAfterMs = options.killAfterMs ?? DEFAULT_KILL_AFTER_MS;
    this.sites = sites;
    this.skipped = skipped;
    this.warnings = warnings;
    this.#hidden = hidden;
    this.#keepFrameFields = options.readsNoFields === true;
    this.#openAtThreadEnd = options.openAtThreadEnd === true;
    for (const site of streamSites) {
      const role = site.role;
      if (role?.kind === 'entry-frame') this.#opensAndDelivers.add(site.probe);
      else if (role?.kind !== 'return' && role?.kind !== 'frame-entry') continue;
      let frames = this.#frames.get(role.function);
      if (frames === undefined) {
        const goroutine = site.fetches.some((f) => f.name === FRAME_FIELDS.goroutine);
        frames = {
          calls: new PendingCalls(MAX_PENDING_CALLS),
          probe: '',
          spec: '',
          goroutine,
          loops: false,
        };
        this.#frames.set(role.function, frames);
      }
      if (role.kind !== 'return' && role.loops) frames.loops = true;
      if (role.kind === 'return') {
        frames.probe = site.probe;
        frames.spec = site.spec;
      }
      (role.kind === 'return' ? this.#frameRoles.return : this.#frameRoles.entry).set(
        site.probe,
        frames,
      );
    }
    const byFunction = new Map<string, Map<number, bigint[]>>();
    const baseOf = (probe: string) =>
      hidden.has(probe) ? probe.slice(0, -HIDDEN_SUFFIX.length) : probe;
    const trampolined = new Set(
      streamSites
        .filter((site) => site.kind === 'return' && site.role?.kind !== 'return')
        .map((site) => baseOf(site.probe)),
    );
    for (const site of streamSites) {
      const kind = site.role?.kind;
      if (kind === 'frame-entry' || kind === 'return' || kind === 'entry-frame') continue;
      const base = baseOf(site.probe);
      let calls = byFunction.get(base);
      if (calls === undefined) {
        calls = new Map();
        byFunction.set(base, calls);
      }
      this.#timing.set(site.probe, {
        hidden: hidden.has(site.probe),
        calls,
        byFrame: this.#frameRoles.return.has(site.probe),
        trampolined: trampolined.has(base),
      });
    }
    this.#launched = launched;
    this.commandPid = launched?.pid;
    this.#watchedPid = options.pid;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
    this.#timer = setInterval(() => this.#tick(), options.pollIntervalMs ?? 25);
    options.signal?.addEventListener('abort', () => void this.close(), { once: true });
    launched?.exited.then((exit) => {
      // An end the attachment caused (SIGTERM at its close) is not the command's own.
      if (!this.#ending) this.#exit = exit;
      void this.close();
    });
  }

  /** @internal The watch for probed files replaced on disk, closed with the attachment. */
  watchReplaced(replaced: ReplacedFiles): void {
    if (this.#closed) replaced.close();
    else this.#replaced = replaced;
  }

  /** Why reading failed, when it did (the attachment then ended). */
  get error(): unknown {
    return this.#error;
  }

  /**
   * How the traced command ended (with `-c`), once it has, when it ended by itself (undefined
   * when the attachment closed first and ended it).
   */
  get exit(): Exit | undefined {
    return this.#exit;
  }

  /** Whether the traced process (`pid`) ended, which ended the attachment. */
  get targetExited(): boolean {
    return this.#targetExited;
  }

  /** Call `handler` for each event of `probe` ('*' for all) that passes `filter`. */
  on(probe: string, handler: Handler, options: ConsumerOptions = {}): () => void {
    const consumer: Consumer = { probe, handler, filter: options.filter };
    this.#consumers.push(consumer);
    // With consumers and no iterator, nothing would ever take the queue.
    if (!this.#iterating) this.#queue = [];
    return () => {
      const at = this.#consumers.indexOf(consumer);
      if (at >= 0) this.#consumers.splice(at, 1);
    };
  }

  /**
   * Every event, in the order read, until the attachment ends; throws if reading failed.
   * Events are kept for the iterator from the start, unless consumers registered with on()
   * take them before any iterator is started.
   */
  async *events(): AsyncGenerator<ProbeEvent, void, undefined> {
    for await (const batch of this.batches()) yield* batch;
  }

  /** The same as events(), a batch (all the events of one read of the buffers) at a time. */
  async *batches(): AsyncGenerator<readonly ProbeEvent[], void, undefined> {
    this.#iterating = true;
    for (;;) {
      if (this.#queue.length > 0) {
        const batch = this.#queue;
        this.#queue = [];
        yield batch;
        continue;
      }
      if (this.#closed) {
        if (this.#error !== undefined) throw this.#error;
        return;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }

  /** Delivered, lost and missed, in all and per probe (hidden timing probes left out). */
  stats(): StreamStats {
    const stats = this.#finalStats ?? this.#stream.stats();
    const hidden = stats.perProbe.filter((p) => this.#hidden.has(p.probe));
    return {
      ...stats,
      delivered: stats.delivered - hidden.reduce((sum, p) => sum + p.delivered, 0),
      perProbe: stats.perProbe.filter((p) => !this.#hidden.has(p.probe)),
    };
  }

  /**
   * Stop, deliver what is still buffered, and remove every probe and the instance; and end
   * the command (with `command`) as a user would: its process group gets SIGTERM (also what
   * is left of it once the command has exited by itself; before the probes are removed), and
   * SIGKILL after `killAfterMs`. `ended` resolves once it is gone. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return this.ended;
    if (this.#draining) {
      // Called by a consumer: end once the read under way is done.
      queueMicrotask(() => void this.close());
      return this.ended;
    }
    this.#closed = true;
    clearInterval(this.#timer);
    this.#replaced?.close();
    // A command still running gets its SIGTERM before its probes are removed: the kernel
    // removes a return probe only once no call holds on to it, and a call of a function that
    // never returns (main) held on for as long as the program called probed functions (see
    // BpfSession.detach()). What it does from here is left out (see the streams' stop()).
    const ending = this.#endCommand();
    try {
      this.#removal?.();
      this.#stream.stop();
      this.#drain(true);
      this.#finalStats = this.#stream.stats();
    } finally {
      this.#stream.close();
      this.#wake?.();
      void ending.then(
        () => this.#resolveEnded(),
        () => this.#resolveEnded(),
      );
    }
    return this.ended;
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
   * The same, synchronously, for exit handlers: nothing more is delivered, and a command not
   * ended yet is killed (SIGKILL to its process group).
   */
  closeSync(): void {
    if (!this.#commandGone) this.#launched?.kill();
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#replaced?.close();
    this.#stream.close();
    this.#wake?.();
    this.#resolveEnded();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #tick(): void {
    try {
      this.#drain();
      if (this.#watchedPid !== undefined && !this.#closed && processEnded(this.#watchedPid)) {
        this.#targetExited = true;
        void this.close();
      }
    } catch (err) {
      // A reader failing mid-trace ends the trace; events() rethrows the error at its end.
      this.#error = err;
      void this.close().catch(() => {});
    }
  }

  #drain(last = false): void {
    const queue = this.#iterating || this.#consumers.length === 0;
    this.#draining = true;
    try {
      this.#poll(queue, last);
    } finally {
      this.#draining = false;
    }
    if (this.#queue.length > 0) this.#wake?.();
  }

  #poll(queue: boolean, last = false): void {
    const deliver = (timed: ProbeEvent) => {
      for (const consumer of this.#consumers) {
        if (consumer.probe !== '*' && consumer.probe !== timed.probe) continue;
        if (consumer.filter !== undefined && !consumer.filter(timed)) continue;
        consumer.handler(timed);
      }
      if (queue) this.#queue.push(timed);
    };
    const delivered = this.#stream.poll((event) => this.#pair(event, deliver));
    // At the end, calls whose thread has ended without returning were left by an unwind (a
    // cancelled thread's) or by the thread's end.
    if (last) this.#closeEnded(deliver);
    // Fault tests stop here: probes live and events flowing.
    if (delivered > 0) pausePoint('tracing');
  }

  /**
   * Pair a return caught at an exit with its call, by frame: hidden frame entries open calls,
   * returns close them, and calls an unwind left are delivered as returns marked `unwound`
   * (before the event that showed it). Events of other probes go to #time().
   */
  #pair(event: ProbeEvent, deliver: (event: ProbeEvent) => void): void {
    // Keyed by the probe's name as is: the event carries the site's own string, whose hash
    // is kept (a key made per event cost a string and its hashing at every call recorded).
    const opens = event.kind !== 'return';
    const frames = (opens ? this.#frameRoles.entry : this.#frameRoles.return).get(event.probe);
    if (frames === undefined) {
      const timed = this.#time(event);
      if (timed !== undefined) deliver(timed);
      return;
    }
    const fields: Record<string, FieldValue> = {};
    let sp: FieldValue = null;
    let goroutine: FieldValue = null;
    let stackTop: FieldValue = null;
    for (const name in event.fields) {
      const value = event.fields[name]!;
      if (name === FRAME_FIELDS.sp) sp = value;
      else if (name === FRAME_FIELDS.goroutine) goroutine = value;
      else if (name === FRAME_FIELDS.stackTop) stackTop = value;
      else fields[name] = value;
    }
    const frame = frameOf(frames.goroutine, event, sp, goroutine, stackTop);
    const unwoundAt = (calls: OpenCall[]) => {
      for (const call of calls) deliver(unwoundEvent(frames, call, event.timestampNs));
    };
    const g = frames.goroutine && typeof goroutine === 'bigint' ? goroutine : undefined;
    if (opens) {
      // Its function went back to its entry within the call open there: no call begins.
      const left =
        frames.loops && frame !== undefined
          ? frames.calls.goesOn(frame.owner, frame.depth)
          : undefined;
      if (left !== undefined) {
        unwoundAt(left);
        return;
      }
      if (frame !== undefined) {
        const call: OpenCall = {
          pid: event.pid,
          tid: event.tid,
          comm: event.comm,
          timestampNs: event.timestampNs,
          goroutine: g,
        };
        unwoundAt(frames.calls.enter(frame.owner, frame.depth, call));
      }
      if (this.#opensAndDelivers.has(event.probe)) {
        deliver(withTiming(event, fields, undefined, g));
      }
      return;
    }
    const { call, unwound } =
      frame === undefined
        ? { call: undefined, unwound: [] }
        : frames.calls.leave(frame.owner, frame.depth);
    unwoundAt(unwound);
    deliver(
      withTiming(
        event,
        fields,
        call === undefined ? undefined : event.timestampNs - call.timestampNs,
        g,
      ),
    );
  }

  /**
   * The open calls of threads (or processes, for goroutines) that have ended: unwound,
   * unless they are left open (AttachOptions.openAtThreadEnd).
   */
  #closeEnded(deliver: (event: ProbeEvent) => void): void {
    if (this.#openAtThreadEnd) return;
    const now = process.hrtime.bigint();
    for (const frames of this.#frames.values()) {
      const ended = frames.calls.drop((owner) => {
        const [pid, tid] = owner.split(':');
        return !existsSync(frames.goroutine ? `/proc/${pid}` : `/proc/${pid}/task/${tid}`);
      });
      for (const call of ended) deliver(unwoundEvent(frames, call, now));
    }
  }

  /** Pair returns with the entry of the same function on the same thread; hide timing probes. */
  #time(event: ProbeEvent): ProbeEvent | undefined {
    const timing = this.#timing.get(event.probe);
    if (timing === undefined || event.kind === 'instruction' || event.kind === 'usdt') {
      return event;
    }
    if (event.kind === 'entry') {
      if (timing.byFrame) return timing.hidden ? undefined : event;
      let stack = timing.calls.get(event.tid);
      if (stack === undefined) {
        stack = [];
        timing.calls.set(event.tid, stack);
      }
      if (!timing.trampolined) {
        if (stack.length < MAX_PENDING_CALLS) stack.push(event.timestampNs);
        return timing.hidden ? undefined : event;
      }
      const { set, continues } = this.#setsTrampoline(event, timing.calls);
      if (continues) {
        // No call: the function went back to its first instruction (a loop there).
        if (set && stack.length < MAX_PENDING_CALLS) stack.push(CONTINUED);
        return undefined;
      }
      if (!set) this.#returnsLeftOut++;
      if (stack.length < MAX_PENDING_CALLS) stack.push(set ? event.timestampNs : NO_RETURN);
      if (timing.hidden) return undefined;
      let shown = event;
      if (!this.#keepFrameFields) {
        const fields: Record<string, FieldValue> = {};
        for (const name in event.fields) {
          if (name !== FRAME_FIELDS.sp && name !== FRAME_FIELDS.returnAddress) {
            fields[name] = event.fields[name]!;
          }
        }
        shown = withTiming(event, fields, undefined);
      }
      return set ? shown : { ...shown, noReturn: true };
    }
    const stack = timing.calls.get(event.tid);
    // The calls made after this one that the kernel set no trampoline for have ended.
    while (stack !== undefined && stack.at(-1) === NO_RETURN) stack.pop();
    const entry = stack?.pop();
    if (timing.trampolined) this.#trampolineTaken(event.tid, timing.calls);
    // The trampoline of an entry that went on with its call: that call's return comes after.
    if (entry === CONTINUED) return undefined;
    if (entry === undefined) return event;
    return withTiming(event, event.fields, event.timestampNs - entry);
  }

  /**
   * Whether the kernel sets a return trampoline for the call `entry` opens (of the function
   * whose pending calls are `of`), as it does: none while the thread has
   * KERNEL_TRAMPOLINE_DEPTH set; else it first drops those a longjmp left (set at a stack
   * pointer not above this entry's), then sets this one. An entry at the stack pointer of the
   * last one set was jumped to by that call (a tail call): its return address is the
   * trampoline already, and the kernel keeps that one too (a chained return: both return at
   * once), so each function of a chain of tail calls holds one of the 64. (The one place this
   * differs from the kernel: a call whose trampoline is the last set, left by a longjmp
   * without one set after it, and a call then made at its stack pointer: taken for chained.)
   *
   * `continues`: the last one set is this function's, at this stack pointer, and the return
   * address the entry finds is not the one that call's entry found: the kernel's trampoline
   * replaced it, so no call was made. The function went back to its start within that call
   * (a loop whose head is its first instruction, a call to itself made a jump), and the entry
   * goes on with it; the kernel chains a trampoline to that call's, and both return at once.
   * (A call made again at the stack pointer of one a longjmp left finds its caller's return
   * address, as the one left found it: a call.)
   */
  #setsTrampoline(
    entry: ProbeEvent,
    of: Map<number, bigint[]>,
  ): { readonly set: boolean; readonly continues: boolean } {
    let kept = this.#trampolines.get(entry.tid);
    if (kept === undefined) {
      kept = { sps: [], of: [], returnAddresses: [] };
      this.#trampolines.set(entry.tid, kept);
    }
    const { sps } = kept;
    // The low 32 bits (stackPointerFetch(), a u32): compared by their wrapped difference.
    const field = entry.fields[FRAME_FIELDS.sp];
    const sp = typeof field === 'number' ? field : 0;
    const ra = entry.fields[FRAME_FIELDS.returnAddress];
    let returnAddress = typeof ra === 'number' ? ra : 0;
    const top = sps.length - 1;
    const chained = top >= 0 && sps[top] === sp;
    const continues = chained && kept.of[top] === of && kept.returnAddresses[top] !== returnAddress;
    // A chained trampoline stands for the call it goes on with: the address that call found.
    if (continues) returnAddress = kept.returnAddresses[top]!;
    if (sps.length >= KERNEL_TRAMPOLINE_DEPTH) return { set: false, continues };
    while (!chained && sps.length > 0 && ((sps[sps.length - 1]! - sp) | 0) <= 0) {
      sps.pop();
      kept.of.pop();
      kept.returnAddresses.pop();
    }
    sps.push(sp);
    kept.of.push(of);
    kept.returnAddresses.push(returnAddress);
    return { set: true, continues };
  }

  /** A return through the trampoline: the kernel drops its trampoline and those set after it. */
  #trampolineTaken(tid: number, of: Map<number, bigint[]>): void {
    const kept = this.#trampolines.get(tid);
    if (kept === undefined) return;
    const at = kept.of.lastIndexOf(of);
    if (at < 0) return;
    kept.of.length = at;
    kept.sps.length = at;
    kept.returnAddresses.length = at;
  }

  /**
   * Calls of functions whose returns come through the kernel's return trampoline that the
   * kernel set none for (made while 64 of their thread's were set): their returns are not
   * traced.
   */
  get returnsLeftOut(): number {
    return this.#returnsLeftOut;
  }
}

/** `event` with these fields and latency. */
function withTiming(
  event: ProbeEvent,
  fields: ProbeEvent['fields'],
  latencyNs: bigint | undefined,
  goroutine?: bigint | undefined,
): ProbeEvent {
  // Written out rather than spread: a spread with one more property gives V8 a slow object.
  return {
    probe: event.probe,
    spec: event.spec,
    kind: event.kind,
    pid: event.pid,
    tid: event.tid,
    cpu: event.cpu,
    timestampNs: event.timestampNs,
    comm: event.comm,
    fields,
    latencyNs,
    exit: event.exit,
    goroutine,
  };
}

/** Who owns a call's frame and how deep it is, from an event's frame fields. */
function frameOf(
  goroutine: boolean,
  event: ProbeEvent,
  sp: FieldValue,
  g: FieldValue,
  stackTop: FieldValue,
): { owner: string; depth: bigint } | undefined {
  if (typeof sp !== 'bigint') return undefined;
  if (!goroutine) return { owner: `${event.pid}:${event.tid}`, depth: threadDepth(sp) };
  if (typeof g !== 'bigint' || typeof stackTop !== 'bigint') return undefined;
  return { owner: `${event.pid}:${g}`, depth: goroutineDepth(stackTop, sp) };
}

/** The return event of a call an unwind (or its thread's end) left, seen at `timestampNs`. */
function unwoundEvent(frames: FunctionFrames, call: OpenCall, timestampNs: bigint): ProbeEvent {
  return {
    probe: frames.probe,
    spec: frames.spec,
    kind: 'return',
    pid: call.pid,
    tid: call.tid,
    cpu: -1,
    timestampNs,
    comm: call.comm,
    fields: {},
    latencyNs: undefined,
    exit: 'unwind',
    goroutine: call.goroutine,
  };
}
