/**
 * The kernel's copy of the unwind tables the stack walker reads (see unwind-program.ts): files
 * by device and inode, each file's rows and a page index into them, the rules the rows
 * share, and the files the walker met without a table (for user space to load).
 */
import type { UnwindRule, UnwindTable } from '../../arch/index.js';
import type { BpfMap } from './kernel.js';
import type { BpfSession } from './session.js';

/** The file's unwind table is in the maps. */
export const FILE_HAS_TABLE = 1;
/** The file had a table but the maps had no room left for it. */
export const FILE_TABLE_FULL = 2;

/** Bytes of a file key: kernel dev_t (u32), padding, inode (u64). */
export const FILE_KEY_BYTES = 16;
/** Bytes of a file's entry: rowFirst, rowCount, pageFirst, pageCount, basePage, fileId, flags, 0. */
export const FILE_VALUE_BYTES = 32;
/** Bytes of a row: file offset where it starts (u32), rule index (u32). */
export const ROW_BYTES = 8;
/** Bytes of a rule: cfa, rbp, ra, signal (u8 each), cfaOffset, cfaAdd, raOffset, rbpOffset (i32). */
export const RULE_BYTES = 20;
/**
 * A mapping as the walker keeps it (the state's fields from vmStart to ino, then the flags):
 * vmStart, vmEnd, fileBase (u64), dev (u32), 0 (u32), ino (u64), flags (u32), 0 (u32).
 */
export const VMA_VALUE_BYTES = 48;
/**
 * The mapping cache (mappings walks found, for processes whose map is not synced): key
 * {pid u32, shift u32, pc >> shift u64}, by page (shift 12: the mapping that holds the page)
 * and by 2 MiB region (shift 21: the last mapping found in it, used when it holds the pc);
 * value a mapping, then the image id it was found in (u64).
 */
const VMA_CACHE_KEY_BYTES = 16;
export const VMA_CACHE_VALUE_BYTES = VMA_VALUE_BYTES + 8;
const VMA_CACHE_ENTRIES = 16384;
export const VMA_REGION_SHIFT = 21;
/**
 * The mappings of the processes followed, read from /proc/PID/maps: a longest-prefix-match
 * trie whose key is {prefix length u32, pid u32, address u64 big-endian} (the pid always
 * whole, then the leading bits of the address), one range of addresses as a few prefixes.
 */
export const VMA_RANGE_KEY_BYTES = 16;
const VMA_RANGE_ENTRIES = 1 << 16;
/** Processes whose ranges are synced: pid (u32) -> the image id they were read for (u64). */
const VMA_PIDS = 4096;
/** Processes a walk found no mapping for while the memory map was locked (pid -> 1). */
const VMA_RESYNC = 1024;
/** `VM_IO`: the kernel sets it on the uprobes page (the walker's mark of that page). */
export const VM_IO = 0x4000;

/** One executable mapping of a process, as /proc/PID/maps gives it. */
export interface ProcessMapping {
  readonly start: bigint;
  readonly end: bigint;
  /** Where the file's offset 0 would be mapped: start less the file offset at start. */
  readonly fileBase: bigint;
  /** The file's kernel dev_t and inode; 0 for anonymous memory. */
  readonly dev: number;
  readonly ino: bigint;
  /** The kernel's uprobes page ([uprobes]: return trampolines, instructions out of line). */
  readonly uprobes: boolean;
}

/**
 * The prefixes that cover [start, end) exactly, largest first: each the `bits` leading bits of
 * `base` (the rest 0). At most two per bit of the range's size.
 */
export function rangePrefixes(start: bigint, end: bigint): { base: bigint; bits: number }[] {
  const found: { base: bigint; bits: number }[] = [];
  let at = start;
  while (at < end) {
    // The largest aligned block that starts at `at` and ends at or before `end`.
    let size = 1n;
    let bits = 64;
    while (bits > 0 && at % (size * 2n) === 0n && at + size * 2n <= end) {
      size *= 2n;
      bits--;
    }
    found.push({ base: at, bits });
    at += size;
  }
  return found;
}

/** The trie's key of a prefix of process `pid`'s addresses (`bits` 64: one address). */
export function rangeKey(pid: number, base: bigint, bits: number): Uint8Array {
  const key = new Uint8Array(VMA_RANGE_KEY_BYTES);
  const view = new DataView(key.buffer);
  view.setUint32(0, 32 + bits, true);
  view.setUint32(4, pid, true);
  view.setBigUint64(8, base, false);
  return key;
}

