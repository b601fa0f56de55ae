import {
  cloneName,
  type DemangledNames,
  demangle,
  demangleNameStrings,
  demangleNames,
  looksMangled,
  withoutParameters,
} from './demangle.js';
import {
  type ElfFile,
  type ElfSymbol,
  type FunctionColumns,
  goFunctionColumns,
  joinedColumns,
  SYMBOL_BINDINGS,
  type SymbolBinding,
  splitSymbolVersion,
} from './elf/index.js';

/** A function as `list` shows it and specs resolve to: one per (name, address). */
export interface FunctionSymbol {
  /** The symbol's name as the file stores it (mangled, for C++ and Rust), without version. */
  readonly name: string;
  /** The demangled name of a C++ or Rust symbol (`ns::Class::method(int)`), else undefined. */
  readonly demangled: string | undefined;
  /** Symbol version from .dynsym (`GLIBC_2.2.5`), when the function is exported. */
  readonly version: string | undefined;
  readonly versionHidden: boolean;
  readonly vaddr: bigint;
  /** Where the function's first byte is in the file (undefined if no PT_LOAD holds it). */
  readonly fileOffset: bigint | undefined;
  readonly sizeBytes: bigint;
  readonly type: 'func' | 'ifunc';
  readonly binding: SymbolBinding;
}

export interface DisplayNameOptions {
  /** Show a C++ or Rust name demangled (default true); false shows the name as stored. */
  readonly demangle?: boolean | undefined;
}

/** The name to show for a function: demangled unless told not to, then `@@VERSION` if any. */
export function functionDisplayName(fn: FunctionSymbol, options: DisplayNameOptions = {}): string {
  const name = options.demangle === false ? fn.name : (fn.demangled ?? fn.name);
  if (fn.version === undefined) return name;
  return `${name}${fn.versionHidden ? '@' : '@@'}${fn.version}`;
}

/** Whitespace takes no part in comparing C++ names: `f(int,char*)` is `f(int, char*)`. */
function compactName(name: string): string {
  return name.replace(/\s+/g, '');
}

/**
 * The forms of a demangled name demangledNamed() finds it by, compacted: the whole name, the
 * name a GCC clone is of, and that name without its parameter list. None for a name that is
 * not mangled.
 */
function demangledKeys(demangled: string | undefined): string[] {
  if (demangled === undefined) return [];
  const keys = [compactName(demangled)];
  const base = cloneName(demangled)?.base ?? demangled;
  if (base !== demangled) keys.push(compactName(base));
  const bare = withoutParameters(base);
  if (bare !== undefined) keys.push(compactName(bare));
  return keys;
}

/**
 * Identifiers the mangled name of any function demangled as `name` (compacted) spells out:
 * those of the parts of its qualified name (`node`, `Environment` of
 * `node::Environment::Environment(...)`, in `_ZN4node11EnvironmentC2E...`, as in Rust's
 * legacy and v0 manglings), not what is inside <>, (), [] or {} (template arguments and
 * parameters may be written as back-references), nor operator names, nor the parts of
 * `std` the mangling abbreviates (`St`, `Sa`, `Ss`...). Empty when none is certain.
 */
export function identifiersOf(name: string): string[] {
  const found: string[] = [];
  let depth = 0;
  let part = '';
  const take = () => {
    const word = /^~?([A-Za-z_][A-Za-z0-9_]*)/.exec(part)?.[1];
    if (word !== undefined && !word.startsWith('operator') && !ABBREVIATED.has(word)) {
      found.push(word);
    }
    part = '';
  };
  for (let i = 0; i < name.length; i++) {
    const ch = name[i]!;
    if ('<([{'.includes(ch)) depth++;
    else if ('>)]}'.includes(ch)) depth = Math.max(0, depth - 1);
    else if (depth === 0 && ch === ':' && name[i + 1] === ':') {
      take();
      i++;
      continue;
    }
    // A part's own text, but for what its brackets hold (kept as a mark: `f(`).
    if (depth === 0 || (depth === 1 && '<([{'.includes(ch))) part += ch;
  }
  take();
  return found;
}

/** Names of `std` the Itanium mangling writes as abbreviations (St, Sa, Sb, Ss, Si, So, Sd). */
const ABBREVIATED = new Set([
  'std',
  'allocator',
  'basic_string',
  'string',
  'char_traits',
  'basic_istream',
  'basic_ostream',
  'basic_iostream',
  'istream',
  'ostream',
  'iostream',
]);

const STT_GNU_IFUNC = 10;

interface Version {
  readonly name: string;
  readonly hidden: boolean;
}

