import { type Abbrev, parseAbbrevTable } from './abbrev.js';
import { DW_AT, DW_FORM, DW_TAG, DW_UT } from './constants.js';
import { Cursor, DwarfFormatError, stringAt } from './cursor.js';
import type { DwarfSections } from './sections.js';

/** An attribute's value as stored, before indexes and offsets are followed. */
export type AttrValue =
  | { readonly kind: 'address'; readonly value: bigint }
  | { readonly kind: 'addrx'; readonly index: number }
  | { readonly kind: 'string'; readonly value: string }
  /** `sup`: the supplementary file's .debug_str (DW_FORM_strp_sup, GNU_strp_alt). */
  | {
      readonly kind: 'strp';
      readonly section: 'str' | 'lineStr' | 'sup';
      readonly offset: number;
    }
  | { readonly kind: 'strx'; readonly index: number }
  /** data1..8 and udata: unsigned; sdata and implicit_const: signed. */
  | { readonly kind: 'constant'; readonly value: bigint; readonly signed: boolean }
  | { readonly kind: 'flag'; readonly value: boolean }
  /** A reference, as an offset in .debug_info. */
  | { readonly kind: 'ref'; readonly offset: number }
  /**
   * A reference into the supplementary file's .debug_info (DW_FORM_ref_sup4/8, GNU_ref_alt):
   * where dwz moved what several files share (a distribution's debug packages).
   */
  | { readonly kind: 'sup-ref'; readonly offset: number }
  | { readonly kind: 'sec-offset'; readonly value: number }
  | { readonly kind: 'block'; readonly bytes: Uint8Array; readonly exprloc: boolean }
  | { readonly kind: 'loclistx' | 'rnglistx'; readonly index: number }
  /** ref_sig8 (a type unit): known but not followed. */
  | { readonly kind: 'unsupported'; readonly form: number };

export interface Die {
  readonly offset: number;
  readonly tag: number;
  readonly attrs: ReadonlyMap<number, AttrValue>;
  readonly children: Die[];
  readonly parent: Die | undefined;
  readonly unit: Unit;
}

export interface Unit {
  /** Offset of the unit header in .debug_info. */
  readonly offset: number;
  /** Offset just past the unit. */
  readonly end: number;
  readonly version: number;
  readonly unitType: number;
  readonly addressSize: number;
  readonly offsetSize: 4 | 8;
  readonly abbrevOffset: number;
  /** Offset of the first DIE. */
  readonly dieOffset: number;
  /** A skeleton's or split unit's id (DWARF 5), which pairs them. */
  readonly dwoId?: bigint | undefined;
  /** A split unit (read from a .dwo file in place of its skeleton: see DebugInfo.root()). */
  readonly split?: SplitUnit | undefined;
  /** A unit of the supplementary file (see DebugInfo's `supplementaryLink`). */
  readonly supplementary?: true | undefined;
}

/**
 * Where a split unit is (-gsplit-dwarf): the sections of its .dwo file (which keep its DIEs,
 * strings and location lists; its addresses stay in the binary's .debug_addr) and the
 * skeleton unit in the binary that names it (with the addresses' base, the code's ranges and
 * the line program).
 */
export interface SplitUnit {
  readonly sections: DwarfSections;
  readonly skeleton: Unit;
}

/** Opens the .dwo file a skeleton names: its sections, or undefined where it is not found. */
export type OpenSplitDwarf = (
  dwoName: string,
  compDir: string | undefined,
) => DwarfSections | undefined;

/**
 * The supplementary file the DWARF names (.gnu_debugaltlink, or DWARF 5's .debug_sup): its
 * name as given, and open() for its sections (undefined where it is not found).
 */
export interface SupplementaryFile {
  readonly name: string;
  open(): DwarfSections | undefined;
}

/** An address range, `[low, high)`. */
export interface AddressRange {
  readonly low: bigint;
  readonly high: bigint;
}

/** What a location attribute says at one pc. */
export type LocationAt =
  | { readonly kind: 'expr'; readonly expr: Uint8Array }
  /** A location list with no entry for the pc: the value is not available there. */
  | { readonly kind: 'none' }
  /** The DIE has no location attribute at all. */
  | { readonly kind: 'absent' };

const MAX_ADDRESS = 0xffff_ffff_ffff_ffffn;

interface ParsedUnit {
  readonly root: Die;
  readonly byOffset: Map<number, Die>;
}

/**
 * A lazy reader of .debug_info: unit headers are scanned once (a few bytes each), a unit's
 * DIEs are parsed only when something in it is asked for, and .debug_aranges (when present)
 * finds the unit of an address without parsing any DIE. DWARF 2-5, 32- and 64-bit.
 * Every read is checked: malformed sections throw DwarfFormatError.
 */
export class DebugInfo {
  private unitList: Unit[] | undefined;
  /** By unit (a split unit's offsets are in its .dwo: they are no key). */
  private readonly parsed = new Map<Unit, ParsedUnit>();
  private readonly roots = new Map<Unit, Die>();
  /** By abbreviation section (the file's, or a .dwo's), then offset. */
  private readonly abbrevs = new Map<Uint8Array, Map<number, Map<number, Abbrev>>>();
  private arangeList: { low: bigint; high: bigint; unit: number }[] | undefined;
  /** The supplementary file, once opened (null: not found). */
  private supplementaryFile: { sections: DwarfSections; units: Unit[] } | null | undefined;

