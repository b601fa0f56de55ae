/**
 * The bpf engine's event stream: one handler for every probe writes a record per hit to a BPF
 * ring buffer (who, when, and the fetched values), and poll() decodes the records in place
 * from the buffer's mapped pages. Hits the buffer had no room for are counted per probe in
 * the kernel, so that delivered + lost is every hit the handlers saw.
 */
import type { FieldValue, ProbeEvent, StreamStats } from '../../events/index.js';
import { fetchTypeBytes } from '../../spec/index.js';
import { integerReader, type Reader, recordText } from '../tracefs/index.js';
import type { SessionKfunc } from './btf.js';
import type { FollowSpec } from './follow.js';
import { type BpfMap, sumSlots } from './kernel.js';
import { findSessionKfunc } from './kernel-facts.js';
import { CUT_MARK, type Filters, fetchType, isSigned } from './programs.js';
import { RingBuffer } from './ring-buffer.js';
import {
  type AttachMode,
  type AttachOptions,
  type AttachReport,
  type BpfProbe,
  BpfSession,
  type MoveProbe,
  type Programs,
} from './session.js';
import {
  type FieldSlot,
  RECORD_HEADER,
  type RecordLayout,
  recordLayout,
  streamProgram,
} from './stream-programs.js';

/**
 * A probe of the stream: its place and fetches, and what its events say. Shaped as the
 * tracer's sites are, so that they are given as they are (a copy of each was a part of
 * attaching every function of a large program).
 */
export interface BpfStreamSite {
  readonly target: { readonly path: string };
  readonly fileOffset: bigint;
  /**
   * `uprobe` (or none): fires at the instruction; `uretprobe`: when the function starting
   * there returns.
   */
  readonly attach?: 'uprobe' | 'uretprobe' | undefined;
  /** A USDT probe's semaphore, which the kernel counts up while the probe is attached. */
  readonly usdt?: { readonly semaphoreFileOffset?: bigint | undefined } | undefined;
  readonly fetches: readonly FieldSlot['fetch'][];
  readonly probe: string;
  readonly spec: string;
  readonly kind: ProbeEvent['kind'];
  /** For a return caught at a tail call out of the function: its events say so. */
  readonly exit?: 'tail-call' | undefined;
}

export interface BpfStreamOptions {
  /**
   * Only these processes and the children they fork (every process, when undefined): the
   * sched tracepoints' handlers keep the set in the kernel (see follow.ts).
   */
  readonly follow?: FollowSpec | undefined;
  /** The ring buffer's size in bytes (rounded up to a power of two). */
  readonly bufferBytes: number;
  /**
   * The ring buffer made ahead by BpfStream.ring() (of `bufferBytes`), which the stream then
   * owns: made while the heap is small, the collections its mapping of tens of megabytes
   * brings cost little (made with the stream, after every function of a large program was
   * planned, they took tens of milliseconds).
   */
  readonly ring?: RingBuffer | undefined;
  readonly filters?: Omit<Filters, 'pid'> | undefined;
  readonly mode?: AttachMode | undefined;
  /**
   * Count lost hits in all, not per probe (stats() then gives each probe none lost): for
   * streams of a great many probes whose losses matter in all (a recording), whose per-probe
   * counters took a tenth of a second to make and tens of system calls to read.
   */
  readonly lostInAll?: boolean | undefined;
}

/** A record layout's decoder: the fields of the record at `start`. */
type Decode = (
  view: DataView,
  bytes: Uint8Array,
  start: number,
  faults: number,
  cuts: number,
) => Record<string, FieldValue>;

/** Reads one slot as its fetch's type (as tracefs records are read: the same values). */
function slotReader(slot: FieldSlot): Reader {
  const at = slot.offset;
  if (slot.string)
    return (_v, bytes, start) => recordText(bytes, start + at, start + at + slot.bytes);
  const type = fetchType(slot.fetch);
  return integerReader(at, fetchTypeBytes(type), isSigned(type))!;
}

function decoder(layout: RecordLayout): Decode {
  const readers = layout.slots.map((slot) => ({ name: slot.fetch.name, read: slotReader(slot) }));
  const names = readers.map((r) => r.name);
  const reads = readers.map((r) => r.read);
  // Loops, not forEach (a closure made per event was a part of reading a recording's), and
  // one without the fault and cut bits for the records that have none.
  return (view, bytes, start, faults, cuts) => {
    const fields: Record<string, FieldValue> = {};
    if ((faults | cuts) === 0) {
      for (let index = 0; index < names.length; index++) {
        fields[names[index]!] = reads[index]!(view, bytes, start, start);
      }
      return fields;
    }
    for (let index = 0; index < names.length; index++) {
      const name = names[index]!;
      const read = reads[index]!;
      if ((faults >>> index) & 1) fields[name] = null;
      else if ((cuts >>> index) & 1) fields[name] = `${read(view, bytes, start, start)}${CUT_MARK}`;
      else fields[name] = read(view, bytes, start, start);
    }
    return fields;
  };
}