export interface SymbolIndexOptions {
  /**
   * The file's separate debug file (an `objcopy --only-keep-debug` copy, found by build-id or
   * .gnu_debuglink, with the same addresses): its .symtab is read when the file has none of
   * its own, as gdb, perf and bpftrace do. Addresses still map to file offsets through the
   * file's own segments, and versions come from its .dynsym.
   */
  readonly debugFile?: { readonly elf: ElfFile; readonly path: string } | undefined;
  /**
   * The file's MiniDebugInfo (see miniDebugInfo()), taken where neither the file nor a debug
   * file has a .symtab: its .symtab's functions with .dynsym's, as gdb and perf list them.
   */
  readonly miniDebugInfo?: ElfFile | undefined;
  /**
   * Lookups by name (named(), clonesOf(), demangledNamed()) answered by scans before maps of
   * every name are made (LOOKUPS_BEFORE_MAPS by default): 0 makes the maps at the first.
   */
  readonly lookupsBeforeMaps?: number | undefined;
}

/** The suffix of the part of a function GCC moved its rarely run code to. */
const COLD_SUFFIX = '.cold';
const COLD_BYTES = new TextEncoder().encode(COLD_SUFFIX);
const NO_POSITIONS: readonly number[] = [];
const UTF8 = new TextEncoder();
/**
 * Lookups by name answered by a scan of the names' bytes before a map of every name is made:
 * a probe's spec looks up a name or two, and a map of node's 86,000 names took 100 ms to make
 * (500 ms by demangled name); a scan of them takes a few.
 */
const LOOKUPS_BEFORE_MAPS = 16;

/** True when bytes [start, end) of `bytes` end with `suffix`. */
function endsWithBytes(bytes: Uint8Array, start: number, end: number, suffix: Uint8Array): boolean {
  return end - start >= suffix.length && bytesAt(bytes, end - suffix.length, suffix);
}

/** True when `bytes` holds `word` at `at` (the caller knows it fits). */
function bytesAt(bytes: Uint8Array, at: number, word: Uint8Array): boolean {
  for (let i = 0; i < word.length; i++) if (bytes[at + i] !== word[i]) return false;
  return true;
}

/**
 * The functions of one ELF file, from .symtab when present (with versions taken from the
 * matching .dynsym entries), else from its separate debug file's .symtab, else from .dynsym
 * alone (the file is stripped); sorted by address then name, one per (name, address).
 *
 * A listing of /usr/bin/node has 86,000 functions, so the index is kept as columns: sorted row
 * numbers into the ELF reader's FunctionColumns, with per-row accessors for renderers that write
 * bytes. FunctionSymbol objects are built only when asked for (`function(k)`, `functions`).
 */
export class SymbolIndex {
  /** True when only .dynsym (exported functions) was available. */
  readonly stripped: boolean;
  /**
   * True when the functions come from a Go program's `.gopclntab` (its symbol table stripped):
   * every function the Go toolchain built, none of cgo's C.
   */
  readonly goPclntab: boolean;
  /** The debug file whose .symtab the functions come from, when they come from one. */
  readonly debugFile: string | undefined;
  readonly #elf: ElfFile;
  /** The file whose symbol table is read: the file itself or its debug file. */
  readonly #symbolFile: ElfFile;
  readonly #columns: FunctionColumns;
  /** Column rows, sorted and without repeats. */
  readonly #order: Uint32Array;
  /** The address of each sorted row, for binary search. */
  readonly #addresses: Float64Array;
  /** Versions of exported functions by name, when .symtab needs them from .dynsym. */
  readonly #exported: Map<string, { address: number; version: Version }[]> | undefined;
  readonly #loads: readonly { start: number; end: number; offset: number }[];
  #lastLoad: { start: number; end: number; offset: number } | undefined;
  #objects: (FunctionSymbol | undefined)[] | undefined;
  #all: readonly FunctionSymbol[] | undefined;
  #byName: Map<string, number[]> | undefined;
  /** Lookups by name so far: the first few scan the names' bytes, later ones a map. */
  #lookups = 0;
  readonly #lookupsBeforeMaps: number;
  /** Positions of the `.cold` parts by the stored name they are parts of (coldPartsOf()). */
  #coldParts: Map<string, number[]> | undefined;
  /** Positions of GCC clones by the stored name they are clones of. */
  #byCloneBase: Map<string, number[]> | undefined;
  /** Demangled names by position: a string, `null` when not mangled, undefined until asked. */
  #demangled: (string | null | undefined)[] | undefined;
  /** Every demangled name as bytes, by position, once demangleAll() ran. */
  #demangledBytes: DemangledNames | undefined;
  /** Positions by demangled name and by demangled name without parameters, compacted. */
  #byDemangled: Map<string, number[]> | undefined;

