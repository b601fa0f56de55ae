import { InternalError } from '../../errors/index.js';
import { BufferSource, type ByteSource, FileSource } from './byte-source.js';
import {
  EHDR_SIZE,
  ELF_MAGIC,
  ELF_TYPES,
  ELFCLASS32,
  ELFCLASS64,
  ELFDATA2LSB,
  ELFDATA2MSB,
  EM_X86_64,
  machineLabel,
  PF_R,
  PF_W,
  PF_X,
  PHDR_SIZE,
  PN_XNUM,
  PT_LOAD,
  SHDR_SIZE,
  SHF_COMPRESSED,
  SHF_EXECINSTR,
  SHN_UNDEF,
  SHN_XINDEX,
  SHT_DYNSYM,
  SHT_NOBITS,
  SHT_NULL,
  SHT_SYMTAB,
  sectionTypeName,
  segmentTypeName,
} from './constants.js';
import { hex, invalidElf, unsupportedElf } from './elf-error.js';
import { inflateSection } from './inflate-section.js';
import { readBuildId, readDebugLink, readNotes, readUsdtNotes } from './read-notes.js';
import { type FunctionColumns, readFunctionColumns, readSymbols } from './read-symbols.js';
import { readScriptHeader, scriptTargetError } from './script.js';
import type {
  DebugLink,
  ElfFile,
  ElfNote,
  ElfSection,
  ElfSegment,
  ElfSymbol,
  ElfType,
  SymbolTableName,
  UsdtNote,
} from './types.js';

export interface ParseElfOptions {
  /** The file the bytes came from, named in error messages and kept as `ElfFile.path`. */
  readonly path?: string;
}

/**
 * Reads an ELF file held in memory. Only 64-bit little-endian x86-64 files are accepted: other
 * classes, byte orders and machines fail with ERR_ELF_UNSUPPORTED, and anything corrupt or
 * truncated with ERR_ELF_INVALID. The headers are checked here; symbols, notes and section
 * contents are decoded (and checked) when first asked for.
 */
export function parseElf(bytes: Uint8Array, options: ParseElfOptions = {}): ElfFile {
  return new ElfReader(new BufferSource(bytes), options.path);
}

/**
 * Reads an ELF file from disk lazily with positional reads: the headers when opened, a
 * section's bytes only when asked for (then cached). Call `close()` when done.
 */
export function openElf(path: string): ElfFile {
  const source = new FileSource(path);
  try {
    return new ElfReader(source, path);
  } catch (err) {
    source.close();
    throw err;
  }
}

const EMPTY = new Uint8Array(0);
/** How much of a script is read to tell what runs it. */
const SCRIPT_HEAD_BYTES = 4096;

/** What the symbol and note readers need from the file. */
export interface ElfContext {
  readonly path: string | undefined;
  readonly sections: readonly ElfSection[];
  sectionBytes(section: ElfSection): Uint8Array;
}

class ElfReader implements ElfFile, ElfContext {
  readonly path: string | undefined;
  readonly fileSize: bigint;
  readonly type: ElfType;
  readonly entry: bigint;
  readonly segments: readonly ElfSegment[];
  readonly sections: readonly ElfSection[];
  readonly hasSymtab: boolean;

  readonly #source: ByteSource;
  readonly #sectionCache = new Map<number, Uint8Array>();
  readonly #symbolCache = new Map<SymbolTableName, readonly ElfSymbol[]>();
  readonly #columnCache = new Map<SymbolTableName, FunctionColumns>();
  #byName: Map<string, ElfSection> | undefined;
  #notes: readonly ElfNote[] | undefined;
  #usdt: readonly UsdtNote[] | undefined;

