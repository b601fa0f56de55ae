import { Cursor, DwarfFormatError, stringAt } from './cursor.js';

/**
 * One .debug_line unit's header (DWARF 2 to 5): the parameters of its line-number program and
 * its directory and file tables. Reading a header is cheap; the program after it runs only when
 * a query needs the unit's rows (runLineProgram).
 */
export interface LineProgramHeader {
  /** Where the unit starts in .debug_line (the value of a CU's DW_AT_stmt_list). */
  readonly offset: number;
  /** Where the next unit starts. */
  readonly end: number;
  readonly version: number;
  readonly offsetSize: 4 | 8;
  readonly addressSize: number;
  /** Where the line-number program starts and ends in .debug_line. */
  readonly programStart: number;
  readonly minInstructionLength: number;
  readonly maxOpsPerInstruction: number;
  readonly defaultIsStmt: boolean;
  readonly lineBase: number;
  readonly lineRange: number;
  readonly opcodeBase: number;
  /** Operand counts of the standard opcodes 1 .. opcodeBase-1. */
  readonly standardOpcodeLengths: readonly number[];
  /**
   * The include directories as stored. DWARF 5: index 0 is the compilation directory. DWARF 2-4:
   * entry k is directory index k+1 (index 0, the compilation directory, is not in the table).
   */
  readonly directories: readonly string[];
  /** The file table as stored; `fileBase` is the file register value of files[0]. */
  readonly files: LineFileEntry[];
  /** 0 for DWARF 5 (file 0 is the primary source file), 1 before. */
  readonly fileBase: 0 | 1;
}

export interface LineFileEntry {
  readonly name: string;
  /** Index into the directory table, with the version's numbering (see `directories`). */
  readonly directory: number;
  /** MD5 of the file's contents as 32 hex digits (DWARF 5 with DW_LNCT_MD5), if given. */
  readonly md5?: string | undefined;
}

/** The strings a DWARF 5 header may point into. */
export interface LineStrings {
  readonly lineStr: Uint8Array;
  readonly str: Uint8Array;
}

const SECTION = '.debug_line';

// DW_LNCT_* content types of DWARF 5 entry formats.
const DW_LNCT_path = 1;
const DW_LNCT_directory_index = 2;
const DW_LNCT_MD5 = 5;

// The attribute forms an entry format may use.
const DW_FORM_block2 = 0x03;
const DW_FORM_block4 = 0x04;
const DW_FORM_data2 = 0x05;
const DW_FORM_data4 = 0x06;
const DW_FORM_data8 = 0x07;
const DW_FORM_string = 0x08;
const DW_FORM_block = 0x09;
const DW_FORM_block1 = 0x0a;
const DW_FORM_data1 = 0x0b;
const DW_FORM_sdata = 0x0d;
const DW_FORM_strp = 0x0e;
const DW_FORM_udata = 0x0f;
const DW_FORM_sec_offset = 0x17;
const DW_FORM_strx = 0x1a;
const DW_FORM_data16 = 0x1e;
const DW_FORM_line_strp = 0x1f;
const DW_FORM_strx1 = 0x25;
const DW_FORM_strx2 = 0x26;
const DW_FORM_strx3 = 0x27;
const DW_FORM_strx4 = 0x28;

/** Reads the header of the unit at `offset`; throws DwarfFormatError when it is malformed. */
export function readLineHeader(
  line: Uint8Array,
  offset: number,
  strings: LineStrings,
): LineProgramHeader {
  const c = new Cursor(line, SECTION, offset);
  const { length, offsetSize } = c.initialLength();
  if (length > c.remaining) {
    c.fail(offset, `unit length ${length} runs past the end of the section (${c.remaining} left)`);
  }
  const end = c.offset + length;
  const unit = new Cursor(line, SECTION, c.offset, end);
  const version = unit.u16();
  if (version < 2 || version > 5) unit.fail(offset, `unsupported line table version ${version}`);
  let addressSize = 8;
  if (version >= 5) {
    addressSize = unit.u8();
    const segmentSelectorSize = unit.u8();
    if (segmentSelectorSize !== 0) {
      unit.fail(offset, `segment selectors (size ${segmentSelectorSize}) are not supported`);
    }
  }
  const headerLength = unit.sectionOffset(offsetSize);
  if (headerLength > unit.remaining) {
    unit.fail(offset, `header length ${headerLength} runs past the unit's end`);
  }
  const programStart = unit.offset + headerLength;
  const h = new Cursor(line, SECTION, unit.offset, programStart);
  const minInstructionLength = h.u8();
  const maxOpsPerInstruction = version >= 4 ? h.u8() : 1;
  const defaultIsStmt = h.u8() !== 0;
  const lineBase = h.s8();
  const lineRange = h.u8();
  const opcodeBase = h.u8();
  if (lineRange === 0) h.fail(offset, 'line_range is 0');
  if (maxOpsPerInstruction === 0) h.fail(offset, 'maximum_operations_per_instruction is 0');
  if (opcodeBase === 0) h.fail(offset, 'opcode_base is 0');
  const standardOpcodeLengths: number[] = [];
  for (let i = 1; i < opcodeBase; i++) standardOpcodeLengths.push(h.u8());
  let directories: string[];
  let files: LineFileEntry[];
  if (version >= 5) {
    directories = readEntries(h, offsetSize, strings, 'directory').map((e) => e.name);
    files = readEntries(h, offsetSize, strings, 'file');
  } else {
    directories = [];
    for (;;) {
      const dir = h.cstring();
      if (dir === '') break;
      directories.push(dir);
    }
    files = [];
    for (;;) {
      const name = h.cstring();
      if (name === '') break;
      const directory = h.ulebNumber();
      h.uleb(); // modification time
      h.uleb(); // length
      files.push({ name, directory });
    }
  }
  return {
    offset,
    end,
    version,
    offsetSize,
    addressSize,
    programStart,
    minInstructionLength,
    maxOpsPerInstruction,
    defaultIsStmt,
    lineBase,
    lineRange,
    opcodeBase,
    standardOpcodeLengths,
    directories,
    files,
    fileBase: version >= 5 ? 0 : 1,
  };
}