/** Use: open(), poll() on a timer (it never blocks), stop() then a last poll(), close(). */
export class BpfStream {
  readonly #session = new BpfSession();
  readonly #ring: RingBuffer;
  readonly #lost: BpfMap;
  /**
   * Per probe (a record's probe number is its index): its site, its record layout's index,
   * its records delivered. Arrays, not an object per probe (a recording of every function of
   * a large program streams over a hundred thousand probes).
   */
  readonly #sites: readonly BpfStreamSite[];
  readonly #layoutOf: Int32Array;
  readonly #deliveredOf: Float64Array;
  /** The layouts, each once, and their decoders. */
  readonly #layouts: RecordLayout[];
  readonly #decoders: Decode[];
  #lastComm = { a: -1, b: -1, c: -1, d: -1, text: '' };
  /** Hits after this time (CLOCK_MONOTONIC ns) are left out: set when stop() begins. */
  #cutNs: bigint | undefined;
  #delivered = 0;
  #attach: AttachReport | undefined;
  readonly #lostInAll: boolean;

  private constructor(sites: readonly BpfStreamSite[], options: BpfStreamOptions) {
    this.#ring = options.ring ?? BpfStream.ring(options.bufferBytes);
    this.#lostInAll = options.lostInAll === true;
    this.#lost = this.#session.map({
      kind: 'percpu-array',
      name: 'lost',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: options.lostInAll === true ? 1 : Math.max(sites.length, 1),
    });
    const layouts = new Map<string, number>();
    // Sites share their fetches' array where they fetch the same (a recording's frame fields,
    // none): its layout is worked out once per array, not once per site.
    const ofArray = new Map<BpfStreamSite['fetches'], number>();
    this.#sites = sites;
    this.#layoutOf = new Int32Array(sites.length);
    this.#deliveredOf = new Float64Array(sites.length);
    this.#layouts = [];
    this.#decoders = [];
    for (let index = 0; index < sites.length; index++) {
      const fetches = sites[index]!.fetches;
      let known = ofArray.get(fetches);
      if (known === undefined) {
        const layout = recordLayout(fetches);
        known = layouts.get(layout.key);
        if (known === undefined) {
          known = this.#layouts.length;
          layouts.set(layout.key, known);
          this.#layouts.push(layout);
          this.#decoders.push(decoder(layout));
        }
        ofArray.set(fetches, known);
      }
      this.#layoutOf[index] = known;
    }
  }

  /** A stream's ring buffer of `bytes`, made ahead (see BpfStreamOptions.ring); close() it if unused. */
  static ring(bytes: number): RingBuffer {
    return RingBuffer.create('upscope_events', bytes);
  }

  static open(sites: readonly BpfStreamSite[], options: BpfStreamOptions): BpfStream {
    let stream: BpfStream;
    try {
      stream = new BpfStream(sites, options);
    } catch (err) {
      options.ring?.close();
      throw err;
    }
    try {
      stream.#start(sites, options);
      return stream;
    } catch (err) {
      stream.close();
      throw err;
    }
  }

  /**
   * open(), with the kernel's links made on another thread: `whileLinking` runs here
   * meanwhile (see BpfSession.attachAsync()), once, even when opening fails.
   */
  static async openAsync(
    sites: readonly BpfStreamSite[],
    options: BpfStreamOptions,
    whileLinking: () => void,
  ): Promise<BpfStream> {
    let stream: BpfStream | undefined;
    let linking = false;
    try {
      stream = new BpfStream(sites, options);
      const { probes, programs, attach } = stream.#attachment(sites, options);
      linking = true;
      stream.#attach = await stream.#session.attachAsync(probes, programs, attach, whileLinking);
      return stream;
    } catch (err) {
      if (stream === undefined) options.ring?.close();
      else stream.close();
      throw err;
    } finally {
      // When the stream failed before its links (attachAsync() runs it otherwise).
      if (!linking) whileLinking();
    }
  }

  #start(sites: readonly BpfStreamSite[], options: BpfStreamOptions): void {
    const { probes, programs, attach } = this.#attachment(sites, options);
    this.#attach = this.#session.attach(probes, programs, attach);
  }

  /** What the session attaches: a probe per site, the handler, how (following processes). */
  #attachment(
    sites: readonly BpfStreamSite[],
    options: BpfStreamOptions,
  ): { probes: BpfProbe[]; programs: Programs; attach: AttachOptions } {
    const followed =
      options.follow === undefined ? undefined : this.#session.follow(options.follow);
    const program = (session?: SessionKfunc) =>
      streamProgram(
        {
          ring: this.#ring.map.fd,
          lost: this.#lost.fd,
          lostInAll: this.#lostInAll,
          followed: followed?.fd,
        },
        this.#layouts,
        options.filters ?? {},
        session,
      );
    return {
      probes: sites.map((site, index) => ({
        path: site.target.path,
        offset: site.fileOffset,
        kind: site.attach === 'uretprobe' ? 'return' : 'entry',
        refCtrOffset: site.usdt?.semaphoreFileOffset,
        cookie: this.#layoutOf[index]! * 2 ** 32 + index,
        early: site.kind === 'return',
      })),
      // A return through the trampoline and its function's entry: one uprobe session.
      programs: { entry: program, return: program, session: () => program(findSessionKfunc()) },
      attach: { mode: options.mode, purpose: `the stream of ${sites.length} probes` },
    };
  }

  get attachReport(): AttachReport | undefined {
    return this.#attach;
  }

  /** Decode every record written so far, in the order they were written. */
  poll(onEvent: (event: ProbeEvent) => void): number {
    let delivered = 0;
    this.#ring.read((view, start) => {
      const probe = view.getUint32(start + RECORD_HEADER.probe, true);
      const pid = view.getUint32(start + RECORD_HEADER.pid, true);
      const site = this.#sites[probe];
      if (site === undefined) return;
      const timestampNs = view.getBigUint64(start + RECORD_HEADER.timeNs, true);
      if (this.#cutNs !== undefined && timestampNs > this.#cutNs) return;
      const faults = view.getUint32(start + RECORD_HEADER.faults, true);
      this.#deliveredOf[probe]!++;
      delivered++;
      onEvent({
        probe: site.probe,
        spec: site.spec,
        kind: site.kind,
        pid,
        tid: view.getUint32(start + RECORD_HEADER.tid, true),
        cpu: view.getUint32(start + RECORD_HEADER.cpu, true),
        timestampNs,
        comm: this.#comm(view, start + RECORD_HEADER.comm),
        fields: this.#decoders[this.#layoutOf[probe]!]!(
          view,
          this.#ring.data,
          start,
          faults,
          view.getUint32(start + RECORD_HEADER.cuts, true),
        ),
        latencyNs: undefined,
        exit: site.exit,
      });
    });
    this.#delivered += delivered;
    return delivered;
  }

  /** The comm at `at`: the last one decoded while its 16 bytes stay the same. */
  #comm(view: DataView, at: number): string {
    const a = view.getUint32(at, true);
    const b = view.getUint32(at + 4, true);
    const c = view.getUint32(at + 8, true);
    const d = view.getUint32(at + 12, true);
    const last = this.#lastComm;
    if (a === last.a && b === last.b && c === last.c && d === last.d) return last.text;
    const text16 = recordText(this.#ring.data, at, at + 16);
    this.#lastComm = { a, b, c, d, text: text16 };
    return text16;
  }

  /**
   * Probe again a file replaced on disk since the probes were attached: copies of the probes
   * in it go where `move` says, their hits recorded as the originals' (see
   * BpfSession.attachMoved()).
   */
  attachMoved(move: MoveProbe): number {
    return this.#session.attachMoved(move);
  }

  /**
   * Stop recording: every probe is detached (the buffer keeps what it has for a last poll).
   * What was hit after the moment stop() began is left out: the returns are removed before
   * the entries (see BpfSession.detach()), and an entry seen without its return would be
   * taken for a call that never returned.
   */
  stop(): void {
    // The records' clock (bpf_ktime_get_ns) is CLOCK_MONOTONIC, as hrtime's.
    this.#cutNs ??= process.hrtime.bigint();
    this.#session.detach();
  }

  stats(): StreamStats {
    // Every probe's count in a few system calls (a lookup per probe was seconds at the end
    // of a recording of every function of a large program).
    const lostOf = new Float64Array(this.#lostInAll ? 1 : this.#sites.length);
    const map = this.#lost;
    map.lookupBatch((keys, values, count) => {
      const view = new DataView(keys.buffer, keys.byteOffset, keys.byteLength);
      for (let i = 0; i < count; i++) {
        const value = values.subarray(i * map.lookupBytes, (i + 1) * map.lookupBytes);
        lostOf[view.getUint32(i * 4, true)] = Number(sumSlots(value, map.cpus, 8));
      }
    });
    const all = this.#lostInAll;
    let lost = all ? lostOf[0]! : 0;
    const perProbe = this.#sites.map((site, index) => {
      const mine = all ? 0 : lostOf[index]!;
      lost += mine;
      const delivered = this.#deliveredOf[index]!;
      return { probe: site.probe, delivered, hits: delivered + mine };
    });
    return { delivered: this.#delivered, lost, missed: undefined, perProbe };
  }

  close(): void {
    this.#session.close();
    this.#ring.close();
  }
}
