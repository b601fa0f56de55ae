import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProbeError } from '../../errors/index.js';
import type { ProbeEvent, StreamStats } from '../../events/index.js';
import { BufferReader } from './buffer-reader.js';
import { type FieldValue, type RecordDecoder, recordDecoder } from './decode-event.js';
import { type EventFormat, parseEventFormat } from './event-format.js';
import { ThreadTable } from './threads.js';
import { type DefinedEvent, TracefsSession, type TracefsSite } from './tracefs-session.js';

/** A site to stream, with what events of it are called. */
export interface StreamSite extends TracefsSite {
  readonly spec: string;
  readonly kind: ProbeEvent['kind'];
  /** For a return caught at a tail call out of the function: its events say so. */
  readonly exit?: 'tail-call' | undefined;
  /** The probe's name in events: `parse_request`, `main+0x1a`, `0x401136`. */
  readonly probe: string;
}

export interface StreamOptions {
  readonly tracefs: string;
  /** Only these threads (and, with followForks, the threads and children they create). */
  readonly pids?: readonly number[] | undefined;
  readonly followForks?: boolean | undefined;
  /** Never these threads, nor the threads and children they create (upscope's own). */
  readonly excludePids?: readonly number[] | undefined;
  /** Ring-buffer size per CPU. */
  readonly bufferSizeKb?: number | undefined;
  /**
   * A process started stopped before its exec (upscope's -c): its events before the exec (the
   * launcher's own code) are dropped, so the trace starts at the command's first instruction.
   */
  readonly startAtExecOf?: number | undefined;
  /** How many of the events are defined so far (see TracefsSession.define()). */
  readonly onDefined?: ((done: number, total: number) => void) | undefined;
}

interface Route {
  readonly site: StreamSite;
  /** The user's fields (the kernel's `__probe_*` left out). */
  readonly decoder: RecordDecoder;
  delivered: number;
  /** Its events in uprobe_events: the first, then copies in files replaced on disk since. */
  readonly events: string[];
}

/** Where the copy of a site goes in the file now at its file's path (replaced on disk). */
export interface MovedSite {
  readonly path: string;
  readonly offset: bigint;
  readonly refCtrOffset?: bigint | undefined;
}

/** Handles a record of a kernel event the stream records for itself. */
type SideEvent = (fields: Record<string, FieldValue>, tid: number, timestampNs: bigint) => void;

/** `struct trace_entry` begins every record: u16 type, u8 flags, u8 preempt count, int pid. */
const ENTRY_BYTES = 8;

/**
 * Ring buffer per CPU of the bookkeeping instance (task and exec events: a few per thread,
 * about 64 bytes each), which never overwrites what it holds.
 */
const BOOKKEEPING_BUFFER_KB = 128;

/**
 * The tracefs engine's event stream: uprobe events in upscope's own group, enabled only in a
 * private instance (its own ring buffer, trace_clock mono), filtered by pid in the kernel, read
 * from the binary per-CPU pages and decoded with each event's format.
 *
 * The kernel's task and exec events, by which threads are named and a command's exec is found,
 * are recorded in a second private instance of their own: in the probes' buffer, a burst of
 * hits the reader has not kept up with would overwrite them. The reader merges both in time
 * order.
 *
 * Use: open(), poll() on a timer (it never blocks), stop() then a last poll() to drain, close().
 */
export class TracefsStream {
  readonly #session: TracefsSession;
  readonly #bookkeeping: TracefsSession;
  readonly #reader: BufferReader;
  /** By event id; copies in replaced files share their original's route. */
  readonly #routes = new Map<number, Route>();
  /** Hits after this time (trace_clock mono, ns) are left out: set when stop() begins. */
  #cutNs: bigint | undefined;
  /** One per site, in the order of the sites. */
  readonly #sites: Route[];
  readonly #threads: ThreadTable;
  readonly #side = new Map<number, { decoder: RecordDecoder; handle: SideEvent }>();
  /** With startAtExecOf: the launched process, and when its exec was seen. */
  readonly #exec: { readonly pid: number; seenAtNs: bigint | undefined } | undefined;
  #delivered = 0;
  #stopped = false;

  private constructor(
    session: TracefsSession,
    bookkeeping: TracefsSession,
    reader: BufferReader,
    routes: Map<number, Route>,
    startAtExecOf: number | undefined,
  ) {
    this.#session = session;
    this.#bookkeeping = bookkeeping;
    this.#reader = reader;
    this.#routes = routes;
    this.#sites = [...routes.values()];
    this.#threads = new ThreadTable(session.root);
    this.#exec =
      startAtExecOf === undefined ? undefined : { pid: startAtExecOf, seenAtNs: undefined };
  }

