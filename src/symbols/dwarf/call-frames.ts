import { Cursor } from './cursor.js';
import type { DwarfSections } from './sections.js';

/** How the canonical frame address (CFA) is computed at one pc. */
export type CfaRule =
  | { readonly kind: 'register'; readonly register: number; readonly offset: bigint }
  /** DW_CFA_def_cfa_expression: computed by an expression this reader does not run. */
  | { readonly kind: 'expression' };

interface Cie {
  readonly returnColumn: number;
  readonly signalFrame: boolean;
  readonly codeAlign: bigint;
  readonly dataAlign: bigint;
  readonly addressSize: number;
  /** The FDE pointer encoding ('R'), DW_EH_PE_absptr when absent. */
  readonly fdeEncoding: number;
  readonly hasAugmentationData: boolean;
  readonly initial: Cursor;
}

interface Fde {
  readonly low: bigint;
  readonly high: bigint;
  readonly cie: Cie;
  readonly instructions: Cursor;
  readonly section: 'eh' | 'debug';
}

const DW_EH_PE = {
  omit: 0xff,
  absptr: 0x00,
  uleb128: 0x01,
  udata2: 0x02,
  udata4: 0x03,
  udata8: 0x04,
  sleb128: 0x09,
  sdata2: 0x0a,
  sdata4: 0x0b,
  sdata8: 0x0c,
  pcrel: 0x10,
  textrel: 0x20,
  datarel: 0x30,
  funcrel: 0x40,
  aligned: 0x50,
  indirect: 0x80,
} as const;

export interface CallFrameOptions {
  /** Base of DW_EH_PE_datarel pointers (the GOT on x86-64); 0 when unknown. */
  readonly dataRelBase?: bigint | undefined;
  /** Base of DW_EH_PE_textrel pointers (.text); 0 when unknown. */
  readonly textRelBase?: bigint | undefined;
}

/**
 * Call frame information from .eh_frame and .debug_frame: CIEs and FDEs (augmentations z, R,
 * P, L, S; every pointer encoding), read once, and the CFA program run up to a pc.
 */
export class CallFrames {
  private fdes: Fde[] | undefined;
  private ranges: RangeIndex | undefined;

  constructor(
    private readonly sections: DwarfSections,
    private readonly options: CallFrameOptions = {},
  ) {}

  /** The CFA rule at `pc`, or undefined when no FDE covers it. */
  cfaAt(pc: bigint): CfaRule | undefined {
    const at = this.covering(pc);
    if (at === undefined) return undefined;
    return runCfa(this.all()[at]!, pc);
  }

  /**
   * Whether an FDE covers `pc` (without running its program): from the FDEs' ranges alone,
   * without making an FDE of each (asked once per function of a pattern over a large program:
   * node's 75,922 FDEs made and sorted took 75 ms, their ranges 21).
   */
  covers(pc: bigint): boolean {
    return this.covering(pc) !== undefined;
  }

  /**
   * Where in section order the first FDE that covers `pc` is: a binary search over the FDEs'
   * ranges sorted by start, built once (a file has tens of thousands; callers ask once per
   * function).
   */
  private covering(pc: bigint): number | undefined {
    this.ranges ??= rangeIndex(this.sections, this.options);
    const { order, lows, highs, reach } = this.ranges;
    const at = Number(pc);
    // The last FDE (by start) that starts at or before pc.
    let lo = 0;
    let hi = lows.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (lows[mid]! <= at) lo = mid + 1;
      else hi = mid;
    }
    // Walk back while an FDE that starts earlier may still reach past pc (overlaps are rare).
    let best: number | undefined;
    for (let i = lo - 1; i >= 0 && reach[i]! > at; i--) {
      if (at < highs[i]! && (best === undefined || order[i]! < best)) best = order[i]!;
    }
    return best;
  }

  /**
   * Every row of every FDE, in section order (.eh_frame first, then .debug_frame): the rules
   * from each row's address up to the next row's. A row whose program cannot be read is left
   * out with the rest of its FDE.
   */
  *rows(): Generator<CallFrameRow> {
    for (const fde of this.all()) {
      const found: CallFrameRow[] = [];
      try {
        runProgram(fde, undefined, (low, high, state) => {
          found.push({
            low,
            high,
            cfa: cfaOf(state),
            registers: new Map(state.registers),
            returnColumn: fde.cie.returnColumn,
            signalFrame: fde.cie.signalFrame,
            section: fde.section,
          });
        });
      } catch {
        // A damaged FDE: the rows read before the damage are kept.
      }
      yield* found;
    }
  }

  private all(): Fde[] {
    if (this.fdes !== undefined) return this.fdes;
    const fdes: Fde[] = [];
    if (this.sections.ehFrame.length > 0) {
      readFrames(this.sections.ehFrame, 'eh', this.sections.ehFrameVaddr, this.options, fdes);
    }
    if (this.sections.frame.length > 0) {
      readFrames(this.sections.frame, 'debug', 0n, this.options, fdes);
    }
    this.fdes = fdes;
    return fdes;
  }
}

