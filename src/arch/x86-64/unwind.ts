/**
 * Unwinding x86-64 user stacks without frame pointers: the call frame information of a file
 * (.eh_frame, .debug_frame) compiled into a table of rules, one per address range, each
 * saying how to find the caller's stack pointer (the CFA), return address and frame pointer
 * from the callee's. The bpf engine runs the same rules in the kernel (engines/bpf); the
 * ptrace engine runs them here, on the stopped thread's registers and memory.
 *
 * Only rsp, rbp and rip are followed, as the OpenTelemetry eBPF profiler does for native
 * code: every CFA rule compilers emit for x86-64 is computed from those (the PLT's and the
 * realigned stack's expressions included). Anything else is a rule the unwinder refuses,
 * and a stack that ends there ends with a marked frame that says why.
 */

import { interned } from '../../internal/index.js';

/** How the CFA (the caller's stack pointer, above the return address) is computed. */
export const CFA_KIND = {
  /** No call frame information covers the address. */
  none: 0,
  /** rsp + cfaOffset */
  rsp: 1,
  /** rbp + cfaOffset */
  rbp: 2,
  /** A PLT entry: rsp + cfaOffset, plus 8 when (pc & 15) >= cfaAdd (after its push). */
  plt: 3,
  /** *(rsp + cfaOffset) + cfaAdd: a stack realigned, the old rsp saved. */
  derefRsp: 4,
  /** *(rbp + cfaOffset) + cfaAdd */
  derefRbp: 5,
  /** A rule this unwinder does not follow. */
  unsupported: 6,
} as const;

/** Where the return address is. */
export const RA_KIND = {
  /** At CFA + raOffset (-8: what `call` pushed). */
  atCfa: 0,
  /** At rsp + raOffset (a signal frame's saved rip). */
  atRsp: 1,
  /** Undefined: the outermost frame (_start, a thread's start). */
  end: 2,
  unsupported: 3,
} as const;

/** Where the caller's rbp is. */
export const RBP_KIND = {
  /** Unchanged (never saved, or not yet). */
  same: 0,
  /** Saved at CFA + rbpOffset. */
  atCfa: 1,
  /** Saved at rbp + rbpOffset. */
  atRbp: 2,
  /** Saved at rsp + rbpOffset. */
  atRsp: 3,
  /** In some other register, or computed: the caller's rbp is not known. */
  unknown: 4,
} as const;

export interface UnwindRule {
  readonly cfa: number;
  readonly cfaOffset: number;
  readonly cfaAdd: number;
  readonly ra: number;
  readonly raOffset: number;
  readonly rbp: number;
  readonly rbpOffset: number;
  /** A signal frame: the caller's pc is the interrupted instruction, not a return address. */
  readonly signal: boolean;
}

/**
 * A file's unwind table: rows sorted by file offset, each the start of a range whose rule is
 * `ruleSet[rules[i]]`, up to the next row (a `none` rule ends what the CFI covers).
 */
export interface UnwindTable {
  readonly starts: Uint32Array;
  readonly rules: Uint32Array;
  readonly ruleSet: readonly UnwindRule[];
}

/** What `compileUnwindTable` takes of each CFI row (symbols/dwarf's CallFrameRow). */
export interface CfiRowInput {
  readonly low: bigint;
  readonly high: bigint;
  readonly cfa:
    | { readonly kind: 'register'; readonly register: number; readonly offset: bigint }
    | { readonly kind: 'expression'; readonly expression: Uint8Array };
  readonly registers: ReadonlyMap<number, CfiRegisterRule>;
  readonly returnColumn: number;
  readonly signalFrame: boolean;
}

type CfiRegisterRule =
  | { readonly kind: 'undefined' | 'same' }
  | { readonly kind: 'offset' | 'val-offset'; readonly offset: bigint }
  | { readonly kind: 'register'; readonly register: number }
  | { readonly kind: 'expression' | 'val-expression'; readonly expression: Uint8Array };

const RSP = 7;
const RBP = 6;
const RIP = 16;