/** A mapping as the walker's state holds it (VMA_VALUE_BYTES). */
export function mappingValue(mapping: ProcessMapping): Uint8Array {
  const value = new Uint8Array(VMA_VALUE_BYTES);
  const view = new DataView(value.buffer);
  view.setBigUint64(0, mapping.start, true);
  view.setBigUint64(8, mapping.end, true);
  view.setBigUint64(16, BigInt.asUintN(64, mapping.fileBase), true);
  view.setUint32(24, mapping.dev, true);
  view.setBigUint64(32, mapping.ino, true);
  view.setUint32(40, mapping.uprobes ? VM_IO : 0, true);
  return value;
}

function mappingName(m: ProcessMapping): string {
  return `${m.start}-${m.end}:${m.fileBase}:${m.dev}:${m.ino}:${m.uprobes}`;
}

/** A process's ranges as they are in the trie, and the image they were read for. */
interface SyncedProcess {
  image: bigint;
  readonly ranges: Map<string, ProcessMapping>;
}

/** The page size of the page index (a row range per 4 KiB of file offsets). */
export const PAGE_SHIFT = 12;

export interface UnwindCapacity {
  readonly rows: number;
  readonly pages: number;
  readonly rules: number;
  readonly files: number;
}

/** A file as the kernel knows it: `vma->vm_file->f_inode`'s superblock device and inode. */
export interface FileIdentity {
  /** The kernel's dev_t: major << 20 | minor. */
  readonly dev: number;
  readonly ino: bigint;
}

export function fileKey(identity: FileIdentity): Uint8Array {
  const key = new Uint8Array(FILE_KEY_BYTES);
  const view = new DataView(key.buffer);
  view.setUint32(0, identity.dev, true);
  view.setBigUint64(8, identity.ino, true);
  return key;
}

function ruleBytes(rule: UnwindRule): Uint8Array {
  const bytes = new Uint8Array(RULE_BYTES);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, rule.cfa);
  view.setUint8(1, rule.rbp);
  view.setUint8(2, rule.ra);
  view.setUint8(3, rule.signal ? 1 : 0);
  view.setInt32(4, rule.cfaOffset, true);
  view.setInt32(8, rule.cfaAdd, true);
  view.setInt32(12, rule.raOffset, true);
  view.setInt32(16, rule.rbpOffset, true);
  return bytes;
}

function sameKeys(a: ReadonlyMap<string, unknown>, b: ReadonlyMap<string, unknown>): boolean {
  if (a.size !== b.size) return false;
  for (const key of a.keys()) if (!b.has(key)) return false;
  return true;
}

function u32Keys(first: number, count: number): Uint8Array {
  const keys = new Uint8Array(count * 4);
  const view = new DataView(keys.buffer);
  for (let i = 0; i < count; i++) view.setUint32(i * 4, first + i, true);
  return keys;
}

/** A file the walker met with no entry in `files`: the process that met it, and its identity. */
export interface MissingFile extends FileIdentity {
  readonly pid: number;
}

/** The unwind maps of one aggregation, and what is loaded in them. */
export class UnwindMaps {
  readonly files: BpfMap;
  readonly rows: BpfMap;
  readonly pages: BpfMap;
  readonly rules: BpfMap;
  readonly missing: BpfMap;
  /** Per CPU: the stack key being built, one per nesting level. */
  readonly scratch: BpfMap;
  /** Per CPU: how many handlers are building a key on it (a preempted one, and another). */
  readonly nest: BpfMap;
  /**
   * Mappings walks found, by process and code page: where bpf_find_vma cannot take the
   * memory map's lock (another thread maps or protects memory), a page seen before is
   * still walked through (an LRU: least used pages go first).
   */
  readonly vmaCache: BpfMap;
  /**
   * The mappings of the processes followed, kept equal to /proc/PID/maps (see syncProcess):
   * where the memory map is locked, the walker finds the pc's mapping here.
   */
  readonly vmaRanges: BpfMap;
  /** The processes whose ranges are synced, and for which image (see memoryImageId). */
  readonly vmaPids: BpfMap;
  /** The processes a walk met with the memory map locked and no mapping known. */
  readonly vmaResync: BpfMap;
  readonly capacity: UnwindCapacity;
  readonly #synced = new Map<number, SyncedProcess>();
  #rowsUsed = 0;
  #pagesUsed = 0;
  readonly #ruleIndex = new Map<string, number>();
  #nextFileId = 0;
  readonly #loaded = new Map<string, number>();