  /**
   * `openSplit`: finds the .dwo files of split units (without it, skeletons stay as they are);
   * `supplementaryLink`: the file what dwz shared out of this one is in (without it, or where
   * it is not found, references into it are not followed).
   */
  constructor(
    readonly sections: DwarfSections,
    private readonly openSplit?: OpenSplitDwarf | undefined,
    private readonly supplementaryLink?: SupplementaryFile | undefined,
  ) {}

  /** The name of the supplementary file the DWARF names, if it names one. */
  supplementaryName(): string | undefined {
    return this.supplementaryLink?.name;
  }

  /** The supplementary file's sections and units, opened at the first reference into it. */
  private supplementary(): { sections: DwarfSections; units: Unit[] } | undefined {
    if (this.supplementaryFile === undefined) {
      const sections = this.supplementaryLink?.open();
      this.supplementaryFile =
        sections === undefined
          ? null
          : { sections, units: readUnits(sections.info, '.debug_info', undefined, true) };
    }
    return this.supplementaryFile ?? undefined;
  }

  get hasInfo(): boolean {
    return this.sections.info.length > 0;
  }

  /** Every unit header of .debug_info, in section order. */
  units(): readonly Unit[] {
    this.unitList ??= readUnits(this.sections.info, '.debug_info', undefined);
    return this.unitList;
  }

  /**
   * The sections a unit's DIEs are read from: a split unit's .dwo (its addresses excepted:
   * see indexedAddress()), else the file's.
   */
  sectionsOf(unit: Unit): DwarfSections {
    if (unit.supplementary === true) return this.supplementary()!.sections;
    return unit.split?.sections ?? this.sections;
  }

  /**
   * A skeleton unit's split unit, read from the .dwo file it names (checked by its id);
   * undefined for other units and where the file is not found or holds no such unit.
   */
  splitOf(unit: Unit): Unit | undefined {
    if (this.openSplit === undefined || unit.split !== undefined) return undefined;
    if (this.splits.has(unit)) return this.splits.get(unit);
    let found: Unit | undefined;
    const named = this.dwoNamed(unit);
    const sections = named === undefined ? undefined : this.openSplit(named.name, named.compDir);
    if (sections !== undefined) {
      const split = { sections, skeleton: unit };
      const units = readUnits(sections.info, '.debug_info.dwo', split);
      found =
        unit.version >= 5
          ? units.find((u) => u.unitType === DW_UT.split_compile && u.dwoId === unit.dwoId)
          : units.find(
              (u) =>
                u.unitType === DW_UT.compile &&
                this.constant(this.ownRoot(u), DW_AT.GNU_dwo_id) === named!.id,
            );
    }
    this.splits.set(unit, found);
    return found;
  }

  /**
   * The .dwo file a skeleton unit names, and the id that pairs it with its split unit: a
   * DWARF 5 skeleton's, or a DWARF 4 compile unit's in GCC's GNU extension of it (as rustc's
   * split-debuginfo=unpacked writes too). Undefined for other units.
   */
  private dwoNamed(
    unit: Unit,
  ): { name: string; compDir: string | undefined; id: bigint | undefined } | undefined {
    let name: string | undefined;
    let id: bigint | undefined;
    if (unit.unitType === DW_UT.skeleton) {
      name = this.string(this.ownRoot(unit), DW_AT.dwo_name);
      id = unit.dwoId;
    } else if (unit.version < 5 && unit.unitType === DW_UT.compile) {
      const root = this.ownRoot(unit);
      if (!root.attrs.has(DW_AT.GNU_dwo_name)) return undefined;
      name = this.string(root, DW_AT.GNU_dwo_name);
      id = this.constant(root, DW_AT.GNU_dwo_id);
    }
    if (name === undefined) return undefined;
    return { name, compDir: this.string(this.ownRoot(unit), DW_AT.comp_dir), id };
  }

  /**
   * The DIE that holds a unit's line program (DW_AT_stmt_list) and compilation directory: its
   * top DIE, or for a split unit (and a skeleton) the skeleton's.
   */
  lineRoot(unit: Unit): Die {
    return this.ownRoot(unit.split?.skeleton ?? unit);
  }

  /**
   * Where a unit's DIEs are in a .dwo file this reader did not read: its name, the unit's
   * compilation directory, and why (`missing`: not found; `gnu`: the split format GCC wrote
   * for DWARF 4, which this reader does not take). Undefined for every other unit.
   */
  unreadSplit(unit: Unit): { name: string; compDir: string | undefined } | undefined {
    const named = this.dwoNamed(unit);
    if (named === undefined || this.splitOf(unit) !== undefined) return undefined;
    return { name: named.name, compDir: named.compDir };
  }

  private readonly splits = new Map<Unit, Unit | undefined>();

  /** The unit holding a .debug_info offset. */
  unitAt(offset: number): Unit | undefined {
    return unitHolding(this.units(), offset);
  }

  /** The compile unit whose code covers `vaddr`: through .debug_aranges, else unit by unit. */
  unitForAddress(vaddr: bigint): Unit | undefined {
    const aranges = this.aranges();
    if (aranges.length > 0) {
      for (const r of aranges) {
        if (vaddr >= r.low && vaddr < r.high) return this.unitAt(r.unit);
      }
    }
    // Units aranges does not describe (or no aranges): their top DIE's ranges.
    const described = new Set(aranges.map((r) => r.unit));
    for (const unit of this.units()) {
      if (described.has(unit.offset) || !isCodeUnit(unit)) continue;
      const root = this.ownRoot(unit);
      if (this.ranges(root).some((r) => vaddr >= r.low && vaddr < r.high)) return unit;
    }
    return undefined;
  }