/** DW_OP_* of the expressions recognised. */
const OP = {
  breg0: 0x70,
  lit0: 0x30,
  deref: 0x06,
  plusUconst: 0x23,
  and: 0x1a,
  ge: 0x2a,
  shl: 0x24,
  plus: 0x22,
} as const;

function readUleb(bytes: Uint8Array, at: { i: number }): bigint | undefined {
  let value = 0n;
  let shift = 0n;
  while (at.i < bytes.length) {
    const byte = bytes[at.i++]!;
    value |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if ((byte & 0x80) === 0) return value;
  }
  return undefined;
}

function readSleb(bytes: Uint8Array, at: { i: number }): bigint | undefined {
  let value = 0n;
  let shift = 0n;
  while (at.i < bytes.length) {
    const byte = bytes[at.i++]!;
    value |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if ((byte & 0x80) === 0) {
      if (byte & 0x40) value -= 1n << shift;
      return value;
    }
  }
  return undefined;
}

/** `DW_OP_bregN off` alone: [register, offset], else undefined. */
function bregOnly(expr: Uint8Array): [number, bigint] | undefined {
  const op = expr[0];
  if (op === undefined || op < OP.breg0 || op > OP.breg0 + 31) return undefined;
  const at = { i: 1 };
  const offset = readSleb(expr, at);
  if (offset === undefined || at.i !== expr.length) return undefined;
  return [op - OP.breg0, offset];
}

const I32_MIN = -(2n ** 31n);
const I32_MAX = 2n ** 31n - 1n;

function i32(value: bigint): number | undefined {
  return value < I32_MIN || value > I32_MAX ? undefined : Number(value);
}

const UNSUPPORTED: UnwindRule = {
  cfa: CFA_KIND.unsupported,
  cfaOffset: 0,
  cfaAdd: 0,
  ra: RA_KIND.unsupported,
  raOffset: 0,
  rbp: RBP_KIND.unknown,
  rbpOffset: 0,
  signal: false,
};

const NONE: UnwindRule = { ...UNSUPPORTED, cfa: CFA_KIND.none };

/** The CFA part of a rule: [kind, offset, add]. */
function cfaOf(cfa: CfiRowInput['cfa']): [number, number, number] | undefined {
  if (cfa.kind === 'register') {
    const offset = i32(cfa.offset);
    if (offset === undefined) return undefined;
    if (cfa.register === RSP) return [CFA_KIND.rsp, offset, 0];
    if (cfa.register === RBP) return [CFA_KIND.rbp, offset, 0];
    return undefined;
  }
  const e = cfa.expression;
  const at = { i: 1 };
  const first = e[0];
  if (first === undefined || first < OP.breg0 || first > OP.breg0 + 31) return undefined;
  const register = first - OP.breg0;
  const offset = readSleb(e, at);
  if (offset === undefined || i32(offset) === undefined) return undefined;
  // The PLT's: breg7 N; breg16 0; lit15; and; litK; ge; lit3; shl; plus.
  if (register === RSP && e[at.i] === OP.breg0 + RIP) {
    at.i++;
    const zero = readSleb(e, at);
    const rest = e.subarray(at.i);
    if (
      zero === 0n &&
      rest.length === 7 &&
      rest[0] === OP.lit0 + 15 &&
      rest[1] === OP.and &&
      rest[2]! >= OP.lit0 &&
      rest[2]! <= OP.lit0 + 31 &&
      rest[3] === OP.ge &&
      rest[4] === OP.lit0 + 3 &&
      rest[5] === OP.shl &&
      rest[6] === OP.plus
    ) {
      return [CFA_KIND.plt, Number(offset), rest[2]! - OP.lit0];
    }
    return undefined;
  }
  // A realigned stack: bregR N; deref; [plus_uconst M].
  if (e[at.i] !== OP.deref || (register !== RSP && register !== RBP)) return undefined;
  at.i++;
  let add = 0n;
  if (at.i < e.length) {
    if (e[at.i] !== OP.plusUconst) return undefined;
    at.i++;
    const value = readUleb(e, at);
    if (value === undefined || at.i !== e.length || i32(value) === undefined) return undefined;
    add = value;
  }
  return [register === RSP ? CFA_KIND.derefRsp : CFA_KIND.derefRbp, Number(offset), Number(add)];
}

