import { ProbeError, quote } from '../../errors/index.js';
import { type LdCacheArch, ldCacheArch } from './flags.js';

/** One library in the dynamic linker cache: `soname => path`. */
export interface LdCacheEntry {
  /** The key ld.so looks up: the library's soname, e.g. "libc.so.6". */
  readonly soname: string;
  /** Where the library is, as ldconfig found it (may be a symlink). */
  readonly path: string;
  /** glibc's FLAG_* word; see describeLdCacheFlags(). */
  readonly flags: number;
  readonly arch: LdCacheArch;
  /** Hardware capability bits; bit 62 marks a glibc-hwcaps entry (see `hwcaps`). */
  readonly hwcap: bigint;
  /** Minimum kernel version from the ABI note (0 when none), as ldconfig stores it. */
  readonly osVersion: number;
  /** The glibc-hwcaps subdirectory the library comes from, e.g. "x86-64-v3". */
  readonly hwcaps?: string;
}

export interface LdCache {
  /** 'new': glibc 2.2+ format only; 'old': libc5 format only; 'compat': old with new inside. */
  readonly format: 'new' | 'old' | 'compat';
  /** Entries in file order (ld.so's search order). */
  readonly entries: LdCacheEntry[];
  /** The "generator" extension: which ldconfig wrote the file. */
  readonly generator?: string;
}

export interface ParseLdCacheOptions {
  /** Name of the file in error messages. Default "/etc/ld.so.cache". */
  readonly source?: string;
}

const MAGIC_OLD = 'ld.so-1.7.0';
const MAGIC_NEW = 'glibc-ld.so.cache1.1';
/** struct cache_file: magic[11], pad, nlibs. */
const OLD_HEADER_SIZE = 16;
/** struct file_entry: flags, key, value. */
const OLD_ENTRY_SIZE = 12;
/** struct cache_file_new: magic[17] version[3] nlibs len_strings flags pad[3] ext unused[3]. */
const NEW_HEADER_SIZE = 48;
/** struct file_entry_new: flags key value osversion hwcap. */
const NEW_ENTRY_SIZE = 24;
/** The new header is aligned to __alignof__(struct cache_file_new) when inside the old one. */
const NEW_ALIGN = 8;
const EXTENSION_MAGIC = 0xeaa42174;
const EXTENSION_TAG_GENERATOR = 0;
const EXTENSION_TAG_GLIBC_HWCAPS = 1;
const HWCAP_EXTENSION_BIT = 1n << 62n;

const decoder = new TextDecoder('utf-8');

/**
 * Parse /etc/ld.so.cache in any of the formats ldconfig writes. For 'compat' files the new
 * format embedded in the old one is read, as ld.so and `ldconfig -p` do. Throws ProbeError
 * 'ERR_LDCACHE_INVALID' for a file that is not a cache or is truncated or inconsistent.
 */
export function parseLdCacheFile(bytes: Uint8Array, options: ParseLdCacheOptions = {}): LdCache {
  const reader = new CacheReader(bytes, options.source ?? '/etc/ld.so.cache');
  if (reader.startsWith(0, MAGIC_NEW)) return reader.readNew(0, 'new');
  if (!reader.startsWith(0, MAGIC_OLD)) {
    const what = bytes.length < MAGIC_OLD.length ? 'the file is too short' : 'bad magic';
    reader.fail(`${what} (expected "${MAGIC_NEW}" or "${MAGIC_OLD}")`);
  }
  return reader.readOld();
}

/** The entries of /etc/ld.so.cache; see parseLdCacheFile(). */
export function parseLdCache(bytes: Uint8Array, options: ParseLdCacheOptions = {}): LdCacheEntry[] {
  return parseLdCacheFile(bytes, options).entries;
}

class CacheReader {
  private readonly view: DataView;

