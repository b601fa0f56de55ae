/**
 * A Go program's `.gopclntab`, the table the Go runtime itself reads to name and unwind its
 * functions. It stays in the file when the symbol table is stripped (`go build -ldflags=-s`,
 * as Debian's and most release builds are), so every Go function can still be probed by
 * name. What is read, per the layout Go's runtime/symtab.go and cmd/link write (64-bit):
 *
 * - the header: a magic number (0xfffffffb for Go 1.2 to 1.15, 0xfffffffa for 1.16 and 1.17,
 *   0xfffffff0 for 1.18 and 1.19, 0xfffffff1 since 1.20), the instruction quantum, the
 *   pointer size, the number of functions, since 1.18 the address entries are offsets from,
 *   and since 1.16 the offsets of the names, the pc-value tables and the function table;
 * - the function table: per function its entry (an address; since 1.18 a 32-bit offset from
 *   that start) and where its `_func` is, then one more entry: the end of the last function;
 * - each `_func`: its name's offset, and its pc-to-stack-pointer table, whose last pc is the
 *   end of the function's code (the alignment padding after it, int3s, is not its own).
 */
import { STT_FUNC } from './constants.js';
import { hex, invalidElf } from './elf-error.js';
import type { FunctionColumns } from './read-symbols.js';
import type { ElfFile, ElfSymbol } from './types.js';

/** pclntab magic numbers, by the Go releases that write them. */
const PCLNTAB_MAGIC: ReadonlyMap<number, 'go1.2' | 'go1.16' | 'go1.18' | 'go1.20'> = new Map([
  [0xfffffffb, 'go1.2'],
  [0xfffffffa, 'go1.16'],
  [0xfffffff0, 'go1.18'],
  [0xfffffff1, 'go1.20'],
]);

/** A pclntab read: its functions by index, in the table's (address) order. */
interface Pclntab {
  readonly data: Buffer;
  readonly count: number;
  /** The entry address of function `i` (`count`: the end of the last one). */
  entry(i: number): number;
  /** Function i's name, as offsets into `data`. */
  name(i: number): { start: number; end: number };
  /** The length of function i's code from its pc-sp table, or undefined without one. */
  codeLength(i: number): number | undefined;
  /** Function i's pc-sp table: how far below its entry's the stack pointer is, per range. */
  stackDeltas(i: number, step: (from: number, to: number, delta: number) => void): void;
}

/**
 * `elf`'s pclntab, or undefined when it has none; throws invalidElf for one of a layout not
 * read here (32-bit, an unknown magic) or that does not hold together.
 */
function readPclntab(elf: ElfFile): Pclntab | undefined {
  const section = elf.section('.gopclntab');
  if (section === undefined) return undefined;
  const bytes = elf.sectionBytes(section);
  const data = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const where = (why: string) =>
    invalidElf(elf.path, `its .gopclntab at ${hex(section.addr)} is not a Go pclntab: ${why}`);
  if (data.length < 16) throw where('it is too short');
  const format = PCLNTAB_MAGIC.get(data.readUInt32LE(0));
  if (format === undefined) throw where(`unknown magic ${hex(data.readUInt32LE(0))}`);
  const ptrSize = data[7]!;
  if (ptrSize !== 8) throw where(`pointers of ${ptrSize} bytes`);
  const quantum = data[6]!;
  const word = (at: number): number => {
    if (at + 8 > data.length) throw where(`a field at ${hex(at)} is past its end`);
    const value = data.readBigUInt64LE(at);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw where(`a field of ${hex(value)}`);
    return Number(value);
  };
  const count = word(8);
  if (count > data.length) throw where(`${count} functions`);
  // Where the function table, the names and the pc-value tables are: since Go 1.16 the
  // header gives each one's offset; before, names and tables are offsets from the header
  // itself, and the function table follows the count.
  const since118 = format === 'go1.18' || format === 'go1.20';
  const fields = format === 'go1.2' ? undefined : since118 ? 32 : 24;
  const functab = fields === undefined ? 8 + ptrSize : word(fields + 32);
  const names = fields === undefined ? 0 : word(fields);
  const pctab = fields === undefined ? 0 : word(fields + 24);
  // Go 1.18+: entries are offsets from the text's start (a position-independent program may
  // leave it to a relocation: .text's start, where Go's linker puts runtime.text).
  const textStart = since118 ? word(24) || Number(elf.section('.text')?.addr ?? 0n) : 0;
  const entryBytes = since118 ? 8 : 16;
  if (functab + (count + 1) * entryBytes > data.length) {
    throw where(`its function table of ${count} functions is past its end`);
  }
  /**
   * Where function i's _func has its fields after its entry (a u32, or a word): its offset is
   * from the function table's start (from the pclntab's before Go 1.16).
   */
  const after = since118 ? 4 : 8;
  const func = (i: number) => {
    const at = since118
      ? functab + data.readUInt32LE(functab + i * 8 + 4)
      : (fields === undefined ? 0 : functab) + word(functab + i * 16 + 8);
    if (at + after + 16 > data.length) throw where(`function ${i}'s record is past its end`);
    return at + after;
  };
  return {
    data,
    count,
    entry: (i) =>
      since118 ? textStart + data.readUInt32LE(functab + i * 8) : word(functab + i * 16),
    name(i) {
      const offset = data.readInt32LE(func(i));
      const start = names + offset;
      const end = offset < 0 || start >= data.length ? -1 : data.indexOf(0, start);
      if (end < 0) throw where(`function ${i}'s name at ${hex(start)} does not end`);
      return { start, end };
    },
    codeLength(i) {
      const pcsp = data.readUInt32LE(func(i) + 12);
      return pcsp === 0 ? undefined : pcValues(data, pctab + pcsp, quantum);
    },
    stackDeltas(i, step) {
      const pcsp = data.readUInt32LE(func(i) + 12);
      if (pcsp !== 0) pcValues(data, pctab + pcsp, quantum, step);
    },
  };
}