/** The x86-64 rule of one CFI row (a rule the unwinder cannot follow is `unsupported`). */
export function ruleOfRow(row: CfiRowInput): UnwindRule {
  const cfa = cfaOf(row.cfa);
  if (cfa === undefined || row.returnColumn !== RIP) return UNSUPPORTED;
  let ra: number = RA_KIND.unsupported;
  let raOffset = 0;
  const raRule = row.registers.get(RIP);
  if (raRule?.kind === 'undefined') ra = RA_KIND.end;
  else if (raRule?.kind === 'offset') {
    const offset = i32(raRule.offset);
    if (offset !== undefined) [ra, raOffset] = [RA_KIND.atCfa, offset];
  } else if (raRule?.kind === 'expression') {
    const saved = bregOnly(raRule.expression);
    const offset = saved === undefined ? undefined : i32(saved[1]);
    if (saved?.[0] === RSP && offset !== undefined) [ra, raOffset] = [RA_KIND.atRsp, offset];
  }
  let rbp: number = RBP_KIND.unknown;
  let rbpOffset = 0;
  const rbpRule = row.registers.get(RBP);
  // The psABI makes rbp callee-saved: a rule left undefined means it was not touched.
  if (rbpRule === undefined || rbpRule.kind === 'same' || rbpRule.kind === 'undefined') {
    rbp = RBP_KIND.same;
  } else if (rbpRule.kind === 'offset') {
    const offset = i32(rbpRule.offset);
    if (offset !== undefined) [rbp, rbpOffset] = [RBP_KIND.atCfa, offset];
  } else if (rbpRule.kind === 'expression') {
    const saved = bregOnly(rbpRule.expression);
    const offset = saved === undefined ? undefined : i32(saved[1]);
    if (offset !== undefined && saved?.[0] === RBP) [rbp, rbpOffset] = [RBP_KIND.atRbp, offset];
    if (offset !== undefined && saved?.[0] === RSP) [rbp, rbpOffset] = [RBP_KIND.atRsp, offset];
  }
  return {
    cfa: cfa[0],
    cfaOffset: cfa[1],
    cfaAdd: cfa[2],
    ra,
    raOffset,
    rbp,
    rbpOffset,
    signal: row.signalFrame,
  };
}

function ruleKey(rule: UnwindRule): string {
  return `${rule.cfa},${rule.cfaOffset},${rule.cfaAdd},${rule.ra},${rule.raOffset},${rule.rbp},${rule.rbpOffset},${rule.signal ? 1 : 0}`;
}

/**
 * A file's unwind table from its CFI rows, by file offset (`toFileOffset` maps a vaddr;
 * rows it cannot map are left out). Where an FDE ends and no other begins, a `none` row
 * ends its range; equal neighbours are merged; where two FDEs cover an address, the first
 * read (.eh_frame before .debug_frame) wins.
 */
export function compileUnwindTable(
  rows: Iterable<CfiRowInput>,
  toFileOffset: (vaddr: bigint) => bigint | undefined,
): UnwindTable {
  const ruleSet = interned(ruleKey);
  ruleSet.id(NONE); // rule 0
  const indexOf = (rule: UnwindRule) => ruleSet.id(rule);
  const ranges: { low: number; high: number; rule: number; order: number }[] = [];
  let order = 0;
  for (const row of rows) {
    const low = toFileOffset(row.low);
    if (low === undefined || low > 0xffff_ffffn) continue;
    const span = row.high - row.low;
    if (span <= 0n || low + span > 0x1_0000_0000n) continue;
    ranges.push({
      low: Number(low),
      high: Number(low + span),
      rule: indexOf(ruleOfRow(row)),
      order: order++,
    });
  }
  ranges.sort((a, b) => a.low - b.low || a.order - b.order);
  const starts: number[] = [];
  const rules: number[] = [];
  const push = (at: number, rule: number) => {
    if (starts.length > 0 && starts.at(-1)! === at) {
      rules[rules.length - 1] = rule;
      if (rules.length > 1 && rules.at(-2) === rule) {
        starts.pop();
        rules.pop();
      }
      return;
    }
    if (rules.length > 0 && rules.at(-1) === rule) return;
    starts.push(at);
    rules.push(rule);
  };
  let covered = 0;
  for (const range of ranges) {
    // Overlapping a range already placed: only the part past it counts.
    if (range.high <= covered) continue;
    const low = Math.max(range.low, covered);
    if (starts.length > 0 && low > covered) push(covered, 0);
    push(low, range.rule);
    covered = range.high;
  }
  if (starts.length > 0) push(covered, 0);
  return {
    starts: Uint32Array.from(starts),
    rules: Uint32Array.from(rules),
    ruleSet: ruleSet.values,
  };
}

