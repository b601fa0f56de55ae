import { ProbeError } from '../../errors/index.js';
import type { HeaderPage } from './event-format.js';

/** One data event of a ring-buffer page. */
export interface PageRecord {
  /** The event's time stamp, in the instance's `trace_clock` (ns for `mono`). */
  readonly timestampNs: bigint;
  /**
   * The event's bytes (the `struct trace_entry` and the event's fields, rounded up to 4
   * bytes): a view into the page passed to decodePage(), not a copy.
   */
  readonly data: Uint8Array;
}

/** One page read from `per_cpu/cpuN/trace_pipe_raw`, with its events. */
export interface DecodedPage extends PageSummary {
  readonly records: PageRecord[];
}

/*
 * The layout, from the kernel's include/linux/ring_buffer.h and kernel/trace/ring_buffer.c
 * (also printed by events/header_event): each event starts with a little-endian u32 whose low
 * 5 bits are type_len and high 27 bits time_delta, followed by array[] of u32.
 */
const TYPE_PADDING = 29;
const TYPE_TIME_EXTEND = 30;
const TYPE_TIME_STAMP = 31;
/** Top bit of commit: events were lost before this page. */
const MISSED_EVENTS = 0x8000_0000;
/** Next bit: the lost count is stored as an unsigned long right after the data. */
const MISSED_STORED = 0x4000_0000;
const COMMIT_SIZE_MASK = 0x3fff_ffff;
const TS_SHIFT = 27n;
/** An absolute time stamp event holds 59 bits; the top 5 come from the running time. */
const TS_MSB = 0xf8n << 56n;
const ABS_TS_CARRY = 1n << 59n;

function corrupt(reason: string, details: Record<string, unknown> = {}): ProbeError {
  return new ProbeError('ERR_TRACEFS_FORMAT', `Cannot decode ring-buffer page: ${reason}`, {
    hints: ['The page must be read whole from trace_pipe_raw, in sizes of the sub-buffer'],
    details,
  });
}

function hex(n: number): string {
  return `0x${n.toString(16)}`;
}

/** What a page's header says besides its events. */
export interface PageSummary {
  /** The page header's time stamp: the base the first event's delta adds to. */
  readonly timestamp: bigint;
  /** The kernel dropped events (ring buffer full, overwritten) before this page. */
  readonly missedEvents: boolean;
  /** How many were dropped, when the kernel had room to store the count after the data. */
  readonly lostCount: number | undefined;
  /** Bytes of event data the page commits (its commit field without the flag bits). */
  readonly dataSizeBytes: number;
}

/**
 * Decode one ring-buffer page (a sub-buffer as read from `trace_pipe_raw`): the header
 * (time stamp; commit with the data size and the missed-events flags; the lost count when
 * stored) and every data event in it with its absolute time stamp. Time extends, absolute
 * time stamps and padding are consumed, never returned. Only the committed bytes are read.
 *
 * Throws ProbeError ERR_TRACEFS_FORMAT when the page is shorter than its header, the commit
 * size runs past the page, or an event runs past the committed data.
 */
export function decodePage(page: Uint8Array, header: HeaderPage): DecodedPage {
  const records: PageRecord[] = [];
  const cursor = new PageCursor(header);
  const summary = cursor.open(page, new DataView(page.buffer, page.byteOffset, page.byteLength));
  while (cursor.next()) {
    records.push({
      timestampNs: cursor.timestampNs,
      data: page.subarray(cursor.start, cursor.end),
    });
  }
  return { ...summary, records };
}

/**
 * Steps through the data events of one page at a time, without making an object per event:
 * open() a page, then each true next() leaves the event's bytes at `[start, end)` and its
 * time in `timestampNs`. A reader merging several CPUs' pages keeps one cursor per CPU.
 */
export class PageCursor {
  readonly #header: HeaderPage;
  #view: DataView = new DataView(new ArrayBuffer(0));
  #pos = 0;
  #end = 0;
  #now = 0n;
  /** The current event's bytes, after a true next(). */
  start = 0;
  end = 0;
  timestampNs = 0n;

  constructor(header: HeaderPage) {
    this.#header = header;
  }

