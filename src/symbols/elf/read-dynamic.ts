import type { ElfFile } from './types.js';

/** The d_tag values upscope reads (elf.h). */
export const DT = {
  NULL: 0n,
  NEEDED: 1n,
  STRTAB: 5n,
  STRSZ: 10n,
  SONAME: 14n,
  RPATH: 15n,
  DEBUG: 21n,
  RUNPATH: 29n,
} as const;

/** Bytes of one Elf64_Dyn: d_tag (signed 64-bit), then d_val/d_ptr. */
export const DYN_ENTRY_BYTES = 16;

/** One entry of a dynamic section, and where it is (its byte offset in the section). */
export interface DynamicEntry {
  readonly tag: bigint;
  readonly value: bigint;
  /** Byte offset of the entry from the start of the dynamic array (its value is 8 further). */
  readonly at: number;
}

/**
 * The entries of an Elf64 dynamic array (from a file's PT_DYNAMIC, or read from a process's
 * memory), up to and without the DT_NULL that ends it, or to the end of the bytes.
 */
export function parseDynamicEntries(bytes: Uint8Array): DynamicEntry[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const entries: DynamicEntry[] = [];
  for (let at = 0; at + DYN_ENTRY_BYTES <= bytes.length; at += DYN_ENTRY_BYTES) {
    const tag = view.getBigInt64(at, true);
    if (tag === DT.NULL) break;
    entries.push({ tag, value: view.getBigUint64(at + 8, true), at });
  }
  return entries;
}

/** What a dynamically linked file asks of the dynamic linker: its search paths and soname. */
export interface DynamicInfo {
  /** The PT_DYNAMIC segment's link-time address (runtime: plus the load bias). */
  readonly vaddr: bigint;
  /** Its size in the file. */
  readonly sizeBytes: number;
  readonly soname: string | undefined;
  readonly needed: readonly string[];
  /** DT_RPATH, split at ':' ($ORIGIN not expanded); ld.so ignores it when DT_RUNPATH is set. */
  readonly rpath: readonly string[] | undefined;
  /** DT_RUNPATH, split at ':' ($ORIGIN not expanded). */
  readonly runpath: readonly string[] | undefined;
}

/**
 * The file's dynamic section (through PT_DYNAMIC, so a file without section headers reads
 * too), with the strings of DT_STRTAB; undefined for a file without one (static, or an
 * object file). Malformed string offsets give no string rather than an error.
 */
export function readDynamicInfo(elf: ElfFile): DynamicInfo | undefined {
  const segment = elf.segments.find((s) => s.typeName === 'DYNAMIC');
  if (segment === undefined || segment.fileSize === 0n) return undefined;
  const entries = parseDynamicEntries(elf.read(segment.offset, segment.fileSize));
  const value = (tag: bigint) => entries.find((e) => e.tag === tag)?.value;
  const strtab = value(DT.STRTAB);
  const strsz = value(DT.STRSZ);
  const strtabOffset = strtab === undefined ? undefined : elf.vaddrToFileOffset(strtab);
  let strings: Uint8Array | undefined;
  // A table that starts past the end of the file (a damaged segment) has no strings.
  if (strtabOffset !== undefined && strsz !== undefined && strtabOffset < elf.fileSize) {
    const available = elf.fileSize - strtabOffset;
    // biome-ignore lint/complexity/useMathMinMax: bigints, which Math.min does not take
    strings = elf.read(strtabOffset, strsz < available ? strsz : available);
  }
  const string = (offset: bigint | undefined): string | undefined => {
    if (strings === undefined || offset === undefined || offset >= BigInt(strings.length))
      return undefined;
    const start = Number(offset);
    const end = strings.indexOf(0, start);
    return Buffer.from(strings.subarray(start, end < 0 ? strings.length : end)).toString('utf8');
  };
  const paths = (tag: bigint) => {
    const text = string(value(tag));
    return text === undefined ? undefined : text.split(':').filter((dir) => dir !== '');
  };
  return {
    vaddr: segment.vaddr,
    sizeBytes: Number(segment.fileSize),
    soname: string(value(DT.SONAME)),
    needed: entries
      .filter((e) => e.tag === DT.NEEDED)
      .map((e) => string(e.value))
      .filter((name): name is string => name !== undefined),
    rpath: paths(DT.RPATH),
    runpath: paths(DT.RUNPATH),
  };
}

/**
 * The program's interpreter (PT_INTERP: its dynamic loader), if it names one; a program that
 * names none is statically linked.
 */
export function interpreterOf(elf: ElfFile): string | undefined {
  const segment = elf.segments.find((s) => s.typeName === 'INTERP');
  if (segment === undefined) return undefined;
  const bytes = elf.read(segment.offset, segment.fileSize);
  const end = bytes.indexOf(0);
  return Buffer.from(bytes.subarray(0, end < 0 ? bytes.length : end)).toString('utf8');
}