/** DW_EH_PE_pcrel | DW_EH_PE_sdata4. */
const PCREL_SDATA4 = 0x1b;

/**
 * The FDEs' ranges as numbers, sorted by start: each one's place in section order (that of
 * CallFrames.all()), start, end, and the furthest end so far.
 */
interface RangeIndex {
  readonly order: Uint32Array;
  readonly lows: Float64Array;
  readonly highs: Float64Array;
  readonly reach: Float64Array;
}

function rangeIndex(sections: DwarfSections, options: CallFrameOptions): RangeIndex {
  const lows: number[] = [];
  const highs: number[] = [];
  if (sections.ehFrame.length > 0) {
    readRanges(sections.ehFrame, 'eh', sections.ehFrameVaddr, options, lows, highs);
  }
  if (sections.frame.length > 0) readRanges(sections.frame, 'debug', 0n, options, lows, highs);
  // Plain loops: TypedArray.from() with a function, over 76,000 FDEs, took 20 ms.
  const count = lows.length;
  const order = new Uint32Array(count);
  let sorted = true;
  for (let i = 0; i < count; i++) {
    order[i] = i;
    if (i > 0 && lows[i]! < lows[i - 1]!) sorted = false;
  }
  // A linker writes them in address order, mostly: sorted only when they are not.
  if (!sorted) order.sort((a, b) => lows[a]! - lows[b]! || a - b);
  const index: RangeIndex = {
    order,
    lows: new Float64Array(count),
    highs: new Float64Array(count),
    reach: new Float64Array(count),
  };
  let furthest = 0;
  for (let k = 0; k < count; k++) {
    const i = order[k]!;
    index.lows[k] = lows[i]!;
    index.highs[k] = highs[i]!;
    if (highs[i]! > furthest) furthest = highs[i]!;
    index.reach[k] = furthest;
  }
  return index;
}

/** Each FDE's [low, high) in a call frame section, as numbers, into `lows` and `highs`. */
function readRanges(
  bytes: Uint8Array,
  kind: 'eh' | 'debug',
  sectionVaddr: bigint,
  options: CallFrameOptions,
  lows: number[],
  highs: number[],
): void {
  const reader = frameReader(bytes, kind, sectionVaddr, options);
  const c = new Cursor(bytes, reader.name);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const base = Number(sectionVaddr);
  while (!c.atEnd) {
    const start = c.offset;
    // The usual FDE (.eh_frame, a 4-byte length, its start relative to where it is kept and
    // its size 4 bytes each, as gcc and clang write them) read as numbers; any other entry
    // as DWARF says.
    const short = kind === 'eh' && start + 8 <= bytes.length ? view.getUint32(start, true) : 0;
    if (short > 0 && short < 0xffff_fff0 && start + 4 + short <= bytes.length) {
      const id = view.getUint32(start + 4, true);
      if (id !== 0) {
        const cie = reader.parseCie(start + 4 - id, start + 4);
        if (cie.fdeEncoding === PCREL_SDATA4 && short >= 12) {
          const low = base + start + 8 + view.getInt32(start + 8, true);
          lows.push(low);
          highs.push(low + view.getInt32(start + 12, true));
          c.offset = start + 4 + short;
          continue;
        }
      }
    }
    const { length, offsetSize } = c.initialLength();
    const next = c.offset + length;
    if (length === 0) continue;
    if (next > bytes.length) c.fail(start, 'an entry runs past the end');
    const idAt = c.offset;
    const id = offsetSize === 4 ? BigInt(c.u32()) : c.u64();
    if (!reader.isCie(id, offsetSize)) {
      const cie = reader.parseCie(kind === 'eh' ? idAt - Number(id) : Number(id), idAt);
      const low = reader.readPointer(c, cie.fdeEncoding, cie.addressSize);
      const range = reader.readPointer(c, cie.fdeEncoding & 0x0f, cie.addressSize);
      lows.push(Number(low));
      highs.push(Number(low + range));
    }
    c.offset = next;
  }
}

