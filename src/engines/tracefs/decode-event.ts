import { ProbeError, quote } from '../../errors/index.js';
import type { EventField, EventFormat } from './event-format.js';

/**
 * A decoded field: integers below 64 bits as numbers, 64-bit ones as bigints (signed or not
 * as the format says), `char` arrays and `__data_loc char[]` as strings (up to the first NUL),
 * other arrays and odd sizes as a copy of their bytes; `null` for a dynamic field of length
 * 0, which is how the kernel records a fetch that faulted.
 */
export type FieldValue = number | bigint | string | Uint8Array | null;

export interface DecodedEvent {
  /** `common_type`: the id of the event's format. */
  readonly type: number;
  /** `common_pid`: the thread (kernel pid) the event fired in. */
  readonly pid: number;
  /** The event's own fields (not the `common_*` ones), by name, in format order. */
  readonly fields: Record<string, FieldValue>;
}

/**
 * Reads one field of the record at `bytes[start, end)`; `view` spans the same buffer as
 * `bytes`, from its offset 0.
 */
export type Reader = (view: DataView, bytes: Uint8Array, start: number, end: number) => FieldValue;

/** A format compiled into field readers, to decode many records of one event. */
export interface RecordDecoder {
  readonly format: EventFormat;
  /** Bytes a record must have to hold every fixed part. */
  readonly minSizeBytes: number;
  /**
   * The fields kept (all but `common_*` and those the compile's `skip` named), in format
   * order, of the record at `bytes[start, end)`; `view` spans `bytes` from its offset 0.
   * Throws ProbeError ERR_TRACEFS_FORMAT when the record is shorter than the format's fixed
   * fields or a dynamic field points outside it.
   */
  fields(view: DataView, bytes: Uint8Array, start: number, end: number): Record<string, FieldValue>;
}

interface CompiledFormat extends RecordDecoder {
  readonly typeOffset: number;
  readonly pidOffset: number;
}

const compiled = new WeakMap<EventFormat, CompiledFormat>();
const utf8 = new TextDecoder('utf-8');
let viewBuffer: ArrayBufferLike | undefined;
let bufferView: DataView<ArrayBufferLike> = new DataView(new ArrayBuffer(0));
let bufferBytes: Uint8Array<ArrayBufferLike> = new Uint8Array(0);

/** Text of `bytes[start, end)` up to the first NUL: short ASCII built directly, else UTF-8. */
export function text(bytes: Uint8Array, start: number, end: number): string {
  let result = '';
  for (let i = start; i < end; i++) {
    const byte = bytes[i]!;
    if (byte === 0) return result;
    if (byte >= 0x80 || i - start === 64) {
      const nul = bytes.indexOf(0, i);
      return utf8.decode(bytes.subarray(start, nul < 0 || nul > end ? end : nul));
    }
    result += String.fromCharCode(byte);
  }
  return result;
}

function isChar(type: string): boolean {
  return type === 'char' || type === 'signed char' || type === 'unsigned char';
}

/** A little-endian integer at `offset` of a record (64-bit ones as bigints). */
export function integerReader(
  offset: number,
  sizeBytes: number,
  signed: boolean,
): Reader | undefined {
  switch (sizeBytes) {
    case 1:
      return signed ? (v, _b, s) => v.getInt8(s + offset) : (v, _b, s) => v.getUint8(s + offset);
    case 2:
      return signed
        ? (v, _b, s) => v.getInt16(s + offset, true)
        : (v, _b, s) => v.getUint16(s + offset, true);
    case 4:
      return signed
        ? (v, _b, s) => v.getInt32(s + offset, true)
        : (v, _b, s) => v.getUint32(s + offset, true);
    case 8:
      return signed
        ? (v, _b, s) => v.getBigInt64(s + offset, true)
        : (v, _b, s) => v.getBigUint64(s + offset, true);
    default:
      return undefined;
  }
}

/**
 * Where a `__data_loc`/`__rel_loc` field's bytes are: `[from, from + length)` of the buffer,
 * packed as from * 2^16 + length (a loc's length is 16 bits). Throws when they leave the record.
 */
function dynamicSpanReader(
  field: EventField,
  eventName: string,
): (view: DataView, start: number, end: number) => number {
  const { offset, name } = field;
  const relativeTo = field.location === 'rel_loc' ? offset + 4 : 0;
  return (view, start, end) => {
    const loc = view.getUint32(start + offset, true);
    const from = start + relativeTo + (loc & 0xffff);
    const length = loc >>> 16;
    if (from + length > end) {
      throw new ProbeError(
        'ERR_TRACEFS_FORMAT',
        `Cannot decode event ${quote(eventName)}: field ${quote(name)} points at ${length} bytes at offset ${from - start}, past the record's ${end - start} bytes`,
      );
    }
    return from * 0x1_0000 + length;
  };
}

function dynamicReader(field: EventField, eventName: string): Reader {
  const span = dynamicSpanReader(field, eventName);
  if (!isChar(field.elementType)) {
    return (view, bytes, start, end) => {
      const packed = span(view, start, end);
      const from = Math.floor(packed / 0x1_0000);
      return bytes.slice(from, from + (packed & 0xffff));
    };
  }
  return (view, bytes, start, end) => {
    const packed = span(view, start, end);
    const length = packed & 0xffff;
    if (length === 0) return null;
    const from = Math.floor(packed / 0x1_0000);
    return text(bytes, from, from + length);
  };
}

