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

/** Reads one field; `view` spans the record's whole buffer and `base` is the record's start. */
type Reader = (view: DataView, base: number, data: Uint8Array) => FieldValue;

interface CompiledFormat {
  readonly names: readonly string[];
  readonly readers: readonly Reader[];
  /** Bytes a record must have to hold every fixed part. */
  readonly minSizeBytes: number;
  readonly typeOffset: number;
  readonly pidOffset: number;
  /** An object with every field name, in order: each record's fields start as a copy. */
  readonly template: Readonly<Record<string, FieldValue>>;
}

const compiled = new WeakMap<EventFormat, CompiledFormat>();
const utf8 = new TextDecoder('utf-8');
let viewBuffer: ArrayBufferLike | undefined;
let bufferView: DataView<ArrayBufferLike> = new DataView(new ArrayBuffer(0));

/** Text of bytes up to the first NUL: short ASCII built directly (fastest), else UTF-8. */
function text(bytes: Uint8Array): string {
  let result = '';
  const length = bytes.length;
  for (let i = 0; i < length; i++) {
    const byte = bytes[i]!;
    if (byte === 0) return result;
    if (byte >= 0x80 || i === 64) {
      const end = bytes.indexOf(0, i);
      return utf8.decode(bytes.subarray(0, end < 0 ? length : end));
    }
    result += String.fromCharCode(byte);
  }
  return result;
}

function isChar(type: string): boolean {
  return type === 'char' || type === 'signed char' || type === 'unsigned char';
}

function integerReader(offset: number, sizeBytes: number, signed: boolean): Reader | undefined {
  switch (sizeBytes) {
    case 1:
      return signed ? (v, b) => v.getInt8(b + offset) : (v, b) => v.getUint8(b + offset);
    case 2:
      return signed
        ? (v, b) => v.getInt16(b + offset, true)
        : (v, b) => v.getUint16(b + offset, true);
    case 4:
      return signed
        ? (v, b) => v.getInt32(b + offset, true)
        : (v, b) => v.getUint32(b + offset, true);
    case 8:
      return signed
        ? (v, b) => v.getBigInt64(b + offset, true)
        : (v, b) => v.getBigUint64(b + offset, true);
    default:
      return undefined;
  }
}

function dynamicReader(field: EventField, eventName: string): Reader {
  const { offset, name } = field;
  const relativeTo = field.location === 'rel_loc' ? offset + 4 : 0;
  const asText = isChar(field.elementType);
  return (view, base, data) => {
    const loc = view.getUint32(base + offset, true);
    const start = relativeTo + (loc & 0xffff);
    const length = loc >>> 16;
    if (start + length > data.length) {
      throw new ProbeError(
        'ERR_TRACEFS_FORMAT',
        `Cannot decode event ${quote(eventName)}: field ${quote(name)} points at ${length} bytes at offset ${start}, past the record's ${data.length} bytes`,
      );
    }
    if (!asText) return data.slice(start, start + length);
    if (length === 0) return null;
    return text(data.subarray(start, start + length));
  };
}

function fieldReader(field: EventField, eventName: string): Reader {
  if (field.location !== 'static') return dynamicReader(field, eventName);
  const { offset, sizeBytes } = field;
  if (field.arrayLength !== undefined || field.type.endsWith(']')) {
    if (sizeBytes === 0) {
      // A flexible array (`char buf[]`): the rest of the record.
      if (isChar(field.elementType)) return (_v, _b, data) => text(data.subarray(offset));
      return (_v, _b, data) => data.slice(offset);
    }
    if (isChar(field.elementType))
      return (_v, _b, data) => text(data.subarray(offset, offset + sizeBytes));
    return (_v, _b, data) => data.slice(offset, offset + sizeBytes);
  }
  return (
    integerReader(offset, sizeBytes, field.signed) ??
    ((_v, _b, data) => data.slice(offset, offset + sizeBytes))
  );
}

function compile(format: EventFormat): CompiledFormat {
  const names: string[] = [];
  const readers: Reader[] = [];
  let minSizeBytes = 0;
  let typeOffset = -1;
  let pidOffset = -1;
  for (const field of format.fields) {
    minSizeBytes = Math.max(minSizeBytes, field.offset + field.sizeBytes);
    if (field.name === 'common_type' && field.sizeBytes === 2) typeOffset = field.offset;
    else if (field.name === 'common_pid' && field.sizeBytes === 4) pidOffset = field.offset;
    if (field.common) continue;
    names.push(field.name);
    readers.push(fieldReader(field, format.name));
  }
  if (typeOffset < 0 || pidOffset < 0) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: its format has no 2-byte common_type or 4-byte common_pid field`,
    );
  }
  const template: Record<string, FieldValue> = {};
  // Own data properties (even one named `__proto__`, a name the kernel allows): copies made
  // by spreading keep them own, so assigning to them never reaches Object.prototype.
  for (const name of names) {
    Object.defineProperty(template, name, { value: null, enumerable: true, writable: true });
  }
  return { names, readers, minSizeBytes, typeOffset, pidOffset, template };
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
  if (data.length < plan.minSizeBytes) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: the record is ${data.length} bytes, its format needs ${plan.minSizeBytes}`,
    );
  }
  // One DataView per buffer, not per record: records are views into the same page.
  if (data.buffer !== viewBuffer) {
    viewBuffer = data.buffer;
    bufferView = new DataView(data.buffer);
  }
  const view = bufferView;
  const base = data.byteOffset;
  const type = view.getUint16(base + plan.typeOffset, true);
  if (type !== format.id) {
    throw new ProbeError(
      'ERR_TRACEFS_FORMAT',
      `Cannot decode event ${quote(format.name)}: the record's common_type is ${type}, not the format's ID ${format.id}`,
      { hints: ['Pick the format by the record type: recordType(data)'] },
    );
  }
  const fields: Record<string, FieldValue> = { ...plan.template };
  const { names, readers } = plan;
  for (let i = 0; i < names.length; i++) fields[names[i]!] = readers[i]!(view, base, data);
  return { type, pid: view.getInt32(base + plan.pidOffset, true), fields };
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