/** What reading a call frame section's entries needs: its CIEs (read once) and pointers. */
function frameReader(
  bytes: Uint8Array,
  kind: 'eh' | 'debug',
  sectionVaddr: bigint,
  options: CallFrameOptions,
): {
  readonly name: string;
  readonly isCie: (id: bigint, offsetSize: number) => boolean;
  readonly parseCie: (offset: number, from: number) => Cie;
  readonly readPointer: (cur: Cursor, encoding: number, addressSize: number) => bigint;
} {
  const name = kind === 'eh' ? '.eh_frame' : '.debug_frame';
  const cies = new Map<number, Cie>();
  const isCie = (id: bigint, offsetSize: number) =>
    kind === 'eh' ? id === 0n : id === (offsetSize === 4 ? 0xffff_ffffn : 2n ** 64n - 1n);
  const readPointer = (cur: Cursor, encoding: number, addressSize: number): bigint => {
    if (encoding === DW_EH_PE.omit) return 0n;
    const fieldVaddr = sectionVaddr + BigInt(cur.offset);
    let value: bigint;
    switch (encoding & 0x0f) {
      case DW_EH_PE.absptr:
        value = cur.unsigned(addressSize);
        break;
      case DW_EH_PE.uleb128:
        value = cur.uleb();
        break;
      case DW_EH_PE.udata2:
        value = BigInt(cur.u16());
        break;
      case DW_EH_PE.udata4:
        value = BigInt(cur.u32());
        break;
      case DW_EH_PE.udata8:
        value = cur.u64();
        break;
      case DW_EH_PE.sleb128:
        value = cur.sleb();
        break;
      case DW_EH_PE.sdata2:
        value = BigInt(cur.s16());
        break;
      case DW_EH_PE.sdata4:
        value = BigInt(cur.s32());
        break;
      case DW_EH_PE.sdata8:
        value = cur.s64();
        break;
      default:
        return cur.fail(cur.offset, `unknown pointer encoding 0x${encoding.toString(16)}`);
    }
    switch (encoding & 0x70) {
      case 0:
        break;
      case DW_EH_PE.pcrel:
        value += fieldVaddr;
        break;
      case DW_EH_PE.datarel:
        value += options.dataRelBase ?? 0n;
        break;
      case DW_EH_PE.textrel:
        value += options.textRelBase ?? 0n;
        break;
      default:
        return cur.fail(cur.offset, `unsupported pointer application 0x${encoding.toString(16)}`);
    }
    return BigInt.asUintN(64, value);
  };
  const parseCie = (offset: number, from: number): Cie => {
    const known = cies.get(offset);
    if (known !== undefined) return known;
    const cur = new Cursor(bytes, name);
    if (offset < 0) cur.fail(from, 'CIE pointer before the section');
    if (offset >= bytes.length) cur.fail(offset, 'CIE pointer past the end');
    cur.offset = offset;
    const { length, offsetSize } = cur.initialLength();
    const body = cur.sub(length);
    const id = offsetSize === 4 ? BigInt(body.u32()) : body.u64();
    if (!isCie(id, offsetSize)) body.fail(offset, 'an FDE points at something that is not a CIE');
    const version = body.u8();
    if (version !== 1 && version !== 3 && version !== 4)
      body.fail(offset, `CIE version ${version}`);
    const augmentation = body.cstring();
    let addressSize = 8;
    if (version === 4) {
      addressSize = body.u8();
      body.u8(); // segment selector size
    }
    if (augmentation.includes('eh')) body.skip(addressSize);
    const codeAlign = body.uleb();
    const dataAlign = body.sleb();
    const returnColumn = version === 1 ? body.u8() : body.ulebNumber();
    let fdeEncoding: number = DW_EH_PE.absptr;
    const hasAugmentationData = augmentation.startsWith('z');
    if (hasAugmentationData) {
      const data = body.sub(body.ulebNumber());
      for (const ch of augmentation.slice(1)) {
        if (ch === 'R') fdeEncoding = data.u8();
        else if (ch === 'P') {
          const encoding = data.u8();
          readPointer(data, encoding & ~DW_EH_PE.indirect, addressSize);
        } else if (ch === 'L') data.u8();
        else if (ch === 'S' || ch === 'B' || ch === 'G') {
          // signal frame, BTI, MTE: no data
        } else break;
      }
    }
    const cie: Cie = {
      returnColumn,
      signalFrame: augmentation.includes('S'),
      codeAlign,
      dataAlign,
      addressSize,
      fdeEncoding,
      hasAugmentationData,
      initial: body.sub(body.remaining),
    };
    cies.set(offset, cie);
    return cie;
  };
  return { name, isCie, parseCie, readPointer };
}

