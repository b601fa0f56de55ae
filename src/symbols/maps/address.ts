import { isFileMapping, type MappedObject } from './mapped-objects.js';
import type { MapEntry } from './parse-proc-maps.js';

/** The area holding a runtime address, file-backed or not. */
export function findMapping(entries: readonly MapEntry[], address: bigint): MapEntry | undefined {
  return entries.find((e) => address >= e.start && address < e.end);
}

/**
 * Where a runtime address of the process is in the file mapped there:
 * fileOffset = address - entry.start + entry.offset. Undefined when no file-backed area holds
 * the address (anonymous memory, [heap], [vdso], or nothing mapped).
 */
export function runtimeToFileOffset(
  entries: readonly MapEntry[],
  address: bigint,
): { entry: MapEntry; fileOffset: bigint } | undefined {
  const entry = findMapping(entries, address);
  if (entry === undefined || !isFileMapping(entry)) return undefined;
  return { entry, fileOffset: address - entry.start + entry.offset };
}

/** The size of the file range an area maps. */
function mappedSize(entry: MapEntry): bigint {
  return entry.end - entry.start;
}

/**
 * The runtime address where a file offset of a mapped object is, or undefined when no area
 * maps it. When several areas map the same file page (small files whose code and data
 * segments share a page), an executable area wins, then the lowest address.
 */
export function fileOffsetToRuntime(object: MappedObject, fileOffset: bigint): bigint | undefined {
  return runtimeAddressesOf(object)(Number(fileOffset));
}

/** runtimeAddressesOf()'s answer for each object asked of. */
const runtimeAddresses = new WeakMap<MappedObject, (fileOffset: number) => bigint | undefined>();

/**
 * fileOffsetToRuntime() of one object, for offsets as numbers (a plan keeps them so): its
 * areas' numbers worked out once per object, not two bigint sums per area per offset.
 */
export function runtimeAddressesOf(
  object: MappedObject,
): (fileOffset: number) => bigint | undefined {
  const known = runtimeAddresses.get(object);
  if (known !== undefined) return known;
  const areas = object.mappings.map((m) => ({
    offset: Number(m.offset),
    end: Number(m.offset + mappedSize(m)),
    start: m.start,
    executable: m.executable,
  }));
  const runtime = (fileOffset: number) => {
    let best: (typeof areas)[number] | undefined;
    for (const area of areas) {
      if (fileOffset < area.offset || fileOffset >= area.end) continue;
      if (best === undefined || (area.executable && !best.executable)) best = area;
    }
    return best === undefined ? undefined : best.start + BigInt(fileOffset - best.offset);
  };
  runtimeAddresses.set(object, runtime);
  return runtime;
}

/** A loadable segment of the object's ELF file (PT_LOAD p_vaddr and p_offset). */
export interface LoadSegment {
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
}

/**
 * The load bias of a mapped ELF object: runtime address = vaddr + bias (0 for a non-PIE
 * executable). Given the file's PT_LOAD segments, picks the bias that places the most
 * segments on one of the object's areas; undefined when none of them is mapped.
 */
export function loadBias(
  object: MappedObject,
  segments: readonly LoadSegment[],
): bigint | undefined {
  const votes = new Map<bigint, number>();
  for (const segment of segments) {
    const seen = new Set<bigint>();
    for (const m of object.mappings) {
      if (segment.fileOffset < m.offset || segment.fileOffset >= m.offset + mappedSize(m)) continue;
      const bias = m.start + (segment.fileOffset - m.offset) - segment.vaddr;
      if (seen.has(bias)) continue;
      seen.add(bias);
      votes.set(bias, (votes.get(bias) ?? 0) + 1);
    }
  }
  let best: bigint | undefined;
  let bestVotes = 0;
  for (const [bias, count] of votes) {
    if (count > bestVotes) {
      best = bias;
      bestVotes = count;
    }
  }
  return best;
}