/** DWARF 5 directory or file entries: a format (content type, form pairs), a count, entries. */
function readEntries(
  h: Cursor,
  offsetSize: 4 | 8,
  strings: LineStrings,
  what: 'directory' | 'file',
): LineFileEntry[] {
  const formatCount = h.u8();
  const format: [number, number][] = [];
  for (let i = 0; i < formatCount; i++) format.push([h.ulebNumber(), h.ulebNumber()]);
  const countAt = h.offset;
  const count = h.ulebNumber();
  // Each entry takes at least one byte per field: a count the header cannot hold is a lie.
  if (count > h.remaining)
    h.fail(countAt, `${count} ${what} entries in a ${h.remaining}-byte header`);
  const entries: LineFileEntry[] = [];
  for (let i = 0; i < count; i++) {
    let name: string | undefined;
    let directory = 0;
    let md5: string | undefined;
    for (const [type, form] of format) {
      const at = h.offset;
      const value = readForm(h, form, offsetSize, strings);
      if (type === DW_LNCT_path) {
        if (typeof value !== 'string')
          h.fail(at, `${what} name has non-string form 0x${form.toString(16)}`);
        name = value;
      } else if (type === DW_LNCT_directory_index) {
        if (typeof value !== 'number')
          h.fail(at, `directory index has form 0x${form.toString(16)}`);
        directory = value;
      } else if (type === DW_LNCT_MD5 && value instanceof Uint8Array) {
        md5 = Buffer.from(value).toString('hex');
      }
    }
    if (name === undefined) h.fail(h.offset, `${what} entry ${i} has no path`);
    entries.push({ name, directory, md5 });
  }
  return entries;
}

/** A value of an entry-format field: a string, a number, or a block's bytes. */
function readForm(
  h: Cursor,
  form: number,
  offsetSize: 4 | 8,
  strings: LineStrings,
): string | number | Uint8Array {
  switch (form) {
    case DW_FORM_string:
      return h.cstring();
    case DW_FORM_line_strp:
      return stringAt(strings.lineStr, '.debug_line_str', h.sectionOffset(offsetSize));
    case DW_FORM_strp:
      return stringAt(strings.str, '.debug_str', h.sectionOffset(offsetSize));
    case DW_FORM_udata:
      return h.ulebNumber();
    case DW_FORM_sdata:
      return h.slebNumber();
    case DW_FORM_data1:
      return h.u8();
    case DW_FORM_data2:
      return h.u16();
    case DW_FORM_data4:
      return h.u32();
    case DW_FORM_data8:
      return h.u64Number();
    case DW_FORM_sec_offset:
      return h.sectionOffset(offsetSize);
    case DW_FORM_data16:
      return h.bytes.subarray(h.take(16), h.offset);
    case DW_FORM_block1:
      return blockOf(h, h.u8());
    case DW_FORM_block2:
      return blockOf(h, h.u16());
    case DW_FORM_block4:
      return blockOf(h, h.u32());
    case DW_FORM_block:
      return blockOf(h, h.ulebNumber());
    case DW_FORM_strx:
    case DW_FORM_strx1:
    case DW_FORM_strx2:
    case DW_FORM_strx3:
    case DW_FORM_strx4:
      return h.fail(
        h.offset,
        'string index forms (DW_FORM_strx*) in a line table header are not supported',
      );
    default:
      return h.fail(h.offset, `unknown form 0x${form.toString(16)} in an entry format`);
  }
}