function readFrames(
  bytes: Uint8Array,
  kind: 'eh' | 'debug',
  sectionVaddr: bigint,
  options: CallFrameOptions,
  out: Fde[],
): void {
  const { name, isCie, parseCie, readPointer } = frameReader(bytes, kind, sectionVaddr, options);
  const c = new Cursor(bytes, name);
  while (!c.atEnd) {
    const start = c.offset;
    const { length, offsetSize } = c.initialLength();
    if (length === 0) continue; // .eh_frame's terminator (or padding)
    const body = c.sub(length);
    const idAt = body.offset;
    const id = offsetSize === 4 ? BigInt(body.u32()) : body.u64();
    if (isCie(id, offsetSize)) {
      parseCie(start, start);
      continue;
    }
    const cie = parseCie(kind === 'eh' ? idAt - Number(id) : Number(id), idAt);
    const low = readPointer(body, cie.fdeEncoding, cie.addressSize);
    const range = readPointer(body, cie.fdeEncoding & 0x0f, cie.addressSize);
    if (cie.hasAugmentationData) body.skip(body.ulebNumber());
    out.push({
      low,
      high: low + range,
      cie,
      instructions: body.sub(body.remaining),
      section: kind,
    });
  }
}

/** Where a register's value in the caller is, at one pc (DWARF's register rules). */
export type RegisterRule =
  | { readonly kind: 'undefined' }
  | { readonly kind: 'same' }
  /** Saved at CFA + offset. */
  | { readonly kind: 'offset'; readonly offset: bigint }
  /** Its value is CFA + offset. */
  | { readonly kind: 'val-offset'; readonly offset: bigint }
  /** Held in another register. */
  | { readonly kind: 'register'; readonly register: number }
  /** Saved at the address the expression computes (the CFA pushed first). */
  | { readonly kind: 'expression'; readonly expression: Uint8Array }
  /** Its value is what the expression computes. */
  | { readonly kind: 'val-expression'; readonly expression: Uint8Array };

/** The CFA at one pc, with the expression's bytes when it is computed by one. */
export type CfaDefinition =
  | { readonly kind: 'register'; readonly register: number; readonly offset: bigint }
  | { readonly kind: 'expression'; readonly expression: Uint8Array };

/** One row of the unwind table: from `low` up to the next row (or the FDE's end). */
export interface CallFrameRow {
  readonly low: bigint;
  readonly high: bigint;
  readonly cfa: CfaDefinition;
  /** The rules of the registers the row's instructions name (others: the ABI's default). */
  readonly registers: ReadonlyMap<number, RegisterRule>;
  /** The return address column of the CIE (16, rip, on x86-64). */
  readonly returnColumn: number;
  /** A signal frame (augmentation 'S'): its pc is the interrupted one, not a return address. */
  readonly signalFrame: boolean;
  /** From .eh_frame, or from .debug_frame. */
  readonly section: 'eh' | 'debug';
}

interface CfaState {
  register: number;
  offset: bigint;
  expression: Uint8Array | undefined;
  registers: Map<number, RegisterRule>;
}

function copyState(state: CfaState): CfaState {
  return { ...state, registers: new Map(state.registers) };
}

/**
 * Runs the CIE's initial instructions then the FDE's, calling `row` with each row's state as
 * its location ends (a row that covers no address is skipped), up to `stopPc` when given:
 * then the state at `stopPc` is returned without further rows.
 */