  constructor(session: BpfSession, capacity: UnwindCapacity, keyBytes: number) {
    this.capacity = capacity;
    this.files = session.map({
      kind: 'hash',
      name: 'uw_files',
      keyBytes: FILE_KEY_BYTES,
      valueBytes: FILE_VALUE_BYTES,
      maxEntries: capacity.files,
    });
    this.rows = session.map({
      kind: 'array',
      name: 'uw_rows',
      keyBytes: 4,
      valueBytes: ROW_BYTES,
      maxEntries: capacity.rows,
    });
    this.pages = session.map({
      kind: 'array',
      name: 'uw_pages',
      keyBytes: 4,
      valueBytes: 4,
      maxEntries: capacity.pages,
    });
    this.rules = session.map({
      kind: 'array',
      name: 'uw_rules',
      keyBytes: 4,
      valueBytes: RULE_BYTES,
      maxEntries: capacity.rules,
    });
    this.missing = session.map({
      kind: 'hash',
      name: 'uw_missing',
      keyBytes: FILE_KEY_BYTES,
      valueBytes: 8,
      maxEntries: 1024,
    });
    this.scratch = session.map({
      kind: 'percpu-array',
      name: 'uw_scratch',
      keyBytes: 4,
      // The stack key, then the kind of the pc's mapping (see KIND_AT).
      valueBytes: keyBytes + 8,
      maxEntries: 2,
    });
    this.vmaCache = session.map({
      kind: 'lru-hash',
      name: 'uw_vma_cache',
      keyBytes: VMA_CACHE_KEY_BYTES,
      valueBytes: VMA_CACHE_VALUE_BYTES,
      maxEntries: VMA_CACHE_ENTRIES,
    });
    this.vmaRanges = session.map({
      kind: 'lpm-trie',
      name: 'uw_vma_ranges',
      keyBytes: VMA_RANGE_KEY_BYTES,
      valueBytes: VMA_VALUE_BYTES,
      maxEntries: VMA_RANGE_ENTRIES,
    });
    this.vmaPids = session.map({
      kind: 'hash',
      name: 'uw_vma_pids',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: VMA_PIDS,
    });
    this.vmaResync = session.map({
      kind: 'hash',
      name: 'uw_vma_resync',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: VMA_RESYNC,
    });
    this.nest = session.map({
      kind: 'percpu-array',
      name: 'uw_nest',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: 1,
    });
  }

  /** Rows and pages a table takes in the maps. */
  static footprint(table: UnwindTable): { rows: number; pages: number } {
    const { starts } = table;
    if (starts.length === 0) return { rows: 0, pages: 0 };
    const pages = (starts[starts.length - 1]! >>> PAGE_SHIFT) - (starts[0]! >>> PAGE_SHIFT) + 2;
    return { rows: starts.length, pages };
  }

  /** The id under which a file's frames are keyed, if it is loaded. */
  fileId(identity: FileIdentity): number | undefined {
    return this.#loaded.get(`${identity.dev}:${identity.ino}`);
  }