  constructor(elf: ElfFile, options: SymbolIndexOptions = {}) {
    this.#elf = elf;
    this.#lookupsBeforeMaps = options.lookupsBeforeMaps ?? LOOKUPS_BEFORE_MAPS;
    const debug = options.debugFile;
    const fromDebug = !elf.hasSymtab && debug !== undefined && debug.elf.hasSymtab;
    const mini =
      !elf.hasSymtab && !fromDebug && options.miniDebugInfo?.hasSymtab === true
        ? options.miniDebugInfo
        : undefined;
    this.#symbolFile = fromDebug ? debug.elf : (mini ?? elf);
    this.debugFile = fromDebug ? debug.path : mini?.path;
    // A Go program stripped of its symbol table still names all its functions in its pclntab.
    const go = this.#symbolFile.hasSymtab ? undefined : goFunctionColumns(elf);
    this.goPclntab = go !== undefined;
    this.stripped = !this.#symbolFile.hasSymtab && go === undefined;
    this.#columns =
      go ??
      (mini === undefined
        ? this.#symbolFile.functionColumns(this.stripped ? 'dynsym' : 'symtab')
        : joinedColumns(elf.functionColumns('dynsym'), mini.functionColumns('symtab')));
    // .dynsym matters beside .symtab only for symbol versions, which exist for a file's own
    // functions only when it defines versions (.gnu.version_d: libc, not a typical program).
    if (!this.stripped && elf.section('.gnu.version_d') !== undefined) {
      this.#exported = exportedVersions(elf.functionColumns('dynsym'));
    }
    this.#loads = elf.segments
      .filter((s) => s.typeName === 'LOAD')
      .map((s) => ({
        start: Number(s.vaddr),
        end: Number(s.vaddr + s.fileSize),
        offset: Number(s.offset),
      }));
    this.#order = sortUnique(this.#columns);
    this.#addresses = Float64Array.from(this.#order, (row) => this.#columns.address[row]!);
  }

  /** How many functions. */
  get length(): number {
    return this.#order.length;
  }

  /** All functions as objects, sorted (built on first use). */
  get functions(): readonly FunctionSymbol[] {
    this.#all ??= Array.from({ length: this.length }, (_, k) => this.function(k));
    return this.#all;
  }

  /** The k-th function in address order. */
  function(k: number): FunctionSymbol {
    this.#objects ??= new Array(this.length);
    let fn = this.#objects[k];
    if (fn === undefined) {
      fn = this.#materialize(this.#order[k]!, this.demangledAt(k));
      this.#objects[k] = fn;
    }
    return fn;
  }

  // Per-row accessors, for renderers that write bytes without building objects.

  vaddrAt(k: number): number {
    return this.#addresses[k]!;
  }

  sizeAt(k: number): number {
    return this.#columns.size[this.#order[k]!]!;
  }

  fileOffsetAt(k: number): number | undefined {
    const address = this.#addresses[k]!;
    let load = this.#lastLoad;
    if (load === undefined || address < load.start || address >= load.end) {
      load = this.#loads.find((l) => address >= l.start && address < l.end);
      if (load === undefined) return undefined;
      this.#lastLoad = load;
    }
    return address - load.start + load.offset;
  }