function runProgram(
  fde: Fde,
  stopPc: bigint | undefined,
  row?: (low: bigint, high: bigint, state: CfaState) => void,
): CfaState {
  const state: CfaState = {
    register: 7,
    offset: 8n,
    expression: undefined,
    registers: new Map(),
  };
  const stack: CfaState[] = [];
  let initial = new Map<number, RegisterRule>();
  let loc = fde.low;
  /** Whether the program goes on: false once `stopPc` lies before the new location. */
  const moveTo = (next: bigint): boolean => {
    if (stopPc !== undefined) return next <= stopPc;
    if (row !== undefined && next > loc) row(loc, next, state);
    return true;
  };
  const run = (program: Cursor, isCie: boolean): boolean => {
    const c = new Cursor(program.bytes, program.section, program.offset, program.end);
    const advance = (delta: bigint): boolean => {
      const next = loc + delta * fde.cie.codeAlign;
      if (!moveTo(next)) return false;
      loc = next;
      return true;
    };
    const factored = (value: bigint) => value * fde.cie.dataAlign;
    const restore = (register: number) => {
      const rule = initial.get(register);
      if (rule === undefined) state.registers.delete(register);
      else state.registers.set(register, rule);
    };
    while (!c.atEnd) {
      const at = c.offset;
      const op = c.u8();
      const high = op & 0xc0;
      const low = op & 0x3f;
      if (high === 0x40) {
        if (!advance(BigInt(low))) return false;
        continue;
      }
      if (high === 0x80) {
        state.registers.set(low, { kind: 'offset', offset: factored(c.uleb()) });
        continue;
      }
      if (high === 0xc0) {
        restore(low);
        continue;
      }
      switch (op) {
        case 0x00: // nop
          break;
        case 0x01: {
          // set_loc
          const next = c.unsigned(fde.cie.addressSize);
          if (!moveTo(next)) return false;
          loc = next;
          break;
        }
        case 0x02:
          if (!advance(BigInt(c.u8()))) return false;
          break;
        case 0x03:
          if (!advance(BigInt(c.u16()))) return false;
          break;
        case 0x04:
          if (!advance(BigInt(c.u32()))) return false;
          break;
        case 0x05: // offset_extended
          state.registers.set(c.ulebNumber(), { kind: 'offset', offset: factored(c.uleb()) });
          break;
        case 0x06: // restore_extended
          restore(c.ulebNumber());
          break;
        case 0x07: // undefined
          state.registers.set(c.ulebNumber(), { kind: 'undefined' });
          break;
        case 0x08: // same_value
          state.registers.set(c.ulebNumber(), { kind: 'same' });
          break;
        case 0x09: {
          // register
          const register = c.ulebNumber();
          state.registers.set(register, { kind: 'register', register: c.ulebNumber() });
          break;
        }
        case 0x0a:
          stack.push(copyState(state));
          break;
        case 0x0b: {
          const saved = stack.pop();
          if (saved === undefined) c.fail(at, 'DW_CFA_restore_state without remember_state');
          Object.assign(state, saved);
          break;
        }
        case 0x0c: // def_cfa
          state.register = c.ulebNumber();
          state.offset = c.uleb();
          state.expression = undefined;
          break;
        case 0x0d: // def_cfa_register
          state.register = c.ulebNumber();
          state.expression = undefined;
          break;
        case 0x0e: // def_cfa_offset
          state.offset = c.uleb();
          break;
        case 0x0f: // def_cfa_expression
          state.expression = c.bytes.slice(c.offset, c.offset + c.ulebNumber());
          c.skip(state.expression.length);
          break;
        case 0x10: // expression
        case 0x16: {
          // val_expression
          const register = c.ulebNumber();
          const length = c.ulebNumber();
          const expression = c.bytes.slice(c.offset, c.offset + length);
          c.skip(length);
          state.registers.set(register, {
            kind: op === 0x10 ? 'expression' : 'val-expression',
            expression,
          });
          break;
        }
        case 0x11: // offset_extended_sf
          state.registers.set(c.ulebNumber(), { kind: 'offset', offset: factored(c.sleb()) });
          break;
        case 0x14: // val_offset
          state.registers.set(c.ulebNumber(), { kind: 'val-offset', offset: factored(c.uleb()) });
          break;
        case 0x15: // val_offset_sf
          state.registers.set(c.ulebNumber(), { kind: 'val-offset', offset: factored(c.sleb()) });
          break;
        case 0x12: // def_cfa_sf
          state.register = c.ulebNumber();
          state.offset = factored(c.sleb());
          state.expression = undefined;
          break;
        case 0x13: // def_cfa_offset_sf
          state.offset = factored(c.sleb());
          break;
        case 0x2e: // GNU_args_size
          c.uleb();
          break;
        case 0x2f: // GNU_negative_offset_extended
          state.registers.set(c.ulebNumber(), { kind: 'offset', offset: -factored(c.uleb()) });
          break;
        default:
          c.fail(at, `unknown call frame instruction 0x${op.toString(16)}`);
      }
    }
    if (isCie) initial = new Map(state.registers);
    return true;
  };
  if (run(fde.cie.initial, true) && run(fde.instructions, false)) {
    if (stopPc === undefined && row !== undefined && fde.high > loc) row(loc, fde.high, state);
  }
  return state;
}

function cfaOf(state: CfaState): CfaDefinition {
  return state.expression === undefined
    ? { kind: 'register', register: state.register, offset: state.offset }
    : { kind: 'expression', expression: state.expression };
}

/** Runs the CIE's initial instructions then the FDE's, up to and including `pc`. */
function runCfa(fde: Fde, pc: bigint): CfaRule {
  const state = runProgram(fde, pc);
  return state.expression !== undefined
    ? { kind: 'expression' }
    : { kind: 'register', register: state.register, offset: state.offset };
}