  /**
   * Load a file's table (undefined: the file has none, and its frames end the stack there)
   * and return the id its frames are keyed by. A file loaded already keeps its id.
   */
  addFile(identity: FileIdentity, table: UnwindTable | undefined): number {
    const name = `${identity.dev}:${identity.ino}`;
    const known = this.#loaded.get(name);
    if (known !== undefined) return known;
    const fileId = this.#nextFileId++;
    const value = new Uint8Array(FILE_VALUE_BYTES);
    const view = new DataView(value.buffer);
    view.setUint32(20, fileId, true);
    if (table !== undefined && table.starts.length > 0) {
      const { rows, pages } = UnwindMaps.footprint(table);
      const ruleIds = this.#rules(table.ruleSet);
      if (
        ruleIds === undefined ||
        this.#rowsUsed + rows > this.capacity.rows ||
        this.#pagesUsed + pages > this.capacity.pages
      ) {
        view.setUint32(24, FILE_TABLE_FULL, true);
      } else {
        const rowFirst = this.#rowsUsed;
        const pageFirst = this.#pagesUsed;
        const basePage = table.starts[0]! >>> PAGE_SHIFT;
        this.#writeRows(rowFirst, table, ruleIds);
        this.#writePages(pageFirst, pages, basePage, rowFirst, table.starts);
        this.#rowsUsed += rows;
        this.#pagesUsed += pages;
        view.setUint32(0, rowFirst, true);
        view.setUint32(4, rows, true);
        view.setUint32(8, pageFirst, true);
        view.setUint32(12, pages - 1, true);
        view.setUint32(16, basePage, true);
        view.setUint32(24, FILE_HAS_TABLE, true);
      }
    }
    this.files.update(fileKey(identity), value);
    this.#loaded.set(name, fileId);
    return fileId;
  }

  /** The files met without a table since the last call (taken out of the map). */
  takeMissing(): MissingFile[] {
    const found: MissingFile[] = [];
    for (const key of this.missing.keys()) {
      const value = this.missing.lookup(key);
      this.missing.delete(key);
      const view = new DataView(key.buffer, key.byteOffset, key.byteLength);
      found.push({
        dev: view.getUint32(0, true),
        ino: view.getBigUint64(8, true),
        pid: value === undefined ? 0 : new DataView(value.buffer).getUint32(0, true),
      });
    }
    return found;
  }

  /**
   * Make the walker's copy of process `pid`'s executable mappings equal to `mappings`, read
   * from /proc/PID/maps for the image `image` (memoryImageId, read before the maps). Ranges
   * gone or changed since the last sync leave the trie, with any page the walks cached in
   * them; new ones come in. While this runs, the process is marked not synced (the walker
   * falls back on the pages walks cached), and it is marked synced for `image` after: a walk
   * in another image (the process has exec'd since) does not use these ranges.
   */
  syncProcess(pid: number, image: bigint, mappings: readonly ProcessMapping[]): void {
    const pidKey = u32Keys(pid, 1);
    let known = this.#synced.get(pid);
    const wanted = new Map(mappings.map((m) => [mappingName(m), m]));
    if (known !== undefined && known.image === image && sameKeys(known.ranges, wanted)) return;
    this.vmaPids.delete(pidKey);
    if (known === undefined) {
      known = { image, ranges: new Map() };
      this.#synced.set(pid, known);
    }
    for (const [name, mapping] of known.ranges) {
      if (wanted.has(name) && known.image === image) continue;
      // Pages cached in another image are told apart by their image id already.
      this.#dropRange(pid, mapping, known.image === image);
      known.ranges.delete(name);
    }
    known.image = image;
    for (const [name, mapping] of wanted) {
      if (known.ranges.has(name)) continue;
      const value = mappingValue(mapping);
      try {
        for (const { base, bits } of rangePrefixes(mapping.start, mapping.end)) {
          this.vmaRanges.update(rangeKey(pid, base, bits), value);
        }
      } catch {
        // the trie is full: this range is not there (walks fall back on the pages cached)
        this.#dropRange(pid, mapping, false);
        continue;
      }
      known.ranges.set(name, mapping);
    }
    const value = new Uint8Array(8);
    new DataView(value.buffer).setBigUint64(0, image, true);
    this.vmaPids.update(pidKey, value);
  }

  /** Forget process `pid`'s mappings (it has ended). */
  forgetProcess(pid: number): void {
    const known = this.#synced.get(pid);
    this.vmaPids.delete(u32Keys(pid, 1));
    if (known === undefined) return;
    for (const mapping of known.ranges.values()) this.#dropRange(pid, mapping, false);
    this.#synced.delete(pid);
  }