  constructor(source: ByteSource, path: string | undefined) {
    this.#source = source;
    this.path = path;
    const size = source.size;
    this.fileSize = BigInt(size);

    const ident = this.#readHeaderBytes(size);
    const view = new DataView(ident.buffer, ident.byteOffset, ident.byteLength);
    const eType = view.getUint16(16, true);
    const machine = view.getUint16(18, true);
    if (machine !== EM_X86_64) throw unsupportedElf(path, `machine ${machineLabel(machine)}`);
    this.type = ELF_TYPES[eType] ?? 'unknown';
    this.entry = view.getBigUint64(24, true);
    const phoff = view.getBigUint64(32, true);
    const shoff = view.getBigUint64(40, true);
    const phentsize = view.getUint16(54, true);
    let phnum = view.getUint16(56, true);
    const shentsize = view.getUint16(58, true);
    let shnum = view.getUint16(60, true);
    let shstrndx = view.getUint16(62, true);

    // Section 0 holds the real counts when they do not fit in the header's 16-bit fields.
    if (shoff !== 0n) {
      if (shentsize !== SHDR_SIZE) {
        throw invalidElf(path, `e_shentsize is ${shentsize}, not ${SHDR_SIZE}`);
      }
      this.#checkRange(shoff, BigInt(SHDR_SIZE), 'the section header table');
      const first = this.#view(Number(shoff), SHDR_SIZE);
      if (shnum === 0) {
        const count = first.getBigUint64(32, true);
        this.#checkCount(shoff, count, SHDR_SIZE, 'the section header table');
        shnum = Number(count);
      }
      if (shstrndx === SHN_XINDEX) shstrndx = first.getUint32(40, true);
      if (phnum === PN_XNUM) phnum = first.getUint32(44, true);
    } else if (shnum !== 0) {
      throw invalidElf(path, `e_shnum is ${shnum} but e_shoff is 0`);
    }
    if (phnum !== 0 && phentsize !== PHDR_SIZE) {
      throw invalidElf(path, `e_phentsize is ${phentsize}, not ${PHDR_SIZE}`);
    }
    this.#checkCount(phoff, BigInt(phnum), PHDR_SIZE, 'the program header table');
    this.#checkCount(shoff, BigInt(shnum), SHDR_SIZE, 'the section header table');

    this.segments = this.#readSegments(Number(phoff), phnum);
    this.sections = this.#readSections(Number(shoff), shnum, shstrndx);
    this.hasSymtab = this.sections.some((s) => s.type === SHT_SYMTAB);
  }

  #readHeaderBytes(size: number): Uint8Array {
    const path = this.path;
    if (size === 0) throw invalidElf(path, 'the file is empty');
    const head = this.#source.read(0, Math.min(size, EHDR_SIZE));
    if (head.length < 4 || head.readUInt32LE(0) !== ELF_MAGIC) {
      const script = readScriptHeader(this.#source.read(0, Math.min(size, SCRIPT_HEAD_BYTES)));
      if (script !== undefined) throw scriptTargetError(path, script);
      const first = [...head.subarray(0, 4)].map((b) => b.toString(16).padStart(2, '0'));
      throw invalidElf(
        path,
        `not an ELF file (it starts with bytes ${first.join(' ')}, not 7f 45 4c 46)`,
      );
    }
    if (head.length < 16)
      throw invalidElf(path, `the file is truncated to ${size} bytes inside the ELF header`);
    const elfClass = head[4]!;
    const data = head[5]!;
    if (elfClass === ELFCLASS32) throw unsupportedElf(path, '32-bit ELF (ELFCLASS32)');
    if (elfClass !== ELFCLASS64) throw invalidElf(path, `unknown ELF class ${elfClass} in e_ident`);
    if (data === ELFDATA2MSB) throw unsupportedElf(path, 'big-endian ELF (ELFDATA2MSB)');
    if (data !== ELFDATA2LSB) throw invalidElf(path, `unknown byte order ${data} in e_ident`);
    if (head.length < EHDR_SIZE) {
      throw invalidElf(
        path,
        `the file is truncated to ${size} bytes inside the ELF header (${EHDR_SIZE} bytes)`,
      );
    }
    return head;
  }

