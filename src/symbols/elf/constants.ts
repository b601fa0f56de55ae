/** Numbers from the ELF specification and GNU extensions, and the names readelf gives them. */

export const ELF_MAGIC = 0x464c457f; // "\x7fELF" read as a little-endian u32
export const ELFCLASS32 = 1;
export const ELFCLASS64 = 2;
export const ELFDATA2LSB = 1;
export const ELFDATA2MSB = 2;
export const EM_X86_64 = 62;

export const EHDR_SIZE = 64;
export const PHDR_SIZE = 56;
export const SHDR_SIZE = 64;
export const SYM_SIZE = 24;
export const CHDR_SIZE = 24;

export const PN_XNUM = 0xffff;
export const SHN_UNDEF = 0;
export const SHN_LORESERVE = 0xff00;
export const SHN_ABS = 0xfff1;
export const SHN_COMMON = 0xfff2;
export const SHN_XINDEX = 0xffff;

export const PT_LOAD = 1;
export const PT_NOTE = 4;
export const PF_X = 1;
export const PF_W = 2;
export const PF_R = 4;

export const SHT_NULL = 0;
export const SHT_SYMTAB = 2;
export const SHT_STRTAB = 3;
export const SHT_NOTE = 7;
export const SHT_NOBITS = 8;
export const SHT_DYNSYM = 11;
export const SHT_SYMTAB_SHNDX = 18;
export const SHT_GNU_VERDEF = 0x6ffffffd;
export const SHT_GNU_VERNEED = 0x6ffffffe;
export const SHT_GNU_VERSYM = 0x6fffffff;

export const SHF_EXECINSTR = 0x4n;
export const SHF_COMPRESSED = 0x800n;
export const ELFCOMPRESS_ZLIB = 1;
export const ELFCOMPRESS_ZSTD = 2;

export const NT_GNU_BUILD_ID = 3;
export const NT_STAPSDT = 3;

export const VERSYM_HIDDEN = 0x8000;
export const VERSYM_VERSION = 0x7fff;

const hex = (value: number): string => `0x${value.toString(16)}`;

const SEGMENT_TYPES: ReadonlyMap<number, string> = new Map([
  [0, 'NULL'],
  [1, 'LOAD'],
  [2, 'DYNAMIC'],
  [3, 'INTERP'],
  [4, 'NOTE'],
  [5, 'SHLIB'],
  [6, 'PHDR'],
  [7, 'TLS'],
  [0x6474e550, 'GNU_EH_FRAME'],
  [0x6474e551, 'GNU_STACK'],
  [0x6474e552, 'GNU_RELRO'],
  [0x6474e553, 'GNU_PROPERTY'],
  [0x6474e554, 'GNU_SFRAME'],
]);

export function segmentTypeName(type: number): string {
  return SEGMENT_TYPES.get(type) ?? hex(type);
}

const SECTION_TYPES: ReadonlyMap<number, string> = new Map([
  [0, 'NULL'],
  [1, 'PROGBITS'],
  [2, 'SYMTAB'],
  [3, 'STRTAB'],
  [4, 'RELA'],
  [5, 'HASH'],
  [6, 'DYNAMIC'],
  [7, 'NOTE'],
  [8, 'NOBITS'],
  [9, 'REL'],
  [10, 'SHLIB'],
  [11, 'DYNSYM'],
  [14, 'INIT_ARRAY'],
  [15, 'FINI_ARRAY'],
  [16, 'PREINIT_ARRAY'],
  [17, 'GROUP'],
  [18, 'SYMTAB SECTION INDICES'],
  [19, 'RELR'],
  [0x6fff4c00, 'LLVM_ODRTAB'],
  [0x6fff4c01, 'LLVM_LINKER_OPTIONS'],
  [0x6fff4c03, 'LLVM_ADDRSIG'],
  [0x6ffffff5, 'GNU_ATTRIBUTES'],
  [0x6ffffff6, 'GNU_HASH'],
  [0x6ffffff7, 'GNU_LIBLIST'],
  [0x6ffffffd, 'VERDEF'],
  [0x6ffffffe, 'VERNEED'],
  [0x6fffffff, 'VERSYM'],
  [0x70000001, 'X86_64_UNWIND'],
]);

export function sectionTypeName(type: number): string {
  return SECTION_TYPES.get(type) ?? hex(type);
}

const MACHINES: ReadonlyMap<number, string> = new Map([
  [0, 'EM_NONE'],
  [2, 'EM_SPARC'],
  [3, 'EM_386'],
  [4, 'EM_68K'],
  [8, 'EM_MIPS'],
  [20, 'EM_PPC'],
  [21, 'EM_PPC64'],
  [22, 'EM_S390'],
  [40, 'EM_ARM'],
  [42, 'EM_SH'],
  [43, 'EM_SPARCV9'],
  [50, 'EM_IA_64'],
  [62, 'EM_X86_64'],
  [183, 'EM_AARCH64'],
  [243, 'EM_RISCV'],
  [247, 'EM_BPF'],
  [258, 'EM_LOONGARCH'],
]);

/** `EM_AARCH64 (183)`, or `unknown (1234)`. */
export function machineLabel(machine: number): string {
  return `${MACHINES.get(machine) ?? 'unknown'} (${machine})`;
}

export const ELF_TYPES = ['unknown', 'rel', 'exec', 'dyn', 'core'] as const;

/** Symbol types (low nibble of st_info) that are code. */
export const STT_FUNC = 2;
export const STT_GNU_IFUNC = 10;

export const SYMBOL_TYPES = [
  'notype',
  'object',
  'func',
  'section',
  'file',
  'common',
  'tls',
  'other',
  'other',
  'other',
  'ifunc', // STT_GNU_IFUNC = 10
  'other',
  'other',
  'other',
  'other',
  'other',
] as const;

export const SYMBOL_BINDINGS = [
  'local',
  'global',
  'weak',
  'other',
  'other',
  'other',
  'other',
  'other',
  'other',
  'other',
  'unique', // STB_GNU_UNIQUE = 10
  'other',
  'other',
  'other',
  'other',
  'other',
] as const;

export const SYMBOL_VISIBILITIES = ['default', 'internal', 'hidden', 'protected'] as const;