function fieldReader(field: EventField, eventName: string): Reader {
  if (field.location !== 'static') return dynamicReader(field, eventName);
  const { offset, sizeBytes } = field;
  if (field.arrayLength !== undefined || field.type.endsWith(']')) {
    if (sizeBytes === 0) {
      // A flexible array (`char buf[]`): the rest of the record.
      if (isChar(field.elementType)) return (_v, b, s, e) => text(b, s + offset, e);
      return (_v, b, s, e) => b.slice(s + offset, e);
    }
    if (isChar(field.elementType)) return (_v, b, s) => text(b, s + offset, s + offset + sizeBytes);
    return (_v, b, s) => b.slice(s + offset, s + offset + sizeBytes);
  }
  return (
    integerReader(offset, sizeBytes, field.signed) ??
    ((_v, b, s) => b.slice(s + offset, s + offset + sizeBytes))
  );
}

function compile(format: EventFormat, skip?: (name: string) => boolean): CompiledFormat {
  const names: string[] = [];
  const readers: Reader[] = [];
  let minSizeBytes = 0;
  let typeOffset = -1;
  let pidOffset = -1;
  for (const field of format.fields) {
    minSizeBytes = Math.max(minSizeBytes, field.offset + field.sizeBytes);
    if (field.name === 'common_type' && field.sizeBytes === 2) typeOffset = field.offset;
    else if (field.name === 'common_pid' && field.sizeBytes === 4) pidOffset = field.offset;
    if (field.common || skip?.(field.name) === true) continue;
    names.push(field.name);
    readers.push(fieldReader(field, format.name));
  }
  if (typeOffset < 0 || pidOffset < 0) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: its format has no 2-byte common_type or 4-byte common_pid field`,
    );
  }
  // Each record's fields start as a copy of an object with every name, in order (one shape
  // for all). Own data properties, even one named `__proto__` (a name the kernel allows):
  // copies made by spreading keep them own, so assigning to them never reaches the prototype.
  const template: Record<string, FieldValue> = {};
  for (const name of names) {
    Object.defineProperty(template, name, { value: null, enumerable: true, writable: true });
  }
  const count = names.length;
  return {
    format,
    minSizeBytes,
    typeOffset,
    pidOffset,
    fields(view, bytes, start, end) {
      if (end - start < minSizeBytes) {
        throw new ProbeError(
          'ERR_TRACEFS_FORMAT',
          `Cannot decode event ${quote(format.name)}: the record is ${end - start} bytes, its format needs ${minSizeBytes}`,
        );
      }
      const fields: Record<string, FieldValue> = { ...template };
      for (let i = 0; i < count; i++) fields[names[i]!] = readers[i]!(view, bytes, start, end);
      return fields;
    },
  };
}

/**
 * Compile `format` into a RecordDecoder, leaving out the fields `skip` names (besides the
 * `common_*` ones, always left out). Throws ProbeError ERR_TRACEFS_FORMAT when the format
 * has no common_type or common_pid.
 */
export function recordDecoder(
  format: EventFormat,
  skip?: (name: string) => boolean,
): RecordDecoder {
  return compile(format, skip);
}

/**
 * Decode one record's bytes (PageRecord.data) with its event's format. The format is
 * compiled into field readers once and cached. Throws ProbeError ERR_TRACEFS_FORMAT when the
 * record is shorter than the format's fixed fields, its common_type is not the format's id,
 * or a dynamic field points outside the record.
 */
export function decodeEvent(data: Uint8Array, format: EventFormat): DecodedEvent {
  let plan = compiled.get(format);
  if (plan === undefined) {
    plan = compile(format);
    compiled.set(format, plan);
  }
  // One DataView per buffer, not per record: records are views into the same page.
  if (data.buffer !== viewBuffer) {
    viewBuffer = data.buffer;
    bufferView = new DataView(data.buffer);
    bufferBytes = new Uint8Array(data.buffer);
  }
  const view = bufferView;
  const start = data.byteOffset;
  const end = start + data.length;
  if (data.length < plan.minSizeBytes) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: the record is ${data.length} bytes, its format needs ${plan.minSizeBytes}`,
    );
  }
  const type = view.getUint16(start + plan.typeOffset, true);
  if (type !== format.id) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: the record's common_type is ${type}, not the format's ID ${format.id}`,
      { hints: ['Pick the format by the record type: recordType(data)'] },
    );
  }
  const fields = plan.fields(view, bufferBytes, start, end);
  return { type, pid: view.getInt32(start + plan.pidOffset, true), fields };
}

/**
 * The event id (`common_type`) of a record: the first u16 of every record, as the kernel's
 * `struct trace_entry` begins with it. Returns -1 for a record shorter than 2 bytes.
 */
export function recordType(data: Uint8Array): number {
  return data.length < 2 ? -1 : data[0]! | (data[1]! << 8);
}

/**
 * The thread id (`common_pid`) of a record without decoding it: the kernel's
 * `struct trace_entry` keeps it as an int at offset 4 (after type, flags, preempt count).
 * Returns -1 for a record shorter than 8 bytes.
 */
export function recordPid(data: Uint8Array): number {
  return data.length < 8 ? -1 : data[4]! | (data[5]! << 8) | (data[6]! << 16) | (data[7]! << 24);
}