  private aranges(): { low: bigint; high: bigint; unit: number }[] {
    if (this.arangeList !== undefined) return this.arangeList;
    const list: { low: bigint; high: bigint; unit: number }[] = [];
    const bytes = this.sections.aranges;
    const c = new Cursor(bytes, '.debug_aranges');
    while (!c.atEnd) {
      const start = c.offset;
      const { length, offsetSize } = c.initialLength();
      const set = c.sub(length);
      const version = set.u16();
      if (version !== 2 && version !== 3) set.fail(start, `unsupported aranges version ${version}`);
      const unit = set.sectionOffset(offsetSize);
      const addressSize = set.u8();
      const segmentSize = set.u8();
      if (addressSize !== 4 && addressSize !== 8) set.fail(start, `address size ${addressSize}`);
      if (segmentSize !== 0) set.fail(start, `segment selector size ${segmentSize}`);
      const tuple = 2 * addressSize;
      const misalign = (set.offset - start) % tuple;
      if (misalign !== 0) set.skip(Math.min(tuple - misalign, set.remaining));
      while (set.remaining >= tuple) {
        const low = set.unsigned(addressSize);
        const size = set.unsigned(addressSize);
        if (low === 0n && size === 0n) break;
        if (size > 0n) list.push({ low, high: low + size, unit });
      }
    }
    this.arangeList = list;
    return list;
  }

  private abbrevTable(unit: Unit): Map<number, Abbrev> {
    const section = this.sectionsOf(unit).abbrev;
    let tables = this.abbrevs.get(section);
    if (tables === undefined) {
      tables = new Map();
      this.abbrevs.set(section, tables);
    }
    let table = tables.get(unit.abbrevOffset);
    if (table === undefined) {
      table = parseAbbrevTable(section, unit.abbrevOffset);
      tables.set(unit.abbrevOffset, table);
    }
    return table;
  }

  /**
   * The unit's top DIE (compile unit), without its children unless already parsed; for a
   * skeleton whose .dwo is found, its split unit's (see splitOf()).
   */
  root(unit: Unit): Die {
    return this.ownRoot(this.splitOf(unit) ?? unit);
  }

  /** The unit's own top DIE (a skeleton's, not its split unit's). */
  private ownRoot(unit: Unit): Die {
    const parsed = this.parsed.get(unit);
    if (parsed !== undefined) return parsed.root;
    let root = this.roots.get(unit);
    if (root === undefined) {
      const c: Cursor = this.unitCursor(unit);
      const die = this.readDie(c, unit, this.abbrevTable(unit), undefined);
      if (die === undefined) c.fail(unit.dieOffset, 'unit has no DIE');
      root = die.die;
      this.roots.set(unit, root);
    }
    return root;
  }

  private unitCursor(unit: Unit): Cursor {
    const name = unit.split === undefined ? '.debug_info' : '.debug_info.dwo';
    return new Cursor(this.sectionsOf(unit).info, name, unit.dieOffset, unit.end);
  }

  /** All the DIEs of a unit, as a tree (parsed once); a skeleton's split unit's, as root(). */
  tree(unit: Unit): Die {
    return this.parseUnit(this.splitOf(unit) ?? unit).root;
  }

  private parseUnit(unit: Unit): ParsedUnit {
    const known = this.parsed.get(unit);
    if (known !== undefined) return known;
    const abbrevs = this.abbrevTable(unit);
    const c: Cursor = this.unitCursor(unit);
    const byOffset = new Map<number, Die>();
    const first = this.readDie(c, unit, abbrevs, undefined);
    if (first === undefined) c.fail(unit.dieOffset, 'unit has no DIE');
    const root = first.die;
    byOffset.set(root.offset, root);
    const stack: Die[] = first.hasChildren ? [root] : [];
    while (stack.length > 0 && !c.atEnd) {
      const parent = stack[stack.length - 1]!;
      const read = this.readDie(c, unit, abbrevs, parent);
      if (read === undefined) {
        stack.pop();
        continue;
      }
      parent.children.push(read.die);
      byOffset.set(read.die.offset, read.die);
      if (read.hasChildren) stack.push(read.die);
    }
    const parsed = { root, byOffset };
    this.parsed.set(unit, parsed);
    this.roots.delete(unit);
    return parsed;
  }

  /** The DIE at a .debug_info offset (parsing its unit). */
  dieAt(offset: number): Die | undefined {
    const unit = this.unitAt(offset);
    if (unit === undefined) return undefined;
    return this.parseUnit(this.splitOf(unit) ?? unit).byOffset.get(offset);
  }

  /** The DIE at an offset of the supplementary file's .debug_info, where it is found. */
  private supplementaryDieAt(offset: number): Die | undefined {
    const units = this.supplementary()?.units;
    const unit = units === undefined ? undefined : unitHolding(units, offset);
    return unit === undefined ? undefined : this.parseUnit(unit).byOffset.get(offset);
  }