/** The rule for `fileOffset`, or `none` when the table does not cover it. */
export function ruleAt(table: UnwindTable, fileOffset: number): UnwindRule {
  const { starts } = table;
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (starts[mid]! <= fileOffset) lo = mid + 1;
    else hi = mid;
  }
  if (lo === 0) return NONE;
  return table.ruleSet[table.rules[lo - 1]!] ?? NONE;
}

/** Why a stack ends before its outermost frame; each is shown as a marked frame. */
export const STOP_REASON = {
  /** More frames than are kept. */
  depth: 1,
  /** No call frame information covers the address (kept for its number; walked by rbp). */
  noInfo: 2,
  /** The CFI's rule there is one the unwinder does not follow. */
  unsupported: 3,
  /** The stack could not be read where a rule says the caller's registers are. */
  unreadable: 4,
  /** The file has no unwind table (none could be read, or it is not loaded yet). */
  noTable: 5,
  /** No mapping holds the address. */
  unmapped: 6,
  /** The process's memory map was being changed: it could not be read then. */
  busy: 7,
  /** The caller's stack pointer is not above the callee's. */
  badFrame: 8,
  /** A return address replaced by a uretprobe's trampoline. */
  uretprobe: 9,
  /** The kernel's table of rules was full when the file was loaded. */
  tableFull: 10,
} as const;

export type StopReason = keyof typeof STOP_REASON;

const STOP_TEXT: Readonly<Record<StopReason, string>> = {
  depth: 'depth limit',
  noInfo: 'no unwind info here',
  unsupported: 'unwind rule not followed',
  unreadable: 'stack unreadable',
  noTable: 'no unwind table',
  unmapped: 'unmapped address',
  busy: 'memory map busy',
  badFrame: 'bad frame',
  uretprobe: 'uretprobe trampoline',
  tableFull: 'unwind tables full',
};

/** The marked frame that ends a stack cut short: `[stack cut: depth limit]`. */
export function stopFrameText(reason: StopReason): string {
  return `[stack cut: ${STOP_TEXT[reason]}]`;
}

export function stopReasonOf(code: number): StopReason | undefined {
  return (Object.keys(STOP_REASON) as StopReason[]).find((name) => STOP_REASON[name] === code);
}

/** Where an address is, for the walker: a file (with or without a table), JIT, or nothing. */
export type Located<F> =
  | {
      readonly kind: 'file';
      readonly file: F;
      readonly fileOffset: bigint;
      readonly table: UnwindTable | undefined;
    }
  /** Anonymous executable memory (JIT code): walked by frame pointers. */
  | { readonly kind: 'anonymous' }
  /** The uprobes trampoline page. */
  | { readonly kind: 'uprobes' };

export interface UnwoundFrame<F> {
  readonly pc: bigint;
  readonly file: F | undefined;
  readonly fileOffset: bigint | undefined;
}

export interface UnwindOptions<F> {
  /** 8 bytes of the process's memory, or undefined when they cannot be read. */
  readonly read64: (address: bigint) => bigint | undefined;
  /** Where `pc` is, or undefined when nothing is mapped there. */
  readonly locate: (pc: bigint) => Located<F> | undefined;
  /** Frames kept, the marked frame of a cut included. */
  readonly maxFrames: number;
}

/**
 * Walk a user stack from the registers of its innermost frame: each frame's rule found from
 * its pc (the one before a return address, which may be past the end of a call that does
 * not return), the caller's rsp, rip and rbp computed from it. Code with no file (JIT) is
 * walked by its frame pointers. The stack ends at an undefined return address or a zero pc;
 * anything else that ends it is its `stop` reason.
 */