  #view(offset: number, length: number): DataView {
    const bytes = this.#source.read(offset, length);
    return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Throws unless [offset, offset + length) lies inside the file. */
  #checkRange(offset: bigint, length: bigint, what: string): void {
    if (offset < 0n || length < 0n || offset + length > this.fileSize) {
      throw invalidElf(
        this.path,
        `${what} at ${hex(offset)} (${length} bytes) runs past the end of the file (${this.fileSize} bytes)`,
      );
    }
  }

  #checkCount(offset: bigint, count: bigint, entrySize: number, what: string): void {
    if (count === 0n) return;
    if (offset + count * BigInt(entrySize) > this.fileSize) {
      throw invalidElf(
        this.path,
        `${what} at ${hex(offset)} with ${count} entries runs past the end of the file (${this.fileSize} bytes)`,
      );
    }
  }

  #readSegments(phoff: number, phnum: number): ElfSegment[] {
    const segments: ElfSegment[] = [];
    if (phnum === 0) return segments;
    const view = this.#view(phoff, phnum * PHDR_SIZE);
    for (let i = 0; i < phnum; i++) {
      const at = i * PHDR_SIZE;
      const type = view.getUint32(at, true);
      const flags = view.getUint32(at + 4, true);
      segments.push({
        type,
        typeName: segmentTypeName(type),
        readable: (flags & PF_R) !== 0,
        writable: (flags & PF_W) !== 0,
        executable: (flags & PF_X) !== 0,
        offset: view.getBigUint64(at + 8, true),
        vaddr: view.getBigUint64(at + 16, true),
        fileSize: view.getBigUint64(at + 32, true),
        memSize: view.getBigUint64(at + 40, true),
        align: view.getBigUint64(at + 48, true),
      });
    }
    return segments;
  }

  #readSections(shoff: number, shnum: number, shstrndx: number): ElfSection[] {
    if (shnum === 0) return [];
    const view = this.#view(shoff, shnum * SHDR_SIZE);
    const raw: Omit<ElfSection, 'name'>[] = [];
    const nameOffsets: number[] = [];
    for (let i = 0; i < shnum; i++) {
      const at = i * SHDR_SIZE;
      const type = view.getUint32(at + 4, true);
      const flags = view.getBigUint64(at + 8, true);
      nameOffsets.push(view.getUint32(at, true));
      raw.push({
        index: i,
        type,
        typeName: sectionTypeName(type),
        flags,
        executable: (flags & SHF_EXECINSTR) !== 0n,
        addr: view.getBigUint64(at + 16, true),
        offset: view.getBigUint64(at + 24, true),
        size: view.getBigUint64(at + 32, true),
        link: view.getUint32(at + 40, true),
        info: view.getUint32(at + 44, true),
        addralign: view.getBigUint64(at + 48, true),
        entSize: view.getBigUint64(at + 56, true),
      });
    }
    const names = this.#sectionNames(raw, shstrndx);
    const sections = raw.map((section, i): ElfSection => {
      const name = this.#sectionName(names, nameOffsets[i]!, i);
      // Every section but NOBITS (and the null section) must lie inside the file.
      if (i !== 0 && section.type !== SHT_NOBITS && section.type !== SHT_NULL) {
        this.#checkRange(section.offset, section.size, `section [${i}] ${name}`);
      }
      return { ...section, name };
    });
    return sections;
  }

  /** The section name table, checked to lie inside the file and to end with a NUL byte. */
  #sectionNames(raw: readonly Omit<ElfSection, 'name'>[], shstrndx: number): Buffer | undefined {
    const path = this.path;
    if (shstrndx === SHN_UNDEF) return undefined;
    const table = raw[shstrndx];
    if (table === undefined) {
      throw invalidElf(
        path,
        `e_shstrndx ${shstrndx} is not a section (the file has ${raw.length})`,
      );
    }
    const what = `the section name table [${shstrndx}]`;
    if (table.type === SHT_NOBITS || table.type === SHT_NULL) {
      throw invalidElf(path, `${what} has no contents`);
    }
    if ((table.flags & SHF_COMPRESSED) !== 0n) throw invalidElf(path, `${what} is compressed`);
    this.#checkRange(table.offset, table.size, what);
    const names = this.#source.read(Number(table.offset), Number(table.size));
    if (names.length > 0 && names[names.length - 1] !== 0) {
      throw invalidElf(path, `${what} does not end with a NUL byte`);
    }
    return names;
  }

  #sectionName(names: Buffer | undefined, offset: number, index: number): string {
    if (names === undefined || offset === 0) return '';
    if (offset >= names.length) {
      throw invalidElf(
        this.path,
        `the name of section [${index}] is at ${hex(offset)}, past the end of the section name table (${names.length} bytes)`,
      );
    }
    return names.toString('utf8', offset, names.indexOf(0, offset));
  }

  section(name: string): ElfSection | undefined {
    if (this.#byName === undefined) {
      const byName = new Map<string, ElfSection>();
      for (const s of this.sections) if (!byName.has(s.name)) byName.set(s.name, s);
      this.#byName = byName;
    }
    return this.#byName.get(name);
  }

  sectionBytes(section: ElfSection): Uint8Array {
    const own = this.sections[section.index] === section;
    if (own) {
      const cached = this.#sectionCache.get(section.index);
      if (cached !== undefined) return cached;
    }
    let bytes: Uint8Array;
    if (section.type === SHT_NOBITS || section.type === SHT_NULL || section.size === 0n) {
      bytes = EMPTY;
    } else {
      this.#checkRange(section.offset, section.size, `section [${section.index}] ${section.name}`);
      bytes = this.#source.read(Number(section.offset), Number(section.size));
      if ((section.flags & SHF_COMPRESSED) !== 0n)
        bytes = inflateSection(this.path, section, bytes);
    }
    if (own) this.#sectionCache.set(section.index, bytes);
    return bytes;
  }

  read(fileOffset: bigint, length: number | bigint): Uint8Array {
    return this.#read(fileOffset, length, false);
  }

  /**
   * read() without a copy where it can: for bytes read and let go at once, never changed
   * (each function's code, swept for its returns).
   */
  view(fileOffset: bigint, length: number | bigint): Uint8Array {
    return this.#read(fileOffset, length, true);
  }

  #read(fileOffset: bigint, length: number | bigint, view: boolean): Uint8Array {
    if (typeof length === 'number' && (!Number.isSafeInteger(length) || length < 0)) {
      throw new InternalError(`Cannot read ELF file: invalid length ${length}`);
    }
    // A length read from the file is checked before it becomes a number.
    this.#checkRange(fileOffset, BigInt(length), `${length} bytes`);
    if (length === 0 || length === 0n) return EMPTY;
    return view
      ? this.#source.view(Number(fileOffset), Number(length))
      : this.#source.read(Number(fileOffset), Number(length));
  }

  symbols(table: SymbolTableName): readonly ElfSymbol[] {
    let symbols = this.#symbolCache.get(table);
    if (symbols === undefined) {
      symbols = readSymbols(this, table === 'symtab' ? SHT_SYMTAB : SHT_DYNSYM, table);
      this.#symbolCache.set(table, symbols);
    }
    return symbols;
  }

  functionColumns(table: SymbolTableName): FunctionColumns {
    let columns = this.#columnCache.get(table);
    if (columns === undefined) {
      columns = readFunctionColumns(this, table === 'symtab' ? SHT_SYMTAB : SHT_DYNSYM, table);
      this.#columnCache.set(table, columns);
    }
    return columns;
  }

  notes(): readonly ElfNote[] {
    if (this.#notes === undefined)
      this.#notes = readNotes(this, (segment) => this.#segmentNotes(segment), this.segments);
    return this.#notes;
  }

  /** Notes from PT_NOTE segments, for files without section headers. */
  #segmentNotes(segment: ElfSegment): Uint8Array {
    if (segment.fileSize > BigInt(Number.MAX_SAFE_INTEGER)) return EMPTY;
    return this.read(segment.offset, segment.fileSize);
  }

  buildId(): string | undefined {
    return readBuildId(this.notes());
  }

  debugLink(): DebugLink | undefined {
    return readDebugLink(this, this.section('.gnu_debuglink'));
  }

  usdtNotes(): readonly UsdtNote[] {
    if (this.#usdt === undefined) {
      this.#usdt = readUsdtNotes(
        this,
        this.section('.note.stapsdt'),
        this.section('.stapsdt.base'),
      );
    }
    return this.#usdt;
  }

  vaddrToFileOffset(vaddr: bigint): bigint | undefined {
    for (const s of this.segments) {
      if (s.type === PT_LOAD && vaddr >= s.vaddr && vaddr - s.vaddr < s.fileSize) {
        return s.offset + (vaddr - s.vaddr);
      }
    }
    return undefined;
  }

  fileOffsetToVaddr(fileOffset: bigint): bigint | undefined {
    for (const s of this.segments) {
      if (s.type === PT_LOAD && fileOffset >= s.offset && fileOffset - s.offset < s.fileSize) {
        return s.vaddr + (fileOffset - s.offset);
      }
    }
    return undefined;
  }

  loadSegmentOf(vaddr: bigint): ElfSegment | undefined {
    for (const s of this.segments) {
      if (s.type === PT_LOAD && vaddr >= s.vaddr && vaddr - s.vaddr < s.memSize) return s;
    }
    return undefined;
  }

  close(): void {
    this.#source.close();
  }
}