  /** Reads one DIE; undefined for a null entry (end of siblings). */
  private readDie(
    c: Cursor,
    unit: Unit,
    abbrevs: Map<number, Abbrev>,
    parent: Die | undefined,
  ): { die: Die; hasChildren: boolean } | undefined {
    const offset = c.offset;
    const code = c.ulebNumber();
    if (code === 0) return undefined;
    const abbrev = abbrevs.get(code);
    if (abbrev === undefined) c.fail(offset, `DIE uses undefined abbreviation code ${code}`);
    const attrs = new Map<number, AttrValue>();
    for (const spec of abbrev.attributes) {
      const value = readForm(c, spec.form, unit, spec.implicitConst);
      if (!attrs.has(spec.at)) attrs.set(spec.at, value);
    }
    return {
      die: { offset, tag: abbrev.tag, attrs, children: [], parent, unit },
      hasChildren: abbrev.hasChildren,
    };
  }

  // ---- attribute values ----

  private unitBase(unit: Unit, at: number, fallback?: number): number | undefined {
    // A split unit's addresses are the skeleton's (in the binary's .debug_addr).
    if (unit.split !== undefined && (at === DW_AT.addr_base || at === DW_AT.GNU_ranges_base)) {
      return this.unitBase(unit.split.skeleton, at, fallback);
    }
    const root = this.ownRoot(unit);
    let value = root.attrs.get(at);
    if (value === undefined && at === DW_AT.addr_base) value = root.attrs.get(DW_AT.GNU_addr_base);
    if (value === undefined) return fallback;
    if (value.kind === 'sec-offset') return value.value;
    if (value.kind === 'constant') return Number(value.value);
    return fallback;
  }

  /** The string of an attribute (name, producer, ...), following strp/strx. */
  string(die: Die, at: number): string | undefined {
    const value = die.attrs.get(at);
    if (value === undefined) return undefined;
    switch (value.kind) {
      case 'string':
        return value.value;
      case 'strp':
        if (value.section === 'sup') {
          const sup = this.supplementary()?.sections.str;
          return sup === undefined ? undefined : stringAt(sup, '.debug_str', value.offset);
        }
        return value.section === 'str'
          ? stringAt(this.sectionsOf(die.unit).str, '.debug_str', value.offset)
          : stringAt(this.sectionsOf(die.unit).lineStr, '.debug_line_str', value.offset);
      case 'strx': {
        const unit = die.unit;
        const sections = this.sectionsOf(unit);
        // A DWARF 4 .dwo's string offsets have no header (GCC's extension of DWARF 4).
        const header = unit.split !== undefined && unit.version < 5 ? 0 : unit.offsetSize * 2;
        const base = this.unitBase(unit, DW_AT.str_offsets_base, header)!;
        const bytes = sections.strOffsets;
        const c = new Cursor(bytes, '.debug_str_offsets');
        c.offset = base + value.index * unit.offsetSize;
        if (c.offset > bytes.length) c.fail(base, `string index ${value.index} past the end`);
        return stringAt(sections.str, '.debug_str', c.sectionOffset(unit.offsetSize));
      }
      default:
        return undefined;
    }
  }

  /** An address attribute, following addrx through .debug_addr. */
  address(die: Die, at: number): bigint | undefined {
    const value = die.attrs.get(at);
    if (value === undefined) return undefined;
    if (value.kind === 'address') return value.value;
    if (value.kind === 'addrx') return this.indexedAddress(die.unit, value.index);
    return undefined;
  }

  indexedAddress(unit: Unit, index: number): bigint {
    const base = this.unitBase(unit, DW_AT.addr_base, unit.offsetSize === 4 ? 8 : 16)!;
    const bytes = this.sections.addr;
    const at = base + index * unit.addressSize;
    if (at + unit.addressSize > bytes.length) {
      throw new DwarfFormatError('.debug_addr', at, `address index ${index} past the end`);
    }
    const c = new Cursor(bytes, '.debug_addr', at);
    return c.unsigned(unit.addressSize);
  }

  /** A constant attribute (sizes, offsets, lines, bounds); signed when stored signed. */
  constant(die: Die, at: number): bigint | undefined {
    const value = die.attrs.get(at);
    if (value?.kind === 'constant') return value.value;
    return undefined;
  }

  flag(die: Die, at: number): boolean {
    const value = die.attrs.get(at);
    return value?.kind === 'flag' && value.value;
  }

  /** The DIE a reference attribute points at (in the supplementary file too). */
  ref(die: Die, at: number): Die | undefined {
    const value = die.attrs.get(at);
    if (value?.kind === 'sup-ref') return this.supplementaryDieAt(value.offset);
    if (value?.kind !== 'ref') return undefined;
    const local = this.parsed.get(die.unit)?.byOffset.get(value.offset);
    if (local !== undefined) return local;
    // A supplementary file's DIEs refer within it.
    return die.unit.supplementary === true
      ? this.supplementaryDieAt(value.offset)
      : this.dieAt(value.offset);
  }

  /**
   * Why the attribute is a reference this reader does not follow: into a type unit
   * (ref_sig8), or into a supplementary file it did not find. Undefined for any other
   * attribute.
   */
  unfollowedRef(die: Die, at: number): 'type unit' | 'supplementary' | undefined {
    const kind = die.attrs.get(at)?.kind;
    if (kind === 'unsupported') return 'type unit';
    if (kind === 'sup-ref' && this.supplementary() === undefined) return 'supplementary';
    return undefined;
  }

  /**
   * The name of a DIE, from itself or the DIE it completes (DW_AT_abstract_origin,
   * DW_AT_specification).
   */
  name(die: Die): string | undefined {
    return this.inherited(die, (d) => this.string(d, DW_AT.name));
  }