  /**
   * Read a page's header and stand before its first event. `view` must span `page` from its
   * offset 0. Throws ProbeError ERR_TRACEFS_FORMAT when the header does not fit the page.
   */
  open(page: Uint8Array, view: DataView): PageSummary {
    const header = this.#header;
    const dataOffset = header.data.offset;
    if (page.length < dataOffset) {
      throw corrupt(`page is ${page.length} bytes, shorter than its ${dataOffset}-byte header`);
    }
    const timestamp = view.getBigUint64(header.timestamp.offset, true);
    // Only the low 32 bits of commit carry the size and flags: the kernel adds the flag
    // (1 << 31, an int) to a long, which sets the high bits too.
    const commit = view.getUint32(header.commit.offset, true);
    const dataSizeBytes = commit & COMMIT_SIZE_MASK;
    const room = page.length - dataOffset;
    if (dataSizeBytes > room) {
      throw corrupt(`commit says ${dataSizeBytes} bytes of data, but the page holds ${room}`, {
        commit,
      });
    }
    const missedEvents = (commit & MISSED_EVENTS) !== 0;
    let lostCount: number | undefined;
    if (missedEvents && (commit & MISSED_STORED) !== 0) {
      const at = dataOffset + dataSizeBytes;
      if (at + 8 > page.length) {
        throw corrupt(
          `the lost-events count at ${hex(at)} runs past the page (${page.length} bytes)`,
        );
      }
      lostCount = Number(view.getBigUint64(at, true));
    }
    this.#view = view;
    this.#pos = dataOffset;
    this.#end = dataOffset + dataSizeBytes;
    this.#now = timestamp;
    return { timestamp, missedEvents, lostCount, dataSizeBytes };
  }

  /**
   * Step to the next data event; false at the end of the page. Throws ProbeError
   * ERR_TRACEFS_FORMAT when an event runs past the committed data.
   */
  next(): boolean {
    const view = this.#view;
    const end = this.#end;
    let pos = this.#pos;
    while (pos < end) {
      if (end - pos < 4) {
        throw corrupt(`event header at ${hex(pos)} runs past the committed data end ${hex(end)}`);
      }
      const word = view.getUint32(pos, true);
      const typeLen = word & 0x1f;
      const delta = word >>> 5;
      if (typeLen >= 1 && typeLen <= 28) {
        const next = pos + 4 + typeLen * 4;
        if (next > end) throw pastEnd(pos, next - pos, end);
        if (delta !== 0) this.#now += BigInt(delta);
        return this.#found(pos + 4, next);
      }
      if (typeLen === TYPE_PADDING && delta === 0) break; // the rest of the page is unused
      if (end - pos < 8) throw pastEnd(pos, 8, end);
      const array0 = view.getUint32(pos + 4, true);
      switch (typeLen) {
        case 0: {
          // array[0] is the length after the header word, itself included; data follows it.
          if (array0 < 4) {
            throw corrupt(
              `event at ${hex(pos)} has length ${array0}, shorter than its length word`,
            );
          }
          const next = pos + 4 + array0;
          if (next > end) throw pastEnd(pos, 4 + array0, end);
          if (delta !== 0) this.#now += BigInt(delta);
          return this.#found(pos + 8, next);
        }
        case TYPE_PADDING: {
          // A discarded event: array[0] is its length after the header word. Its delta
          // counts, as libtraceevent's reader counts it.
          const next = pos + 4 + array0;
          if (next > end) throw pastEnd(pos, 4 + array0, end);
          this.#now += BigInt(delta);
          pos = next;
          break;
        }
        case TYPE_TIME_EXTEND:
          this.#now += (BigInt(array0) << TS_SHIFT) + BigInt(delta);
          pos += 8;
          break;
        case TYPE_TIME_STAMP: {
          // An absolute time, whose 5 top bits are those of the running time.
          const now = this.#now;
          let absolute = (BigInt(array0) << TS_SHIFT) + BigInt(delta);
          if ((now & TS_MSB) !== 0n) {
            absolute |= now & TS_MSB;
            if (absolute < now) absolute += ABS_TS_CARRY;
          }
          this.#now = absolute;
          pos += 8;
          break;
        }
        default:
          throw corrupt(`event at ${hex(pos)} has type ${typeLen}, which the kernel never writes`);
      }
    }
    this.#pos = end;
    return false;
  }

  #found(start: number, next: number): true {
    this.start = start;
    this.end = next;
    this.timestampNs = this.#now;
    this.#pos = next;
    return true;
  }
}

function pastEnd(pos: number, length: number, end: number): ProbeError {
  return corrupt(
    `event at ${hex(pos)} is ${length} bytes and runs past the committed data end ${hex(end)}`,
    { offset: pos, length, end },
  );
}
