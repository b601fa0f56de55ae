import { DT, parseDynamicEntries } from './read-dynamic.js';

/**
 * The dynamic linker's rendezvous with debuggers (<link.h>): `struct r_debug`, which ld.so
 * keeps up to date as it loads and unloads objects, and whose address it stores in the
 * executable's DT_DEBUG entry (and exports as `_r_debug`). ld.so calls the function at
 * `r_brk` (`_dl_debug_state`) before a change to its list of objects, with `r_state` RT_ADD
 * or RT_DELETE, and after it, with RT_CONSISTENT.
 */
export const RT_STATE = { CONSISTENT: 0, ADD: 1, DELETE: 2 } as const;

export type RendezvousState = 'consistent' | 'add' | 'delete' | 'unknown';

/** `struct r_debug` of a 64-bit process. */
export interface RDebug {
  readonly version: number;
  /** The first `struct link_map` (the executable's). */
  readonly map: bigint;
  /** The function ld.so calls around each change. */
  readonly brk: bigint;
  readonly state: RendezvousState;
  /** The dynamic linker's load address. */
  readonly ldbase: bigint;
}

/** Bytes of `struct r_debug` (x86-64): int, pointer, pointer, enum, pointer. */
export const R_DEBUG_BYTES = 40;
/** Where `r_state` is in `struct r_debug` (x86-64). */
export const R_STATE_OFFSET = 24;

/** Read `struct r_debug` from its bytes (R_DEBUG_BYTES of them) in a 64-bit process. */
export function parseRDebug(bytes: Uint8Array): RDebug {
  if (bytes.length < R_DEBUG_BYTES) {
    throw new RangeError(`struct r_debug needs ${R_DEBUG_BYTES} bytes, got ${bytes.length}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    version: view.getInt32(0, true),
    map: view.getBigUint64(8, true),
    brk: view.getBigUint64(16, true),
    state: rendezvousState(view.getUint32(R_STATE_OFFSET, true)),
    ldbase: view.getBigUint64(32, true),
  };
}

/** The name of an `r_state` value. */
export function rendezvousState(value: number): RendezvousState {
  switch (value) {
    case RT_STATE.CONSISTENT:
      return 'consistent';
    case RT_STATE.ADD:
      return 'add';
    case RT_STATE.DELETE:
      return 'delete';
    default:
      return 'unknown';
  }
}

/** `struct link_map`'s public head (x86-64): one object ld.so has loaded. */
export interface LinkMapEntry {
  /** The object's load bias (l_addr). */
  readonly addr: bigint;
  /** Address of its path string (empty for the executable). */
  readonly name: bigint;
  /** Address of its dynamic section. */
  readonly ld: bigint;
  readonly next: bigint;
  readonly prev: bigint;
}

/** Bytes of the public head of `struct link_map` (x86-64): five pointers. */
export const LINK_MAP_BYTES = 40;

/** Read the public head of one `struct link_map` from its bytes. */
export function parseLinkMapEntry(bytes: Uint8Array): LinkMapEntry {
  if (bytes.length < LINK_MAP_BYTES) {
    throw new RangeError(`struct link_map needs ${LINK_MAP_BYTES} bytes, got ${bytes.length}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return {
    addr: view.getBigUint64(0, true),
    name: view.getBigUint64(8, true),
    ld: view.getBigUint64(16, true),
    next: view.getBigUint64(24, true),
    prev: view.getBigUint64(32, true),
  };
}

/**
 * The objects of a link map, following `l_next` from `first` (at most `limit`, so that a list
 * read while it changes, or a loop, ends). `read` reads a process's memory.
 */
export function walkLinkMap(
  read: (vaddr: bigint, length: number) => Uint8Array,
  first: bigint,
  limit = 4096,
): LinkMapEntry[] {
  const entries: LinkMapEntry[] = [];
  const seen = new Set<bigint>();
  for (let at = first; at !== 0n && entries.length < limit && !seen.has(at); ) {
    seen.add(at);
    const entry = parseLinkMapEntry(read(at, LINK_MAP_BYTES));
    entries.push(entry);
    at = entry.next;
  }
  return entries;
}

/**
 * Where DT_DEBUG's value is in a dynamic array read from memory (its byte offset), and the
 * value: the address of `struct r_debug` once ld.so has set it (0 before). Undefined when
 * the array has no DT_DEBUG (a shared library, or a program linked without one).
 */
export function findDebugEntry(dynamic: Uint8Array): { at: number; value: bigint } | undefined {
  const entry = parseDynamicEntries(dynamic).find((e) => e.tag === DT.DEBUG);
  return entry === undefined ? undefined : { at: entry.at + 8, value: entry.value };
}

/** The auxiliary vector's AT_BASE: where the kernel mapped the program's interpreter (ld.so). */
export const AT_BASE = 7n;

/**
 * The entries of a 64-bit auxiliary vector (/proc/PID/auxv: type and value pairs, up to
 * AT_NULL), as a map from type to value.
 */
export function parseAuxv(bytes: Uint8Array): Map<bigint, bigint> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const entries = new Map<bigint, bigint>();
  for (let at = 0; at + 16 <= bytes.length; at += 16) {
    const type = view.getBigUint64(at, true);
    if (type === 0n) break;
    entries.set(type, view.getBigUint64(at + 8, true));
  }
  return entries;
}
