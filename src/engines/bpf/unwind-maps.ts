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
  readonly capacity: UnwindCapacity;
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
      valueBytes: keyBytes,
      maxEntries: 2,
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