  static open(sites: readonly StreamSite[], options: StreamOptions): TracefsStream {
    const session = new TracefsSession({ tracefs: options.tracefs });
    const bookkeeping = new TracefsSession({ tracefs: options.tracefs });
    try {
      const defined = session.define(sites, options.onDefined);
      session.createInstance({ bufferSizeKb: options.bufferSizeKb });
      bookkeeping.createInstance({ bufferSizeKb: BOOKKEEPING_BUFFER_KB });
      const dir = session.instancePath!;
      const sideDir = bookkeeping.instancePath!;
      const routes = new Map<number, Route>();
      defined.forEach((event, i) => {
        const format = readFormat(dir, event);
        routes.set(format.id, {
          site: sites[i]!,
          decoder: recordDecoder(format, (name) => name.startsWith('__probe_')),
          delivered: 0,
          events: [event.event],
        });
      });
      writeOption(dir, 'record-tgid', '1');
      writeOption(sideDir, 'record-tgid', '1');
      // Keep the oldest records when full: the command's exec is among the first.
      writeOption(sideDir, 'overwrite', '0');
      if (options.pids !== undefined) {
        const filter = { followForks: options.followForks ?? true };
        session.filterPids(options.pids, filter);
        bookkeeping.filterPids(options.pids, filter);
      }
      if (options.excludePids !== undefined && options.excludePids.length > 0) {
        session.excludePids(options.excludePids);
        bookkeeping.excludePids(options.excludePids);
      }
      const reader = new BufferReader(options.tracefs, [dir, sideDir]);
      const stream = new TracefsStream(session, bookkeeping, reader, routes, options.startAtExecOf);
      stream.#recordSideEvents(sideDir);
      // The names threads have now, once their renames from now on are recorded: a hit is
      // then shown with the name its thread had when it hit, even if it is renamed (or execs)
      // before the hit is read.
      stream.#threads.snapshot(options.pids);
      session.enable();
      return stream;
    } catch (err) {
      closeAll(session, bookkeeping);
      throw err;
    }
  }