  bindingAt(k: number): SymbolBinding {
    return SYMBOL_BINDINGS[this.#columns.info[this.#order[k]!]! >> 4]!;
  }

  typeAt(k: number): 'func' | 'ifunc' {
    return (this.#columns.info[this.#order[k]!]! & 0xf) === STT_GNU_IFUNC ? 'ifunc' : 'func';
  }

  /** The length in bytes of the name as the file stores it. */
  nameLengthAt(k: number): number {
    const row = this.#order[k]!;
    return this.#columns.nameEnd[row]! - this.#columns.nameStart[row]!;
  }

  /** Copy the stored name's bytes into `target` at `offset`; returns how many. */
  copyNameAt(k: number, target: Uint8Array, offset: number): number {
    const row = this.#order[k]!;
    const c = this.#columns;
    const start = c.nameStart[row]!;
    const end = c.nameEnd[row]!;
    return copyBytes(c.strings, start, end, target, offset);
  }

  /**
   * The demangled name of the k-th function, or undefined when its name is not a mangled C++
   * or Rust name. Demangled on first use and kept (a name takes about 5 µs to demangle), or
   * read from what demangleAll() made.
   */
  demangledAt(k: number): string | undefined {
    this.#demangled ??= new Array(this.length);
    let known = this.#demangled[k];
    if (known === undefined) {
      const all = this.#demangledBytes;
      if (all !== undefined) {
        const start = all.start[k]!;
        known = start < 0 ? null : utf8(all.bytes, start, all.end[k]!);
      } else {
        const row = this.#order[k]!;
        // Most names of a C program are not mangled: look at the bytes before building a string.
        const c = this.#columns;
        const start = c.nameStart[row]!;
        const mangled =
          c.nameEnd[row]! - start > 2 &&
          c.strings[start] === 0x5f &&
          looksMangled(this.#nameOf(row));
        known = mangled ? (demangle(this.#nameOf(row)) ?? null) : null;
      }
      this.#demangled[k] = known;
    }
    return known ?? undefined;
  }

  /**
   * Demangle every name at once (demangleNames(): from the string table's bytes, into one
   * buffer), for callers about to read them all: a listing, a pattern, a demangled name.
   */
  demangleAll(): void {
    if (this.#demangledBytes !== undefined) return;
    const { starts, ends } = this.#nameRanges(this.length, (k) => k);
    this.#demangledBytes = demangleNames(this.#columns.strings, starts, ends);
  }

  /**
   * Demangle the names at these positions at once (as demangleAll() does, about twice as
   * fast as one by one), for a caller about to read those (the functions a pattern matched).
   */
  demangleSome(positions: readonly number[]): void {
    if (this.#demangledBytes !== undefined) return;
    this.#demangled ??= new Array(this.length);
    const wanted = positions.filter((k) => this.#demangled![k] === undefined);
    const { starts, ends } = this.#nameRanges(wanted.length, (i) => wanted[i]!);
    const some = demangleNameStrings(this.#columns.strings, starts, ends);
    wanted.forEach((k, i) => {
      this.#demangled![k] = some[i]!;
    });
  }

  /** Where in the string table the names to demangle are: `count` of them, the i-th at `at(i)`. */
  #nameRanges(
    count: number,
    at: (i: number) => number,
  ): { starts: Uint32Array; ends: Uint32Array } {
    const c = this.#columns;
    const starts = new Uint32Array(count);
    const ends = new Uint32Array(count);
    for (let i = 0; i < count; i++) {
      const row = this.#order[at(i)]!;
      const start = c.nameStart[row]!;
      let end = c.nameEnd[row]!;
      // .symtab may write a version into the name (`_ZSt4cout@GLIBCXX_3.4`): not demangled.
      if (!this.stripped && c.strings[start] === 0x5f) {
        for (let j = start; j < end; j++) {
          if (c.strings[j] === 0x40) {
            end = j;
            break;
          }
        }
      }
      starts[i] = start;
      ends[i] = end;
    }
    return { starts, ends };
  }

  /**
   * The length in UTF-8 bytes of the k-th demangled name, or -1 when it is not mangled: from
   * every name's bytes once demangleAll() ran, else from the name (see demangleSome()).
   */
  demangledLengthAt(k: number): number {
    const all = this.#demangledBytes;
    if (all === undefined) {
      const demangled = this.demangledAt(k);
      return demangled === undefined ? -1 : Buffer.byteLength(demangled);
    }
    return all.start[k]! < 0 ? -1 : all.end[k]! - all.start[k]!;
  }

  /** Copy the k-th demangled name's bytes into `target` at `offset`; returns how many. */
  copyDemangledAt(k: number, target: Uint8Array, offset: number): number {
    const all = this.#demangledBytes;
    if (all === undefined) {
      const demangled = this.demangledAt(k);
      if (demangled === undefined) return 0;
      return Buffer.from(target.buffer, target.byteOffset, target.byteLength).write(
        demangled,
        offset,
      );
    }
    const start = all.start[k]!;
    if (start < 0) return 0;
    return copyBytes(all.bytes, start, all.end[k]!, target, offset);
  }

  /**
   * True when the k-th function's name matches `pattern`: its stored name, its name with the
   * version, its demangled name, or its demangled name without the parameter list; for a
   * GCC clone (`helper.isra.0`, `ns::f(int) [clone .cold]`), the same of the name it is a
   * clone of. Without `demangle`, its demangled forms are not tried (it holds none of a
   * glob's requiredFragments()).
   */
  matchesAt(k: number, pattern: RegExp, demangle = true): boolean {
    const row = this.#order[k]!;
    const name = this.#nameOf(row);
    if (pattern.test(name)) return true;
    const suffix = this.versionSuffixAt(k);
    if (suffix !== '' && pattern.test(`${name}${suffix}`)) return true;
    const demangled = demangle ? this.demangledAt(k) : undefined;
    if (demangled === undefined) {
      const clone = name.includes('.') ? cloneName(name) : undefined;
      return clone !== undefined && pattern.test(clone.base);
    }
    if (pattern.test(demangled)) return true;
    const base = cloneName(demangled)?.base ?? demangled;
    if (base !== demangled && pattern.test(base)) return true;
    const bare = withoutParameters(base);
    return bare !== undefined && pattern.test(bare);
  }

  /**
   * matchesAt() for a pattern that cannot match a demangled name (see mangledOnly()): the
   * stored name and its versioned name, without demangling, unless the name is a GCC clone
   * (`_ZN3app3runEv.cold`), whose base name matchesAt() also tries. `openEnd`: the pattern
   * ends in `*`, so it matches a clone's name whenever it matches its base name.
   */
  matchesStoredAt(k: number, pattern: RegExp, openEnd = false): boolean {
    const name = this.#nameOf(this.#order[k]!);
    if (pattern.test(name)) return true;
    const suffix = this.versionSuffixAt(k);
    if (suffix !== '' && pattern.test(`${name}${suffix}`)) return true;
    return !openEnd && name.includes('.') && this.matchesAt(k, pattern);
  }

  /**
   * The functions a name given by a user means, as probes take it: those stored under it and
   * their GCC clones and parts; else those whose demangled name it is, with or without the
   * parameter list (with their clones and parts). Callers leave out the .cold parts they must.
   */
  functionsCalled(name: string): readonly FunctionSymbol[] {
    const stored = this.storedAs(name);
    return stored.length > 0 ? stored : this.demangledNamed(name);
  }

  /** Functions stored under `name`, with their GCC clones and parts: functionsCalled()'s first. */
  storedAs(name: string): readonly FunctionSymbol[] {
    return [...this.named(name), ...this.clonesOf(name)];
  }

  /**
   * The GCC clones and parts of the function stored as `name` (`helper.isra.0`,
   * `helper.cold`, `_ZN3app4Calc3addEi.constprop.0`): what gdb finds by the plain name too.
   */
  clonesOf(name: string): readonly FunctionSymbol[] {
    if (this.#byCloneBase === undefined && !this.#manyLookups()) {
      // One lookup: the names that begin `${name}.`, by their bytes (a string for each of a
      // large program's names, and a map of them all, cost 30 ms for node's 86,000).
      const found: FunctionSymbol[] = [];
      this.#eachStartingWith(`${name}.`, (k) => {
        if (cloneName(this.#nameOf(this.#order[k]!))?.base === name) found.push(this.function(k));
      });
      return found;
    }
    if (this.#byCloneBase === undefined) {
      this.#byCloneBase = new Map();
      for (let k = 0; k < this.length; k++) {
        const stored = this.#nameOf(this.#order[k]!);
        if (!stored.includes('.')) continue;
        const clone = cloneName(stored);
        if (clone === undefined) continue;
        const list = this.#byCloneBase.get(clone.base);
        if (list === undefined) this.#byCloneBase.set(clone.base, [k]);
        else list.push(k);
      }
    }
    return (this.#byCloneBase.get(name) ?? []).map((k) => this.function(k));
  }

  /**
   * Functions whose demangled name is `name`, with or without the parameter list, spaces
   * aside: `ns::Class::method` finds every overload, `ns::Class::method(int)` one of them,
   * and their GCC clones and parts (`ns::Class::method(int) [clone .isra.0]`).
   */
  demangledNamed(name: string): readonly FunctionSymbol[] {
    const key = compactName(name);
    const tokens = this.#byDemangled === undefined ? identifiersOf(key) : [];
    if (tokens.length > 0 && !this.#manyLookups()) {
      // One lookup: only the stored names that hold every identifier of the name are
      // demangled (demangling all of node's 86,000 took 500 ms); see identifiersOf().
      const candidates: number[] = [];
      this.#eachHoldingAll(tokens, (k) => candidates.push(k));
      this.demangleSome(candidates);
      return candidates
        .filter((k) => demangledKeys(this.demangledAt(k)).includes(key))
        .map((k) => this.function(k));
    }
    if (this.#byDemangled === undefined) {
      this.demangleAll();
      this.#byDemangled = new Map();
      for (let k = 0; k < this.length; k++) {
        for (const found of demangledKeys(this.demangledAt(k))) {
          const list = this.#byDemangled.get(found);
          if (list === undefined) this.#byDemangled.set(found, [k]);
          else if (list[list.length - 1] !== k) list.push(k);
        }
      }
    }
    return (this.#byDemangled.get(key) ?? []).map((k) => this.function(k));
  }

  /** What follows the stored name in the display name: `@@GLIBC_2.2.5`, or ''. */
  versionSuffixAt(k: number): string {
    const version = this.#versionOf(this.#order[k]!);
    return version === undefined ? '' : `${version.hidden ? '@' : '@@'}${version.name}`;
  }

  /** Functions with this exact name (several when static functions in different files share it). */
  named(name: string): readonly FunctionSymbol[] {
    if (this.#byName === undefined && !this.#manyLookups()) {
      // One lookup: the names that begin with it, by their bytes, then each as #nameOf()
      // gives it (a version written into it left out); see clonesOf().
      const found: FunctionSymbol[] = [];
      this.#eachStartingWith(name, (k) => {
        if (this.#nameOf(this.#order[k]!) === name) found.push(this.function(k));
      });
      return found;
    }
    if (this.#byName === undefined) {
      this.#byName = new Map();
      for (let k = 0; k < this.length; k++) {
        const key = this.#nameOf(this.#order[k]!);
        const list = this.#byName.get(key);
        if (list === undefined) this.#byName.set(key, [k]);
        else list.push(k);
      }
    }
    return (this.#byName.get(name) ?? []).map((k) => this.function(k));
  }

  /**
   * The functions stored as `${name}.cold`: the part GCC moved a function's rarely run code
   * to. Asked for every function of a pattern, so the names that have one are known first and
   * the others cost no lookup.
   */
  coldPartsOf(name: string): readonly FunctionSymbol[] {
    if (this.#coldParts === undefined) {
      // By the bytes of each name: a string for each of a large program's names, and a map of
      // them all by name, cost more than the rest of finding a function's returns.
      this.#coldParts = new Map();
      const c = this.#columns;
      for (let k = 0; k < this.length; k++) {
        const row = this.#order[k]!;
        if (!endsWithBytes(c.strings, c.nameStart[row]!, c.nameEnd[row]!, COLD_BYTES)) continue;
        const base = this.#nameOf(row).slice(0, -COLD_SUFFIX.length);
        const list = this.#coldParts.get(base);
        if (list === undefined) this.#coldParts.set(base, [k]);
        else list.push(k);
      }
    }
    return (this.#coldParts.get(name) ?? NO_POSITIONS).map((k) => this.function(k));
  }

  /** All functions at one address (aliases such as malloc and __libc_malloc). */
  at(vaddr: bigint): readonly FunctionSymbol[] {
    const address = Number(vaddr);
    const found: FunctionSymbol[] = [];
    for (
      let k = this.#lowerBound(address);
      k < this.length && this.#addresses[k] === address;
      k++
    ) {
      found.push(this.function(k));
    }
    return found;
  }

  /** The function whose [start, start + size) holds the address, preferring exported names. */
  containing(vaddr: bigint): FunctionSymbol | undefined {
    const address = Number(vaddr);
    let best: FunctionSymbol | undefined;
    // Walk back over functions that start at or before the address; nested or overlapping
    // symbols are rare, so this loop runs a handful of times at most.
    for (let k = this.#lowerBound(address + 1) - 1, steps = 0; k >= 0 && steps < 64; k--, steps++) {
      const start = this.#addresses[k]!;
      if (best !== undefined && start < Number(best.vaddr)) break;
      const size = this.sizeAt(k);
      if (address < start + (size === 0 ? 1 : size)) {
        const fn = this.function(k);
        if (best === undefined || preferName(fn, best)) best = fn;
      }
    }
    return best;
  }

  /** Any defined or imported symbol with this name, to explain why a name is not a function. */
  anySymbolNamed(name: string): ElfSymbol | undefined {
    const table = this.stripped ? 'dynsym' : 'symtab';
    return (
      this.#symbolFile.symbols(table).find((sym) => sym.name === name) ??
      this.#elf.symbols('dynsym').find((sym) => sym.name === name)
    );
  }

  #versionOf(row: number): Version | undefined {
    const c = this.#columns;
    if (this.stripped) return c.version(row);
    if (this.#exported === undefined) return undefined;
    const name = c.name(row);
    if (name.includes('@')) return undefined; // the version is written into the name
    return this.#exported.get(name)?.find((e) => e.address === c.address[row])?.version;
  }

  /**
   * Whether names have been looked up often enough (lookupsBeforeMaps) to be worth a map of
   * them all; counts this lookup.
   */
  #manyLookups(): boolean {
    return ++this.#lookups > this.#lookupsBeforeMaps;
  }

  /** Calls `found` with each position whose stored name's bytes begin with `prefix`'s. */
  #eachStartingWith(prefix: string, found: (k: number) => void): void {
    const wanted = UTF8.encode(prefix);
    if (wanted.length === 0) return;
    const c = this.#columns;
    for (let k = 0; k < this.length; k++) {
      const row = this.#order[k]!;
      const start = c.nameStart[row]!;
      if (c.nameEnd[row]! - start >= wanted.length && bytesAt(c.strings, start, wanted)) found(k);
    }
  }

  /**
   * The positions of the functions a glob (and `pattern`, its globToRegExp()) matches, as
   * matchesAt() matches them: a glob that can match only stored names (mangledOnly()) is
   * matched without demangling, and one with requiredFragments() demangles only the names
   * that hold them; another demangles every name.
   */
  matching(glob: string, pattern: RegExp): number[] {
    const stored = mangledOnly(glob);
    const fragments = stored ? [] : requiredFragments(glob);
    let could: Uint8Array | undefined;
    if (fragments.length > 0) {
      const holding: number[] = [];
      this.#eachHoldingAll(fragments, (k) => holding.push(k));
      could = new Uint8Array(this.length);
      for (const k of holding) could[k] = 1;
      this.demangleSome(holding);
    } else if (!stored) this.demangleAll();
    const openEnd = glob.endsWith('*');
    const matched: number[] = [];
    for (let k = 0; k < this.length; k++) {
      if (
        stored
          ? this.matchesStoredAt(k, pattern, openEnd)
          : this.matchesAt(k, pattern, could === undefined || could[k] === 1)
      ) {
        matched.push(k);
      }
    }
    return matched;
  }

  /** Calls `found` with each position whose stored name's bytes hold every one of `words`'. */
  #eachHoldingAll(words: readonly string[], found: (k: number) => void): void {
    const wanted = words.map((word) => UTF8.encode(word));
    const c = this.#columns;
    const holds = (start: number, end: number, word: Uint8Array) => {
      for (let at = start; at + word.length <= end; at++) {
        if (c.strings[at] === word[0] && bytesAt(c.strings, at, word)) return true;
      }
      return false;
    };
    for (let k = 0; k < this.length; k++) {
      const row = this.#order[k]!;
      const start = c.nameStart[row]!;
      const end = c.nameEnd[row]!;
      if (wanted.every((word) => holds(start, end, word))) found(k);
    }
  }

  /** A row's name without any version written into it (names only: no object is built). */
  #nameOf(row: number): string {
    const name = this.#columns.name(row);
    return this.stripped ? name : (splitSymbolVersion(name)?.name ?? name);
  }

  #materialize(row: number, demangled: string | undefined): FunctionSymbol {
    const c = this.#columns;
    const exact =
      c.address[row]! <= Number.MAX_SAFE_INTEGER && c.size[row]! <= Number.MAX_SAFE_INTEGER;
    const elfSymbol = exact ? undefined : c.symbol(row);
    const vaddr = elfSymbol?.value ?? BigInt(c.address[row]!);
    let name = c.name(row);
    let version = this.#versionOf(row);
    const split = this.stripped ? undefined : splitSymbolVersion(name);
    if (split !== undefined) {
      name = split.name;
      version = { name: split.version, hidden: split.hidden };
    }
    const load = this.#loads.find((l) => c.address[row]! >= l.start && c.address[row]! < l.end);
    return {
      name,
      demangled,
      version: version?.name,
      versionHidden: version?.hidden ?? false,
      vaddr,
      fileOffset: load === undefined ? undefined : vaddr - BigInt(load.start) + BigInt(load.offset),
      sizeBytes: elfSymbol?.size ?? BigInt(c.size[row]!),
      type: (c.info[row]! & 0xf) === STT_GNU_IFUNC ? 'ifunc' : 'func',
      binding: SYMBOL_BINDINGS[c.info[row]! >> 4]!,
    };
  }

  #lowerBound(address: number): number {
    let lo = 0;
    let hi = this.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#addresses[mid]! < address) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** Copy bytes [start, end) of `from` into `to` at `offset`: a loop (names are short). */
function copyBytes(
  from: Uint8Array,
  start: number,
  end: number,
  to: Uint8Array,
  offset: number,
): number {
  for (let i = start; i < end; i++) to[offset + i - start] = from[i]!;
  return end - start;
}

/** The UTF-8 text of bytes [start, end). */
function utf8(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('utf8');
}

/** The versions .dynsym gives exported functions, by name. */
function exportedVersions(
  dynamic: FunctionColumns,
): Map<string, { address: number; version: Version }[]> {
  const exported = new Map<string, { address: number; version: Version }[]>();
  for (let row = 0; row < dynamic.count; row++) {
    const version = dynamic.version(row);
    if (version === undefined) continue;
    const name = dynamic.name(row);
    const entry = { address: dynamic.address[row]!, version };
    const list = exported.get(name);
    if (list === undefined) exported.set(name, [entry]);
    else list.push(entry);
  }
  return exported;
}

/** The name to show for an address with several: global over weak over local, then shortest. */
export function preferName(a: FunctionSymbol, b: FunctionSymbol): boolean {
  const rank = (fn: FunctionSymbol) =>
    fn.binding === 'global' ? 0 : fn.binding === 'weak' ? 1 : fn.binding === 'unique' ? 2 : 3;
  if (rank(a) !== rank(b)) return rank(a) < rank(b);
  const underscores = (fn: FunctionSymbol) => /^_*/.exec(fn.name)![0].length;
  if (underscores(a) !== underscores(b)) return underscores(a) < underscores(b);
  return a.name.length < b.name.length;
}

/**
 * Rows sorted by address then name, without repeats of the same (name, address). Addresses
 * are sorted as doubles without a callback when they fit: each key packs the address above the
 * row number; rows at one address are then ordered by their name bytes.
 */
function sortUnique(c: FunctionColumns): Uint32Array {
  const n = c.count;
  const scale = 2 ** Math.max(1, Math.ceil(Math.log2(n + 1)));
  let maxAddress = 0;
  for (let i = 0; i < n; i++) if (c.address[i]! > maxAddress) maxAddress = c.address[i]!;
  const order = new Uint32Array(n);
  if (maxAddress * scale < Number.MAX_SAFE_INTEGER) {
    const keys = new Float64Array(n);
    for (let i = 0; i < n; i++) keys[i] = c.address[i]! * scale + i;
    keys.sort();
    for (let i = 0; i < n; i++) order[i] = keys[i]! % scale;
  } else {
    for (let i = 0; i < n; i++) order[i] = i;
    order.sort((x, y) => c.address[x]! - c.address[y]!);
  }
  // Name bytes compared in place (a listing of /usr/bin/node compares 40,000 aliases).
  const compareNames = (x: number, y: number) => {
    const ax = c.nameStart[x]!;
    const ay = c.nameStart[y]!;
    const lx = c.nameEnd[x]! - ax;
    const ly = c.nameEnd[y]! - ay;
    for (let i = 0; i < lx && i < ly; i++) {
      const d = c.strings[ax + i]! - c.strings[ay + i]!;
      if (d !== 0) return d;
    }
    return lx - ly;
  };
  // Same name and version (one object per version in .dynsym, none in .symtab): a repeat.
  // One name at one address under several versions (realpath@GLIBC_2.2.5, ...) is kept.
  const compare = (x: number, y: number) =>
    compareNames(x, y) ||
    (c.version(x) === c.version(y)
      ? 0
      : (c.version(x)?.name ?? '') < (c.version(y)?.name ?? '')
        ? -1
        : 1);
  const unique = new Uint32Array(n);
  let count = 0;
  for (let i = 0; i < n; ) {
    const address = c.address[order[i]!]!;
    let j = i + 1;
    while (j < n && c.address[order[j]!] === address) j++;
    if (j === i + 1) {
      unique[count++] = order[i]!;
    } else {
      const run = Array.from(order.subarray(i, j));
      run.sort(compare);
      for (let k = 0; k < run.length; k++) {
        if (k === 0 || compare(run[k]!, run[k - 1]!) !== 0) {
          unique[count++] = run[k]!;
        }
      }
    }
    i = j;
  }
  return unique.slice(0, count);
}

/**
 * Whether a glob can match only stored names, never a demangled one: it starts with `_Z`, as
 * an Itanium C++ mangled name does (and Rust's legacy names), which no demangled name does
 * (C and C++ reserve the names that begin with `_` and a capital letter: no declared function,
 * class or namespace has one). Such a pattern, `_ZN2v88internal8compiler*` or `_ZN[1-9S]*`,
 * needs no name demangled to be matched.
 */
export function mangledOnly(glob: string): boolean {
  return glob.startsWith('_Z');
}

/**
 * Runs of identifier characters a glob must match literally (between its `*`, `?` and `[...]`)
 * that any name the glob matches holds in its mangled form as well, when the match is of its
 * demangled form: the demanglers spell out what a mangled name spells (identifiers), and
 * write of their own only numbers (template arguments), words of the language (`int`,
 * `operator`, `const`), the parts of `std` the mangling abbreviates (`allocator`, `string`),
 * and their marks (`{lambda(int)#1}`, `(anonymous namespace)`, `[clone .isra.0]`, Rust's
 * `{closure#0}`). A run that is part of such a word, or begins with a digit, is not taken.
 * So a name whose stored bytes lack one of these runs need not be demangled to know the glob
 * does not match it (`uv_*`, `node::*Start*` over node's 86,000 names).
 */
export function requiredFragments(glob: string): string[] {
  const found: string[] = [];
  let run = '';
  const take = () => {
    const lower = run.toLowerCase();
    // Not a number, nor what follows one (`5u`, Rust's `3usize`: literals, not spelled).
    if (run.length >= 2 && !/^\d/.test(run) && !DEMANGLER_WORDS.some((w) => w.includes(lower))) {
      found.push(run);
    }
    run = '';
  };
  for (let i = 0; i < glob.length; i++) {
    const ch = glob[i]!;
    if (ch === '[') {
      take();
      // A class, read as globToRegExp() reads it: `]` right after `[` (or `[!`, `[^`) is
      // one of its members.
      const first = glob[i + 1] === '!' || glob[i + 1] === '^' ? i + 2 : i + 1;
      const end = glob.indexOf(']', first + 1);
      if (end < 0) return []; // a `[` that matches itself: left to the full match
      i = end;
    } else if (/[A-Za-z0-9_]/.test(ch)) {
      run += ch;
    } else if (ch.charCodeAt(0) > 0x7f) {
      // Not ASCII (a Rust identifier is spelled in punycode): left to the full match.
      return [];
    } else {
      take();
    }
  }
  take();
  return found;
}

/**
 * Words the demanglers write that no mangled name spells (lower case): C++'s types and
 * keywords, operator and special names, std's abbreviated names, and Rust's types and marks.
 */
const DEMANGLER_WORDS = [
  // C++ builtin types and qualifiers.
  'void wchar_t bool char signed unsigned short int long float double __int128 __float128',
  '_float16 _float32 _float64 _float128 char8_t char16_t char32_t decimal32 decimal64',
  'decimal128 half auto decltype std::nullptr_t nullptr_t const volatile restrict',
  '__restrict __vector __complex__ __imaginary__ _complex _imaginary _accum _fract _sat',
  // Operators and expressions.
  'operator new delete sizeof alignof typeid noexcept throw this true false nullptr',
  'dynamic_cast static_cast const_cast reinterpret_cast requires co_await',
  // Special names and marks.
  'vtable for typeinfo name construction-vtable virtual thunk to non-virtual covariant return',
  'guard variable transaction clone safe tls init function wrapper reference temporary',
  'hidden alias java resource lambda unnamed type anonymous namespace string literal',
  'isra part constprop cold lto_priv localalias abi template parameter object structured binding',
  'module initializer vtt typeinfo fn offset override invocation block in parm default arg',
  'class struct union enum friend transaction_safe requires java flat invalid syntax',
  'recursion limit reached size unexpected',
  // std's names the mangling abbreviates.
  ...ABBREVIATED,
  // Rust (legacy and v0) types and marks.
  'i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 str closure shim impl dyn',
  'unsafe extern fn mut as core alloc vtable',
]
  .join(' ')
  .split(' ');
