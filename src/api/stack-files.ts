/**
 * The files stack frames are unwound through and named from, each opened once and known by
 * the identity the kernel gives its mappings (device and inode): a file replaced on disk is
 * read through /proc/PID/map_files (the mapped inode, not the new file at its path), and a
 * file stays open after its process has ended, so that its frames are still named.
 */
import { readFileSync, realpathSync, statSync } from 'node:fs';
import { type CfiRowInput, compileUnwindTable, type UnwindTable } from '../arch/index.js';
import { isDebugInfo, lookupDebugInfo, targetSymbols } from '../plan/index.js';
import {
  CallFrames,
  DW_TAG,
  DwarfReader,
  dwarfSections,
  type ElfFile,
  type FunctionSymbol,
  goStackDeltas,
  type LineTable,
  type MapEntry,
  openElf,
  type SymbolIndex,
  splitDev,
} from '../symbols/index.js';

/**
 * A Go program's frames as call frame rows, from its pclntab's pc-sp tables: the CFA is the
 * stack pointer plus the function's delta there plus the return address's 8, the return
 * address just below it; rbp is left as it is, as the .debug_frame Go's linker writes says.
 */
function* goFrameRows(elf: ElfFile): Generator<CfiRowInput> {
  const returnAddress = new Map([[RIP_COLUMN, { kind: 'offset' as const, offset: -8n }]]);
  for (const { low, high, delta } of goStackDeltas(elf) ?? []) {
    yield {
      low,
      high,
      cfa: { kind: 'register', register: RSP_COLUMN, offset: BigInt(delta + 8) },
      registers: returnAddress,
      returnColumn: RIP_COLUMN,
      signalFrame: false,
    };
  }
}

function* chain<T>(...parts: Iterable<T>[]): Generator<T> {
  for (const part of parts) yield* part;
}

/** DWARF's x86-64 register numbers of the stack pointer and of the return address. */
const RSP_COLUMN = 7;
const RIP_COLUMN = 16;

/** A file as the kernel knows a mapping of it: its superblock's dev_t (major << 20 | minor). */
export interface FileIdentity {
  readonly dev: number;
  readonly ino: bigint;
}

export function kernelDev(major: number, minor: number): number {
  return ((major << 20) | minor) >>> 0;
}

function identityKey(identity: FileIdentity): string {
  return `${identity.dev}:${identity.ino}`;
}

/** The identity of the file at `path` (following links), or undefined when it cannot be read. */
export function identityOf(path: string): FileIdentity | undefined {
  try {
    const stat = statSync(path, { bigint: true });
    const { major, minor } = splitDev(stat.dev);
    return { dev: kernelDev(major, minor), ino: stat.ino };
  } catch {
    return undefined;
  }
}

/** One file: its ELF (kept open), unwind table and symbols, each made on first use. */
export class StackFile {
  readonly identity: FileIdentity;
  /** The path as the process names it. */
  readonly path: string;
  readonly #elf: ElfFile;
  #table: UnwindTable | undefined | null = null;
  #symbols: SymbolIndex | undefined | null = null;
  #dwarf: DwarfReader | undefined | null = null;
  #lines: LineTable | undefined | null = null;

  constructor(identity: FileIdentity, path: string, elf: ElfFile) {
    this.identity = identity;
    this.path = path;
    this.#elf = elf;
  }

  /** The file name alone, as frames show it. */
  get object(): string {
    return this.path.slice(this.path.lastIndexOf('/') + 1);
  }

  get elf(): ElfFile {
    return this.#elf;
  }

  /**
   * The unwind table from its .eh_frame and .debug_frame, and for a Go program from its
   * pclntab where those do not cover its code: a stripped one has no .debug_frame, and cgo's
   * C parts bring an .eh_frame of their own (undefined when it has none of those).
   */
  table(): UnwindTable | undefined {
    if (this.#table === null) {
      const elf = this.#elf;
      const toFileOffset = (vaddr: bigint) => elf.vaddrToFileOffset(vaddr);
      const compiled = (rows: Iterable<CfiRowInput>) => {
        const table = compileUnwindTable(rows, toFileOffset);
        return table.starts.length === 0 ? undefined : table;
      };
      try {
        const frames = new CallFrames(dwarfSections(elf), {
          dataRelBase: elf.section('.got')?.addr,
        });
        this.#table = compiled(chain(frames.rows(), goFrameRows(elf)));
      } catch {
        // Call frame information it cannot read: the pclntab's rows alone.
        try {
          this.#table = compiled(goFrameRows(elf));
        } catch {
          this.#table = undefined;
        }
      }
    }
    return this.#table;
  }

  /**
   * The function holding `vaddr`: from the file's own symbols, or from its separate debug
   * file's .symtab when the file itself is stripped of one.
   */
  functionAt(vaddr: bigint): FunctionSymbol | undefined {
    if (this.#symbols === null) {
      try {
        this.#symbols = targetSymbols(this.#elf, this.path);
      } catch {
        this.#symbols = undefined;
      }
    }
    return this.#symbols?.containing(vaddr);
  }

