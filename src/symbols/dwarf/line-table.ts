import { isAbsolute, posix } from 'node:path';
import type { ElfFile } from '../elf/index.js';
import { DwarfFormatError } from './cursor.js';
import {
  type LineProgramHeader,
  type LineRows,
  ROW_END_SEQUENCE,
  ROW_IS_STMT,
  ROW_PROLOGUE_END,
  readLineHeader,
  runLineProgram,
} from './line-program.js';
import { type DwarfSections, dwarfSections } from './sections.js';

/** A row of the line table that a query returns. */
export interface LineAddress {
  readonly vaddr: bigint;
  /** The source file's path as the line table spells it, made absolute when it can be. */
  readonly file: string;
  readonly line: number;
  /** 0 when the compiler did not say. */
  readonly column: number;
  readonly isStmt: boolean;
  /** Where the compiler said the function's prologue ends (DW_LNS_set_prologue_end). */
  readonly prologueEnd: boolean;
}

/** Where an address is in the source. */
export interface SourceLocation {
  readonly file: string;
  readonly line: number;
  readonly column: number;
}

export interface LineTableOptions {
  /**
   * The compilation directory of the unit whose line program starts at this .debug_line offset.
   * DWARF 5 headers hold it (directory 0); DWARF 2-4 headers do not, it is the CU's
   * DW_AT_comp_dir in .debug_info. Without it, those units' relative paths stay relative.
   */
  readonly compDirOf?: ((lineOffset: number) => string | undefined) | undefined;
  /**
   * Whether a sequence starting at this address describes code that is in the file; the
   * linker leaves the line programs of functions it dropped at address 0 or a tombstone.
   * Default: the address must be inside an executable section (see LineTable.of).
   */
  readonly keepSequence?: ((vaddr: number) => boolean) | undefined;
}

/** One unit of .debug_line: its header, and its rows once a query ran its program. */
interface LineUnit {
  readonly header: LineProgramHeader;
  /** The path of each file-table entry (index = file register - fileBase). */
  paths: string[] | undefined;
  rows: LineRows | undefined;
}

/** A sequence in the address index: [low, high) of one unit's rows [start, end). */
interface IndexedSequence {
  readonly low: number;
  readonly high: number;
  readonly unit: LineUnit;
  readonly start: number;
  readonly end: number;
}

/**
 * The source-line tables of one file (.debug_line), read lazily: unit headers are indexed on
 * the first query, and a unit's program runs only when a query needs its rows (a source line
 * runs only the units whose file table names that file; an address runs every unit once).
 *
 * File names match like gdb's: `file.c` or `dir/file.c` match whole trailing path components,
 * an absolute path matches exactly. Throws DwarfFormatError when a table is malformed.
 */
export class LineTable {
  readonly #sections: Pick<DwarfSections, 'line' | 'lineStr' | 'str'>;
  readonly #options: LineTableOptions;
  #units: LineUnit[] | undefined;
  #addressIndex: IndexedSequence[] | undefined;

  constructor(
    sections: Pick<DwarfSections, 'line' | 'lineStr' | 'str'>,
    options: LineTableOptions = {},
  ) {
    this.#sections = sections;
    this.#options = options;
  }

  /**
   * The line table of an ELF file (a binary built with -g, or a separate debug file). Sequences
   * are kept when they start inside one of the file's executable sections (a debug file keeps
   * the section headers of the binary, without the bytes).
   */
  static of(elf: ElfFile, options: Omit<LineTableOptions, 'keepSequence'> = {}): LineTable {
    const code = elf.sections
      .filter((s) => s.executable && s.addr !== 0n && s.size !== 0n)
      .map((s) => ({ low: Number(s.addr), high: Number(s.addr + s.size) }));
    const keepSequence =
      code.length === 0
        ? (vaddr: number) => vaddr !== 0
        : (vaddr: number) => code.some((s) => vaddr >= s.low && vaddr < s.high);
    return new LineTable(dwarfSections(elf), { ...options, keepSequence });
  }

  /** True when the file has a .debug_line section with at least one unit. */
  get present(): boolean {
    return this.#sections.line.length > 0;
  }

  /** How many units .debug_line holds. */
  get unitCount(): number {
    return this.#allUnits().length;
  }

