import {
  SHT_GNU_VERDEF,
  SHT_GNU_VERNEED,
  SHT_GNU_VERSYM,
  VERSYM_HIDDEN,
  VERSYM_VERSION,
} from './constants.js';
import { hex, invalidElf } from './elf-error.js';
import type { ElfContext } from './parse-elf.js';
import { stringTable } from './string-table.js';
import type { ElfSection } from './types.js';

export interface SymbolVersion {
  readonly name: string;
  /** Not the default version of a definition, or a version needed from another file. */
  readonly hidden: boolean;
}

export interface SymbolVersions {
  /** The version of dynamic symbol `index`, as readelf shows it. */
  of(index: number, defined: boolean): SymbolVersion | undefined;
}

const VERDEF_SIZE = 20;
const VERDAUX_SIZE = 8;
const VERNEED_SIZE = 16;
const VERNAUX_SIZE = 16;

/**
 * GNU symbol versioning: .gnu.version holds one 16-bit index per dynamic symbol (bit 15 set for
 * a non-default version); the index names an entry of .gnu.version_d (versions this file
 * defines) or .gnu.version_r (versions it needs from other files). Indices 0 and 1 mean local
 * and global: no version.
 */
export function readSymbolVersions(
  file: ElfContext,
  dynsym: ElfSection,
  count: number,
): SymbolVersions | undefined {
  const versym =
    file.sections.find((s) => s.type === SHT_GNU_VERSYM && s.link === dynsym.index) ??
    file.sections.find((s) => s.type === SHT_GNU_VERSYM);
  if (versym === undefined) return undefined;
  const raw = file.sectionBytes(versym);
  if (raw.length < count * 2) {
    throw invalidElf(
      file.path,
      `section [${versym.index}] ${versym.name} has ${Math.floor(raw.length / 2)} entries for ${count} dynamic symbols`,
    );
  }
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const defined = new Map<number, string>();
  const needed = new Map<number, string>();
  for (const section of file.sections) {
    if (section.type === SHT_GNU_VERDEF) readDefinitions(file, section, defined);
    if (section.type === SHT_GNU_VERNEED) readNeeds(file, section, needed);
  }
  // One result object per distinct .gnu.version value, shared by all symbols that have it.
  const results = new Map<number, SymbolVersion | undefined>();
  return {
    of(index: number, isDefined: boolean): SymbolVersion | undefined {
      const value = view.getUint16(index * 2, true);
      const key = isDefined ? value : value | 0x10000;
      if (results.has(key)) return results.get(key);
      const number = value & VERSYM_VERSION;
      let result: SymbolVersion | undefined;
      if (number > 1) {
        const def = isDefined ? defined.get(number) : undefined;
        const need = needed.get(number);
        if (def !== undefined) result = { name: def, hidden: (value & VERSYM_HIDDEN) !== 0 };
        else if (need !== undefined) result = { name: need, hidden: true };
      }
      results.set(key, result);
      return result;
    },
  };
}

function nameAt(file: ElfContext, strings: Buffer, offset: number, section: ElfSection): string {
  if (offset >= strings.length) {
    throw invalidElf(
      file.path,
      `a version name in section [${section.index}] ${section.name} is at ${hex(offset)}, past the end of its string table`,
    );
  }
  return strings.toString('utf8', offset, strings.indexOf(0, offset));
}

function truncated(file: ElfContext, section: ElfSection, at: number): Error {
  return invalidElf(
    file.path,
    `an entry at ${hex(at)} in section [${section.index}] ${section.name} runs past its end`,
  );
}

/** Verdef entries chained by vd_next, each naming its version in its first Verdaux. */
function readDefinitions(file: ElfContext, section: ElfSection, out: Map<number, string>): void {
  const bytes = file.sectionBytes(section);
  if (bytes.length === 0) return;
  const strings = stringTable(file, section.link, section);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const limit = Math.floor(bytes.length / VERDEF_SIZE);
  let at = 0;
  for (let n = 0; n < limit; n++) {
    if (at + VERDEF_SIZE > bytes.length) throw truncated(file, section, at);
    const index = view.getUint16(at + 4, true) & VERSYM_VERSION;
    const auxCount = view.getUint16(at + 6, true);
    const aux = at + view.getUint32(at + 12, true);
    if (auxCount > 0) {
      if (aux + VERDAUX_SIZE > bytes.length) throw truncated(file, section, aux);
      if (!out.has(index))
        out.set(index, nameAt(file, strings, view.getUint32(aux, true), section));
    }
    const next = view.getUint32(at + 16, true);
    if (next === 0) break;
    at += next;
  }
}

/** Verneed entries (one per needed file) chained by vn_next, each with a chain of Vernaux. */
function readNeeds(file: ElfContext, section: ElfSection, out: Map<number, string>): void {
  const bytes = file.sectionBytes(section);
  if (bytes.length === 0) return;
  const strings = stringTable(file, section.link, section);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // Every entry and auxiliary entry takes 16 bytes, so no well-formed section has more steps.
  let budget = Math.floor(bytes.length / VERNEED_SIZE);
  let at = 0;
  while (budget-- > 0) {
    if (at + VERNEED_SIZE > bytes.length) throw truncated(file, section, at);
    const auxCount = view.getUint16(at + 2, true);
    let aux = at + view.getUint32(at + 8, true);
    for (let j = 0; j < auxCount && budget-- > 0; j++) {
      if (aux + VERNAUX_SIZE > bytes.length) throw truncated(file, section, aux);
      const index = view.getUint16(aux + 6, true) & VERSYM_VERSION;
      if (!out.has(index))
        out.set(index, nameAt(file, strings, view.getUint32(aux + 8, true), section));
      const next = view.getUint32(aux + 12, true);
      if (next === 0) break;
      aux += next;
    }
    const next = view.getUint32(at + 12, true);
    if (next === 0) break;
    at += next;
  }
}