  linkageName(die: Die): string | undefined {
    return this.inherited(
      die,
      (d) => this.string(d, DW_AT.linkage_name) ?? this.string(d, DW_AT.MIPS_linkage_name),
    );
  }

  /** An attribute looked up on the DIE, then through abstract_origin/specification. */
  inherited<T>(die: Die, get: (d: Die) => T | undefined): T | undefined {
    let d: Die | undefined = die;
    for (let depth = 0; d !== undefined && depth < 8; depth++) {
      const value = get(d);
      if (value !== undefined) return value;
      d = this.ref(d, DW_AT.abstract_origin) ?? this.ref(d, DW_AT.specification);
    }
    return undefined;
  }

  /** The DIE a DIE's abstract_origin or specification chain ends at (itself if none). */
  origin(die: Die): Die {
    let d = die;
    for (let depth = 0; depth < 8; depth++) {
      const next = this.ref(d, DW_AT.abstract_origin) ?? this.ref(d, DW_AT.specification);
      if (next === undefined) break;
      d = next;
    }
    return d;
  }

  /** The code ranges of a DIE: low_pc/high_pc (end address or length) or DW_AT_ranges. */
  ranges(die: Die): AddressRange[] {
    // A split unit's code is the skeleton's to say.
    const split = die.unit.split;
    if (split !== undefined && die.parent === undefined) {
      return this.ranges(this.ownRoot(split.skeleton));
    }
    const low = this.address(die, DW_AT.low_pc);
    const highValue = die.attrs.get(DW_AT.high_pc);
    if (low !== undefined && highValue !== undefined) {
      const high =
        highValue.kind === 'constant' ? low + highValue.value : this.address(die, DW_AT.high_pc);
      return high === undefined || high <= low ? [] : [{ low, high }];
    }
    const ranges = die.attrs.get(DW_AT.ranges);
    if (ranges === undefined) return [];
    const unit = die.unit;
    const base = this.baseAddress(unit);
    if (unit.version >= 5) {
      let offset: number;
      if (ranges.kind === 'rnglistx') {
        offset = this.listOffset(unit, 'rngLists', DW_AT.rnglists_base, ranges.index);
      } else if (ranges.kind === 'sec-offset' || ranges.kind === 'constant') {
        offset = Number(ranges.kind === 'sec-offset' ? ranges.value : ranges.value);
      } else return [];
      return readRngList(this, unit, offset, base);
    }
    if (ranges.kind !== 'sec-offset' && ranges.kind !== 'constant') return [];
    const offset = ranges.kind === 'sec-offset' ? ranges.value : Number(ranges.value);
    const extra =
      die.tag === DW_TAG.compile_unit ? 0 : (this.unitBase(unit, DW_AT.GNU_ranges_base) ?? 0);
    return readRanges(this.sections.ranges, unit.addressSize, offset + extra, base);
  }

  /**
   * The entry address of a subprogram or inlined instance: DW_AT_entry_pc, else DW_AT_low_pc,
   * else (code in several ranges) the start of its first range for a subprogram, as gdb takes
   * it (GCC lists a function's own code before its .cold part, which lies lower, in
   * .text.unlikely), and the lowest address for an inlined instance.
   */
  entryPc(die: Die): bigint | undefined {
    const ranges = this.ranges(die);
    const entry = die.attrs.get(DW_AT.entry_pc);
    if (entry !== undefined) {
      if (entry.kind === 'constant') {
        const low = this.address(die, DW_AT.low_pc) ?? ranges[0]?.low;
        if (low !== undefined) return low + entry.value;
      } else {
        const address = this.address(die, DW_AT.entry_pc);
        if (address !== undefined) return address;
      }
    }
    const low = this.address(die, DW_AT.low_pc);
    if (low !== undefined) return low;
    if (die.tag === DW_TAG.subprogram) return ranges[0]?.low;
    let lowest: bigint | undefined;
    for (const r of ranges) if (lowest === undefined || r.low < lowest) lowest = r.low;
    return lowest;
  }

  /** The unit's base address (the compile unit's low_pc; 0 without one). */
  baseAddress(unit: Unit): bigint {
    return this.address(this.lineRoot(unit), DW_AT.low_pc) ?? 0n;
  }

  private listOffset(
    unit: Unit,
    section: 'rngLists' | 'locLists',
    baseAt: number,
    index: number,
  ): number {
    const base = this.unitBase(unit, baseAt, unit.offsetSize === 4 ? 12 : 20)!;
    const bytes = this.sectionsOf(unit)[section];
    const name = section === 'rngLists' ? '.debug_rnglists' : '.debug_loclists';
    const c = new Cursor(bytes, name);
    const at = base + index * unit.offsetSize;
    if (at > bytes.length) c.fail(at, `list index ${index} past the end`);
    c.offset = at;
    return base + c.sectionOffset(unit.offsetSize);
  }