  /**
   * The kernel events the stream records besides the probes (filtered by pid like them):
   * threads made and renamed, for events' comm and pid, and with startAtExecOf, the exec
   * that starts the command.
   */
  #recordSideEvents(instanceDir: string): void {
    const threads = this.#threads;
    this.#enableSide(instanceDir, 'task', 'task_newtask', (fields, tid) => {
      threads.created(
        tid,
        Number(fields['pid']),
        String(fields['comm']),
        typeof fields['clone_flags'] === 'bigint' ? fields['clone_flags'] : 0n,
      );
    });
    this.#enableSide(instanceDir, 'task', 'task_rename', (fields) => {
      threads.renamed(Number(fields['pid']), String(fields['newcomm']));
    });
    const exec = this.#exec;
    if (exec !== undefined) {
      this.#enableSide(instanceDir, 'sched', 'sched_process_exec', (fields, _tid, timestampNs) => {
        if (exec.seenAtNs === undefined && fields['pid'] === exec.pid) exec.seenAtNs = timestampNs;
      });
    }
  }

  #enableSide(instanceDir: string, system: string, name: string, handle: SideEvent): void {
    const dir = join(instanceDir, 'events', system, name);
    const format = parseEventFormat(readFileSync(join(dir, 'format'), 'utf8'));
    writeFileSync(join(dir, 'enable'), '1');
    this.#side.set(format.id, { decoder: recordDecoder(format), handle });
  }

  /**
   * Decode what the kernel has buffered, in time order (after stop(), all of it); returns how
   * many events were delivered.
   */
  poll(onEvent: (event: ProbeEvent) => void): number {
    let delivered = 0;
    this.#reader.drain((cpu, view, bytes, start, end, timestampNs) => {
      if (end - start < ENTRY_BYTES) return;
      const type = view.getUint16(start, true);
      const tid = view.getInt32(start + 4, true);
      const route = this.#routes.get(type);
      if (route === undefined) {
        const side = this.#side.get(type);
        side?.handle(side.decoder.fields(view, bytes, start, end), tid, timestampNs);
        return;
      }
      if (this.#beforeExec(tid, timestampNs)) return;
      if (this.#cutNs !== undefined && timestampNs > this.#cutNs) return;
      const fields = route.decoder.fields(view, bytes, start, end);
      route.delivered++;
      this.#delivered++;
      delivered++;
      const site = route.site;
      onEvent({
        probe: site.probe,
        spec: site.spec,
        kind: site.kind,
        pid: this.#threads.tgid(tid),
        tid,
        cpu,
        timestampNs,
        comm: this.#threads.comm(tid),
        fields,
        // Present on every event, so that all have one shape (a return's is filled in later).
        latencyNs: undefined,
        exit: site.exit,
      });
    }, this.#stopped);
    return delivered;
  }

  /** An event of the launched process from before its exec: the launcher's, not the command's. */
  #beforeExec(tid: number, timestampNs: bigint): boolean {
    const exec = this.#exec;
    if (exec === undefined || tid !== exec.pid) return false;
    return exec.seenAtNs === undefined || timestampNs < exec.seenAtNs;
  }

  /**
   * Probe again a file replaced on disk since the events were defined (a new inode at its
   * path, which the kernel's uprobes, keyed by inode, do not see): for each site `move`
   * gives a place in the new file, an event is defined there with the same fetches and
   * enabled, its records delivered as the site's. Nothing after stop(). Returns how many
   * events were defined.
   */
  attachMoved(move: (path: string, offset: bigint) => MovedSite | undefined): number {
    if (this.#stopped) return 0;
    const dir = this.#session.instancePath!;
    let defined = 0;
    for (const route of this.#sites) {
      const site = route.site;
      const to = move(site.target.path, site.fileOffset);
      if (to === undefined) continue;
      const copy: StreamSite = {
        ...site,
        target: { ...site.target, path: to.path },
        fileOffset: to.offset,
        usdt:
          site.usdt === undefined
            ? undefined
            : { ...site.usdt, semaphoreFileOffset: to.refCtrOffset },
      };
      const [event] = this.#session.define([copy]);
      const format = readFormat(dir, event!);
      this.#routes.set(format.id, route);
      route.events.push(event!.event);
      this.#session.enable([event!]);
      defined++;
    }
    return defined;
  }

  /**
   * Stop recording (the buffer keeps what it has for a last poll()). What was hit after the
   * moment stop() began is left out: the returns are disabled before the entries (see
   * TracefsSession.disable()), and an entry without its return would be taken for a call that
   * never returned.
   */
  stop(): void {
    // The instance's trace_clock is mono: hrtime's clock.
    this.#cutNs ??= process.hrtime.bigint();
    this.#session.disable();
    this.#stopped = true;
  }

  stats(): StreamStats {
    const kernel = this.#session.stats();
    const hits = new Map(kernel.events.map((e) => [e.event, e.hits]));
    return {
      delivered: this.#delivered,
      lost: Math.max(this.#reader.lost, kernel.overrun + kernel.dropped),
      missed: kernel.events.some((e) => e.misses !== undefined)
        ? kernel.events.reduce((sum, e) => sum + (e.misses ?? 0), 0)
        : undefined,
      perProbe: this.#sites.map((route) => {
        const counted = route.events.map((event) => hits.get(event));
        return {
          probe: route.site.probe,
          delivered: route.delivered,
          hits: counted.includes(undefined)
            ? undefined
            : counted.reduce((sum: number, n) => sum + n!, 0),
        };
      }),
    };
  }

  /** Remove everything: readers, the instance, the events. Idempotent; never throws for what is gone. */
  close(): void {
    this.#reader.close();
    closeAll(this.#session, this.#bookkeeping);
  }
}

/** Close both sessions, the second even when the first fails; the first failure is thrown. */
function closeAll(first: TracefsSession, second: TracefsSession): void {
  try {
    first.close();
  } finally {
    second.close();
  }
}

function readFormat(instanceDir: string, event: DefinedEvent): EventFormat {
  const path = join(instanceDir, 'events', event.group, event.event, 'format');
  try {
    return parseEventFormat(readFileSync(path, 'utf8'));
  } catch (cause) {
    if (cause instanceof ProbeError) throw cause;
    throw new ProbeError(
      'ERR_TRACEFS_WRITE',
      `Cannot read the format of ${event.group}/${event.event}: ${(cause as Error).message}`,
      { cause },
    );
  }
}

function writeOption(instanceDir: string, option: string, value: string): void {
  const path = join(instanceDir, 'options', option);
  if (existsSync(path)) writeFileSync(path, value);
}
