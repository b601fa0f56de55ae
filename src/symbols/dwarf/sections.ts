import type { ElfFile } from '../elf/index.js';

/** The DWARF sections a reader may need; an absent section is an empty array. */
export interface DwarfSections {
  readonly info: Uint8Array;
  readonly abbrev: Uint8Array;
  readonly line: Uint8Array;
  readonly lineStr: Uint8Array;
  readonly str: Uint8Array;
  readonly strOffsets: Uint8Array;
  readonly addr: Uint8Array;
  readonly ranges: Uint8Array;
  readonly rngLists: Uint8Array;
  readonly loc: Uint8Array;
  readonly locLists: Uint8Array;
  readonly aranges: Uint8Array;
  readonly frame: Uint8Array;
  readonly ehFrame: Uint8Array;
  /** Where .eh_frame is loaded (its pointers may be pc-relative), 0 when absent. */
  readonly ehFrameVaddr: bigint;
}

const EMPTY = new Uint8Array(0);

/**
 * The DWARF sections of a file, each read (and inflated when compressed) only when first
 * used: resolving one line should not inflate .debug_info.
 */
export function dwarfSections(elf: ElfFile): DwarfSections {
  const cache = new Map<string, Uint8Array>();
  const get = (name: string): Uint8Array => {
    let bytes = cache.get(name);
    if (bytes === undefined) {
      const section = elf.section(name);
      bytes = section === undefined ? EMPTY : elf.sectionBytes(section);
      cache.set(name, bytes);
    }
    return bytes;
  };
  return {
    get info() {
      return get('.debug_info');
    },
    get abbrev() {
      return get('.debug_abbrev');
    },
    get line() {
      return get('.debug_line');
    },
    get lineStr() {
      return get('.debug_line_str');
    },
    get str() {
      return get('.debug_str');
    },
    get strOffsets() {
      return get('.debug_str_offsets');
    },
    get addr() {
      return get('.debug_addr');
    },
    get ranges() {
      return get('.debug_ranges');
    },
    get rngLists() {
      return get('.debug_rnglists');
    },
    get loc() {
      return get('.debug_loc');
    },
    get locLists() {
      return get('.debug_loclists');
    },
    get aranges() {
      return get('.debug_aranges');
    },
    get frame() {
      return get('.debug_frame');
    },
    get ehFrame() {
      return get('.eh_frame');
    },
    get ehFrameVaddr() {
      return elf.section('.eh_frame')?.addr ?? 0n;
    },
  };
}

/**
 * The DWARF sections of a split unit's .dwo file (-gsplit-dwarf), read now (the file may be
 * closed after), with `binary`'s .debug_addr, where the split units' addresses are.
 */
export function splitDwarfSections(dwo: ElfFile, binary: DwarfSections): DwarfSections {
  const read = (name: string): Uint8Array => {
    const section = dwo.section(`${name}.dwo`);
    return section === undefined ? EMPTY : dwo.sectionBytes(section);
  };
  return {
    info: read('.debug_info'),
    abbrev: read('.debug_abbrev'),
    line: read('.debug_line'),
    lineStr: EMPTY,
    str: read('.debug_str'),
    strOffsets: read('.debug_str_offsets'),
    get addr() {
      return binary.addr;
    },
    // A DWARF 4 split unit's ranges are in the program's .debug_ranges (GCC's extension).
    get ranges() {
      return binary.ranges;
    },
    rngLists: read('.debug_rnglists'),
    loc: read('.debug_loc'),
    locLists: read('.debug_loclists'),
    aranges: EMPTY,
    frame: EMPTY,
    ehFrame: EMPTY,
    ehFrameVaddr: 0n,
  };
}

/**
 * The supplementary file a file's DWARF names, where dwz moved what several files share (a
 * distribution's debug packages: Debian's -dbgsym of a package with several programs,
 * Fedora's debuginfo): GNU's .gnu_debugaltlink (the file's name, then its build-id) or DWARF
 * 5's .debug_sup (version, is_supplementary, name, checksum). Undefined where it names none.
 */
export function supplementaryLink(
  elf: ElfFile,
): { readonly name: string; readonly buildId: string | undefined } | undefined {
  const alt = elf.section('.gnu_debugaltlink');
  if (alt !== undefined) {
    const bytes = elf.sectionBytes(alt);
    const end = bytes.indexOf(0);
    if (end <= 0) return undefined;
    const id = bytes.subarray(end + 1);
    return {
      name: Buffer.from(bytes.subarray(0, end)).toString('utf8'),
      buildId: id.length === 0 ? undefined : Buffer.from(id).toString('hex'),
    };
  }
  const sup = elf.section('.debug_sup');
  if (sup === undefined) return undefined;
  const bytes = elf.sectionBytes(sup);
  // u16 version, u8 is_supplementary (0: this file refers to one), then the name.
  if (bytes.length < 4 || bytes[2] !== 0) return undefined;
  const end = bytes.indexOf(0, 3);
  if (end <= 3) return undefined;
  return { name: Buffer.from(bytes.subarray(3, end)).toString('utf8'), buildId: undefined };
}

/** The sections of a supplementary file (see supplementaryLink()), read now. */
export function supplementarySections(elf: ElfFile): DwarfSections {
  const read = (name: string): Uint8Array => {
    const section = elf.section(name);
    return section === undefined ? EMPTY : elf.sectionBytes(section);
  };
  return {
    info: read('.debug_info'),
    abbrev: read('.debug_abbrev'),
    line: read('.debug_line'),
    lineStr: read('.debug_line_str'),
    str: read('.debug_str'),
    strOffsets: read('.debug_str_offsets'),
    addr: EMPTY,
    ranges: EMPTY,
    rngLists: EMPTY,
    loc: EMPTY,
    locLists: EMPTY,
    aranges: EMPTY,
    frame: EMPTY,
    ehFrame: EMPTY,
    ehFrameVaddr: 0n,
  };
}

/** True when the file carries DWARF of its own (a .debug_info or .debug_line section). */
export function hasDwarf(elf: ElfFile): boolean {
  return elf.section('.debug_info') !== undefined || elf.section('.debug_line') !== undefined;
}
