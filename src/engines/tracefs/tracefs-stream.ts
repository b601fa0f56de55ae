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
  /** Ring-buffer size per CPU. */
  readonly bufferSizeKb?: number | undefined;
  /**
   * A process started stopped before its exec (upscope's -c): its events before the exec (the
   * launcher's own code) are dropped, so the trace starts at the command's first instruction.
   */
  readonly startAtExecOf?: number | undefined;
}

interface Route {
  readonly site: StreamSite;
  /** The user's fields (the kernel's `__probe_*` left out). */
  readonly decoder: RecordDecoder;
  delivered: number;
}

/** Handles a record of a kernel event the stream records for itself. */
type SideEvent = (fields: Record<string, FieldValue>, tid: number, timestampNs: bigint) => void;

/** `struct trace_entry` begins every record: u16 type, u8 flags, u8 preempt count, int pid. */
const ENTRY_BYTES = 8;

/**
 * The tracefs engine's event stream: uprobe events in upscope's own group, enabled only in a
 * private instance (its own ring buffer, trace_clock mono), filtered by pid in the kernel, read
 * from the binary per-CPU pages and decoded with each event's format.
 *
 * Use: open(), poll() on a timer (it never blocks), stop() then a last poll() to drain, close().
 */
export class TracefsStream {
  readonly #session: TracefsSession;
  readonly #reader: BufferReader;
  readonly #routes = new Map<number, Route>();
  readonly #threads: ThreadTable;
  readonly #side = new Map<number, { decoder: RecordDecoder; handle: SideEvent }>();
  /** With startAtExecOf: the launched process, and when its exec was seen. */
  readonly #exec: { readonly pid: number; seenAtNs: bigint | undefined } | undefined;
  #delivered = 0;
  #stopped = false;

  private constructor(
    session: TracefsSession,
    reader: BufferReader,
    routes: Map<number, Route>,
    startAtExecOf: number | undefined,
  ) {
    this.#session = session;
    this.#reader = reader;
    this.#routes = routes;
    this.#threads = new ThreadTable(session.root);
    this.#exec =
      startAtExecOf === undefined ? undefined : { pid: startAtExecOf, seenAtNs: undefined };
  }

  static open(sites: readonly StreamSite[], options: StreamOptions): TracefsStream {
    const session = new TracefsSession({ tracefs: options.tracefs });
    try {
      const defined = session.define(sites);
      session.createInstance({ bufferSizeKb: options.bufferSizeKb });
      const dir = session.instancePath!;
      const routes = new Map<number, Route>();
      defined.forEach((event, i) => {
        const format = readFormat(dir, event);
        routes.set(format.id, {
          site: sites[i]!,
          decoder: recordDecoder(format, (name) => name.startsWith('__probe_')),
          delivered: 0,
        });
      });
      writeOption(dir, 'record-tgid', '1');
      if (options.pids !== undefined) {
        session.filterPids(options.pids, { followForks: options.followForks ?? true });
      }
      const reader = new BufferReader(options.tracefs, dir);
      const stream = new TracefsStream(session, reader, routes, options.startAtExecOf);
      stream.#recordSideEvents(dir);
      session.enable();
      return stream;
    } catch (err) {
      session.close();
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

  /** Stop recording (the buffer keeps what it has for a last poll()). */
  stop(): void {
    this.#session.disable();
    this.#stopped = true;
  }

  stats(): StreamStats {
    const kernel = this.#session.stats();
    const hits = new Map(kernel.events.map((e) => [e.event, e.hits]));
    const events = this.#session.events;
    return {
      delivered: this.#delivered,
      lost: Math.max(this.#reader.lost, kernel.overrun + kernel.dropped),
      missed: kernel.events.some((e) => e.misses !== undefined)
        ? kernel.events.reduce((sum, e) => sum + (e.misses ?? 0), 0)
        : undefined,
      perProbe: [...this.#routes.values()].map((route, i) => ({
        probe: route.site.probe,
        delivered: route.delivered,
        hits: hits.get(events[i]?.event ?? ''),
      })),
    };
  }

  /** Remove everything: readers, the instance, the events. Idempotent; never throws for what is gone. */
  close(): void {
    this.#reader.close();
    this.#session.close();
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