  /** The processes whose mappings are synced. */
  syncedProcesses(): number[] {
    return [...this.#synced.keys()];
  }

  /** The processes walks asked to sync since the last call (taken out of the map). */
  takeResync(): number[] {
    const pids: number[] = [];
    for (const key of this.vmaResync.keys()) {
      this.vmaResync.delete(key);
      pids.push(new DataView(key.buffer, key.byteOffset).getUint32(0, true));
    }
    return pids;
  }

  /**
   * A range out of the trie, and (`pages`) the pages walks cached in it out of the cache:
   * page by page, or by a look at every key cached when that is fewer.
   */
  #dropRange(pid: number, mapping: ProcessMapping, cachedToo: boolean): void {
    for (const { base, bits } of rangePrefixes(mapping.start, mapping.end)) {
      this.vmaRanges.delete(rangeKey(pid, base, bits));
    }
    if (!cachedToo) return;
    const span = (shift: number) => {
      const first = mapping.start >> BigInt(shift);
      const last = (mapping.end + (1n << BigInt(shift)) - 1n) >> BigInt(shift);
      return { first, last };
    };
    const pages = span(PAGE_SHIFT);
    const regions = span(VMA_REGION_SHIFT);
    const cached = (key: Uint8Array) => {
      const view = new DataView(key.buffer, key.byteOffset);
      const shift = view.getUint32(4, true);
      const { first, last } = shift === PAGE_SHIFT ? pages : regions;
      const at = view.getBigUint64(8, true);
      return view.getUint32(0, true) === pid && at >= first && at < last;
    };
    if (pages.last - pages.first > BigInt(VMA_CACHE_ENTRIES)) {
      for (const key of this.vmaCache.keys()) if (cached(key)) this.vmaCache.delete(key);
      return;
    }
    const key = new Uint8Array(VMA_CACHE_KEY_BYTES);
    const view = new DataView(key.buffer);
    view.setUint32(0, pid, true);
    for (const [shift, { first, last }] of [
      [PAGE_SHIFT, pages],
      [VMA_REGION_SHIFT, regions],
    ] as const) {
      view.setUint32(4, shift, true);
      for (let at = first; at < last; at++) {
        view.setBigUint64(8, at, true);
        this.vmaCache.delete(key);
      }
    }
  }

  /** The global indexes of a table's rules, added to the map as needed. */
  #rules(ruleSet: readonly UnwindRule[]): number[] | undefined {
    const ids: number[] = [];
    const added: { id: number; bytes: Uint8Array }[] = [];
    for (const rule of ruleSet) {
      const bytes = ruleBytes(rule);
      const key = bytes.join(',');
      let id = this.#ruleIndex.get(key);
      if (id === undefined) {
        id = this.#ruleIndex.size;
        if (id >= this.capacity.rules) return undefined;
        this.#ruleIndex.set(key, id);
        added.push({ id, bytes });
      }
      ids.push(id);
    }
    if (added.length > 0) {
      const keys = new Uint8Array(added.length * 4);
      const values = new Uint8Array(added.length * RULE_BYTES);
      const view = new DataView(keys.buffer);
      added.forEach((one, i) => {
        view.setUint32(i * 4, one.id, true);
        values.set(one.bytes, i * RULE_BYTES);
      });
      this.rules.updateBatch(keys, values, added.length);
    }
    return ids;
  }

  #writeRows(first: number, table: UnwindTable, ruleIds: readonly number[]): void {
    const count = table.starts.length;
    const values = new Uint8Array(count * ROW_BYTES);
    const view = new DataView(values.buffer);
    for (let i = 0; i < count; i++) {
      view.setUint32(i * ROW_BYTES, table.starts[i]!, true);
      view.setUint32(i * ROW_BYTES + 4, ruleIds[table.rules[i]!]!, true);
    }
    this.rows.updateBatch(u32Keys(first, count), values, count);
  }

  /**
   * Page p (from `basePage`) holds the index of the last row starting at or before the page's
   * start (the first row when none does); one more entry ends the last page's range.
   */
  #writePages(
    first: number,
    pages: number,
    basePage: number,
    rowFirst: number,
    starts: Uint32Array,
  ): void {
    const values = new Uint8Array(pages * 4);
    const view = new DataView(values.buffer);
    let row = 0;
    for (let p = 0; p < pages; p++) {
      const pageStart = (basePage + p) * 2 ** PAGE_SHIFT;
      while (row + 1 < starts.length && starts[row + 1]! <= pageStart) row++;
      view.setUint32(p * 4, rowFirst + row, true);
    }
    // The last entry: the table's last row.
    view.setUint32((pages - 1) * 4, rowFirst + starts.length - 1, true);
    this.pages.updateBatch(u32Keys(first, pages), values, pages);
  }
}