/**
 * The entry addresses of the functions the Go toolchain compiled or assembled, sorted, from
 * the function table of `.gopclntab`. C functions linked into the same program (cgo) are not
 * in it. Undefined without a pclntab.
 */
export function goFunctionEntries(elf: ElfFile): Float64Array | undefined {
  const table = readPclntab(elf);
  if (table === undefined) return undefined;
  const entries = new Float64Array(table.count);
  for (let i = 0; i < table.count; i++) entries[i] = table.entry(i);
  entries.sort();
  return entries;
}

/**
 * The functions of `elf`'s `.gopclntab` as symbol columns (each a global function, its size
 * its code's), or undefined when it has none or one of a layout not read here.
 */
export function goFunctionColumns(elf: ElfFile): FunctionColumns | undefined {
  const table = knownPclntab(elf);
  if (table === undefined) return undefined;
  const { data, count } = table;
  const address = new Float64Array(count);
  const size = new Float64Array(count);
  // Global functions (STB_GLOBAL, 1, in the high nibble).
  const info = new Uint8Array(count).fill((1 << 4) | STT_FUNC);
  const nameStart = new Uint32Array(count);
  const nameEnd = new Uint32Array(count);
  let next = table.entry(0);
  for (let i = 0; i < count; i++) {
    const entry = next;
    next = table.entry(i + 1);
    const { start, end } = table.name(i);
    address[i] = entry;
    nameStart[i] = start;
    nameEnd[i] = end;
    // The code's end where its pc-sp table says, within the next function's start.
    const code = table.codeLength(i);
    size[i] = code !== undefined && code > 0 && code <= next - entry ? code : next - entry;
  }
  const name = (i: number) => data.toString('utf8', nameStart[i], nameEnd[i]);
  const objects: ElfSymbol[] = [];
  return {
    table: 'gopclntab',
    count,
    address,
    size,
    info,
    nameStart,
    nameEnd,
    strings: data,
    name,
    version: () => undefined,
    symbol(i) {
      objects[i] ??= {
        name: name(i),
        version: undefined,
        versionHidden: false,
        value: BigInt(address[i]!),
        size: BigInt(size[i]!),
        type: 'func',
        binding: 'global',
        visibility: 'default',
        sectionIndex: elf.sections.findIndex((s) => s.name === '.text'),
        defined: true,
        table: 'gopclntab',
      };
      return objects[i]!;
    },
  };
}

/** A range of a Go function's code and how far its stack pointer is below its entry's. */
export interface GoStackDelta {
  readonly low: bigint;
  readonly high: bigint;
  readonly delta: number;
}

/**
 * Every Go function's pc-sp table as address ranges (what Go's runtime unwinds its stacks by:
 * the caller's stack pointer is the callee's plus the delta plus the return address's 8), or
 * undefined without a pclntab of a layout read here. A stripped Go program has no other
 * unwind table (`-w` drops .debug_frame, and Go writes no .eh_frame).
 */
export function goStackDeltas(elf: ElfFile): GoStackDelta[] | undefined {
  const table = knownPclntab(elf);
  if (table === undefined) return undefined;
  const rows: GoStackDelta[] = [];
  for (let i = 0; i < table.count; i++) {
    const entry = table.entry(i);
    table.stackDeltas(i, (from, to, delta) => {
      if (to > from) rows.push({ low: BigInt(entry + from), high: BigInt(entry + to), delta });
    });
  }
  return rows;
}

/**
 * readPclntab() where the file has a pclntab of a layout read here; undefined otherwise (a Go
 * release after these: its functions are then what its other tables say).
 */
function knownPclntab(elf: ElfFile): Pclntab | undefined {
  const section = elf.section('.gopclntab');
  if (section === undefined) return undefined;
  const bytes = elf.sectionBytes(section);
  if (bytes.length < 4) return undefined;
  const magic = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true);
  return PCLNTAB_MAGIC.has(magic) ? readPclntab(elf) : undefined;
}

/**
 * Walks a pc-value table: `step(from, to, value)` for each range of its function's code
 * (offsets from its entry) with its value. Each step is the value's change (a zigzag varint;
 * 0 ends the table, except as the first, from -1), then the pc's (a varint, in instruction
 * quanta). Returns the bytes covered (the end of the last range), or undefined where the
 * table runs past the data.
 */
function pcValues(
  data: Buffer,
  at: number,
  quantum: number,
  step?: (from: number, to: number, value: number) => void,
): number | undefined {
  let pc = 0;
  let value = -1;
  let first = true;
  let i = at;
  const varint = (): number | undefined => {
    let result = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (i >= data.length) return undefined;
      const byte = data[i++]!;
      result += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) return result;
    }
    return undefined;
  };
  for (;;) {
    const change = varint();
    if (change === undefined) return undefined;
    if (change === 0 && !first) return pc;
    first = false;
    value += change % 2 === 1 ? -(change + 1) / 2 : change / 2;
    const length = varint();
    if (length === undefined) return undefined;
    step?.(pc, pc + length * quantum, value);
    pc += length * quantum;
  }
}
