import type { FieldValue } from '../events/index.js';

/**
 * Per probe, per field: whether the field prints in hex (the x* types and pointers). Made by
 * the caller from the probes' fetch types; a field not listed prints as it comes.
 */
export type HexFields = ReadonlyMap<string, ReadonlyMap<string, boolean>>;

/** A fetched value as text: `(fault)`, a quoted string, bytes in hex, a number (or hex). */
export function formatValue(value: FieldValue, hex: boolean | undefined): string {
  if (value === null) return '(fault)';
  if (typeof value === 'string') return JSON.stringify(value);
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  if (hex === true) {
    const n = BigInt(value);
    return `0x${(n < 0n ? n + (1n << 64n) : n).toString(16)}`;
  }
  return String(value);
}

/**
 * A fetched value as JSON holds it: 64-bit integers and hex fields as strings (exact), bytes
 * as hex, a fault as null, other numbers and strings as they are.
 */
export function jsonValue(value: FieldValue, hex: boolean | undefined): unknown {
  if (typeof value === 'bigint' || value instanceof Uint8Array) return formatValue(value, hex);
  if (typeof value === 'number' && hex === true) return formatValue(value, hex);
  return value;
}

/** An event's fields as a JSON object. */
export function jsonFields(
  fields: Readonly<Record<string, FieldValue>>,
  hex: ReadonlyMap<string, boolean> | undefined,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(fields)) out[name] = jsonValue(value, hex?.get(name));
  return out;
}