  /** Every distinct source file the tables name, sorted. */
  sourceFiles(): string[] {
    const all = new Set<string>();
    for (const unit of this.#allUnits()) for (const path of this.#pathsOf(unit)) all.add(path);
    return [...all].sort();
  }

  /**
   * The distinct source files a name matches, sorted: none, one, or several (an ambiguous name
   * such as `util.c` when two directories have one).
   */
  matchFiles(query: string): string[] {
    const matches = new Set<string>();
    const match = fileMatcher(query);
    for (const unit of this.#allUnits()) {
      for (const path of this.#pathsOf(unit)) if (match(path)) matches.add(path);
    }
    return [...matches].sort();
  }

  /** The rows of a line of a file (a path matchFiles returned), in address order. */
  rowsOfLine(path: string, line: number): LineAddress[] {
    return this.rowsOfLines(path, line, line);
  }

  /** The rows of lines first..last of a file, in address order. */
  rowsOfLines(path: string, first: number, last: number): LineAddress[] {
    const found: LineAddress[] = [];
    this.#forRowsOf(path, (rows, i, unitPath) => {
      const line = rows.line[i]!;
      if (line >= first && line <= last) found.push(rowAt(rows, i, unitPath));
    });
    return found.sort((a, b) => (a.vaddr < b.vaddr ? -1 : a.vaddr > b.vaddr ? 1 : 0));
  }

  /** The lines of a file that have at least one is_stmt row, ascending. */
  linesWithCode(path: string): number[] {
    const lines = new Set<number>();
    this.#forRowsOf(path, (rows, i) => {
      if ((rows.flags[i]! & ROW_IS_STMT) !== 0) lines.add(rows.line[i]!);
    });
    return [...lines].sort((a, b) => a - b);
  }

  /**
   * The source location of the instruction at `vaddr`: the last row at or before it in its
   * sequence (as addr2line reports), undefined when no sequence covers it.
   */
  locationOf(vaddr: bigint): SourceLocation | undefined {
    const v = Number(vaddr);
    const sequence = this.#sequenceAt(v);
    if (sequence === undefined) return undefined;
    const rows = sequence.unit.rows!;
    let lo = sequence.start;
    let hi = sequence.end - 1; // the end_sequence row covers nothing
    // Last row with address <= v in [start, end - 1).
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (rows.address[mid]! <= v) lo = mid;
      else hi = mid;
    }
    const paths = this.#pathsOf(sequence.unit);
    return {
      file: fileName(sequence.unit, paths, rows.file[lo]!),
      line: rows.line[lo]!,
      column: rows.column[lo]!,
    };
  }

  /** The rows whose address is in [low, high), by address (end_sequence rows left out). */
  rowsInRange(low: bigint, high: bigint): LineAddress[] {
    const lo = Number(low);
    const hi = Number(high);
    const found: LineAddress[] = [];
    for (const sequence of this.#index()) {
      if (sequence.high <= lo || sequence.low >= hi) continue;
      const rows = sequence.unit.rows!;
      const paths = this.#pathsOf(sequence.unit);
      for (let i = sequence.start; i < sequence.end; i++) {
        const address = rows.address[i]!;
        if (address < lo || address >= hi || (rows.flags[i]! & ROW_END_SEQUENCE) !== 0) continue;
        found.push(rowAt(rows, i, fileName(sequence.unit, paths, rows.file[i]!)));
      }
    }
    return found.sort((a, b) => (a.vaddr < b.vaddr ? -1 : a.vaddr > b.vaddr ? 1 : 0));
  }

  #allUnits(): LineUnit[] {
    if (this.#units !== undefined) return this.#units;
    const { line, lineStr, str } = this.#sections;
    const units: LineUnit[] = [];
    let offset = 0;
    while (offset < line.length) {
      const header = readLineHeader(line, offset, { lineStr, str });
      units.push({ header, paths: undefined, rows: undefined });
      offset = header.end;
    }
    this.#units = units;
    return units;
  }

  #pathsOf(unit: LineUnit): string[] {
    // DWARF 5 headers name the compilation directory themselves; asking .debug_info for it
    // would read every unit's first entry.
    unit.paths ??= filePaths(
      unit.header,
      unit.header.version >= 5 ? undefined : this.#options.compDirOf?.(unit.header.offset),
    );
    return unit.paths;
  }

  #rowsOf(unit: LineUnit): LineRows {
    unit.rows ??= runLineProgram(this.#sections.line, unit.header, {
      keepSequence: this.#options.keepSequence,
    });
    return unit.rows;
  }

  /** Calls `visit` for each non-end row of `path` in every unit that names it. */
  #forRowsOf(path: string, visit: (rows: LineRows, i: number, path: string) => void): void {
    for (const unit of this.#allUnits()) {
      const paths = this.#pathsOf(unit);
      const base = unit.header.fileBase;
      const registers = new Set<number>();
      paths.forEach((p, k) => {
        if (p === path) registers.add(k + base);
      });
      if (registers.size === 0) continue;
      const rows = this.#rowsOf(unit);
      for (let i = 0; i < rows.count; i++) {
        if ((rows.flags[i]! & ROW_END_SEQUENCE) !== 0 || !registers.has(rows.file[i]!)) continue;
        visit(rows, i, path);
      }
    }
  }

  #index(): IndexedSequence[] {
    if (this.#addressIndex !== undefined) return this.#addressIndex;
    const index: IndexedSequence[] = [];
    for (const unit of this.#allUnits()) {
      const rows = this.#rowsOf(unit);
      for (const { start, end } of rows.sequences) {
        index.push({ low: rows.address[start]!, high: rows.address[end - 1]!, unit, start, end });
      }
    }
    index.sort((a, b) => a.low - b.low);
    this.#addressIndex = index;
    return index;
  }

  #sequenceAt(v: number): IndexedSequence | undefined {
    const index = this.#index();
    let lo = 0;
    let hi = index.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (index[mid]!.low <= v) lo = mid + 1;
      else hi = mid;
    }
    // Sequences may nest when a table is odd; look back from the last one starting at or before v.
    for (let k = lo - 1; k >= 0 && k >= lo - 8; k--) {
      const s = index[k]!;
      if (v >= s.low && v < s.high) return s;
    }
    return undefined;
  }
}

