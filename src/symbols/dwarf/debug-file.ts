import { closeSync, existsSync, openSync, readSync, realpathSync } from 'node:fs';
import * as zlib from 'node:zlib';
import { type DebugFileCandidate, debugFileLocations } from '../debug-files.js';
import { type ElfFile, openElf } from '../elf/index.js';
import { hasDwarf } from './sections.js';

/** Where a file's DWARF comes from. */
export interface DebugInfoSource {
  /** The ELF file whose debug sections are read: the target itself or its debug file. */
  readonly elf: ElfFile;
  readonly path: string;
  /** 'embedded': the target has its own; otherwise what found the separate file. */
  readonly how: 'embedded' | 'build-id' | 'debuglink';
}

/** A candidate looked at and why it was not used. */
export interface DebugFileRejection {
  readonly path: string;
  readonly how: DebugFileCandidate['how'];
  readonly reason: string;
}

export type DebugInfoLookup =
  | ({ readonly found: true } & DebugInfoSource)
  | {
      readonly found: false;
      /** Every place looked at, in order (the build-id path first when the file has one). */
      readonly candidates: readonly DebugFileCandidate[];
      /** Candidates that exist but were refused (wrong build-id, CRC, no DWARF, not ELF). */
      readonly rejected: readonly DebugFileRejection[];
    };

export interface FindDebugInfoOptions {
  /** Directories searched like /usr/lib/debug, before it (gdb's debug-file-directory). */
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * Finds the debug info for `target` (opened from `path`): its own .debug_info/.debug_line, else
 * a separate debug file found by build-id or .gnu_debuglink and checked to belong to it (same
 * build-id, or the debuglink's CRC-32 of the file) that has DWARF or a .symtab (a debug file
 * made from a binary built without -g has only the symbols). A separate file has the same
 * addresses as the target (the same link), so its addresses map through the target's
 * segments. The caller closes `elf` when it is not `target`.
 */
export function findDebugInfo(
  target: ElfFile,
  path: string,
  options: FindDebugInfoOptions = {},
): DebugInfoLookup {
  if (hasDwarf(target)) return { found: true, elf: target, path, how: 'embedded' };
  const buildId = target.buildId();
  const link = target.debugLink();
  const candidates = debugFileLocations(path, buildId, link?.file, options.debugDirs);
  const rejected: DebugFileRejection[] = [];
  const self = realPath(path);
  for (const candidate of candidates) {
    if (!existsSync(candidate.path) || realPath(candidate.path) === self) continue;
    let elf: ElfFile;
    try {
      elf = openElf(candidate.path);
    } catch (err) {
      rejected.push({
        ...candidate,
        reason: `not a readable ELF file (${(err as Error).message})`,
      });
      continue;
    }
    const reason = refusal(elf, candidate, buildId, link?.crc32);
    if (reason === undefined) return { found: true, elf, path: candidate.path, how: candidate.how };
    elf.close();
    rejected.push({ ...candidate, reason });
  }
  return { found: false, candidates, rejected };
}

/** Why a candidate is not the target's debug file, or undefined when it is. */
function refusal(
  elf: ElfFile,
  candidate: DebugFileCandidate,
  buildId: string | undefined,
  crc: number | undefined,
): string | undefined {
  const theirs = elf.buildId();
  if (candidate.how === 'build-id' || (buildId !== undefined && theirs !== undefined)) {
    if (theirs !== buildId) return `its build-id ${theirs ?? '(none)'} is not ${buildId}`;
  } else if (crc !== undefined) {
    const actual = fileCrc32(candidate.path);
    if (actual !== crc) {
      return `its CRC-32 0x${hex8(actual)} is not the 0x${hex8(crc)} .gnu_debuglink records`;
    }
  }
  if (!hasDwarf(elf) && !elf.hasSymtab) {
    return 'it has no .debug_info, .debug_line or .symtab section';
  }
  return undefined;
}

function hex8(value: number): string {
  return value.toString(16).padStart(8, '0');
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

const CHUNK_BYTES = 1 << 20;

/** The CRC-32 (the zlib/.gnu_debuglink one) of a whole file, read in chunks. */
export function fileCrc32(path: string): number {
  const fd = openSync(path, 'r');
  try {
    const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
    let crc = 0;
    for (;;) {
      const n = readSync(fd, chunk, 0, CHUNK_BYTES, null);
      if (n === 0) return crc;
      crc = crc32(chunk.subarray(0, n), crc);
    }
  } finally {
    closeSync(fd);
  }
}

let table: Uint32Array | undefined;

/** CRC-32 (polynomial 0xedb88320), continuing from `crc`: node:zlib's when it has one (20.15+). */
export function crc32(data: Uint8Array, crc = 0): number {
  const native = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
  if (native !== undefined) return native(data, crc);
  if (table === undefined) {
    table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c >>> 0;
    }
  }
  let c = ~crc >>> 0;
  for (const byte of data) c = table[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}