  /** The location expression of `at` (DW_AT_location, DW_AT_frame_base) that applies at `pc`. */
  locationAt(die: Die, at: number, pc: bigint): LocationAt {
    const value = die.attrs.get(at);
    if (value === undefined) return { kind: 'absent' };
    if (value.kind === 'block') return { kind: 'expr', expr: value.bytes };
    const unit = die.unit;
    const base = this.baseAddress(unit);
    let expr: Uint8Array | undefined;
    if (unit.version >= 5) {
      let offset: number;
      if (value.kind === 'loclistx') {
        offset = this.listOffset(unit, 'locLists', DW_AT.loclists_base, value.index);
      } else if (value.kind === 'sec-offset') offset = value.value;
      else return { kind: 'absent' };
      expr = readLocList(this, unit, offset, base, pc);
    } else {
      let offset: number;
      if (value.kind === 'sec-offset') offset = value.value;
      else if (value.kind === 'constant' && !value.signed) offset = Number(value.value);
      else return { kind: 'absent' };
      expr =
        unit.split === undefined
          ? readLoc(this.sections.loc, unit.addressSize, offset, base, pc)
          : readSplitLoc(this, unit, offset, pc);
    }
    return expr === undefined || expr.length === 0 ? { kind: 'none' } : { kind: 'expr', expr };
  }
}

function isCodeUnit(unit: Unit): boolean {
  return (
    unit.unitType === DW_UT.compile ||
    unit.unitType === DW_UT.partial ||
    unit.unitType === DW_UT.skeleton
  );
}

/** Reads one attribute value of `form`. */
function readForm(
  c: Cursor,
  form: number,
  unit: Unit,
  implicitConst: bigint | undefined,
): AttrValue {
  const at = c.offset;
  switch (form) {
    case DW_FORM.addr:
      return { kind: 'address', value: c.unsigned(unit.addressSize) };
    case DW_FORM.addrx:
    case DW_FORM.GNU_addr_index:
      return { kind: 'addrx', index: c.ulebNumber() };
    case DW_FORM.addrx1:
      return { kind: 'addrx', index: c.u8() };
    case DW_FORM.addrx2:
      return { kind: 'addrx', index: c.u16() };
    case DW_FORM.addrx3:
      return { kind: 'addrx', index: c.u24() };
    case DW_FORM.addrx4:
      return { kind: 'addrx', index: c.u32() };
    case DW_FORM.string:
      return { kind: 'string', value: c.cstring() };
    case DW_FORM.strp:
      return { kind: 'strp', section: 'str', offset: c.sectionOffset(unit.offsetSize) };
    case DW_FORM.line_strp:
      return { kind: 'strp', section: 'lineStr', offset: c.sectionOffset(unit.offsetSize) };
    case DW_FORM.strx:
    case DW_FORM.GNU_str_index:
      return { kind: 'strx', index: c.ulebNumber() };
    case DW_FORM.strx1:
      return { kind: 'strx', index: c.u8() };
    case DW_FORM.strx2:
      return { kind: 'strx', index: c.u16() };
    case DW_FORM.strx3:
      return { kind: 'strx', index: c.u24() };
    case DW_FORM.strx4:
      return { kind: 'strx', index: c.u32() };
    case DW_FORM.data1:
      return { kind: 'constant', value: BigInt(c.u8()), signed: false };
    case DW_FORM.data2:
      return { kind: 'constant', value: BigInt(c.u16()), signed: false };
    case DW_FORM.data4:
      return { kind: 'constant', value: BigInt(c.u32()), signed: false };
    case DW_FORM.data8:
      return { kind: 'constant', value: c.u64(), signed: false };
    case DW_FORM.data16:
      return { kind: 'block', bytes: c.bytes.subarray(c.take(16), c.offset), exprloc: false };
    case DW_FORM.sdata:
      return { kind: 'constant', value: c.sleb(), signed: true };
    case DW_FORM.udata:
      return { kind: 'constant', value: c.uleb(), signed: false };
    case DW_FORM.implicit_const:
      if (implicitConst === undefined) c.fail(at, 'implicit_const without a value');
      return { kind: 'constant', value: implicitConst, signed: true };
    case DW_FORM.flag:
      return { kind: 'flag', value: c.u8() !== 0 };
    case DW_FORM.flag_present:
      return { kind: 'flag', value: true };
    case DW_FORM.exprloc:
    case DW_FORM.block:
      return block(c, c.ulebNumber(), form === DW_FORM.exprloc);
    case DW_FORM.block1:
      return block(c, c.u8(), false);
    case DW_FORM.block2:
      return block(c, c.u16(), false);
    case DW_FORM.block4:
      return block(c, c.u32(), false);
    case DW_FORM.ref1:
      return localRef(c, unit, c.u8());
    case DW_FORM.ref2:
      return localRef(c, unit, c.u16());
    case DW_FORM.ref4:
      return localRef(c, unit, c.u32());
    case DW_FORM.ref8:
      return localRef(c, unit, c.u64Number());
    case DW_FORM.ref_udata:
      return localRef(c, unit, c.ulebNumber());
    case DW_FORM.ref_addr:
      return {
        kind: 'ref',
        offset:
          unit.version <= 2
            ? Number(c.unsigned(unit.addressSize))
            : c.sectionOffset(unit.offsetSize),
      };
    case DW_FORM.sec_offset:
      return { kind: 'sec-offset', value: c.sectionOffset(unit.offsetSize) };
    case DW_FORM.loclistx:
      return { kind: 'loclistx', index: c.ulebNumber() };
    case DW_FORM.rnglistx:
      return { kind: 'rnglistx', index: c.ulebNumber() };
    case DW_FORM.ref_sig8:
      c.skip(8);
      return { kind: 'unsupported', form };
    case DW_FORM.ref_sup4:
      return { kind: 'sup-ref', offset: c.u32() };
    case DW_FORM.ref_sup8:
      return { kind: 'sup-ref', offset: c.u64Number() };
    case DW_FORM.GNU_ref_alt:
      return { kind: 'sup-ref', offset: c.sectionOffset(unit.offsetSize) };
    case DW_FORM.strp_sup:
    case DW_FORM.GNU_strp_alt:
      return { kind: 'strp', section: 'sup', offset: c.sectionOffset(unit.offsetSize) };
    case DW_FORM.indirect: {
      const actual = c.ulebNumber();
      if (actual === DW_FORM.indirect || actual === DW_FORM.implicit_const) {
        c.fail(at, `DW_FORM_indirect names form 0x${actual.toString(16)}`);
      }
      return readForm(c, actual, unit, undefined);
    }
    default:
      return c.fail(at, `unknown attribute form 0x${form.toString(16)}`);
  }
}