  /** Where `vaddr` is in the source (file and line), when the file's debug info says. */
  sourceAt(vaddr: bigint): { file: string; line: number } | undefined {
    if (this.#lines === null) {
      this.#lines = undefined;
      try {
        const info = lookupDebugInfo(this.#elf, this.path);
        if (isDebugInfo(info) && info.lines.present) this.#lines = info.lines;
      } catch {
        // no line tables
      }
    }
    try {
      const found = this.#lines?.locationOf(vaddr);
      return found === undefined || found.line === 0
        ? undefined
        : { file: found.file, line: found.line };
    } catch {
      return undefined;
    }
  }

  /**
   * The functions inlined at `vaddr`, innermost first, named as gdb names them (from DWARF,
   * qualified by their namespaces and classes); empty when nothing is inlined there or there
   * is no DWARF (the file's own, or its debug file's).
   */
  inlinedAt(vaddr: bigint): string[] {
    if (this.#dwarf === null) {
      this.#dwarf = undefined;
      try {
        const info = lookupDebugInfo(this.#elf, this.path);
        if (isDebugInfo(info)) this.#dwarf = info.dwarf();
        else {
          const own = DwarfReader.fromElf(this.#elf);
          if (own.hasInfo) this.#dwarf = own;
        }
      } catch {
        // no DWARF
      }
    }
    const dwarf = this.#dwarf;
    if (dwarf === undefined) return [];
    const found: string[] = [];
    try {
      for (let c = dwarf.inlineContextAt(vaddr); c !== undefined; c = c.caller) {
        if (c.kind !== 'inlined') break;
        found.push(qualifiedName(dwarf, c.originOffset) ?? c.name ?? '??');
      }
    } catch {
      return [];
    }
    return found;
  }

  close(): void {
    this.#elf.close();
  }
}

/** The files of one aggregation, by identity, and by the id the kernel's tables key them. */
export class StackFiles {
  readonly #files = new Map<string, StackFile | undefined>();
  readonly #ids = new Map<number, StackFile>();

  get(identity: FileIdentity): StackFile | undefined {
    return this.#files.get(identityKey(identity));
  }

  /** Whether the identity was tried already (found or not). */
  tried(identity: FileIdentity): boolean {
    return this.#files.has(identityKey(identity));
  }

  byId(id: number): StackFile | undefined {
    return this.#ids.get(id);
  }

  setId(id: number, file: StackFile): void {
    this.#ids.set(id, file);
  }

  /**
   * The file a process maps at `entry`: through /proc/PID/map_files (the mapped inode even
   * when the path now names another file), else its path under /proc/PID/root when it is still
   * the same file. Undefined when neither can be opened.
   */
  fromProcess(pid: number, entry: MapEntry): StackFile | undefined {
    const identity = { dev: kernelDev(entry.devMajor, entry.devMinor), ino: entry.inode };
    const key = identityKey(identity);
    if (this.#files.has(key)) return this.#files.get(key);
    const range = `${entry.start.toString(16)}-${entry.end.toString(16)}`;
    const candidates = [`/proc/${pid}/map_files/${range}`, `/proc/${pid}/root${entry.path}`];
    if (!entry.deleted) candidates.push(entry.path);
    const file = this.#open(identity, entry.path, candidates);
    this.#files.set(key, file);
    return file;
  }

  /**
   * A file by path (a command's program or library, before it runs): identity from stat,
   * shown by its real path, as the process's memory map will name it.
   */
  fromPath(path: string, shownAs?: string): StackFile | undefined {
    const identity = identityOf(path);
    if (identity === undefined) return undefined;
    const key = identityKey(identity);
    if (this.#files.has(key)) return this.#files.get(key);
    let shown = shownAs ?? path;
    try {
      if (shownAs === undefined) shown = realpathSync(path);
    } catch {
      // shown as given
    }
    const file = this.#open(identity, shown, [path]);
    this.#files.set(key, file);
    return file;
  }

  /** Remember that a file could not be opened (its frames stay unnamed and end the stack). */
  markMissing(identity: FileIdentity): void {
    const key = identityKey(identity);
    if (!this.#files.has(key)) this.#files.set(key, undefined);
  }

  #open(identity: FileIdentity, shown: string, candidates: string[]): StackFile | undefined {
    for (const candidate of candidates) {
      const found = identityOf(candidate);
      if (found === undefined || found.ino !== identity.ino) continue;
      // Device numbers of overlay and btrfs files differ between stat and the mapping.
      try {
        return new StackFile(identity, shown, openElf(candidate));
      } catch {
        // not an ELF file we can read: the next candidate
      }
    }
    return undefined;
  }

  close(): void {
    for (const file of this.#files.values()) file?.close();
    this.#files.clear();
    this.#ids.clear();
  }
}

/** DW_TAG_namespace, structure_type, class_type, union_type: scopes that qualify a name. */
const SCOPES: ReadonlySet<number> = new Set([
  0x39,
  DW_TAG.structure_type,
  DW_TAG.class_type,
  DW_TAG.union_type,
]);

/** A function's name with its namespaces and classes (`calc::Adder::add`), from its DIE. */
function qualifiedName(dwarf: DwarfReader, offset: number): string | undefined {
  const die = dwarf.info.dieAt(offset);
  if (die === undefined) return undefined;
  const name = dwarf.info.name(die);
  if (name === undefined) return undefined;
  const parts = [name];
  for (let scope = die.parent; scope !== undefined; scope = scope.parent) {
    if (!SCOPES.has(scope.tag)) continue;
    parts.unshift(dwarf.info.name(scope) ?? '(anonymous namespace)');
  }
  return parts.join('::');
}

/** The pid a process has in its own pid namespace (its perf map is named after it). */
export function namespacePid(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const line = /^NSpid:\s*(.*)$/m.exec(status)?.[1];
    const last = line?.trim().split(/\s+/).at(-1);
    return last === undefined ? pid : Number(last);
  } catch {
    return pid;
  }
}