function rowAt(rows: LineRows, i: number, file: string): LineAddress {
  return {
    vaddr: BigInt(rows.address[i]!),
    file,
    line: rows.line[i]!,
    column: rows.column[i]!,
    isStmt: (rows.flags[i]! & ROW_IS_STMT) !== 0,
    prologueEnd: (rows.flags[i]! & ROW_PROLOGUE_END) !== 0,
  };
}

/** The path of a file register value: from the header's table, or a define_file entry. */
function fileName(unit: LineUnit, paths: readonly string[], register: number): string {
  const k = register - unit.header.fileBase;
  if (k >= 0 && k < paths.length) return paths[k]!;
  const defined = unit.rows?.definedFiles[k - paths.length];
  if (defined !== undefined) return posix.normalize(defined.name);
  return `<file ${register}>`;
}

/** The full path of each file-table entry: directory joined to the name, normalized. */
function filePaths(header: LineProgramHeader, compDir: string | undefined): string[] {
  const dirs = header.directories;
  const compilation = header.version >= 5 ? (dirs[0] ?? compDir) : compDir;
  const directory = (index: number): string => {
    const dir = header.version >= 5 ? dirs[index] : index === 0 ? compDir : dirs[index - 1];
    if (dir === undefined) return compilation ?? '';
    if (isAbsolute(dir) || compilation === undefined || index === 0) return dir;
    return posix.join(compilation, dir);
  };
  return header.files.map((file) =>
    posix.normalize(
      isAbsolute(file.name) ? file.name : posix.join(directory(file.directory), file.name),
    ),
  );
}

/** A predicate for the paths a user's file name means (see LineTable). */
export function fileMatcher(query: string): (path: string) => boolean {
  const q = posix.normalize(query);
  if (isAbsolute(q)) return (path) => path === q;
  const suffix = `/${q}`;
  return (path) => path === q || path.endsWith(suffix);
}

/**
 * One address per function context from the rows of a line: the lowest is_stmt address in
 * each. A line's code is often scattered (a loop's test before and after its body, a
 * scheduled instruction), and one probe per copy of the line is what a user asks for; the
 * copies are the contexts: `contextOf` says which function (or inlined instance) an address
 * belongs to. Rows without a context share one group. Returns the picked rows by address.
 */
export function firstAddressPerContext(
  rows: readonly LineAddress[],
  contextOf: (vaddr: bigint) => string | number | bigint | undefined,
): LineAddress[] {
  const best = new Map<string | number | bigint | undefined, LineAddress>();
  for (const row of rows) {
    if (!row.isStmt) continue;
    const context = contextOf(row.vaddr);
    const known = best.get(context);
    if (known === undefined || row.vaddr < known.vaddr) best.set(context, row);
  }
  return [...best.values()].sort((a, b) => (a.vaddr < b.vaddr ? -1 : a.vaddr > b.vaddr ? 1 : 0));
}

/** The lines with code nearest to `line`: the closest below and above it. */
export function nearestLines(lines: readonly number[], line: number): number[] {
  let below: number | undefined;
  let above: number | undefined;
  for (const l of lines) {
    if (l < line) below = l;
    else if (l > line && above === undefined) above = l;
  }
  return [below, above].filter((l): l is number => l !== undefined);
}

export { DwarfFormatError };