function block(c: Cursor, length: number, exprloc: boolean): AttrValue {
  const start = c.take(length);
  return { kind: 'block', bytes: c.bytes.subarray(start, start + length), exprloc };
}

function localRef(c: Cursor, unit: Unit, offset: number): AttrValue {
  const target = unit.offset + offset;
  if (target >= unit.end) c.fail(c.offset, `reference 0x${offset.toString(16)} past its unit`);
  return { kind: 'ref', offset: target };
}

/** A DWARF 2-4 .debug_ranges list. */
function readRanges(
  bytes: Uint8Array,
  addressSize: number,
  offset: number,
  unitBase: bigint,
): AddressRange[] {
  const c = listAt(bytes, '.debug_ranges', offset, 'range');
  const all = addressSize === 8 ? MAX_ADDRESS : 0xffff_ffffn;
  let base = unitBase;
  const out: AddressRange[] = [];
  for (;;) {
    const begin = c.unsigned(addressSize);
    const end = c.unsigned(addressSize);
    if (begin === 0n && end === 0n) return out;
    if (begin === all) base = end;
    else if (end > begin) out.push({ low: base + begin, high: base + end });
  }
}

const DW_RLE = {
  end_of_list: 0,
  base_addressx: 1,
  startx_endx: 2,
  startx_length: 3,
  offset_pair: 4,
  base_address: 5,
  start_end: 6,
  start_length: 7,
} as const;

/** A DWARF 5 .debug_rnglists list. */
function readRngList(
  info: DebugInfo,
  unit: Unit,
  offset: number,
  unitBase: bigint,
): AddressRange[] {
  const bytes = info.sectionsOf(unit).rngLists;
  const c = listAt(bytes, '.debug_rnglists', offset, 'range');
  let base = unitBase;
  const out: AddressRange[] = [];
  const push = (low: bigint, high: bigint) => {
    if (high > low) out.push({ low, high });
  };
  for (;;) {
    const at = c.offset;
    const kind = c.u8();
    switch (kind) {
      case DW_RLE.end_of_list:
        return out;
      case DW_RLE.base_addressx:
        base = info.indexedAddress(unit, c.ulebNumber());
        break;
      case DW_RLE.startx_endx: {
        const low = info.indexedAddress(unit, c.ulebNumber());
        push(low, info.indexedAddress(unit, c.ulebNumber()));
        break;
      }
      case DW_RLE.startx_length: {
        const low = info.indexedAddress(unit, c.ulebNumber());
        push(low, low + c.uleb());
        break;
      }
      case DW_RLE.offset_pair: {
        const low = base + c.uleb();
        push(low, base + c.uleb());
        break;
      }
      case DW_RLE.base_address:
        base = c.unsigned(unit.addressSize);
        break;
      case DW_RLE.start_end: {
        const low = c.unsigned(unit.addressSize);
        push(low, c.unsigned(unit.addressSize));
        break;
      }
      case DW_RLE.start_length: {
        const low = c.unsigned(unit.addressSize);
        push(low, low + c.uleb());
        break;
      }
      default:
        c.fail(at, `unknown range list entry kind ${kind}`);
    }
  }
}

/** The expression of a DWARF 2-4 .debug_loc list that covers `pc`. */
function readLoc(
  bytes: Uint8Array,
  addressSize: number,
  offset: number,
  unitBase: bigint,
  pc: bigint,
): Uint8Array | undefined {
  const c = listAt(bytes, '.debug_loc', offset, 'location');
  const all = addressSize === 8 ? MAX_ADDRESS : 0xffff_ffffn;
  let base = unitBase;
  for (;;) {
    const begin = c.unsigned(addressSize);
    const end = c.unsigned(addressSize);
    if (begin === 0n && end === 0n) return undefined;
    if (begin === all) {
      base = end;
      continue;
    }
    const length = c.u16();
    const start = c.take(length);
    if (pc >= base + begin && pc < base + end) return bytes.subarray(start, start + length);
  }
}

/** The entries of a DWARF 4 .dwo's .debug_loc.dwo (GCC's extension): addresses by index. */
const DW_LLE_GNU = {
  end_of_list: 0,
  base_address_selection: 1,
  start_end: 2,
  start_length: 3,
} as const;

/**
 * The expression of a DWARF 4 .dwo's location list that covers `pc`: its addresses are
 * indexes into the program's .debug_addr, whole addresses (no base is added to them).
 */
