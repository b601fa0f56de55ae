import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProbeError } from '../../errors/index.js';
import type { ProbeEvent, StreamStats } from '../../events/index.js';
import type { FetchArg } from '../../spec/index.js';
import { BufferReader } from './buffer-reader.js';
import {
  decodeEvent,
  type RecordDecoder,
  recordDecoder,
  repeatedTextReader,
} from './decode-event.js';
import { type EventFormat, parseEventFormat } from './event-format.js';
import { type DefinedEvent, TracefsSession, type TracefsSite } from './tracefs-session.js';

/** A site to stream, with what events of it are called. */
export interface StreamSite extends TracefsSite {
  readonly spec: string;
  readonly kind: ProbeEvent['kind'];
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

/** The fetch every event gets for its thread's name; the user's fetches keep their names. */
const COMM_FIELD = 'upscope_comm';
const COMM_FETCH: FetchArg = {
  name: COMM_FIELD,
  nameExplicit: true,
  expr: { kind: 'comm', span: { start: 0, end: 0 } },
  type: 'string',
  span: { start: 0, end: 0 },
};

interface Route {
  readonly site: StreamSite;
  /** The user's fields (upscope's comm and the kernel's `__probe_*` left out). */
  readonly decoder: RecordDecoder;
  readonly comm: (view: DataView, bytes: Uint8Array, start: number, end: number) => string | null;
  delivered: number;
}

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
  readonly #tgids = new Map<number, number>();
  readonly #exec:
    | {
        readonly pid: number;
        readonly type: number;
        readonly format: EventFormat;
        seenAtNs: bigint | undefined;
      }
    | undefined;
  #delivered = 0;
  #stopped = false;

  private constructor(
    session: TracefsSession,
    reader: BufferReader,
    routes: Map<number, Route>,
    exec: { pid: number; type: number; format: EventFormat } | undefined,
  ) {
    this.#session = session;
    this.#reader = reader;
    this.#routes = routes;
    this.#exec = exec === undefined ? undefined : { ...exec, seenAtNs: undefined };
  }

  static open(sites: readonly StreamSite[], options: StreamOptions): TracefsStream {
    const session = new TracefsSession({ tracefs: options.tracefs });
    try {
      const defined = session.define(
        sites.map((site) => ({ ...site, fetches: [...site.fetches, COMM_FETCH] })),
      );
      const dir = session.createInstance({ bufferSizeKb: options.bufferSizeKb });
      const routes = new Map<number, Route>();
      defined.forEach((event, i) => {
        const format = readFormat(dir, event);
        routes.set(format.id, {
          site: sites[i]!,
          decoder: recordDecoder(
            format,
            (name) => name === COMM_FIELD || name.startsWith('__probe_'),
          ),
          comm: repeatedTextReader(format, COMM_FIELD),
          delivered: 0,
        });
      });
      writeOption(dir, 'record-tgid', '1');
      if (options.pids !== undefined) {
        session.filterPids(options.pids, { followForks: options.followForks ?? true });
      }
      const exec =
        options.startAtExecOf === undefined
          ? undefined
          : { pid: options.startAtExecOf, ...enableExecEvent(dir) };
      const reader = new BufferReader(options.tracefs, dir);
      session.enable();
      return new TracefsStream(session, reader, routes, exec);
    } catch (err) {
      session.close();
      throw err;
    }
  }

  /**
   * Decode what the kernel has buffered, in time order (after stop(), all of it); returns how
   * many events were delivered.
   */
  poll(onEvent: (event: ProbeEvent) => void): number {
    let delivered = 0;
    this.#reader.drain((cpu, view, bytes, start, end, timestampNs) => {
      if (end - start < ENTRY_BYTES) return;
      const exec = this.#exec;
      if (exec !== undefined && exec.seenAtNs === undefined) {
        if (view.getUint16(start, true) === exec.type) {
          if (decodeEvent(bytes.subarray(start, end), exec.format).pid === exec.pid)
            exec.seenAtNs = timestampNs;
          return;
        }
      }
      if (this.#deliver(cpu, view, bytes, start, end, timestampNs, onEvent)) delivered++;
    }, this.#stopped);
    return delivered;
  }

  #deliver(
    cpu: number,
    view: DataView,
    bytes: Uint8Array,
    start: number,
    end: number,
    timestampNs: bigint,
    onEvent: (event: ProbeEvent) => void,
  ): boolean {
    const route = this.#routes.get(view.getUint16(start, true));
    if (route === undefined) return false;
    const tid = view.getInt32(start + 4, true);
    if (this.#beforeExec(tid, timestampNs)) return false;
    const fields = route.decoder.fields(view, bytes, start, end);
    const comm = route.comm(view, bytes, start, end);
    route.delivered++;
    this.#delivered++;
    const site = route.site;
    onEvent({
      probe: site.probe,
      spec: site.spec,
      kind: site.kind,
      pid: this.#tgidOf(tid),
      tid,
      cpu,
      timestampNs,
      comm: comm ?? '',
      fields,
    });
    return true;
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

  /** The process a thread belongs to: /proc while it lives, the kernel's saved_tgids after. */
  #tgidOf(tid: number): number {
    let tgid = this.#tgids.get(tid);
    if (tgid !== undefined) return tgid;
    try {
      const status = readFileSync(`/proc/${tid}/status`, 'utf8');
      tgid = Number(/^Tgid:\s+(\d+)/m.exec(status)?.[1] ?? tid);
    } catch {
      const saved = readText(join(this.#session.tracefs, 'saved_tgids'));
      const match = new RegExp(`^${tid} (\\d+)$`, 'm').exec(saved);
      tgid = match === null ? tid : Number(match[1]);
    }
    this.#tgids.set(tid, tgid);
    return tgid;
  }
}

/** Record sched_process_exec in the instance (filtered by pid like the probes). */
function enableExecEvent(instanceDir: string): { type: number; format: EventFormat } {
  const dir = join(instanceDir, 'events', 'sched', 'sched_process_exec');
  const format = parseEventFormat(readFileSync(join(dir, 'format'), 'utf8'));
  writeFileSync(join(dir, 'enable'), '1');
  return { type: format.id, format };
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

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
