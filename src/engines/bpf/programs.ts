/**
 * The code generator: the in-kernel handlers upscope needs, as BPF instructions. Every handler
 * starts with the same prologue (keep the context, apply the filters, learn which probe fired
 * from the attach cookie) and ends by updating maps with atomic adds, so that counts stay
 * exact when two threads, or a preempted handler and another one, update the same slot.
 *
 * Registers: r6 the saved `struct pt_regs *`, r7 the value being handled, r8 the probe index
 * (the attach cookie), r9 a map value pointer; r1-r5 are clobbered by helper calls.
 */
import { type BucketScheme, linearSteps, NEGATIVE_BUCKETS } from '../../aggregate/index.js';
import { InternalError, ProbeError } from '../../errors/index.js';
import { BPF_FUNC, USER_REGS } from '../../native/index.js';
import {
  ARGUMENT_REGISTERS,
  type Comparison,
  type FetchArg,
  type FetchExpr,
  type FetchType,
  fetchTypeBytes,
  printFetchExpr,
  readsReturnValue,
  registerInfo,
} from '../../spec/index.js';
import { Asm, type Subprogram } from './asm.js';
import {
  COOKIE_FRAME_ENTRY,
  COOKIE_RETURN_SITE,
  COOKIE_TAIL_CALL,
  emitFrameEnter,
  emitFrameLeave,
  FRAME_START,
  FRAME_TIMED,
  type FrameMaps,
  ifCookieBit,
} from './frame-programs.js';
import {
  alu64Imm,
  alu64Reg,
  atomicAdd,
  call,
  type Insn,
  ld64Imm,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  type Reg,
  st,
  stx,
} from './insn.js';
import type { UnwindMaps } from './unwind-maps.js';
import {
  emitUnwindKey,
  emitUnwindLeave,
  emitUnwindSubprograms,
  UNWIND_KEY_BYTES,
} from './unwind-program.js';

/** Frame layout (offsets from r10). */
const SCRATCH = -8;
const ONE = -16;
const HIST_KEY = -24;
const KEY = -128;
const COMM = -144;
/** The return's time, taken first (the key at KEY ends just below it). */
const NOW = -56;
/** A call's duration while a predicate on the return value is evaluated. */
const DURATION = -40;

/** `BPF_NOEXIST`: a map update that only makes a new element. */
const BPF_NOEXIST = 1;

/** Bytes of a keyed count's key: the probe index (u32), padding, then the key's own bytes. */
export const KEY_HEADER_BYTES = 8;
/** Longest string key kept (the rest is cut). */
export const STRING_KEY_BYTES = 64;
/**
 * The last byte of a string key whose string went on past it (cut at STRING_KEY_BYTES - 1
 * bytes): no text byte (UTF-8 never has 0xff), where a whole one has its NUL.
 */
export const KEY_CUT = 0xff;
/** What ends a string cut at the size of its slot or key (as bpftrace marks one). */
export const CUT_MARK = '...';

/** Indexes in the per-CPU `errors` array. */
export const ERROR_SLOT = {
  /** A hit not counted because its map was full. */
  dropped: 0,
  /** A hit whose fetch could not read the target's memory. */
  faults: 1,
  /** A return whose entry was not seen (attached mid-call, or the entry's slot was full). */
  unmatched: 2,
  /** A call nested deeper in its function than the timed depth: not timed. */
  deep: 3,
  /** A timed call whose span record found the span ring buffer full (latency with spans). */
  spansLost: 4,
} as const;
export const ERROR_SLOTS = 5;

/** `BPF_RB_NO_WAKEUP`: the reader polls on a timer, so a hit never wakes it. */
export const BPF_RB_NO_WAKEUP = 1;

/**
 * A span record of latency (see emitSpan()): pid_tgid, probe index, duration and end time in
 * nanoseconds (CLOCK_MONOTONIC), then the thread's comm (16 bytes).
 */
export const SPAN_RECORD = { pidTgid: 0, probe: 8, duration: 16, end: 24, comm: 32 } as const;
export const SPAN_RECORD_BYTES = 48;

/** Bytes of a `stats` value: count, sum, ~min and max (both biased for signed values). */
export const STATS_BYTES = 32;

/** Which hits a handler takes. */
export interface Filters {
  /** Only this process (thread group id). */
  readonly pid?: number | undefined;
  readonly tid?: number | undefined;
  /** Only threads with this name (the first 15 bytes). */
  readonly comm?: string | undefined;
  readonly predicate?: Comparison | undefined;
  /** Never these processes (thread group ids): upscope's own, in a run over every process. */
  readonly exclude?: readonly number[] | undefined;
}

