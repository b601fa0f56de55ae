import { isAscii } from 'node:buffer';
import {
  SHN_UNDEF,
  SHN_XINDEX,
  SHT_DYNSYM,
  SHT_NOBITS,
  SHT_SYMTAB_SHNDX,
  STT_FUNC,
  STT_GNU_IFUNC,
  SYM_SIZE,
  SYMBOL_BINDINGS,
  SYMBOL_TYPES,
  SYMBOL_VISIBILITIES,
} from './constants.js';
import { hex, invalidElf } from './elf-error.js';
import type { ElfContext } from './parse-elf.js';
import { readSymbolVersions, type SymbolVersion, type SymbolVersions } from './read-versions.js';
import { stringTable } from './string-table.js';
import type { ElfSection, ElfSymbol, SymbolSource, SymbolTableName } from './types.js';

/**
 * The name as readelf and nm print it: `malloc@@GLIBC_2.2.5` (the default version),
 * `memcpy@GLIBC_2.2.5` (another version, or one needed from another file), `main`.
 */
export function symbolDisplayName(sym: ElfSymbol): string {
  if (sym.version === undefined) return sym.name;
  return `${sym.name}${sym.versionHidden ? '@' : '@@'}${sym.version}`;
}

/** A symbol table validated once, as both readers below walk it. */
interface RawSymbolTable {
  readonly section: ElfSection;
  readonly where: string;
  readonly view: DataView;
  readonly count: number;
  readonly strings: Buffer;
  readonly extended: DataView | undefined;
  readonly versions: SymbolVersions | undefined;
}

function openSymbolTable(file: ElfContext, sectionType: number): RawSymbolTable | undefined {
  const path = file.path;
  const section = file.sections.find((s) => s.type === sectionType);
  if (section === undefined || section.type === SHT_NOBITS) return undefined;
  const where = `symbol table [${section.index}] ${section.name}`;
  if (section.entSize !== BigInt(SYM_SIZE)) {
    throw invalidElf(path, `${where} has entries of ${section.entSize} bytes, not ${SYM_SIZE}`);
  }
  if (section.size % BigInt(SYM_SIZE) !== 0n) {
    throw invalidElf(path, `${where} is ${section.size} bytes, not a multiple of ${SYM_SIZE}`);
  }
  const strings = stringTable(file, section.link, section);
  const bytes = file.sectionBytes(section);
  const count = Math.floor(bytes.length / SYM_SIZE);
  return {
    section,
    where,
    view: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    count,
    strings,
    extended: extendedIndices(file, section, count),
    versions: sectionType === SHT_DYNSYM ? readSymbolVersions(file, section, count) : undefined,
  };
}

/**
 * Decodes one symbol table. Names are decoded from one string made of the whole table when it
 * is plain ASCII (the usual case, and much faster than one decode per name), else one by one
 * as UTF-8.
 */
export function readSymbols(
  file: ElfContext,
  sectionType: number,
  table: SymbolTableName,
): ElfSymbol[] {
  const raw = openSymbolTable(file, sectionType);
  if (raw === undefined) return [];
  const { view, count, strings, extended, versions, where } = raw;
  const path = file.path;
  const stringSize = strings.length;
  const allText = isAscii(strings) ? strings.toString('latin1') : undefined;

  // Module constants copied to locals: the loop below runs once per symbol (100,000+ times).
  const types = SYMBOL_TYPES;
  const bindings = SYMBOL_BINDINGS;
  const visibilities = SYMBOL_VISIBILITIES;
  const undef = SHN_UNDEF;
  const xindex = SHN_XINDEX;
  const symbols: ElfSymbol[] = new Array(Math.max(0, count - 1));
  for (let i = 1; i < count; i++) {
    const at = i * 24; // SYM_SIZE
    const info = view.getUint8(at + 4);
    let sectionIndex = view.getUint16(at + 6, true);
    const nameAt = view.getUint32(at, true);
    const other = view.getUint8(at + 5);
    let name = '';
    if (nameAt < stringSize) {
      name =
        allText !== undefined
          ? allText.slice(nameAt, allText.indexOf('\0', nameAt))
          : strings.toString('utf8', nameAt, strings.indexOf(0, nameAt));
    } else if (nameAt !== 0) {
      throw invalidElf(
        path,
        `symbol ${i} of ${where} has its name at ${hex(nameAt)}, past the end of its string table (${stringSize} bytes)`,
      );
    }
    if (sectionIndex === xindex) sectionIndex = extendedIndex(file, extended, i, where);

    let version: string | undefined;
    let versionHidden = false;
    if (versions !== undefined) {
      const v = versions.of(i, sectionIndex !== undef);
      // The symbols the linker makes for version definitions (GLIBC_2.10 in GLIBC_2.10) are
      // shown bare by readelf and nm: they are the version, not a versioned symbol.
      if (v !== undefined && v.name !== name) {
        version = v.name;
        versionHidden = v.hidden;
      }
    }
    // st_value and st_size as two u32 halves: small values reuse shared bigints.
    const valueLow = view.getUint32(at + 8, true);
    const valueHigh = view.getUint32(at + 12, true);
    const sizeLow = view.getUint32(at + 16, true);
    const sizeHigh = view.getUint32(at + 20, true);
    symbols[i - 1] = {
      name,
      version,
      versionHidden,
      value: u64(valueLow, valueHigh),
      size: u64(sizeLow, sizeHigh),
      type: types[info & 0xf]!,
      binding: bindings[info >> 4]!,
      visibility: visibilities[other & 3]!,
      sectionIndex,
      defined: sectionIndex !== undef,
      table,
    };
  }
  // The linker writes versioned references into .symtab as `name@VERSION`: a second pass, only
  // when some name has an '@', keeps that rare case out of the loop above.
  if (versions === undefined && strings.indexOf(0x40) >= 0) {
    for (const sym of symbols) if (sym.name.indexOf('@') > 0) splitVersion(sym);
  }
  return symbols;
}

