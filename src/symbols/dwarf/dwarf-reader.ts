import { realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { DEFAULT_DEBUG_DIR } from '../debug-files.js';
import { type ElfFile, openElf } from '../elf/index.js';
import { CallFrames } from './call-frames.js';
import { DW_AT, DW_TAG } from './constants.js';
import {
  DebugInfo,
  type Die,
  type OpenSplitDwarf,
  type SupplementaryFile,
  type Unit,
} from './debug-info.js';
import { type DwarfType, TypeReader, typeSize } from './dwarf-types.js';
import { LineTable } from './line-table.js';
import { type AddressExpr, evaluateLocation, type VariableLocation } from './location.js';
import {
  type DwarfSections,
  dwarfSections,
  splitDwarfSections,
  supplementaryLink,
  supplementarySections,
} from './sections.js';

/** A subprogram, lexical block or inlined instance whose code covers a pc. */
export interface Scope {
  readonly kind: 'subprogram' | 'block' | 'inlined';
  readonly die: Die;
  /** The function's name (of the inlined function for an inlined instance). */
  readonly name: string | undefined;
}

/** The innermost function (or inlined instance of one) holding an address. */
export interface InlineContext {
  readonly kind: 'subprogram' | 'inlined';
  readonly name: string | undefined;
  readonly linkageName: string | undefined;
  /** Offset of its DIE in .debug_info. */
  readonly dieOffset: number;
  /**
   * Offset of the function's abstract DIE (DW_AT_abstract_origin), the same for all its
   * inlined and out-of-line copies; its own offset when it has none.
   */
  readonly originOffset: number;
  readonly entryPc: bigint | undefined;
  /** For an inlined instance: the call's file (an index into the unit's line table files). */
  readonly callFile: number | undefined;
  readonly callLine: number | undefined;
  /** The unit's .debug_line offset (DW_AT_stmt_list), to turn callFile into a name. */
  readonly lineProgramOffset: number | undefined;
  /** The function (or inlined instance) it is inlined into, if any. */
  readonly caller: InlineContext | undefined;
}

/** A function found by name: a concrete subprogram or an inlined instance. */
export interface DwarfFunction {
  readonly name: string;
  readonly linkageName: string | undefined;
  readonly inlined: boolean;
  readonly entryPc: bigint;
  readonly die: Die;
}

/** A variable or parameter visible at a pc. */
export interface DwarfVariable {
  readonly name: string;
  readonly parameter: boolean;
  /** True for a variable of the compile unit (a global or file static). */
  readonly global: boolean;
  readonly die: Die;
  /** The scope it belongs to (undefined for globals). */
  readonly scope: Scope | undefined;
}

const SCOPE_TAGS: ReadonlySet<number> = new Set([DW_TAG.lexical_block, DW_TAG.inlined_subroutine]);

/** Namespaces, classes and the like that may hold function definitions. */
const CONTAINER_TAGS: ReadonlySet<number> = new Set([
  0x39,
  DW_TAG.structure_type,
  DW_TAG.class_type,
]);

/**
 * The variables, types, scopes and frames of one file's DWARF, read lazily: resolving one
 * function parses only the unit that holds it.
 */
export class DwarfReader {
  readonly info: DebugInfo;
  readonly types: TypeReader;
  readonly frames: CallFrames;

  /**
   * `path`: the binary's, where a split unit's .dwo may be when its build directory is not;
   * `supplementary`: the file dwz moved what the DWARF shares with other files to.
   */
  constructor(
    readonly sections: DwarfSections,
    options: {
      readonly dataRelBase?: bigint | undefined;
      readonly path?: string | undefined;
      readonly supplementary?: SupplementaryFile | undefined;
    } = {},
  ) {
    this.info = new DebugInfo(sections, splitOpener(sections, options.path), options.supplementary);
    this.types = new TypeReader(this.info);
    this.frames = new CallFrames(sections, { dataRelBase: options.dataRelBase });
  }

  static fromElf(elf: ElfFile): DwarfReader {
    return new DwarfReader(dwarfSections(elf), {
      dataRelBase: elf.section('.got')?.addr,
      path: elf.path,
      supplementary: supplementaryOf(elf),
    });
  }

  /**
   * A reader of a separate debug file's DWARF for the binary `code`: the debug file has the
   * debug sections, while the call frames (.eh_frame, loaded) are only in the binary.
   */
  static fromDebugFile(debug: ElfFile, code: ElfFile): DwarfReader {
    if (debug === code) return DwarfReader.fromElf(code);
    const own = dwarfSections(debug);
    const binary = dwarfSections(code);
    const sections = Object.create(own) as DwarfSections;
    Object.defineProperties(sections, {
      ehFrame: { get: () => binary.ehFrame },
      ehFrameVaddr: { get: () => binary.ehFrameVaddr },
    });
    return new DwarfReader(sections, {
      dataRelBase: code.section('.got')?.addr,
      path: code.path ?? debug.path,
      supplementary: supplementaryOf(debug),
    });
  }

  get hasInfo(): boolean {
    return this.info.hasInfo;
  }

  /**
   * The compilation directory of the unit whose line program is at `lineOffset` (DWARF 4
   * line tables leave it out: relative file names are relative to it). Indexed on first use.
   */
  compDirOfLineProgram(lineOffset: number): string | undefined {
    if (this.#compDirs === undefined) {
      this.#compDirs = new Map();
      for (const unit of this.info.units()) {
        const root = this.info.lineRoot(unit);
        const stmtList = root.attrs.get(DW_AT.stmt_list);
        const offset =
          stmtList?.kind === 'sec-offset'
            ? stmtList.value
            : stmtList?.kind === 'constant'
              ? Number(stmtList.value)
              : undefined;
        const dir = this.info.string(root, DW_AT.comp_dir);
        if (offset !== undefined && dir !== undefined) this.#compDirs.set(offset, dir);
      }
    }
    return this.#compDirs.get(lineOffset);
  }

  #compDirs: Map<number, string> | undefined;

  /** The scopes whose code covers `vaddr`, outermost (the subprogram) first. */
  scopesAt(vaddr: bigint): Scope[] {
    const unit = this.info.unitForAddress(vaddr);
    if (unit === undefined) return [];
    const root = this.info.tree(unit);
    const fn = this.findSubprogram(root.children, vaddr, 0);
    if (fn === undefined) return [];
    const scopes: Scope[] = [{ kind: 'subprogram', die: fn, name: this.info.name(fn) }];
    let current = fn;
    for (;;) {
      const inner = this.innerScope(current.children, vaddr);
      if (inner === undefined) return scopes;
      scopes.push({
        kind: inner.tag === DW_TAG.inlined_subroutine ? 'inlined' : 'block',
        die: inner,
        name: inner.tag === DW_TAG.inlined_subroutine ? this.info.name(inner) : undefined,
      });
      current = inner;
    }
  }

  private covers(die: Die, vaddr: bigint): boolean {
    return this.info.ranges(die).some((r) => vaddr >= r.low && vaddr < r.high);
  }

  private findSubprogram(dies: readonly Die[], vaddr: bigint, depth: number): Die | undefined {
    for (const die of dies) {
      if (die.tag === DW_TAG.subprogram && this.covers(die, vaddr)) return die;
      if (CONTAINER_TAGS.has(die.tag) && depth < 8) {
        const found = this.findSubprogram(die.children, vaddr, depth + 1);
        if (found !== undefined) return found;
      }
    }
    return undefined;
  }

  private innerScope(dies: readonly Die[], vaddr: bigint): Die | undefined {
    for (const die of dies) {
      if (!SCOPE_TAGS.has(die.tag)) continue;
      if (this.covers(die, vaddr)) return die;
      // A block without code of its own (no ranges) still scopes what it holds.
      if (
        die.tag === DW_TAG.lexical_block &&
        !die.attrs.has(DW_AT.low_pc) &&
        !die.attrs.has(DW_AT.ranges)
      ) {
        const inner = this.innerScope(die.children, vaddr);
        if (inner !== undefined) return inner;
      }
    }
    return undefined;
  }

  /** The innermost subprogram or inlined instance holding `vaddr`, with its callers. */
  inlineContextAt(vaddr: bigint): InlineContext | undefined {
    const scopes = this.scopesAt(vaddr).filter((s) => s.kind !== 'block');
    let context: InlineContext | undefined;
    for (const scope of scopes) {
      const die = scope.die;
      const stmtList = this.info.lineRoot(die.unit).attrs.get(DW_AT.stmt_list);
      context = {
        kind: scope.kind === 'inlined' ? 'inlined' : 'subprogram',
        name: scope.name,
        linkageName: this.info.linkageName(die),
        dieOffset: die.offset,
        originOffset: this.info.origin(die).offset,
        entryPc: this.info.entryPc(die),
        callFile:
          scope.kind === 'inlined'
            ? numberOrUndefined(this.info.constant(die, DW_AT.call_file))
            : undefined,
        callLine:
          scope.kind === 'inlined'
            ? numberOrUndefined(this.info.constant(die, DW_AT.call_line))
            : undefined,
        lineProgramOffset:
          stmtList?.kind === 'sec-offset'
            ? stmtList.value
            : stmtList?.kind === 'constant'
              ? Number(stmtList.value)
              : undefined,
        caller: context,
      };
    }
    return context;
  }

  /**
   * Functions named `name` (DW_AT_name or linkage name) with their entry pcs: concrete
   * subprograms and inlined instances. Reads every unit.
   */
  functionsNamed(name: string): DwarfFunction[] {
    const out: DwarfFunction[] = [];
    for (const unit of this.info.units()) {
      if (!isCompileUnit(this.info, unit)) continue;
      const walk = (dies: readonly Die[]) => {
        for (const die of dies) {
          if (die.tag === DW_TAG.subprogram || die.tag === DW_TAG.inlined_subroutine) {
            const dieName = this.info.name(die);
            const linkage = this.info.linkageName(die);
            if (dieName === name || linkage === name) {
              const entryPc = this.info.entryPc(die);
              if (entryPc !== undefined) {
                out.push({
                  name: dieName ?? name,
                  linkageName: linkage,
                  inlined: die.tag === DW_TAG.inlined_subroutine,
                  entryPc,
                  die,
                });
              }
            }
          }
          if (die.children.length > 0) walk(die.children);
        }
      };
      walk(this.info.tree(unit).children);
    }
    return out;
  }

  /** Names of every function with code (for suggestions). Reads every unit. */
  functionNames(): string[] {
    const names = new Set<string>();
    for (const unit of this.info.units()) {
      if (!isCompileUnit(this.info, unit)) continue;
      for (const die of this.info.tree(unit).children) {
        if (die.tag !== DW_TAG.subprogram || this.info.ranges(die).length === 0) continue;
        const n = this.info.name(die);
        if (n !== undefined) names.add(n);
      }
    }
    return [...names];
  }

  /**
   * The variables and parameters visible at `vaddr`, innermost first, an inner name hiding an
   * outer one; then the globals of the unit. Parameters of an inlined or out-of-line copy that
   * the compiler dropped are listed too (their location is then absent).
   *
   * With `options.function` (the DIE of a subprogram or inlined instance holding `vaddr`):
   * only that function's own, as gdb shows them at a breakpoint on it: not those of a caller it
   * is inlined into, nor of functions inlined into it that start at the same address (Rust's
   * `black_box` at the top of a function).
   */
  variablesAt(
    vaddr: bigint,
    options: { readonly function?: Die | undefined } = {},
  ): DwarfVariable[] {
    let scopes = this.scopesAt(vaddr);
    if (options.function !== undefined) {
      const own = scopes.findIndex((scope) => scope.die === options.function);
      if (own >= 0) {
        let end = own + 1;
        while (end < scopes.length && scopes[end]!.kind === 'block') end++;
        scopes = scopes.slice(own, end);
      }
    }
    const seen = new Set<string>();
    const out: DwarfVariable[] = [];
    const add = (die: Die, scope: Scope | undefined) => {
      const name = this.info.name(die);
      if (name === undefined || seen.has(name)) return;
      seen.add(name);
      out.push({
        name,
        parameter: die.tag === DW_TAG.formal_parameter,
        global: scope === undefined,
        die,
        scope,
      });
    };
    for (let i = scopes.length - 1; i >= 0; i--) {
      const scope = scopes[i]!;
      const origins = new Set<number>();
      const collect = (dies: readonly Die[]) => {
        for (const die of dies) {
          if (die.tag === DW_TAG.formal_parameter || die.tag === DW_TAG.variable) {
            add(die, scope);
            origins.add(this.info.origin(die).offset);
          } else if (
            die.tag === DW_TAG.lexical_block &&
            !die.attrs.has(DW_AT.low_pc) &&
            !die.attrs.has(DW_AT.ranges)
          ) {
            collect(die.children);
          }
        }
      };
      collect(scope.die.children);
      const origin = this.info.origin(scope.die);
      if (origin !== scope.die) {
        for (const die of origin.children) {
          if (die.tag === DW_TAG.formal_parameter && !origins.has(die.offset)) add(die, scope);
        }
      }
    }
    const fn = scopes[0];
    if (fn !== undefined) {
      for (const die of this.info.tree(fn.die.unit).children) {
        if (die.tag === DW_TAG.variable) add(die, undefined);
      }
    }
    return out;
  }

  /** A global variable with a location (DW_OP_addr), searched in every unit. */
  globalNamed(name: string): DwarfVariable | undefined {
    for (const unit of this.info.units()) {
      if (!isCompileUnit(this.info, unit)) continue;
      for (const die of this.info.tree(unit).children) {
        if (die.tag !== DW_TAG.variable || !die.attrs.has(DW_AT.location)) continue;
        if (this.info.name(die) === name) {
          return { name, parameter: false, global: true, die, scope: undefined };
        }
      }
    }
    return undefined;
  }

  typeOf(variable: DwarfVariable): DwarfType {
    return this.types.typeOf(variable.die);
  }

  /** Where a variable's value is at `vaddr` (its location list entry, evaluated). */
  locate(variable: DwarfVariable, vaddr: bigint): VariableLocation {
    const info = this.info;
    const die = variable.die;
    const unit = die.unit;
    const at = info.locationAt(die, DW_AT.location, vaddr);
    if (at.kind === 'absent') {
      if (die.attrs.has(DW_AT.const_value)) {
        const value = info.constant(die, DW_AT.const_value);
        return value === undefined
          ? { kind: 'unavailable', reason: 'optimized out (a constant the compiler folded)' }
          : { kind: 'constant', value };
      }
      const declaration = info.flag(die, DW_AT.declaration);
      return {
        kind: 'unavailable',
        reason: declaration ? 'declared here, defined elsewhere' : 'optimized out (no location)',
      };
    }
    if (at.kind === 'none') {
      return { kind: 'unavailable', reason: 'optimized out at this address' };
    }
    const fn =
      variable.scope === undefined ? undefined : this.enclosingSubprogram(variable.scope.die);
    const entry = fn === undefined ? undefined : info.entryPc(fn);
    const inlinedEntry =
      variable.scope?.kind === 'inlined' ? info.entryPc(variable.scope.die) : undefined;
    return evaluateLocation(at.expr, {
      addressSize: unit.addressSize,
      atEntry: vaddr === (inlinedEntry ?? entry),
      sizeBytes: typeSize(this.types.typeOf(die)),
      indexedAddress: (index) => info.indexedAddress(unit, index),
      cfa: () => this.cfaAt(vaddr),
      frameBase: () => {
        if (fn === undefined) return 'the variable is not in a function';
        const base = info.locationAt(fn, DW_AT.frame_base, vaddr);
        if (base.kind !== 'expr') return 'the function has no frame base at this address';
        const location = evaluateLocation(base.expr, {
          addressSize: unit.addressSize,
          atEntry: false,
          sizeBytes: undefined,
          indexedAddress: (index) => info.indexedAddress(unit, index),
          cfa: () => this.cfaAt(vaddr),
          frameBase: () => 'the frame base refers to itself',
        });
        switch (location.kind) {
          case 'memory':
            return location.address;
          case 'register':
            return { base: { kind: 'register', register: location.register }, offset: 0n };
          case 'unavailable':
            return location.reason;
          default:
            return 'the frame base is not an address';
        }
      },
    });
  }

  /** The canonical frame address at `vaddr` as register + offset, from the CFI. */
  cfaAt(vaddr: bigint): AddressExpr | string {
    const rule = this.frames.cfaAt(vaddr);
    if (rule === undefined) return 'no call frame information covers this address';
    if (rule.kind === 'expression')
      return 'the call frame information computes it with an expression';
    return { base: { kind: 'register', register: rule.register }, offset: rule.offset };
  }

  private enclosingSubprogram(die: Die): Die | undefined {
    for (let d: Die | undefined = die; d !== undefined; d = d.parent) {
      if (d.tag === DW_TAG.subprogram) return d;
    }
    return undefined;
  }

  /**
   * Where the prologue of the function entered at `entry` ends, as its compiler marked it in
   * the line table (DW_LNS_set_prologue_end: LLVM marks it, as rustc and clang emit; GCC does
   * not): the first row so marked inside the function, past its entry; else undefined.
   */
  prologueEnd(entry: bigint): bigint | undefined {
    const fn = this.scopesAt(entry)[0];
    if (fn === undefined || fn.kind !== 'subprogram') return undefined;
    const range = this.info.ranges(fn.die).find((r) => entry >= r.low && entry < r.high);
    if (range === undefined) return undefined;
    this.#lines ??= new LineTable(this.sections);
    return this.#lines.rowsInRange(entry, range.high).find((row) => row.prologueEnd)?.vaddr;
  }

  #lines: LineTable | undefined;

  /** DebugInfo.unreadSplit() of the unit whose code covers `vaddr`. */
  unreadSplitAt(vaddr: bigint): ReturnType<DebugInfo['unreadSplit']> {
    const unit = this.info.unitForAddress(vaddr);
    return unit === undefined ? undefined : this.info.unreadSplit(unit);
  }

  /** The producer string of the unit holding `vaddr` (e.g. `GNU C17 12.2.0 -mtune=generic -O2 -g`). */
  producerAt(vaddr: bigint): string | undefined {
    const unit = this.info.unitForAddress(vaddr);
    return unit === undefined ? undefined : this.info.string(this.info.root(unit), DW_AT.producer);
  }
}

/** A compile or partial unit, or a skeleton whose split unit is found (its root is that one's). */
function isCompileUnit(info: DebugInfo, unit: Unit): boolean {
  if (unit.unitType !== 1 && unit.unitType !== 3 && unit.unitType !== 4) return false;
  const tag = info.root(unit).tag;
  return tag === DW_TAG.compile_unit || tag === DW_TAG.partial_unit;
}

function numberOrUndefined(value: bigint | undefined): number | undefined {
  return value === undefined ? undefined : Number(value);
}

/**
 * The supplementary file `elf`'s DWARF names, found as gdb finds it: at its name (relative to
 * the directory of `elf`), else by its build-id under /usr/lib/debug/.build-id; checked by the
 * build-id where the link gives one. Opened when first referred to.
 */
function supplementaryOf(elf: ElfFile): SupplementaryFile | undefined {
  const link = supplementaryLink(elf);
  if (link === undefined) return undefined;
  // A relative name is from where dwz found the file, which a distribution's build-id link
  // (/usr/lib/debug/.build-id/ab/cdef.debug) points to from another depth: both are tried.
  const places = isAbsolute(link.name)
    ? [link.name]
    : elf.path === undefined
      ? []
      : [...new Set([elf.path, realPath(elf.path)])].map((at) => join(dirname(at), link.name));
  const id = link.buildId;
  if (id !== undefined && id.length > 2) {
    places.push(join(DEFAULT_DEBUG_DIR, '.build-id', id.slice(0, 2), `${id.slice(2)}.debug`));
  }
  return {
    name: link.name,
    open: () =>
      firstRead(places, (file) =>
        id === undefined || file.buildId() === id ? supplementarySections(file) : undefined,
      ),
  };
}

/** The file's path with its symbolic links followed, or as it is where that fails. */
function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/**
 * Finds a split unit's .dwo file: where its name says (relative to the unit's compilation
 * directory), else beside the binary (a build tree moved, or installed with its .dwo files).
 */
function splitOpener(binary: DwarfSections, path: string | undefined): OpenSplitDwarf {
  return (name, compDir) => {
    const places = isAbsolute(name) ? [name] : compDir === undefined ? [] : [join(compDir, name)];
    if (path !== undefined) places.push(join(dirname(path), basename(name)));
    return firstRead(places, (dwo) => splitDwarfSections(dwo, binary));
  };
}

/**
 * `read` of the first of `places` that opens as an ELF file and gives something (a file it
 * cannot take, or one that throws, is passed over); each file is closed after.
 */
function firstRead<T>(
  places: readonly string[],
  read: (elf: ElfFile) => T | undefined,
): T | undefined {
  for (const place of places) {
    let elf: ElfFile;
    try {
      elf = openElf(place);
    } catch {
      continue;
    }
    try {
      const found = read(elf);
      if (found !== undefined) return found;
    } catch {
      // not a file this reader can take: the next place, or none
    } finally {
      elf.close();
    }
  }
  return undefined;
}