/** What a count is kept per, besides the probe. */
export type CountKey =
  | { readonly kind: 'none' }
  | { readonly kind: 'pid' }
  | { readonly kind: 'tid' }
  | { readonly kind: 'comm' }
  /** The user stack, unwound (the process is in the key's header; see unwind-program.ts). */
  | { readonly kind: 'ustack' }
  | { readonly kind: 'value'; readonly fetch: FetchArg }
  /** Several of the above (not ustack) side by side, each at its own offset. */
  | { readonly kind: 'tuple'; readonly parts: readonly CountKey[] };

export type Buckets = BucketScheme;

/** Bytes of a count key's own part. */
export function countKeyBytes(key: CountKey): number {
  switch (key.kind) {
    case 'none':
      return 0;
    case 'pid':
    case 'tid':
      return 8;
    case 'ustack':
      return UNWIND_KEY_BYTES - KEY_HEADER_BYTES;
    case 'comm':
      return 16;
    case 'value':
      return isStringType(key.fetch) ? STRING_KEY_BYTES : 8;
    case 'tuple':
      return key.parts.reduce((sum, part) => sum + countKeyBytes(part), 0);
  }
}

export function isStringType(fetch: FetchArg): boolean {
  return fetch.type === 'string' || fetch.type === 'ustring';
}

/** A fetch's type, as evaluated here (u64 when none is given). */
export function fetchType(fetch: FetchArg): FetchType {
  return fetch.type ?? 'u64';
}

export function isSigned(type: FetchType): boolean {
  return type.startsWith('s');
}

function regOffset(base: string): number {
  if (base === 'rflags') return USER_REGS.eflags;
  const offset = (USER_REGS as Record<string, number>)[base];
  if (offset === undefined) throw new Error(`no pt_regs slot for ${base}`);
  return offset;
}

/** Maps a handler updates, by file descriptor. */
export interface HandlerMaps {
  readonly errors: number;
  readonly counts?: number | undefined;
  readonly hist?: number | undefined;
  readonly stats?: number | undefined;
  /** For returns caught at functions' exits: the open calls (see frame-programs.ts). */
  readonly frames?: Omit<FrameMaps, 'errors'> | undefined;
  /** The unwind tables and scratch of a count by user stack. */
  readonly unwind?: UnwindMaps | undefined;
  /** The processes followed (see follow.ts): only hits of those count. */
  readonly followed?: number | undefined;
  /** latency: a ring buffer that gets a record of each timed call (see emitSpan()). */
  readonly spans?: number | undefined;
}

function need(fd: number | undefined, name: string): number {
  if (fd === undefined) throw new Error(`BPF handler needs its ${name} map`);
  return fd;
}

/** `r0 = *(u64 *)(errors[slot])++` */
export function countError(a: Asm, maps: HandlerMaps, slot: number): void {
  const skip = a.fresh('error.done');
  a.emit(st('W', 10, SCRATCH, slot), ldMapFd(1, maps.errors), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, skip);
  a.emit(mov64Imm(1, 1), atomicAdd('DW', 0, 0, 1));
  a.label(skip);
}

/**
 * Load the value of a numeric fetch into r7, typed: narrowed to the type's width and sign- or
 * zero-extended. A read of the target's memory that fails jumps to `fault`.
 */