/** `name@VERSION` (hidden) or `name@@VERSION` (default) into name and version. */
function splitVersion(sym: Mutable<ElfSymbol>): void {
  const split = splitSymbolVersion(sym.name);
  if (split === undefined) return;
  sym.name = split.name;
  sym.version = split.version;
  sym.versionHidden = split.hidden;
}

/** A .symtab name with its version written in (`puts@GLIBC_2.2.5`, `foo@@V1`), split. */
export function splitSymbolVersion(
  text: string,
): { name: string; version: string; hidden: boolean } | undefined {
  const mark = text.indexOf('@');
  if (mark <= 0) return undefined;
  const isDefault = text.charCodeAt(mark + 1) === 64; // '@'
  const rest = mark + (isDefault ? 2 : 1);
  if (rest >= text.length || text.indexOf('@', rest) >= 0) return undefined;
  return { name: text.slice(0, mark), version: text.slice(rest), hidden: !isDefault };
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** BigInts for small numbers (sizes mostly), made once and shared rather than one per symbol. */
const SMALL_LIMIT = 0x10000;
const SMALL: (bigint | undefined)[] = new Array(SMALL_LIMIT).fill(undefined);

function makeSmall(value: number): bigint {
  const big = BigInt(value);
  SMALL[value] = big;
  return big;
}

/** A u64 given as two u32 halves; small values reuse shared bigints. */
function u64(low: number, high: number): bigint {
  if (high === 0) {
    if (low < SMALL_LIMIT) return SMALL[low] ?? makeSmall(low);
    return BigInt(low);
  }
  return (BigInt(high) << 32n) | BigInt(low);
}

function extendedIndex(
  file: ElfContext,
  extended: DataView | undefined,
  i: number,
  where: string,
): number {
  if (extended === undefined) {
    throw invalidElf(
      file.path,
      `symbol ${i} of ${where} has section index SHN_XINDEX but no SHT_SYMTAB_SHNDX section holds it`,
    );
  }
  return extended.getUint32(i * 4, true);
}

/** SHT_SYMTAB_SHNDX: the real section index of each symbol whose st_shndx is SHN_XINDEX. */
function extendedIndices(
  file: ElfContext,
  symtab: ElfSection,
  count: number,
): DataView | undefined {
  const section = file.sections.find((s) => s.type === SHT_SYMTAB_SHNDX && s.link === symtab.index);
  if (section === undefined) return undefined;
  const bytes = file.sectionBytes(section);
  if (bytes.length < count * 4) {
    throw invalidElf(
      file.path,
      `section [${section.index}] ${section.name} holds ${Math.floor(bytes.length / 4)} section indices for ${count} symbols`,
    );
  }
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * The defined functions (STT_FUNC, STT_GNU_IFUNC) of a symbol table as columns: one typed-array
 * slot per function instead of one object, for listings of 100,000+ symbols. Addresses and sizes
 * are doubles (exact below 2^53, true of every user-space address); `symbol(i)` builds the full
 * ElfSymbol, with exact bigints, for the few rows a caller wants as objects.
 */
export interface FunctionColumns {
  readonly table: SymbolSource;
  readonly count: number;
  /** st_value and st_size. */
  readonly address: Float64Array;
  readonly size: Float64Array;
  /** st_info: type in the low nibble, binding in the high one. */
  readonly info: Uint8Array;
  /** The name's bytes are strings[nameStart[i], nameEnd[i]). */
  readonly nameStart: Uint32Array;
  readonly nameEnd: Uint32Array;
  readonly strings: Buffer;
  /** The name as text (with a literal `@VERSION` suffix, as .symtab may hold it). */
  name(i: number): string;
  /** The symbol version from .gnu.version, for .dynsym. */
  version(i: number): SymbolVersion | undefined;
  symbol(i: number): ElfSymbol;
}

export function readFunctionColumns(
  file: ElfContext,
  sectionType: number,
  table: SymbolTableName,
): FunctionColumns {
  const raw = openSymbolTable(file, sectionType);
  const count = raw?.count ?? 0;
  const rows = new Uint32Array(count);
  let n = 0;
  if (raw !== undefined) {
    const view = raw.view;
    for (let i = 1; i < count; i++) {
      const at = i * 24; // SYM_SIZE
      const type = view.getUint8(at + 4) & 0xf;
      if (
        (type === STT_FUNC || type === STT_GNU_IFUNC) &&
        view.getUint16(at + 6, true) !== SHN_UNDEF
      ) {
        rows[n++] = i;
      }
    }
  }
  const address = new Float64Array(n);
  const size = new Float64Array(n);
  const info = new Uint8Array(n);
  const nameStart = new Uint32Array(n);
  const nameEnd = new Uint32Array(n);
  const strings = raw?.strings ?? Buffer.alloc(0);
  for (let k = 0; k < n; k++) {
    const at = rows[k]! * 24;
    const view = raw!.view;
    address[k] = view.getUint32(at + 8, true) + view.getUint32(at + 12, true) * 2 ** 32;
    size[k] = view.getUint32(at + 16, true) + view.getUint32(at + 20, true) * 2 ** 32;
    info[k] = view.getUint8(at + 4);
    const start = view.getUint32(at, true);
    if (start >= strings.length && start !== 0) {
      throw invalidElf(
        file.path,
        `symbol ${rows[k]} of ${raw!.where} has its name at ${hex(start)}, past the end of its string table (${strings.length} bytes)`,
      );
    }
    nameStart[k] = Math.min(start, strings.length);
    const end = strings.indexOf(0, start);
    nameEnd[k] = end < 0 ? strings.length : end;
  }
  let objects: ElfSymbol[] | undefined;
  return {
    table,
    count: n,
    address,
    size,
    info,
    nameStart,
    nameEnd,
    strings,
    name: (i) => strings.toString('utf8', nameStart[i], nameEnd[i]),
    version: (i) => raw?.versions?.of(rows[i]!, true),
    symbol(i) {
      // The object reader decodes every row the same way; index it by row.
      objects ??= readSymbols(file, sectionType, table);
      return objects[rows[i]! - 1]!;
    },
  };
}

/**
 * Two tables' functions as one, `first`'s rows then `second`'s: a stripped file's .dynsym
 * and the .symtab of its MiniDebugInfo, which holds only the functions .dynsym leaves out.
 * Versions are `first`'s (.dynsym's); `second`'s rows have none.
 */
export function joinedColumns(first: FunctionColumns, second: FunctionColumns): FunctionColumns {
  const count = first.count + second.count;
  const strings = Buffer.concat([first.strings, second.strings]);
  const shift = first.strings.length;
  const address = new Float64Array(count);
  const size = new Float64Array(count);
  const info = new Uint8Array(count);
  const nameStart = new Uint32Array(count);
  const nameEnd = new Uint32Array(count);
  for (const [columns, at, by] of [
    [first, 0, 0],
    [second, first.count, shift],
  ] as const) {
    address.set(columns.address, at);
    size.set(columns.size, at);
    info.set(columns.info, at);
    for (let i = 0; i < columns.count; i++) {
      nameStart[at + i] = columns.nameStart[i]! + by;
      nameEnd[at + i] = columns.nameEnd[i]! + by;
    }
  }
  return {
    table: 'symtab',
    count,
    address,
    size,
    info,
    nameStart,
    nameEnd,
    strings,
    name: (i) => strings.toString('utf8', nameStart[i], nameEnd[i]),
    version: (i) => (i < first.count ? first.version(i) : undefined),
    symbol: (i) => (i < first.count ? first.symbol(i) : second.symbol(i - first.count)),
  };
}