function blockOf(h: Cursor, length: number): Uint8Array {
  const at = h.take(length);
  return h.bytes.subarray(at, at + length);
}

/**
 * The rows of one unit's line-number matrix, as columns. Rows come in sequences: each ends with
 * an end_sequence row whose address is the first byte after the sequence.
 */
export interface LineRows {
  readonly count: number;
  readonly address: Float64Array;
  /** The file register as the program set it (see LineProgramHeader.fileBase). */
  readonly file: Uint32Array;
  readonly line: Uint32Array;
  readonly column: Uint32Array;
  /** Bit 0: is_stmt; bit 1: end_sequence; bit 2: prologue_end. */
  readonly flags: Uint8Array;
  /** [first row, one past the end_sequence row) of each sequence, by lowest address. */
  readonly sequences: readonly { readonly start: number; readonly end: number }[];
  /** Files added by DW_LNE_define_file, after the header's (DWARF 2-4 only). */
  readonly definedFiles: readonly LineFileEntry[];
}

export const ROW_IS_STMT = 1;
export const ROW_END_SEQUENCE = 2;
/** Where a function's prologue ends (DW_LNS_set_prologue_end: LLVM's, rustc's and clang's). */
export const ROW_PROLOGUE_END = 4;

export interface RunOptions {
  /**
   * Keep a sequence only when this accepts its first address; a linker marks the line programs
   * of code it dropped with address 0 or -1 (a "tombstone").
   */
  readonly keepSequence?: ((vaddr: number) => boolean) | undefined;
}

const DW_LNS_copy = 1;
const DW_LNS_advance_pc = 2;
const DW_LNS_advance_line = 3;
const DW_LNS_set_file = 4;
const DW_LNS_set_column = 5;
const DW_LNS_negate_stmt = 6;
const DW_LNS_set_basic_block = 7;
const DW_LNS_const_add_pc = 8;
const DW_LNS_fixed_advance_pc = 9;
const DW_LNS_set_prologue_end = 10;
const DW_LNS_set_epilogue_begin = 11;
const DW_LNS_set_isa = 12;

const DW_LNE_end_sequence = 1;
const DW_LNE_set_address = 2;
const DW_LNE_define_file = 3;
const DW_LNE_set_discriminator = 4;

/** Addresses past 2^53 cannot be numbers; only tombstones are that high in user space. */
const MAX_ADDRESS = 2 ** 53;

/**
 * Runs a unit's line-number program (the state machine of DWARF 5 section 6.2) and returns its
 * rows. Throws DwarfFormatError when an opcode or operand runs past the unit.
 */
