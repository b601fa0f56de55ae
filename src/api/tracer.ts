import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import {
  type AttachMode,
  BpfStream,
  type BpfStreamSite,
  cleanStaleGroups,
  type MovedProbe,
  type StreamSite,
  TracefsStream,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import type { ProbeEvent, StreamStats } from '../events/index.js';
import {
  type Exit,
  ensureTracefs,
  type LaunchedCommand,
  launchStopped,
  pausePoint,
  processEnded,
  threadsOf,
} from '../host/index.js';
import {
  commandSearchOptions,
  type PlannedProbes,
  type ProbeSite,
  planProbes,
  type SkippedSite,
  siteName,
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
import { processFamily, ReplacedFiles } from './replaced-files.js';

export interface AttachOptions {
  /** Trace only this process (all its threads, and the threads and children it creates). */
  readonly pid?: number | undefined;
  /**
   * Start this command (a shell command line) stopped, trace only it and what it starts, then
   * let it run; the stream ends when it exits. Exclusive with `pid`.
   */
  readonly command?: string | undefined;
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
   * `tracefs` (uprobe_events and the tracing ring buffer; the default) or `bpf` (a BPF
   * handler per hit writing to a BPF ring buffer; root, or CAP_BPF and CAP_PERFMON).
   */
  readonly engine?: 'tracefs' | 'bpf' | undefined;
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
  /** Entry times not yet matched by a return, per thread. */
  readonly calls: Map<number, bigint[]>;
}

/** Return instances kept per thread and function: deeper recursion than this is not paired. */
const MAX_PENDING_CALLS = 1024;

/**
 * Traces probe specs. Today's engine is tracefs (kernel uprobes through uprobe_events and the
 * ring buffer); it needs root or write access to tracefs.
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
    const { sites, skipped } = await planProbes(typeof specs === 'string' ? [specs] : specs, {
      pid: options.pid,
      unsafe: options.unsafe,
      debugDirs: options.debugDirs,
      strict: options.strict,
      // The command's libraries are searched for as its dynamic linker will.
      ...(options.command === undefined ? {} : commandSearchOptions(options.command)),
    });
    // The tracefs engine defines its probes in tracefs (and first removes what a killed
    // upscope left there); the bpf engine defines nothing there, and reads it only to follow a
    // process (the sched tracepoints), so CAP_BPF and CAP_PERFMON are enough without -p or -c.
    const following = options.pid !== undefined || options.command !== undefined;
    const tracefs = options.engine !== 'bpf' || following ? ensureTracefs() : undefined;
    if (options.engine !== 'bpf') cleanStaleGroups(tracefs!);
    const launched =
      options.command === undefined ? undefined : await launchStopped(options.command);
    try {
      const pids =
        launched !== undefined
          ? [launched.pid]
          : options.pid !== undefined
            ? threadsOf(options.pid)
            : undefined;
      const { streamSites, hidden } = streamSitesFor(sites);
      const bufferSizeKb = options.bufferSizeKb ?? 4096;
      const stream: EventStream =
        options.engine === 'bpf'
          ? BpfStream.open(streamSites.map(bpfSite), {
              tracefs,
              // A process's threads share its id: the process is enough.
              pids: pids === undefined ? undefined : [launched?.pid ?? options.pid!],
              // One buffer for all CPUs, twice tracefs's per-CPU ones together: a record of
              // the bpf engine (who, when, the thread's name) is about twice the size.
              bufferBytes: bufferSizeKb * 1024 * availableParallelism() * 2,
              startAtExecOf: launched?.pid,
              mode: options.attachMode,
            })
          : TracefsStream.open(streamSites, {
              tracefs: tracefs!,
              pids,
              followForks: true,
              bufferSizeKb,
              startAtExecOf: launched?.pid,
            });
      const attachment = new Attachment(
        stream,
        { sites, skipped },
        streamSites,
        hidden,
        options,
        launched,
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
      launched?.resume();
      return attachment;
    } catch (err) {
      launched?.kill();
      throw err;
    }
  }
}

/**
 * Throws ProbeError when both a process and a command are given, or the process does not
 * exist: before anything is resolved or attached.
 */
export function checkTargetOptions(
  options: { readonly pid?: number | undefined; readonly command?: string | undefined },
  verb: string,
): void {
  if (options.pid !== undefined && options.command !== undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot ${verb} both a process and a command: give -p or -c, not both`,
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

/** Sites to stream: the user's, plus a hidden entry for each return probe, to time calls. */
type NamedSite = ProbeSite & StreamSite;

function streamSitesFor(sites: readonly ProbeSite[]): {
  streamSites: NamedSite[];
  hidden: Set<string>;
} {
  const key = (site: ProbeSite) => `${site.target.path}:${site.fileOffset}`;
  const entries = new Set(sites.filter((s) => s.kind === 'entry').map(key));
  const streamSites: NamedSite[] = sites.map((site) => ({ ...site, probe: probeName(site) }));
  const hidden = new Set<string>();
  for (const site of sites) {
    if (site.kind !== 'return' || entries.has(key(site))) continue;
    entries.add(key(site));
    const probe = `${probeName(site)}${HIDDEN_SUFFIX}`;
    hidden.add(probe);
    streamSites.push({ ...site, kind: 'entry', fetches: [], probe });
  }
  return { streamSites, hidden };
}

function bpfSite(site: NamedSite): BpfStreamSite {
  return {
    path: site.target.path,
    offset: site.fileOffset,
    attach: site.kind === 'return' ? 'return' : 'entry',
    refCtrOffset: site.usdt?.semaphoreFileOffset,
    fetches: [...site.fetches],
    probe: site.probe,
    spec: site.spec,
    kind: site.kind,
  };
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
  readonly sites: readonly ProbeSite[];
  /** Sites patterns matched that cannot be probed, left out (see `strict`). */
  readonly skipped: readonly SkippedSite[];
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
  readonly #launched: LaunchedCommand | undefined;
  readonly #watchedPid: number | undefined;
  readonly #timer: NodeJS.Timeout;
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

  constructor(
    stream: EventStream,
    { sites, skipped }: PlannedProbes,
    streamSites: readonly StreamSite[],
    hidden: Set<string>,
    options: AttachOptions,
    launched: LaunchedCommand | undefined,
  ) {
    this.#stream = stream;
    this.sites = sites;
    this.skipped = skipped;
    this.#hidden = hidden;
    const byFunction = new Map<string, Map<number, bigint[]>>();
    for (const site of streamSites) {
      const base = hidden.has(site.probe) ? site.probe.slice(0, -HIDDEN_SUFFIX.length) : site.probe;
      let calls = byFunction.get(base);
      if (calls === undefined) {
        calls = new Map();
        byFunction.set(base, calls);
      }
      this.#timing.set(site.probe, { hidden: hidden.has(site.probe), calls });
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
      this.#exit = exit;
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

  /** How the traced command ended (with `-c`), once it has. */
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

  /** Stop, deliver what is still buffered, and remove every probe and the instance. Idempotent. */
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
    try {
      this.#stream.stop();
      this.#drain();
      this.#finalStats = this.#stream.stats();
    } finally {
      this.#stream.close();
      this.#launched?.kill();
      this.#wake?.();
      this.#resolveEnded();
    }
    return this.ended;
  }

  /** The same, synchronously, for exit handlers: nothing more is delivered. */
  closeSync(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    this.#replaced?.close();
    this.#stream.close();
    this.#launched?.kill();
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

  #drain(): void {
    const queue = this.#iterating || this.#consumers.length === 0;
    this.#draining = true;
    try {
      this.#poll(queue);
    } finally {
      this.#draining = false;
    }
    if (this.#queue.length > 0) this.#wake?.();
  }

  #poll(queue: boolean): void {
    const delivered = this.#stream.poll((event) => {
      const timed = this.#time(event);
      if (timed === undefined) return;
      for (const consumer of this.#consumers) {
        if (consumer.probe !== '*' && consumer.probe !== timed.probe) continue;
        if (consumer.filter !== undefined && !consumer.filter(timed)) continue;
        consumer.handler(timed);
      }
      if (queue) this.#queue.push(timed);
    });
    // Fault tests stop here: probes live and events flowing.
    if (delivered > 0) pausePoint('tracing');
  }

  /** Pair returns with the entry of the same function on the same thread; hide timing probes. */
  #time(event: ProbeEvent): ProbeEvent | undefined {
    const timing = this.#timing.get(event.probe);
    if (timing === undefined || event.kind === 'instruction' || event.kind === 'usdt') {
      return event;
    }
    if (event.kind === 'entry') {
      let stack = timing.calls.get(event.tid);
      if (stack === undefined) {
        stack = [];
        timing.calls.set(event.tid, stack);
      }
      if (stack.length < MAX_PENDING_CALLS) stack.push(event.timestampNs);
      return timing.hidden ? undefined : event;
    }
    const entry = timing.calls.get(event.tid)?.pop();
    if (entry === undefined) return event;
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
      fields: event.fields,
      latencyNs: event.timestampNs - entry,
    };
  }
}
