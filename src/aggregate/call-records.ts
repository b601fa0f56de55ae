/**
 * The binary format of a call recording (`upscope record`): a 16-byte header (the magic
 * "UPSCALLS", a u32 version and the u32 size of a record), then fixed-size little-endian
 * records, one per function entry or return, in the order they were read. Pure: encodes into
 * and decodes from bytes; the files are written and read by api/.
 *
 * Record (24 bytes): u8 kind (1 entry, 2 return, 3 left by an unwind, 4 an entry whose return
 * will not come: the kernel set no return trampoline for it, 5 a call of a function whose
 * returns are not probed), 3 bytes zero, u32 tid, u32 pid, u32 function id (an index into the
 * recording's JSON index), u64 time (CLOCK_MONOTONIC, ns). Version 1 had no kind 4, version 2
 * no kind 5; they are read as well.
 */

export const CALLS_MAGIC = 'UPSCALLS';
export const CALLS_VERSION = 3;
export const CALLS_HEADER_BYTES = 16;
export const CALL_RECORD_BYTES = 24;

/**
 * `lone-entry`: an entry the kernel set no return trampoline for (its return will not come).
 * `call`: an entry of a function whose returns are not probed (they cannot be found safely):
 * counted, not timed, and no frame of its own (what it calls is its caller's).
 */
export type CallRecordKind = 'entry' | 'return' | 'unwind' | 'lone-entry' | 'call';

/** One entry into or return from a function, on one thread (or goroutine). */
export interface CallRecord {
  readonly kind: CallRecordKind;
  /**
   * The thread; for a Go function's call, its goroutine's own id among the recording's
   * threads (a goroutine may move between threads while its calls are open).
   */
  readonly tid: number;
  readonly pid: number;
  /** The function's id: its index in the recording's function list. */
  readonly fn: number;
  readonly timeNs: bigint;
  /** For a Go function's call: the goroutine (its g), when the record is made live. */
  readonly goroutine?: bigint | undefined;
}

const KIND_CODE: Readonly<Record<CallRecordKind, number>> = {
  entry: 1,
  return: 2,
  unwind: 3,
  'lone-entry': 4,
  call: 5,
};
const CODE_KIND: readonly (CallRecordKind | undefined)[] = [
  undefined,
  'entry',
  'return',
  'unwind',
  'lone-entry',
  'call',
];

/** The header a calls file starts with. */
export function encodeCallsHeader(): Uint8Array {
  const bytes = new Uint8Array(CALLS_HEADER_BYTES);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < CALLS_MAGIC.length; i++) bytes[i] = CALLS_MAGIC.charCodeAt(i);
  view.setUint32(8, CALLS_VERSION, true);
  view.setUint32(12, CALL_RECORD_BYTES, true);
  return bytes;
}

/** Why a header is not one this version reads, or undefined when it is. */
export function checkCallsHeader(bytes: Uint8Array): string | undefined {
  if (bytes.length < CALLS_HEADER_BYTES) return 'it is shorter than the header';
  for (let i = 0; i < CALLS_MAGIC.length; i++) {
    if (bytes[i] !== CALLS_MAGIC.charCodeAt(i)) return `it does not start with "${CALLS_MAGIC}"`;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, CALLS_HEADER_BYTES);
  const version = view.getUint32(8, true);
  if (version < 1 || version > CALLS_VERSION) {
    return `it is version ${version}, this upscope reads version ${CALLS_VERSION}`;
  }
  if (view.getUint32(12, true) !== CALL_RECORD_BYTES) return 'its record size is not 24';
  return undefined;
}

/** Write `record` at `offset` of `into` (which has CALL_RECORD_BYTES there). */
export function encodeCallRecord(record: CallRecord, into: Uint8Array, offset: number): void {
  const view = new DataView(into.buffer, into.byteOffset, into.byteLength);
  encodeCallFields(view, offset, record.kind, record.tid, record.pid, record.fn, record.timeNs);
}

/**
 * A record given by its fields, written at `offset` of `view`; its time a bigint, or a
 * number where one holds it exactly (an inject engine's hit: no BigInt made per record).
 */
export function encodeCallFields(
  view: DataView,
  offset: number,
  kind: CallRecordKind,
  tid: number,
  pid: number,
  fn: number,
  timeNs: number | bigint,
): void {
  view.setUint32(offset, KIND_CODE[kind], true);
  view.setUint32(offset + 4, tid, true);
  view.setUint32(offset + 8, pid, true);
  view.setUint32(offset + 12, fn, true);
  if (typeof timeNs === 'bigint') {
    view.setBigUint64(offset + 16, timeNs, true);
  } else if (Number.isSafeInteger(timeNs) && timeNs >= 0) {
    const low = timeNs % 2 ** 32;
    view.setUint32(offset + 16, low, true);
    view.setUint32(offset + 20, (timeNs - low) / 2 ** 32, true);
  } else {
    view.setBigUint64(offset + 16, BigInt(timeNs), true);
  }
}

/**
 * Decodes records chunk by chunk (a chunk may end inside a record: the rest waits for the
 * next). Stops at the first record that cannot be one (an unknown kind, a function id out of
 * range) and says where; what came before stays good.
 */
export class CallRecordDecoder {
  readonly #functions: number;
  #pending = new Uint8Array(0);
  #offset = CALLS_HEADER_BYTES;
  #problem: string | undefined;

  /** `functions`: how many functions the index lists (ids are below it). */
  constructor(functions: number) {
    this.#functions = functions;
  }

  /** Why decoding stopped early, when it did (a corrupt record). */
  get problem(): string | undefined {
    return this.#problem;
  }

  /** The records complete in what came so far, after this chunk of the records (no header). */
  push(chunk: Uint8Array): CallRecord[] {
    const out: CallRecord[] = [];
    this.decode(chunk, (kind, tid, pid, fn, timeNs) => {
      out.push({ kind, tid, pid, fn, timeNs });
    });
    return out;
  }

  /**
   * push(), each record given to `visit` by its fields (no object made: the reading of a
   * large recording); how many were.
   */
  decode(
    chunk: Uint8Array,
    visit: (kind: CallRecordKind, tid: number, pid: number, fn: number, timeNs: bigint) => void,
  ): number {
    if (this.#problem !== undefined) return 0;
    const bytes = this.#pending.length === 0 ? chunk : concat(this.#pending, chunk);
    const whole = bytes.length - (bytes.length % CALL_RECORD_BYTES);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    let count = 0;
    for (let at = 0; at < whole; at += CALL_RECORD_BYTES) {
      const code = view.getUint32(at, true);
      const kind = code < CODE_KIND.length ? CODE_KIND[code] : undefined;
      const fn = view.getUint32(at + 12, true);
      if (kind === undefined || fn >= this.#functions) {
        this.#problem = `the record at byte ${this.#offset + at} is corrupt (${
          kind === undefined ? `kind ${code}` : `function id ${fn} of ${this.#functions}`
        })`;
        this.#pending = new Uint8Array(0);
        return count;
      }
      visit(
        kind,
        view.getUint32(at + 4, true),
        view.getUint32(at + 8, true),
        fn,
        view.getBigUint64(at + 16, true),
      );
      count++;
    }
    this.#offset += whole;
    this.#pending = bytes.slice(whole);
    return count;
  }

  /** Bytes left at the end that are not a whole record (a truncated file): 0 when none. */
  get partialBytes(): number {
    return this.#pending.length;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}