function readSplitLoc(
  info: DebugInfo,
  unit: Unit,
  offset: number,
  pc: bigint,
): Uint8Array | undefined {
  const bytes = info.sectionsOf(unit).loc;
  const c = listAt(bytes, '.debug_loc.dwo', offset, 'location');
  for (;;) {
    const kind = c.u8();
    let low: bigint;
    let high: bigint;
    if (kind === DW_LLE_GNU.end_of_list) return undefined;
    if (kind === DW_LLE_GNU.base_address_selection) {
      c.ulebNumber();
      continue;
    }
    if (kind === DW_LLE_GNU.start_end) {
      low = info.indexedAddress(unit, c.ulebNumber());
      high = info.indexedAddress(unit, c.ulebNumber());
    } else if (kind === DW_LLE_GNU.start_length) {
      low = info.indexedAddress(unit, c.ulebNumber());
      high = low + BigInt(c.u32());
    } else {
      throw new DwarfFormatError('.debug_loc.dwo', c.offset - 1, `unknown entry kind ${kind}`);
    }
    const length = c.u16();
    const start = c.take(length);
    if (pc >= low && pc < high) return bytes.subarray(start, start + length);
  }
}

const DW_LLE = {
  end_of_list: 0,
  base_addressx: 1,
  startx_endx: 2,
  startx_length: 3,
  offset_pair: 4,
  default_location: 5,
  base_address: 6,
  start_end: 7,
  start_length: 8,
} as const;

/** The expression of a DWARF 5 .debug_loclists list that covers `pc` (or its default). */
function readLocList(
  info: DebugInfo,
  unit: Unit,
  offset: number,
  unitBase: bigint,
  pc: bigint,
): Uint8Array | undefined {
  const bytes = info.sectionsOf(unit).locLists;
  const c = listAt(bytes, '.debug_loclists', offset, 'location');
  let base = unitBase;
  let fallback: Uint8Array | undefined;
  const expr = (): Uint8Array => {
    const length = c.ulebNumber();
    const start = c.take(length);
    return bytes.subarray(start, start + length);
  };
  for (;;) {
    const at = c.offset;
    const kind = c.u8();
    let low: bigint;
    let high: bigint;
    switch (kind) {
      case DW_LLE.end_of_list:
        return fallback;
      case DW_LLE.base_addressx:
        base = info.indexedAddress(unit, c.ulebNumber());
        continue;
      case DW_LLE.base_address:
        base = c.unsigned(unit.addressSize);
        continue;
      case DW_LLE.default_location:
        fallback = expr();
        continue;
      case DW_LLE.startx_endx:
        low = info.indexedAddress(unit, c.ulebNumber());
        high = info.indexedAddress(unit, c.ulebNumber());
        break;
      case DW_LLE.startx_length:
        low = info.indexedAddress(unit, c.ulebNumber());
        high = low + c.uleb();
        break;
      case DW_LLE.offset_pair:
        low = base + c.uleb();
        high = base + c.uleb();
        break;
      case DW_LLE.start_end:
        low = c.unsigned(unit.addressSize);
        high = c.unsigned(unit.addressSize);
        break;
      case DW_LLE.start_length:
        low = c.unsigned(unit.addressSize);
        high = low + c.uleb();
        break;
      default:
        return c.fail(at, `unknown location list entry kind ${kind}`);
    }
    const e = expr();
    if (pc >= low && pc < high) return e;
  }
}

/**
 * The unit headers of a .debug_info section (or a .dwo's .debug_info.dwo, whose units are
 * `split`), in section order.
 */
function readUnits(
  info: Uint8Array,
  name: string,
  split: SplitUnit | undefined,
  supplementary?: true,
): Unit[] {
  const units: Unit[] = [];
  const c = new Cursor(info, name);
  while (!c.atEnd) {
    const offset = c.offset;
    const { length, offsetSize } = c.initialLength();
    const body = c.sub(length);
    const end = body.end;
    const version = body.u16();
    if (version < 2 || version > 5) body.fail(offset + 4, `unsupported DWARF version ${version}`);
    let unitType: number = DW_UT.compile;
    let addressSize: number;
    let abbrevOffset: number;
    let dwoId: bigint | undefined;
    if (version >= 5) {
      unitType = body.u8();
      addressSize = body.u8();
      abbrevOffset = body.sectionOffset(offsetSize);
      if (unitType === DW_UT.skeleton || unitType === DW_UT.split_compile) {
        dwoId = body.unsigned(8);
      } else if (unitType === DW_UT.type || unitType === DW_UT.split_type) {
        body.skip(8 + offsetSize);
      }
    } else {
      abbrevOffset = body.sectionOffset(offsetSize);
      addressSize = body.u8();
    }
    if (addressSize !== 4 && addressSize !== 8) {
      body.fail(offset, `unit has address size ${addressSize}`);
    }
    units.push({
      offset,
      end,
      version,
      unitType,
      addressSize,
      offsetSize,
      abbrevOffset,
      dieOffset: body.offset,
      dwoId,
      split,
      supplementary,
    });
  }
  return units;
}

/** The unit of `units` (in section order) holding a .debug_info offset. */
function unitHolding(units: readonly Unit[], offset: number): Unit | undefined {
  let lo = 0;
  let hi = units.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const u = units[mid]!;
    if (offset < u.offset) hi = mid - 1;
    else if (offset >= u.end) lo = mid + 1;
    else return u;
  }
  return undefined;
}

/** A cursor at a list's `offset` in its section (checked to be in it). */
function listAt(
  bytes: Uint8Array,
  section: string,
  offset: number,
  what: 'range' | 'location',
): Cursor {
  const c = new Cursor(bytes, section);
  if (offset > bytes.length) c.fail(offset, `${what} list offset past the end`);
  c.offset = offset;
  return c;
}