export function runLineProgram(
  line: Uint8Array,
  header: LineProgramHeader,
  options: RunOptions = {},
): LineRows {
  const c = new Cursor(line, SECTION, header.programStart, header.end);
  const rows = new RowBuilder();
  const definedFiles: LineFileEntry[] = [];
  const { minInstructionLength, maxOpsPerInstruction, lineBase, lineRange, opcodeBase } = header;
  const lengths = header.standardOpcodeLengths;

  let address = 0;
  let opIndex = 0;
  let file = 1;
  let lineNumber = 1;
  let column = 0;
  let isStmt = header.defaultIsStmt;
  let prologueEnd = false;
  let sequenceStart = rows.count;
  /** False once the sequence's address is not one to keep (a tombstone). */
  let keep = true;

  const reset = () => {
    address = 0;
    opIndex = 0;
    file = 1;
    lineNumber = 1;
    column = 0;
    isStmt = header.defaultIsStmt;
    prologueEnd = false;
    sequenceStart = rows.count;
    keep = true;
  };
  const advance = (operationAdvance: number) => {
    if (maxOpsPerInstruction === 1) {
      address += minInstructionLength * operationAdvance;
    } else {
      const ops = opIndex + operationAdvance;
      address += minInstructionLength * Math.floor(ops / maxOpsPerInstruction);
      opIndex = ops % maxOpsPerInstruction;
    }
  };
  const emit = (flags: number) => {
    // Each row takes the register, which then goes back to false.
    const marked = prologueEnd ? ROW_PROLOGUE_END : 0;
    prologueEnd = false;
    if (!keep) return;
    if (
      rows.count === sequenceStart &&
      options.keepSequence !== undefined &&
      !options.keepSequence(address)
    ) {
      keep = false;
      return;
    }
    if (address >= MAX_ADDRESS) {
      keep = false;
      rows.truncate(sequenceStart);
      return;
    }
    rows.push(address, file, lineNumber, column, flags | marked | (isStmt ? ROW_IS_STMT : 0));
  };

  while (!c.atEnd) {
    const opcode = c.u8();
    if (opcode >= opcodeBase) {
      const adjusted = opcode - opcodeBase;
      advance(Math.floor(adjusted / lineRange));
      lineNumber += lineBase + (adjusted % lineRange);
      emit(0);
      continue;
    }
    switch (opcode) {
      case 0: {
        const at = c.offset;
        const length = c.ulebNumber();
        if (length === 0) c.fail(at, 'extended opcode of length 0');
        const body = c.sub(length);
        const sub = body.u8();
        if (sub === DW_LNE_end_sequence) {
          emit(ROW_END_SEQUENCE);
          if (keep && rows.count > sequenceStart) rows.endSequence(sequenceStart);
          reset();
        } else if (sub === DW_LNE_set_address) {
          const size = body.remaining;
          if (size !== 4 && size !== 8) body.fail(at, `set_address with a ${size}-byte operand`);
          const value = body.unsigned(size);
          if (value >= BigInt(MAX_ADDRESS)) {
            keep = false;
            rows.truncate(sequenceStart);
          } else {
            address = Number(value);
            opIndex = 0;
          }
        } else if (sub === DW_LNE_define_file) {
          const name = body.cstring();
          const directory = body.ulebNumber();
          body.uleb();
          body.uleb();
          definedFiles.push({ name, directory });
        } else if (sub === DW_LNE_set_discriminator) {
          body.uleb();
        }
        // Unknown extended opcodes are skipped: their length says how far.
        break;
      }
      case DW_LNS_copy:
        emit(0);
        break;
      case DW_LNS_advance_pc:
        advance(c.ulebNumber());
        break;
      case DW_LNS_advance_line:
        lineNumber += c.slebNumber();
        break;
      case DW_LNS_set_file:
        file = c.ulebNumber();
        break;
      case DW_LNS_set_column:
        column = c.ulebNumber();
        break;
      case DW_LNS_negate_stmt:
        isStmt = !isStmt;
        break;
      case DW_LNS_set_basic_block:
        break;
      case DW_LNS_const_add_pc:
        advance(Math.floor((255 - opcodeBase) / lineRange));
        break;
      case DW_LNS_fixed_advance_pc:
        address += c.u16();
        opIndex = 0;
        break;
      case DW_LNS_set_prologue_end:
        prologueEnd = true;
        break;
      case DW_LNS_set_epilogue_begin:
        break;
      case DW_LNS_set_isa:
        c.uleb();
        break;
      default:
        // A standard opcode this reader does not know: skip the operands the header declares.
        for (let i = 0; i < lengths[opcode - 1]!; i++) c.uleb();
    }
  }
  // A program that stops without end_sequence leaves an open sequence: it has no end address,
  // so its rows cannot say which bytes they cover. Drop them, as readers of broken tables do.
  rows.truncate(sequenceStart);
  return rows.finish(definedFiles);
}

/** Growable columns for the rows of one program. */
class RowBuilder {
  count = 0;
  private address = new Float64Array(256);
  private file = new Uint32Array(256);
  private line = new Uint32Array(256);
  private column = new Uint32Array(256);
  private flags = new Uint8Array(256);
  private readonly sequences: { start: number; end: number; low: number }[] = [];

  push(address: number, file: number, line: number, column: number, flags: number): void {
    if (this.count === this.address.length) this.grow();
    const i = this.count++;
    this.address[i] = address;
    this.file[i] = file;
    this.line[i] = line >>> 0;
    this.column[i] = column;
    this.flags[i] = flags;
  }

  truncate(count: number): void {
    if (count < this.count) this.count = count;
  }

  endSequence(start: number): void {
    this.sequences.push({ start, end: this.count, low: this.address[start]! });
  }

  finish(definedFiles: LineFileEntry[]): LineRows {
    const n = this.count;
    this.sequences.sort((a, b) => a.low - b.low);
    return {
      count: n,
      address: this.address.slice(0, n),
      file: this.file.slice(0, n),
      line: this.line.slice(0, n),
      column: this.column.slice(0, n),
      flags: this.flags.slice(0, n),
      sequences: this.sequences.map(({ start, end }) => ({ start, end })),
      definedFiles,
    };
  }

  private grow(): void {
    const size = this.address.length * 2;
    const grown = <T extends Float64Array | Uint32Array | Uint8Array>(
      old: T,
      make: (n: number) => T,
    ) => {
      const next = make(size);
      next.set(old);
      return next;
    };
    this.address = grown(this.address, (k) => new Float64Array(k));
    this.file = grown(this.file, (k) => new Uint32Array(k));
    this.line = grown(this.line, (k) => new Uint32Array(k));
    this.column = grown(this.column, (k) => new Uint32Array(k));
    this.flags = grown(this.flags, (k) => new Uint8Array(k));
  }
}

export { DwarfFormatError };
