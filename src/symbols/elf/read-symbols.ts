import { isAscii } from 'node:buffer';
import {
  SHN_UNDEF,
  SHN_XINDEX,
  SHT_DYNSYM,
  SHT_NOBITS,
  SHT_SYMTAB_SHNDX,
  SYM_SIZE,
  SYMBOL_BINDINGS,
  SYMBOL_TYPES,
  SYMBOL_VISIBILITIES,
} from './constants.js';
import { hex, invalidElf } from './elf-error.js';
import type { ElfContext } from './parse-elf.js';
import { readSymbolVersions } from './read-versions.js';
import { stringTable } from './string-table.js';
import type { ElfSection, ElfSymbol, SymbolTableName } from './types.js';

/**
 * The name as readelf and nm print it: `malloc@@GLIBC_2.2.5` (the default version),
 * `memcpy@GLIBC_2.2.5` (another version, or one needed from another file), `main`.
 */
export function symbolDisplayName(sym: ElfSymbol): string {
  if (sym.version === undefined) return sym.name;
  return `${sym.name}${sym.versionHidden ? '@' : '@@'}${sym.version}`;
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
  const path = file.path;
  const section = file.sections.find((s) => s.type === sectionType);
  if (section === undefined || section.type === SHT_NOBITS) return [];
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
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const stringSize = strings.length;
  const allText = isAscii(strings) ? strings.toString('latin1') : undefined;
  const extended = extendedIndices(file, section, count);
  const versions =
    sectionType === SHT_DYNSYM ? readSymbolVersions(file, section, count) : undefined;

  // Module constants copied to locals: the loop below runs once per symbol (100,000+ times).
  const types = SYMBOL_TYPES;
  const bindings = SYMBOL_BINDINGS;
  const visibilities = SYMBOL_VISIBILITIES;
  const undef = SHN_UNDEF;
  const xindex = SHN_XINDEX;
  const symbols: ElfSymbol[] = new Array(Math.max(0, count - 1));
  for (let i = 1; i < count; i++) {
    const at = i * 24; // SYM_SIZE
    const nameAt = view.getUint32(at, true);
    const info = view.getUint8(at + 4);
    const other = view.getUint8(at + 5);
    let sectionIndex = view.getUint16(at + 6, true);
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
  const name = sym.name;
  const mark = name.indexOf('@');
  const isDefault = name.charCodeAt(mark + 1) === 64; // '@'
  const rest = mark + (isDefault ? 2 : 1);
  if (rest < name.length && name.indexOf('@', rest) < 0) {
    sym.name = name.slice(0, mark);
    sym.version = name.slice(rest);
    sym.versionHidden = !isDefault;
  }
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
