import type { FunctionColumns } from './read-symbols.js';
/**
 * The shapes the ELF reader hands out. Everything is plain data except `ElfFile`, which reads
 * lazily and caches what it has read. Addresses and file offsets are `bigint`.
 */

export type ElfType = 'exec' | 'dyn' | 'rel' | 'core' | 'unknown';

export interface ElfSegment {
  /** p_type. */
  readonly type: number;
  /** As readelf names it: 'LOAD', 'DYNAMIC', 'NOTE', 'GNU_STACK', ... or '0x...' when unknown. */
  readonly typeName: string;
  readonly readable: boolean;
  readonly writable: boolean;
  readonly executable: boolean;
  readonly offset: bigint;
  readonly vaddr: bigint;
  readonly fileSize: bigint;
  readonly memSize: bigint;
  readonly align: bigint;
}

export interface ElfSection {
  readonly index: number;
  readonly name: string;
  /** sh_type. */
  readonly type: number;
  /** As readelf names it: 'PROGBITS', 'SYMTAB', 'NOBITS', 'VERSYM', ... or '0x...' when unknown. */
  readonly typeName: string;
  readonly flags: bigint;
  /** SHF_EXECINSTR. */
  readonly executable: boolean;
  readonly addr: bigint;
  readonly offset: bigint;
  readonly size: bigint;
  readonly link: number;
  readonly info: number;
  /** sh_addralign. */
  readonly addralign: bigint;
  readonly entSize: bigint;
}

export type SymbolType =
  | 'notype'
  | 'object'
  | 'func'
  | 'section'
  | 'file'
  | 'common'
  | 'tls'
  | 'ifunc'
  | 'other';

export type SymbolBinding = 'local' | 'global' | 'weak' | 'unique' | 'other';

export type SymbolVisibility = 'default' | 'internal' | 'hidden' | 'protected';

export type SymbolTableName = 'symtab' | 'dynsym';

/** Where a symbol was read: an ELF symbol table, or a Go program's function table. */
export type SymbolSource = SymbolTableName | 'gopclntab';

export interface ElfSymbol {
  /** The name without any version (`malloc`, not `malloc@@GLIBC_2.2.5`). */
  readonly name: string;
  /**
   * The symbol version: for .dynsym from .gnu.version with .gnu.version_d/.gnu.version_r; for
   * .symtab from a name the linker wrote as `name@VERSION` or `name@@VERSION`.
   */
  readonly version: string | undefined;
  /**
   * True when the version is not the default one for the name (printed with one '@'), false
   * when it is (printed with '@@'). Versions needed from other files count as hidden.
   */
  readonly versionHidden: boolean;
  readonly value: bigint;
  readonly size: bigint;
  readonly type: SymbolType;
  readonly binding: SymbolBinding;
  readonly visibility: SymbolVisibility;
  /** st_shndx, with SHN_XINDEX resolved through SHT_SYMTAB_SHNDX (SHN_UNDEF = 0, SHN_ABS = 0xfff1). */
  readonly sectionIndex: number;
  /** st_shndx !== SHN_UNDEF. */
  readonly defined: boolean;
  readonly table: SymbolSource;
}

export interface UsdtNote {
  readonly provider: string;
  readonly name: string;
  /** The probe address as recorded in the note. */
  readonly pc: bigint;
  /** The link-time address of .stapsdt.base recorded in the note. */
  readonly base: bigint;
  /** Address of the semaphore (a 16-bit counter), 0 when the probe has none. */
  readonly semaphore: bigint;
  /** The argument description, e.g. `-4@%edi 8@%rsi`. */
  readonly args: string;
  /**
   * The probe address corrected for prelinking: pc + (address of .stapsdt.base in this file -
   * base) when the file has a .stapsdt.base section, else pc.
   */
  readonly vaddr: bigint;
}

export interface ElfNote {
  /** The owner name without its terminator ('GNU', 'stapsdt', ...). */
  readonly owner: string;
  readonly type: number;
  readonly desc: Uint8Array;
}

export interface DebugLink {
  readonly file: string;
  readonly crc32: number;
}

export interface ElfFile {
  readonly path: string | undefined;
  readonly fileSize: bigint;
  /** e_type. */
  readonly type: ElfType;
  readonly entry: bigint;
  readonly segments: readonly ElfSegment[];
  readonly sections: readonly ElfSection[];
  /** The first section of that name. */
  section(name: string): ElfSection | undefined;
  /**
   * The section's contents: empty for SHT_NOBITS, inflated for SHF_COMPRESSED sections. Read
   * once and cached.
   */
  sectionBytes(section: ElfSection): Uint8Array;
  /**
   * Bytes of the file, checked against its size (ERR_ELF_INVALID past its end). A length
   * taken from the file itself is passed as the bigint it was read as.
   */
  read(fileOffset: bigint, length: number | bigint): Uint8Array;
  /**
   * read() without a copy where it can, for bytes read and let go at once, never changed
   * (each function's code, swept for its returns).
   */
  view(fileOffset: bigint, length: number | bigint): Uint8Array;
  /** True when the file has a .symtab (false for a stripped file). */
  readonly hasSymtab: boolean;
  /** The symbols of one table, without the null symbol at index 0; read once and cached. */
  symbols(table: SymbolTableName): readonly ElfSymbol[];
  /** The defined functions of a table as columns (see FunctionColumns); cached. */
  functionColumns(table: SymbolTableName): FunctionColumns;
  /** Every note in the file's note sections (or PT_NOTE segments when it has no sections). */
  notes(): readonly ElfNote[];
  /** The GNU build id as lowercase hex. */
  buildId(): string | undefined;
  /** The .gnu_debuglink section: the name of the separate debug file and its CRC-32. */
  debugLink(): DebugLink | undefined;
  /** The SystemTap (USDT) probes of .note.stapsdt. */
  usdtNotes(): readonly UsdtNote[];
  /** Through the PT_LOAD segment whose file bytes (p_filesz) hold the address. */
  vaddrToFileOffset(vaddr: bigint): bigint | undefined;
  /** Through the PT_LOAD segment whose file bytes hold the offset. */
  fileOffsetToVaddr(fileOffset: bigint): bigint | undefined;
  /** The PT_LOAD segment whose memory image (p_memsz) holds the address. */
  loadSegmentOf(vaddr: bigint): ElfSegment | undefined;
  /** Closes the file of openElf(); idempotent. Reading what was not cached then fails. */
  close(): void;
}