  constructor(
    private readonly bytes: Uint8Array,
    private readonly source: string,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  fail(reason: string): never {
    throw new ProbeError(
      'ERR_LDCACHE_INVALID',
      `Cannot read the dynamic linker cache ${quote(this.source)}: ${reason}`,
      {
        hints: ['Rebuild the cache with: ldconfig'],
        details: { path: this.source, sizeBytes: this.bytes.length },
      },
    );
  }

  startsWith(offset: number, text: string): boolean {
    if (offset + text.length > this.bytes.length) return false;
    for (let i = 0; i < text.length; i++) {
      if (this.bytes[offset + i] !== text.charCodeAt(i)) return false;
    }
    return true;
  }

  private u32(offset: number): number {
    return this.view.getUint32(offset, true);
  }

  readOld(): LdCache {
    const size = this.bytes.length;
    if (size < OLD_HEADER_SIZE) {
      this.fail(
        `the file is truncated: ${size} bytes is less than the ${OLD_HEADER_SIZE}-byte header`,
      );
    }
    const nlibs = this.u32(12);
    if (nlibs > Math.floor((size - OLD_HEADER_SIZE) / OLD_ENTRY_SIZE)) {
      this.fail(`entry count ${nlibs} is too large for the file (${size} bytes)`);
    }
    const entriesEnd = OLD_HEADER_SIZE + nlibs * OLD_ENTRY_SIZE;
    const newBase = Math.ceil(entriesEnd / NEW_ALIGN) * NEW_ALIGN;
    if (this.startsWith(newBase, MAGIC_NEW)) return this.readNew(newBase, 'compat');
    // Old format alone: string offsets count from the end of the entry table.
    const entries: LdCacheEntry[] = [];
    for (let i = 0; i < nlibs; i++) {
      const at = OLD_HEADER_SIZE + i * OLD_ENTRY_SIZE;
      const flags = this.view.getInt32(at, true);
      entries.push({
        soname: this.string(entriesEnd, this.u32(at + 4), size, `entry ${i} soname`),
        path: this.string(entriesEnd, this.u32(at + 8), size, `entry ${i} path`),
        flags,
        arch: ldCacheArch(flags),
        hwcap: 0n,
        osVersion: 0,
      });
    }
    return { format: 'old', entries };
  }

  readNew(base: number, format: 'new' | 'compat'): LdCache {
    const size = this.bytes.length;
    if (base + NEW_HEADER_SIZE > size) {
      this.fail(
        `the file is truncated: the ${NEW_HEADER_SIZE}-byte header at ${base} runs past the end (${size} bytes)`,
      );
    }
    const nlibs = this.u32(base + 20);
    const stringsSize = this.u32(base + 24);
    const endian = this.bytes[base + 28]! & 3;
    if (endian === 3) this.fail('the file is big-endian');
    if (endian === 1) this.fail('the endianness flag is invalid');
    const extensionOffset = this.u32(base + 32);
    if (nlibs > Math.floor((size - base - NEW_HEADER_SIZE) / NEW_ENTRY_SIZE)) {
      this.fail(`entry count ${nlibs} is too large for the file (${size} bytes)`);
    }
    const entriesEnd = base + NEW_HEADER_SIZE + nlibs * NEW_ENTRY_SIZE;
    if (entriesEnd + stringsSize > size) {
      this.fail(
        `the file is truncated: the ${stringsSize}-byte string table at ${entriesEnd} runs past the end (${size} bytes)`,
      );
    }
    const stringsEnd = entriesEnd + stringsSize;
    const extensions = this.readExtensions(extensionOffset);

    const entries: LdCacheEntry[] = [];
    for (let i = 0; i < nlibs; i++) {
      const at = base + NEW_HEADER_SIZE + i * NEW_ENTRY_SIZE;
      const flags = this.view.getInt32(at, true);
      const hwcap = this.view.getBigUint64(at + 16, true);
      const entry: LdCacheEntry = {
        soname: this.string(base, this.u32(at + 4), stringsEnd, `entry ${i} soname`),
        path: this.string(base, this.u32(at + 8), stringsEnd, `entry ${i} path`),
        flags,
        arch: ldCacheArch(flags),
        hwcap,
        osVersion: this.u32(at + 12),
      };
      const hwcaps = this.hwcapsName(hwcap, extensions.hwcaps, base, stringsEnd);
      entries.push(hwcaps === undefined ? entry : { ...entry, hwcaps });
    }
    return extensions.generator === undefined
      ? { format, entries }
      : { format, entries, generator: extensions.generator };
  }

  /** The extension directory (glibc 2.33+); its offsets count from the start of the file. */
  private readExtensions(offset: number): { generator?: string; hwcaps?: number[] } {
    if (offset === 0) return {};
    const size = this.bytes.length;
    if (offset % 4 !== 0) this.fail(`the extension directory offset ${offset} is misaligned`);
    if (offset + 8 > size) {
      this.fail(
        `the extension directory at ${offset} runs past the end of the file (${size} bytes)`,
      );
    }
    if (this.u32(offset) !== EXTENSION_MAGIC) {
      this.fail(`the extension directory at ${offset} has a bad magic number`);
    }
    const count = this.u32(offset + 4);
    if (count > Math.floor((size - offset - 8) / 16)) {
      this.fail(`extension count ${count} is too large for the file (${size} bytes)`);
    }
    const result: { generator?: string; hwcaps?: number[] } = {};
    for (let i = 0; i < count; i++) {
      const at = offset + 8 + i * 16;
      const tag = this.u32(at);
      const sectionOffset = this.u32(at + 8);
      const sectionSize = this.u32(at + 12);
      if (sectionOffset + sectionSize > size) {
        this.fail(
          `extension ${i} (${sectionSize} bytes at ${sectionOffset}) runs past the end of the file (${size} bytes)`,
        );
      }
      if (tag === EXTENSION_TAG_GENERATOR) {
        result.generator = decoder.decode(
          this.bytes.subarray(sectionOffset, sectionOffset + sectionSize),
        );
      } else if (tag === EXTENSION_TAG_GLIBC_HWCAPS) {
        if (sectionSize % 4 !== 0)
          this.fail(`the glibc-hwcaps extension size ${sectionSize} is not a multiple of 4`);
        const names: number[] = [];
        for (let j = 0; j < sectionSize; j += 4) names.push(this.u32(sectionOffset + j));
        result.hwcaps = names;
      }
    }
    return result;
  }

  /**
   * The glibc-hwcaps subdirectory of an entry whose hwcap has the extension bit: the low 32
   * bits index the extension's array of string offsets (which ldconfig writes relative to the
   * new header, like the entries' strings). An index or offset out of range gives undefined,
   * as ld.so then ignores the entry rather than the whole cache.
   */
  private hwcapsName(
    hwcap: bigint,
    table: readonly number[] | undefined,
    base: number,
    stringsEnd: number,
  ): string | undefined {
    if ((hwcap & HWCAP_EXTENSION_BIT) === 0n || table === undefined) return undefined;
    const stringOffset = table[Number(hwcap & 0xffffffffn)];
    if (stringOffset === undefined) return undefined;
    const start = base + stringOffset;
    if (start >= stringsEnd) return undefined;
    const nul = this.bytes.subarray(start, stringsEnd).indexOf(0);
    return nul < 0 ? undefined : decoder.decode(this.bytes.subarray(start, start + nul));
  }

  /** A NUL-terminated string at base + offset that must end before `end`. */
  private string(base: number, offset: number, end: number, what: string): string {
    const start = base + offset;
    if (start >= end) {
      this.fail(`${what} offset ${offset} is out of range (strings end at ${end - base})`);
    }
    const nul = this.bytes.subarray(start, end).indexOf(0);
    if (nul < 0) this.fail(`${what} at offset ${offset} is not NUL-terminated`);
    return decoder.decode(this.bytes.subarray(start, start + nul));
  }
}