export function unwindStack<F>(
  registers: { readonly pc: bigint; readonly sp: bigint; readonly bp: bigint },
  options: UnwindOptions<F>,
): { frames: UnwoundFrame<F>[]; stop: StopReason | undefined } {
  const frames: UnwoundFrame<F>[] = [];
  let { pc, sp, bp } = registers;
  let exact = true;
  const mask = 2n ** 64n - 1n;
  while (pc !== 0n) {
    if (frames.length >= options.maxFrames - 1) return { frames, stop: 'depth' };
    const where = options.locate(pc);
    if (where === undefined) {
      frames.push({ pc, file: undefined, fileOffset: undefined });
      return { frames, stop: 'unmapped' };
    }
    frames.push({
      pc,
      file: where.kind === 'file' ? where.file : undefined,
      fileOffset: where.kind === 'file' ? where.fileOffset : undefined,
    });
    if (where.kind === 'uprobes') return { frames, stop: 'uretprobe' };
    let cfa: bigint;
    let ra: bigint | undefined;
    let nextBp: bigint | undefined = bp;
    let signal = false;
    const rule: UnwindRule | undefined =
      where.kind === 'file' && where.table !== undefined
        ? ruleAt(where.table, Number(exact ? where.fileOffset : where.fileOffset - 1n))
        : undefined;
    // JIT code, and code no CFI covers (JIT code a runtime embeds in its file), is walked by
    // frame pointers.
    if (where.kind === 'anonymous' || rule?.cfa === CFA_KIND.none) {
      if (bp <= sp) return { frames, stop: 'badFrame' };
      cfa = bp + 16n;
      ra = options.read64(bp + 8n);
      nextBp = options.read64(bp);
      if (ra === undefined || nextBp === undefined) return { frames, stop: 'unreadable' };
    } else {
      if (where.kind !== 'file' || rule === undefined) return { frames, stop: 'noTable' };
      signal = rule.signal;
      if (rule.cfa === CFA_KIND.unsupported || rule.ra === RA_KIND.unsupported) {
        return { frames, stop: 'unsupported' };
      }
      const base = rule.cfa === CFA_KIND.rbp || rule.cfa === CFA_KIND.derefRbp ? bp : sp;
      if (rule.cfa === CFA_KIND.rsp || rule.cfa === CFA_KIND.rbp) {
        cfa = base + BigInt(rule.cfaOffset);
      } else if (rule.cfa === CFA_KIND.plt) {
        cfa = sp + BigInt(rule.cfaOffset) + ((pc & 15n) >= BigInt(rule.cfaAdd) ? 8n : 0n);
      } else {
        const saved = options.read64((base + BigInt(rule.cfaOffset)) & mask);
        if (saved === undefined) return { frames, stop: 'unreadable' };
        cfa = saved + BigInt(rule.cfaAdd);
      }
      cfa &= mask;
      if (rule.ra === RA_KIND.end) return { frames, stop: undefined };
      ra = options.read64(((rule.ra === RA_KIND.atCfa ? cfa : sp) + BigInt(rule.raOffset)) & mask);
      if (ra === undefined) return { frames, stop: 'unreadable' };
      switch (rule.rbp) {
        case RBP_KIND.same:
          break;
        case RBP_KIND.atCfa:
          nextBp = options.read64((cfa + BigInt(rule.rbpOffset)) & mask);
          break;
        case RBP_KIND.atRbp:
          nextBp = options.read64((bp + BigInt(rule.rbpOffset)) & mask);
          break;
        case RBP_KIND.atRsp:
          nextBp = options.read64((sp + BigInt(rule.rbpOffset)) & mask);
          break;
        default:
          nextBp = 0n;
      }
      if (nextBp === undefined) return { frames, stop: 'unreadable' };
    }
    // A caller's frame is above its callee's (a signal frame may restore any rsp).
    if (cfa <= sp && !signal) return { frames, stop: 'badFrame' };
    sp = cfa;
    pc = ra;
    bp = nextBp;
    exact = signal;
  }
  return { frames, stop: undefined };
}