export function emitFetch(a: Asm, fetch: FetchArg, fault: string): void {
  const type = fetchType(fetch);
  if (type === 'string' || type === 'ustring') {
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot use ${fetch.name}=${printFetchExpr(fetch.expr)}:${type} as a number: it is a string`,
    );
  }
  const width = fetchTypeBytes(type);
  emitExpr(a, fetch.expr, width, fault);
  if (width < 8) {
    const shift = 64 - width * 8;
    a.emit(alu64Imm('LSH', 7, shift), alu64Imm(isSigned(type) ? 'ARSH' : 'RSH', 7, shift));
  }
}

/** r7 = the expression's value; a dereference at the top reads `width` bytes, inner ones 8. */
function emitExpr(a: Asm, expr: FetchExpr, width: number, fault: string): void {
  switch (expr.kind) {
    case 'arg': {
      const register = ARGUMENT_REGISTERS[expr.index];
      if (register !== undefined) {
        a.emit(ldx('DW', 7, 6, regOffset(register)));
        return;
      }
      // At a function's entry the return address is at the stack pointer; arguments follow.
      a.emit(ldx('DW', 3, 6, USER_REGS.rsp));
      a.emit(alu64Imm('ADD', 3, 8 * (expr.index - ARGUMENT_REGISTERS.length + 1)));
      readUser(a, 8, fault);
      return;
    }
    case 'retval':
      if ((expr.index ?? 0) !== 0) throw unlowered(expr);
      a.emit(ldx('DW', 7, 6, USER_REGS.rax));
      return;
    case 'ip':
      a.emit(ldx('DW', 7, 6, USER_REGS.rip));
      return;
    case 'sp':
      a.emit(ldx('DW', 7, 6, USER_REGS.rsp));
      return;
    case 'register':
      loadRegister(a, 7, expr.name);
      return;
    case 'constant':
      a.emit(ld64Imm(7, expr.value));
      return;
    case 'indexed':
      loadRegister(a, 7, expr.index);
      if (expr.scale > 1) a.emit(alu64Imm('LSH', 7, Math.log2(expr.scale)));
      if (expr.base !== undefined) {
        loadRegister(a, 1, expr.base);
        a.emit(alu64Reg('ADD', 7, 1));
      }
      return;
    case 'deref': {
      emitExpr(a, expr.inner, 8, fault);
      a.emit(mov64Reg(3, 7));
      addConstant(a, 3, expr.offset);
      readUser(a, width, fault);
      return;
    }
    case 'comm':
      throw new ProbeError('ERR_SPEC_INVALID', 'Cannot use comm as a number: it is a string');
    case 'variable':
      throw new InternalError(
        `The fetch of variable "${expr.name}" reached the bpf engine unresolved`,
      );
  }
}

function unlowered(expr: FetchExpr): InternalError {
  return new InternalError(
    `The fetch ${printFetchExpr(expr)} reached the bpf engine without its calling convention`,
  );
}

/** `dst` = what `%name` reads: its bits of the saved register. */
function loadRegister(a: Asm, dst: Reg, name: string): void {
  const info = registerInfo(name);
  if (info === undefined) {
    throw new ProbeError('ERR_SPEC_INVALID', `Cannot fetch %${name}: no such register`);
  }
  a.emit(ldx('DW', dst, 6, regOffset(info.base)));
  if (info.shift > 0) a.emit(alu64Imm('RSH', dst, info.shift));
  if (info.bits < 64) {
    a.emit(alu64Imm('LSH', dst, 64 - info.bits), alu64Imm('RSH', dst, 64 - info.bits));
  }
}

/** r7 = an address whose string a fetch reads: `+off(X)` is X + off, anything else its value. */
export function emitAddress(a: Asm, fetch: FetchArg, fault: string): void {
  const expr = fetch.expr;
  if (expr.kind === 'deref') {
    emitExpr(a, expr.inner, 8, fault);
    addConstant(a, 7, expr.offset);
  } else {
    emitExpr(a, expr, 8, fault);
  }
}

function addConstant(a: Asm, reg: Reg, value: bigint): void {
  if (value === 0n) return;
  if (value >= -0x8000_0000n && value < 0x8000_0000n) {
    a.emit(alu64Imm('ADD', reg, Number(value)));
  } else {
    a.emit(ld64Imm(1, value), alu64Reg('ADD', reg, 1));
  }
}

/** r7 = `width` bytes of user memory at r3 (zero-extended); a fault jumps to `fault`. */
function readUser(a: Asm, width: number, fault: string): void {
  a.emit(st('DW', 10, SCRATCH, 0), mov64Reg(1, 10), alu64Imm('ADD', 1, SCRATCH));
  a.emit(mov64Imm(2, width), call(BPF_FUNC.probe_read_user));
  a.jmpImm('JNE', 0, 0, fault);
  a.emit(ldx('DW', 7, 10, SCRATCH));
}

/**
 * Save the context, apply the filters (jumping to `out` when a hit is not wanted), and leave
 * the attach cookie in r8. With `followed`, only processes whose id is a key of that hash
 * map are taken (a process and the children it forks).
 */
export function prologue(a: Asm, filters: Filters, out: string, followed?: number): void {
  processPrologue(a, filters, out, followed);
  emitHitFilters(a, filters, out);
}

/**
 * Save the context, take only the processes the filters and `followed` cover (jumping to
 * `out` for the others), and leave the attach cookie in r8; the per-hit filters (thread,
 * name, predicate) are left to emitHitFilters().
 */
export function processPrologue(a: Asm, filters: Filters, out: string, followed?: number): void {
  a.emit(mov64Reg(6, 1));
  if (followed !== undefined) {
    a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32), stx('W', 10, SCRATCH, 0));
    a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
    a.emit(call(BPF_FUNC.map_lookup_elem));
    a.jmpImm('JEQ', 0, 0, out);
  }
  if (filters.pid !== undefined) {
    a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
    a.jmpImm('JNE', 0, filters.pid, out);
  }
  if (filters.exclude !== undefined && filters.exclude.length > 0) {
    a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
    for (const pid of filters.exclude) a.jmpImm('JEQ', 0, pid, out);
  }
  a.emit(mov64Reg(1, 6), call(BPF_FUNC.get_attach_cookie), mov64Reg(8, 0));
}

/**
 * The filters of one hit: its thread, the thread's name, the predicate (jumping to `out`
 * when one does not hold). Clobbers r0-r5 and r7; r6, r8 and r9 are kept.
 */
export function emitHitFilters(a: Asm, filters: Filters, out: string): void {
  if (filters.tid !== undefined) {
    a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('LSH', 0, 32), alu64Imm('RSH', 0, 32));
    a.jmpImm('JNE', 0, filters.tid, out);
  }
  if (filters.comm !== undefined) {
    const bytes = new Uint8Array(16);
    bytes.set(new TextEncoder().encode(filters.comm).subarray(0, 15));
    const view = new DataView(bytes.buffer);
    a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, COMM), mov64Imm(2, 16));
    a.emit(call(BPF_FUNC.get_current_comm));
    for (const half of [0, 8]) {
      a.emit(ldx('DW', 1, 10, COMM + half), ld64Imm(2, view.getBigUint64(half, true)));
      a.jmpReg('JNE', 1, 2, out);
    }
  }
  if (filters.predicate !== undefined) emitPredicate(a, filters.predicate, out);
}

/** Jump to `out` unless the comparison holds at this hit. */
function emitPredicate(a: Asm, predicate: Comparison, out: string): void {
  const { fetch, op, value } = predicate;
  emitFetch(a, fetch, out);
  a.emit(ld64Imm(1, value));
  const signed = isSigned(fetchType(fetch));
  // Jump out when the comparison is false.
  const negated = {
    '==': 'JNE',
    '!=': 'JEQ',
    '<': signed ? 'JSGE' : 'JGE',
    '<=': signed ? 'JSGT' : 'JGT',
    '>': signed ? 'JSLE' : 'JLE',
    '>=': signed ? 'JSLT' : 'JLT',
  } as const;
  a.jmpReg(negated[op], 7, 1, out);
}

/**
 * The prologue of a handler that may serve returns caught at a function's exits (maps with
 * `frames`): filters, then a frame entry is handled and ends the hit, a return pairs with its
 * call (its start at FRAME_START); then `--filter`, which may read a return's value and so
 * is applied after. Without `frames`, the plain prologue.
 */
function framedPrologue(
  a: Asm,
  maps: HandlerMaps,
  filters: Filters,
  out: string,
  /** Where a return at a tail call goes when the handler reads its (not yet made) result. */
  tailCall?: string | undefined,
): void {
  if (maps.frames === undefined) {
    prologue(a, filters, out, maps.followed);
    return;
  }
  const frames = { ...maps.frames, errors: maps.errors };
  prologue(a, { ...filters, predicate: undefined }, out, maps.followed);
  const enter = a.fresh('frame.enter');
  const leave = a.fresh('frame.leave');
  const body = a.fresh('frame.body');
  ifCookieBit(a, COOKIE_FRAME_ENTRY, enter);
  ifCookieBit(a, COOKIE_RETURN_SITE, leave);
  a.goto(body);
  a.label(enter);
  emitFrameEnter(a, frames, ERROR_SLOT, out);
  a.label(leave);
  emitFrameLeave(a, frames, ERROR_SLOT);
  if (tailCall !== undefined) ifCookieBit(a, COOKIE_TAIL_CALL, tailCall);
  a.label(body);
  if (filters.predicate !== undefined) emitPredicate(a, filters.predicate, out);
}

/** Options of the count and histogram handlers. */
export interface ValueOptions {
  /**
   * The key or value read is a function's result (`retval`): at a return caught at a tail
   * call, where the result is not made yet, the hit is not counted but said (a fault).
   */
  readonly readsResult?: boolean | undefined;
}

/**
 * Add `r1`'s worth (1 when `by` is undefined, else the register given) to the u64 under the
 * key at `fp + keyAt` (or at the address in register `keyAt.reg`) in a per-CPU hash: the
 * slot is made when missing. A full map counts the hit as dropped.
 */
function addToHash(
  a: Asm,
  maps: HandlerMaps,
  map: number,
  keyAt: number | { readonly reg: Reg },
  by?: Reg,
): void {
  const add = a.fresh('hash.add');
  const done = a.fresh('hash.done');
  const keyArg = () =>
    typeof keyAt === 'number'
      ? a.emit(mov64Reg(2, 10), alu64Imm('ADD', 2, keyAt))
      : a.emit(mov64Reg(2, keyAt.reg));
  const lookup = () => {
    a.emit(ldMapFd(1, map));
    keyArg();
    a.emit(call(BPF_FUNC.map_lookup_elem));
  };
  if (by !== undefined) a.emit(stx('DW', 10, ONE, by));
  else a.emit(st('DW', 10, ONE, 1));
  lookup();
  a.jmpImm('JNE', 0, 0, add);
  a.emit(ldMapFd(1, map));
  keyArg();
  a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, ONE), mov64Imm(4, BPF_NOEXIST));
  a.emit(call(BPF_FUNC.map_update_elem));
  a.jmpImm('JEQ', 0, 0, done);
  // Another CPU made the slot first: add to it.
  lookup();
  a.jmpImm('JNE', 0, 0, add);
  countError(a, maps, ERROR_SLOT.dropped);
  a.goto(done);
  a.label(add);
  a.emit(ldx('DW', 1, 10, ONE), atomicAdd('DW', 0, 0, 1));
  a.label(done);
}

function epilogue(a: Asm, out: string, fault: string | undefined, maps: HandlerMaps): Insn[] {
  a.goto(out);
  // The verifier refuses code nothing reaches: a fault handler only where a fetch can fault.
  if (fault !== undefined && a.isTarget(fault)) {
    a.label(fault);
    countError(a, maps, ERROR_SLOT.faults);
  }
  a.label(out);
  a.returnZero();
  return a.finish();
}

/**
 * Count hits per probe and user stack: the stack unwound into a key in per-CPU scratch
 * memory (too long for the BPF stack), then counted under it.
 */
function stackCountProgram(
  maps: HandlerMaps,
  filters: Filters,
): { insns: Insn[]; subprograms: readonly Subprogram[] } {
  const a = new Asm();
  const out = 'out';
  const full = 'nested';
  const unwind = maps.unwind;
  if (unwind === undefined) throw new Error('BPF handler needs its unwind maps');
  framedPrologue(a, maps, filters, out);
  emitUnwindKey(a, unwind, full, out);
  addToHash(a, maps, need(maps.counts, 'counts'), { reg: 9 });
  emitUnwindLeave(a);
  a.goto(out);
  a.label(full);
  countError(a, maps, ERROR_SLOT.dropped);
  a.label(out);
  a.returnZero();
  emitUnwindSubprograms(a, unwind);
  return { insns: a.finish(), subprograms: a.subprograms };
}

/**
 * Count hits per probe (a per-CPU array indexed by probe) or per probe and key (a per-CPU
 * hash of `{u32 probe, u32 0, key bytes}`).
 */
export function countProgram(
  maps: HandlerMaps,
  key: CountKey,
  filters: Filters,
  options: ValueOptions = {},
): Insn[] | { insns: Insn[]; subprograms: readonly Subprogram[] } {
  if (key.kind === 'ustack') return stackCountProgram(maps, filters);
  const a = new Asm();
  const out = 'out';
  const fault = 'fault';
  framedPrologue(a, maps, filters, out, options.readsResult === true ? fault : undefined);
  const counts = need(maps.counts, 'counts');
  if (key.kind === 'none') {
    a.emit(stx('W', 10, SCRATCH, 8), ldMapFd(1, counts), mov64Reg(2, 10));
    a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
    a.jmpImm('JEQ', 0, 0, out);
    a.emit(mov64Imm(1, 1), atomicAdd('DW', 0, 0, 1));
    return epilogue(a, out, undefined, maps);
  }
  const bytes = KEY_HEADER_BYTES + countKeyBytes(key);
  const keyAt = KEY;
  for (let at = 0; at < bytes; at += 8) a.emit(st('DW', 10, keyAt + at, 0));
  a.emit(stx('W', 10, keyAt, 8));
  let into = keyAt + KEY_HEADER_BYTES;
  for (const part of key.kind === 'tuple' ? key.parts : [key]) {
    emitKeyPart(a, part, into, fault);
    into += countKeyBytes(part);
  }
  addToHash(a, maps, counts, keyAt);
  return epilogue(a, out, fault, maps);
}

/** Write one part of a count's key at `into` (bytes from r10). */
function emitKeyPart(a: Asm, key: CountKey, into: number, fault: string): void {
  switch (key.kind) {
    case 'pid':
      a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32), stx('DW', 10, into, 0));
      break;
    case 'tid':
      a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('LSH', 0, 32), alu64Imm('RSH', 0, 32));
      a.emit(stx('DW', 10, into, 0));
      break;
    case 'comm':
      a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, into), mov64Imm(2, 16));
      a.emit(call(BPF_FUNC.get_current_comm));
      break;
    case 'value':
      if (isStringType(key.fetch)) {
        emitAddress(a, key.fetch, fault);
        a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, into), mov64Imm(2, STRING_KEY_BYTES));
        a.emit(mov64Reg(3, 7), call(BPF_FUNC.probe_read_user_str));
        // 0 is a read that failed without an error: even an empty string counts its NUL.
        a.jmpImm('JSLE', 0, 0, fault);
        // One that filled the key may go on: when the source's byte there is not a NUL, the
        // key's last byte (the NUL written) becomes KEY_CUT, apart from a whole one.
        const whole = a.fresh('whole');
        a.jmpImm('JNE', 0, STRING_KEY_BYTES, whole);
        a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, into + STRING_KEY_BYTES - 1), mov64Imm(2, 1));
        a.emit(mov64Reg(3, 7), alu64Imm('ADD', 3, STRING_KEY_BYTES - 1));
        a.emit(call(BPF_FUNC.probe_read_user));
        a.jmpImm('JNE', 0, 0, whole);
        a.emit(ldx('B', 1, 10, into + STRING_KEY_BYTES - 1));
        a.jmpImm('JEQ', 1, 0, whole);
        a.emit(st('B', 10, into + STRING_KEY_BYTES - 1, KEY_CUT));
        a.label(whole);
      } else {
        emitFetch(a, key.fetch, fault);
        a.emit(stx('DW', 10, into, 7));
      }
      break;
    default:
      throw new Error(`a count key part of kind ${key.kind}`);
  }
}

/** r1 = the bucket of r7 (see `bucketBounds` in aggregate/ for what each index holds). */
function emitBucket(a: Asm, buckets: Buckets, signed: boolean, scale: number): void {
  if (buckets.kind === 'linear') {
    const under = signed ? 'JSLT' : 'JLT';
    const atLeast = signed ? 'JSGE' : 'JGE';
    const count = linearSteps(buckets);
    a.emit(ld64Imm(1, buckets.min), mov64Imm(2, 0));
    const below = a.fresh('bucket.under');
    a.jmpReg(under, 7, 1, below);
    a.emit(ld64Imm(1, buckets.max), mov64Imm(2, count + 1));
    a.jmpReg(atLeast, 7, 1, below);
    a.emit(mov64Reg(2, 7), ld64Imm(1, buckets.min), alu64Reg('SUB', 2, 1));
    a.emit(ld64Imm(1, buckets.step), alu64Reg('DIV', 2, 1), alu64Imm('ADD', 2, 1));
    a.label(below);
    a.emit(mov64Reg(1, 2));
    return;
  }
  // Log2 with 8 linear steps in each power of two: values below 8 have a bucket each; v with
  // floor(log2 v) = k >= 3 goes to 8 + (k - 3) * 8 + (the 3 bits after its top one).
  a.emit(mov64Reg(5, 7), mov64Imm(4, 0));
  if (scale > 1) a.emit(alu64Imm('DIV', 5, scale));
  if (signed) {
    const positive = a.fresh('bucket.positive');
    a.jmpImm('JSGE', 5, 0, positive);
    a.emit(alu64Imm('NEG', 5, 0), mov64Imm(4, NEGATIVE_BUCKETS));
    a.label(positive);
  }
  const small = a.fresh('bucket.small');
  a.emit(mov64Reg(1, 5));
  a.jmpImm('JLT', 5, 8, small);
  a.emit(mov64Reg(2, 5), mov64Imm(1, 0));
  for (const shift of [32, 16, 8, 4, 2, 1]) {
    const skip = a.fresh('bucket.skip');
    a.emit(mov64Reg(3, 2), alu64Imm('RSH', 3, shift));
    a.jmpImm('JEQ', 3, 0, skip);
    a.emit(mov64Reg(2, 3), alu64Imm('ADD', 1, shift));
    a.label(skip);
  }
  a.emit(alu64Imm('SUB', 1, 3), mov64Reg(3, 5), alu64Reg('RSH', 3, 1), alu64Imm('AND', 3, 7));
  a.emit(alu64Imm('LSH', 1, 3), alu64Imm('ADD', 1, 8), alu64Reg('ADD', 1, 3));
  a.label(small);
  a.emit(alu64Reg('ADD', 1, 4));
}

/** Histogram r7 into `hist` under {probe, bucket} and add it to the probe's `stats`. */
function emitRecord(a: Asm, maps: HandlerMaps, buckets: Buckets, signed: boolean, scale = 1): void {
  const hist = need(maps.hist, 'hist');
  const stats = need(maps.stats, 'stats');
  emitBucket(a, buckets, signed, scale);
  a.emit(stx('W', 10, HIST_KEY, 8), stx('W', 10, HIST_KEY + 4, 1));
  addToHash(a, maps, hist, HIST_KEY);
  const none = a.fresh('stats.none');
  a.emit(stx('W', 10, SCRATCH, 8), ldMapFd(1, stats), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, none);
  a.emit(mov64Reg(9, 0), mov64Imm(1, 1), atomicAdd('DW', 9, 0, 1), atomicAdd('DW', 9, 8, 7));
  a.emit(mov64Reg(1, 7));
  if (signed) a.emit(ld64Imm(2, 1n << 63n), alu64Reg('XOR', 1, 2));
  a.emit(mov64Reg(2, 1), alu64Imm('XOR', 2, -1));
  const notLower = a.fresh('stats.min');
  const notHigher = a.fresh('stats.max');
  a.emit(ldx('DW', 3, 9, 16));
  a.jmpReg('JLE', 2, 3, notLower);
  a.emit(stx('DW', 9, 16, 2));
  a.label(notLower);
  a.emit(ldx('DW', 3, 9, 24));
  a.jmpReg('JLE', 1, 3, notHigher);
  a.emit(stx('DW', 9, 24, 1));
  a.label(notHigher);
  a.label(none);
}

/** Histogram a fetched value per probe (with its count, sum, min and max). */
export function valueProgram(
  maps: HandlerMaps,
  fetch: FetchArg,
  buckets: Buckets,
  filters: Filters,
  options: ValueOptions = {},
): Insn[] {
  const a = new Asm();
  const out = 'out';
  const fault = 'fault';
  framedPrologue(a, maps, filters, out, options.readsResult === true ? fault : undefined);
  emitFetch(a, fetch, fault);
  emitRecord(a, maps, buckets, isSigned(fetchType(fetch)));
  return epilogue(a, out, fault, maps);
}

/**
 * The filters a call is timed by, split by where they are decided: a predicate that reads the
 * return value at the return, every other one (thread, name, a predicate on the arguments) at
 * the entry, where the arguments are; the decision is carried to the return in the call's
 * slot. The process filters apply at both.
 */
function latencyFilters(filters: Filters): { entry: Filters; atReturn: Comparison | undefined } {
  const predicate = filters.predicate;
  if (predicate === undefined || !readsReturnValue(predicate.fetch.expr)) {
    return { entry: filters, atReturn: undefined };
  }
  return { entry: { ...filters, predicate: undefined }, atReturn: predicate };
}

/**
 * The latency handler of every uprobe of the timed functions, told apart by their cookies:
 * the entry that opens a call pushes its frame with its start (a start of 0 when the entry's
 * filters do not take it); a return, at one of the function's exits or through the kernel's
 * return trampoline, pops the frame it ends and histograms the time since its start. Calls
 * are paired by frame (the thread and its stack pointer), not by counting a thread's open
 * calls: the kernel leaves out the return trampolines of calls nested more than 64 deep on a
 * thread (MAX_URETPROBE_DEPTH), and a count of calls whose returns never come would never
 * come back down (the function was not timed again on that thread).
 */
export function latencyProgram(maps: HandlerMaps, filters: Filters, unitNs = 1): Insn[] {
  const a = new Asm();
  const out = 'out';
  processPrologue(a, filters, out, maps.followed);
  emitFramedLatency(a, maps, latencyFilters(filters), unitNs, out);
  // A uprobe of neither kind: none is attached so.
  countError(a, maps, ERROR_SLOT.unmatched);
  return epilogue(a, out, undefined, maps);
}

/** r9 = 1 when the entry's filters take the call (it is timed), else 0. */
function emitTimedDecision(a: Asm, entry: Filters): void {
  const untimed = a.fresh('untimed');
  const decided = a.fresh('decided');
  a.emit(mov64Imm(9, 1));
  emitHitFilters(a, entry, untimed);
  // The verifier refuses code nothing reaches: the untimed branch only where a filter is.
  if (a.isTarget(untimed)) {
    a.goto(decided);
    a.label(untimed);
    a.emit(mov64Imm(9, 0));
    a.label(decided);
  }
}

/**
 * A frame entry pushes the call with its time (a start of 0 when the entry's filters do not
 * take it); a return pairs with it by frame (thread and stack pointer, or goroutine and
 * depth) and histograms the time since, when its entry took it and a predicate on the return
 * value holds; then `out`. Anything else falls through.
 */
function emitFramedLatency(
  a: Asm,
  maps: HandlerMaps,
  filters: ReturnType<typeof latencyFilters>,
  unitNs: number,
  out: string,
): void {
  const frames = { ...maps.frames!, errors: maps.errors };
  const enter = a.fresh('frame.enter');
  const leave = a.fresh('frame.leave');
  const other = a.fresh('frame.other');
  ifCookieBit(a, COOKIE_FRAME_ENTRY, enter);
  ifCookieBit(a, COOKIE_RETURN_SITE, leave);
  a.goto(other);
  a.label(enter);
  emitTimedDecision(a, filters.entry);
  a.emit(stx('DW', 10, FRAME_TIMED, 9));
  emitFrameEnter(a, frames, ERROR_SLOT, out, FRAME_TIMED);
  a.label(leave);
  // The time first, before the handler's own work.
  a.emit(call(BPF_FUNC.ktime_get_ns), stx('DW', 10, NOW, 0));
  emitFrameLeave(a, frames, ERROR_SLOT);
  a.emit(ldx('DW', 1, 10, FRAME_START));
  a.jmpImm('JEQ', 1, 0, out);
  a.emit(ldx('DW', 7, 10, NOW), alu64Reg('SUB', 7, 1));
  emitReturnPredicate(a, filters.atReturn, out);
  emitSpan(a, maps);
  emitRecord(a, maps, { kind: 'log2' }, false, unitNs);
  a.goto(out);
  a.label(other);
}

/** With a predicate on the return value: jump to `out` unless it holds; r7 is kept. */
function emitReturnPredicate(a: Asm, atReturn: Comparison | undefined, out: string): void {
  if (atReturn === undefined) return;
  // The predicate's fetch takes r7: the duration waits (NOW keeps the return's time).
  a.emit(stx('DW', 10, DURATION, 7));
  emitPredicate(a, atReturn, out);
  a.emit(ldx('DW', 7, 10, DURATION));
}

/**
 * With a span ring buffer: a record of the timed call (r7 its duration, r8 its probe, NOW the
 * return's time), so that each call can be sent on as a span; a full buffer is counted in
 * ERROR_SLOT.spansLost. r7 and r8 are kept.
 */
function emitSpan(a: Asm, maps: HandlerMaps): void {
  if (maps.spans === undefined) return;
  const full = a.fresh('span.full');
  const done = a.fresh('span.done');
  a.emit(ldMapFd(1, maps.spans), mov64Imm(2, SPAN_RECORD_BYTES), mov64Imm(3, 0));
  a.emit(call(BPF_FUNC.ringbuf_reserve));
  a.jmpImm('JEQ', 0, 0, full);
  a.emit(mov64Reg(9, 0), call(BPF_FUNC.get_current_pid_tgid));
  a.emit(stx('DW', 9, SPAN_RECORD.pidTgid, 0), stx('DW', 9, SPAN_RECORD.probe, 8));
  a.emit(stx('DW', 9, SPAN_RECORD.duration, 7));
  a.emit(ldx('DW', 1, 10, NOW), stx('DW', 9, SPAN_RECORD.end, 1));
  a.emit(mov64Reg(1, 9), alu64Imm('ADD', 1, SPAN_RECORD.comm), mov64Imm(2, 16));
  a.emit(call(BPF_FUNC.get_current_comm));
  a.emit(mov64Reg(1, 9), mov64Imm(2, BPF_RB_NO_WAKEUP), call(BPF_FUNC.ringbuf_submit));
  a.goto(done);
  a.label(full);
  countError(a, maps, ERROR_SLOT.spansLost);
  a.label(done);
}
