/**
 * Calls paired with their returns by frame, in the kernel, for return probes caught at a
 * function's exits (no return address replaced) or through the kernel's return trampoline
 * (which leaves out the returns of calls nested more than 64 deep on a thread): each owner
 * (a thread, or a Go goroutine) keeps a stack of its open calls of the function, each at its
 * depth in the owner's stack and with its start time. An entry pops the calls at its depth
 * or deeper (an unwind, a longjmp or the kernel left them) and pushes itself; a return pops
 * the deeper ones the same way and then its own call. Calls left so are counted per probe.
 *
 * Depth grows with the stack: for a thread `0 - sp` at the entry (unsigned), for a goroutine
 * `g.stack.hi - sp` (%r14 holds g under Go's register ABI, and a copy of the stack to a
 * larger one keeps that distance). The stack pointer is the same at a call's entry and at
 * its exit (`ret`, or a jump to another function), and 8 above it at the trampoline.
 *
 * Code here is emitted into the count, histogram and latency handlers, after their prologue
 * (r6 the saved registers, r8 the attach cookie); it uses r7 (calls found unwound) and r9
 * (the owner's frames) and the frame slots below, which the handlers leave alone.
 */
import { BPF_FUNC, USER_REGS } from '../../native/index.js';
import type { Asm } from './asm.js';
import {
  alu64Imm,
  alu64Reg,
  atomicAdd,
  call,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  st,
  stx,
} from './insn.js';
import { kernelFacts, type WalkerOffsets } from './kernel-facts.js';

/** Open calls kept per owner and function; deeper ones are counted but not timed or paired. */
export const MAX_FRAMES = 16;
/** A frame's value: how many are kept, how many deeper are not, then (depth, start) each. */
export const FRAMES_VALUE_BYTES = 16 + 16 * MAX_FRAMES;
/** A frame's key: the owner (pid_tgid, or a goroutine's g), the probe, the process. */
export const FRAMES_KEY_BYTES = 16;

/** The attach cookie's bit for the entry that opens a call's frame (nothing is counted). */
export const COOKIE_FRAME_ENTRY = 2 ** 33;
/** The attach cookie's bit for a return caught at one of the function's exits. */
export const COOKIE_RETURN_SITE = 2 ** 34;
/** The attach cookie's bit for frames kept per goroutine (%r14) rather than per thread. */
export const COOKIE_GOROUTINE = 2 ** 35;
/** The attach cookie's bit for a return caught at a tail call (the result is not made yet). */
export const COOKIE_TAIL_CALL = 2 ** 36;
/**
 * The attach cookie's bit for a return through the kernel's return trampoline (a uretprobe):
 * the `ret` has popped the return address, so the stack pointer is 8 above the entry's.
 */
export const COOKIE_TRAMPOLINE_RETURN = 2 ** 37;
/**
 * The attach cookie's bit for the frame entry of a function that jumps back to its entry
 * (ReturnPlan.loopsAtEntry): an entry at the depth of its owner's open call goes on with it.
 */
export const COOKIE_LOOPS = 2 ** 38;
/**
 * The attach cookie's bit for the frame entry of a return through the kernel's trampoline: an
 * entry at the depth of its owner's open call is that call's function gone back to its entry
 * (the kernel chains a trampoline to the one it set: both return at once), so a frame with no
 * start is pushed over it, whose return is paired and not timed.
 */
export const COOKIE_CHAINS = 2 ** 39;

/** Stack slots (from r10), below everything the other handlers use. */
const FRAME_KEY = -512;
const FRAME_DEPTH = -496;
/** The start time of the call a return was paired with; 0 when none. */
export const FRAME_START = -488;
/** For emitFrameEnter()'s `timedAt`: whether the call is timed (0: pushed with a start of 0). */
export const FRAME_TIMED = -480;

/** Maps the frame code updates, by file descriptor. */
export interface FrameMaps {
  /** LRU hash: {owner u64, probe u32, tgid u32} -> FRAMES_VALUE_BYTES. */
  readonly frames: number;
  /** An array of one zeroed FRAMES_VALUE_BYTES value: what a new owner starts from. */
  readonly zero: number;
  /** Per-CPU array by probe index: calls found left by an unwind. */
  readonly unwound: number;
  /** Per-CPU error slots: `dropped` (a full map), `unmatched`, `deep`. */
  readonly errors: number;
}

export interface FrameErrorSlots {
  readonly dropped: number;
  readonly unmatched: number;
  readonly deep: number;
}

/** Jump to `label` when the cookie (r8) has `bit` set. */
export function ifCookieBit(a: Asm, bit: number, label: string): void {
  a.emit(mov64Reg(1, 8), alu64Imm('RSH', 1, Math.log2(bit)), alu64Imm('AND', 1, 1));
  a.jmpImm('JNE', 1, 0, label);
}

/** `r9 = &value->frames[n - 1] - 16` for n in r1, known to be 1..MAX_FRAMES; r2 = the same. */
function topFrame(a: Asm): void {
  a.emit(mov64Reg(2, 1), alu64Imm('SUB', 2, 1), alu64Imm('LSH', 2, 4), alu64Reg('ADD', 2, 9));
}

/** Pop the top frame (n in r1): count it, and the untracked deeper ones, as unwound (r7). */
function popUnwound(a: Asm): void {
  a.emit(alu64Imm('SUB', 1, 1), stx('DW', 9, 0, 1));
  a.emit(ldx('DW', 5, 9, 8), alu64Reg('ADD', 7, 5), st('DW', 9, 8, 0), alu64Imm('ADD', 7, 1));
}

/** Add r7 (unwound calls) to the probe's slot of `unwound`, when not 0. */
function addUnwound(a: Asm, maps: FrameMaps): void {
  const none = a.fresh('frames.none');
  a.jmpImm('JEQ', 7, 0, none);
  a.emit(stx('W', 10, SCRATCH, 8), ldMapFd(1, maps.unwound), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, none);
  a.emit(atomicAdd('DW', 0, 0, 7));
  a.label(none);
}

/** `errors[slot]++` (per-CPU). */
function countError(a: Asm, maps: FrameMaps, slot: number): void {
  const skip = a.fresh('frames.error');
  a.emit(st('W', 10, SCRATCH, slot), ldMapFd(1, maps.errors), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, skip);
  a.emit(mov64Imm(1, 1), atomicAdd('DW', 0, 0, 1));
  a.label(skip);
}

/**
 * r9 = the open calls of this probe by the caller's thread or goroutine, with the key at
 * FRAME_KEY and the depth at FRAME_DEPTH. When the owner has none: made from `zero` with
 * `missing` 'make' (a full map jumps to `full`), else a jump to `missing`. A goroutine whose
 * stack cannot be read jumps to `fault`.
 */
function emitFrames(a: Asm, maps: FrameMaps, fault: string, full: string, missing: string): void {
  const goroutine = a.fresh('frames.goroutine');
  const keyed = a.fresh('frames.keyed');
  a.emit(call(BPF_FUNC.get_current_pid_tgid), stx('DW', 10, FRAME_KEY, 0));
  a.emit(alu64Imm('RSH', 0, 32), stx('W', 10, FRAME_KEY + 12, 0), stx('W', 10, FRAME_KEY + 8, 8));
  ifCookieBit(a, COOKIE_GOROUTINE, goroutine);
  // A thread: owner pid_tgid (already in the key), depth 0 - sp (8 - sp after a return
  // through the trampoline: the entry's).
  a.emit(ldx('DW', 1, 6, USER_REGS.rsp), mov64Imm(2, 0), alu64Reg('SUB', 2, 1));
  a.emit(mov64Reg(3, 8), alu64Imm('RSH', 3, Math.log2(COOKIE_TRAMPOLINE_RETURN)));
  a.emit(alu64Imm('AND', 3, 1), alu64Imm('LSH', 3, 3), alu64Reg('ADD', 2, 3));
  a.emit(stx('DW', 10, FRAME_DEPTH, 2));
  a.goto(keyed);
  a.label(goroutine);
  // A goroutine: owner g (%r14), depth g.stack.hi (8 bytes into g) - sp.
  a.emit(ldx('DW', 3, 6, USER_REGS.r14), stx('DW', 10, FRAME_KEY, 3), alu64Imm('ADD', 3, 8));
  a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, FRAME_DEPTH), mov64Imm(2, 8));
  a.emit(call(BPF_FUNC.probe_read_user));
  a.jmpImm('JNE', 0, 0, fault);
  a.emit(ldx('DW', 1, 10, FRAME_DEPTH), ldx('DW', 2, 6, USER_REGS.rsp));
  a.emit(alu64Reg('SUB', 1, 2), stx('DW', 10, FRAME_DEPTH, 1));
  a.label(keyed);
  const have = a.fresh('frames.have');
  const lookup = () => {
    a.emit(ldMapFd(1, maps.frames), mov64Reg(2, 10), alu64Imm('ADD', 2, FRAME_KEY));
    a.emit(call(BPF_FUNC.map_lookup_elem));
  };
  lookup();
  a.jmpImm('JNE', 0, 0, have);
  if (missing !== MAKE) {
    a.goto(missing);
  } else {
    // A new owner starts from the zeroed value of `zero`.
    a.emit(st('W', 10, SCRATCH, 0), ldMapFd(1, maps.zero), mov64Reg(2, 10));
    a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
    a.jmpImm('JEQ', 0, 0, full);
    a.emit(mov64Reg(3, 0), ldMapFd(1, maps.frames), mov64Reg(2, 10));
    a.emit(alu64Imm('ADD', 2, FRAME_KEY), mov64Imm(4, 0), call(BPF_FUNC.map_update_elem));
    lookup();
    a.jmpImm('JEQ', 0, 0, full);
  }
  a.label(have);
  a.emit(mov64Reg(9, 0));
}

/** Where the kernel's return trampoline is found, or undefined where its BTF does not say. */
function trampolineOffsets(): WalkerOffsets | undefined {
  try {
    const walker = kernelFacts().walker;
    return 'missing' in walker ? undefined : walker;
  } catch {
    return undefined;
  }
}

/**
 * Falls through when the return address on top of the stack (at an entry) is the kernel's
 * return trampoline (task->mm->uprobes_state.xol_area->vaddr), else jumps to `not`:
 * the entry was not reached by a call, the kernel having replaced the address a call left.
 * Uses FRAME_START and SCRATCH, and r1-r5.
 */
function emitReturnsToTrampoline(
  a: Asm,
  o: Pick<WalkerOffsets, 'taskMm' | 'mmXolArea' | 'xolVaddr'>,
  not: string,
): void {
  const read = (helper: number, at: number, from: () => void) => {
    from();
    a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, at), mov64Imm(2, 8), call(helper));
    a.jmpImm('JNE', 0, 0, not);
  };
  // The return address: *(u64 *)rsp.
  read(BPF_FUNC.probe_read_user, FRAME_START, () => a.emit(ldx('DW', 3, 6, USER_REGS.rsp)));
  // The trampoline: task->mm, ->uprobes_state.xol_area, ->vaddr (none yet: no trampoline).
  a.emit(call(BPF_FUNC.get_current_task), stx('DW', 10, SCRATCH, 0));
  for (const offset of [o.taskMm, o.mmXolArea, o.xolVaddr]) {
    read(BPF_FUNC.probe_read_kernel, SCRATCH, () => {
      a.emit(ldx('DW', 3, 10, SCRATCH));
      a.jmpImm('JEQ', 3, 0, not);
      a.emit(alu64Imm('ADD', 3, offset));
    });
  }
  a.emit(ldx('DW', 1, 10, FRAME_START), ldx('DW', 2, 10, SCRATCH));
  a.jmpReg('JNE', 1, 2, not);
}

/** `missing` of emitFrames(): make the owner's value. */
const MAKE = '';

/**
 * At the entry of a call: its frame is pushed, with the time, after popping the calls at its
 * depth or deeper (counted as unwound). An entry at the depth of an open call that is its
 * function gone back to its start goes on with that call: with COOKIE_LOOPS nothing is
 * pushed; with COOKIE_CHAINS, where the return address is the kernel's trampoline, a frame
 * with no start (the kernel's chained return). Past MAX_FRAMES open calls it is only counted.
 * With `timedAt`, a stack slot (FRAME_TIMED) that holds 0 for a call not to be timed: its
 * frame is pushed with a start of 0, so that its return pairs with it but is not timed.
 * Then jumps to `out`.
 */
export function emitFrameEnter(
  a: Asm,
  maps: FrameMaps,
  slots: FrameErrorSlots,
  out: string,
  timedAt?: number,
): void {
  const full = a.fresh('frames.full');
  const fault = a.fresh('frames.fault');
  const push = a.fresh('frames.push');
  const pushed = a.fresh('frames.pushed');
  const chained = a.fresh('frames.chained');
  const walker = trampolineOffsets();
  a.emit(mov64Imm(7, 0));
  emitFrames(a, maps, fault, full, MAKE);
  for (let k = 0; k < MAX_FRAMES; k++) {
    a.emit(ldx('DW', 1, 9, 0));
    a.jmpImm('JEQ', 1, 0, push);
    a.jmpImm('JGT', 1, MAX_FRAMES, push);
    topFrame(a);
    a.emit(ldx('DW', 3, 2, 16), ldx('DW', 4, 10, FRAME_DEPTH));
    // Shallower than the new call: still running.
    a.jmpReg('JLT', 3, 4, push);
    const pop = a.fresh('frames.pop');
    a.jmpReg('JNE', 3, 4, pop);
    // At its depth: the same call, gone back to its entry, where the function loops there.
    a.emit(mov64Reg(5, 8), alu64Imm('RSH', 5, Math.log2(COOKIE_LOOPS)), alu64Imm('AND', 5, 1));
    a.jmpImm('JNE', 5, 0, pushed);
    if (walker !== undefined) {
      a.emit(mov64Reg(5, 8), alu64Imm('RSH', 5, Math.log2(COOKIE_CHAINS)), alu64Imm('AND', 5, 1));
      a.jmpImm('JEQ', 5, 0, pop);
      emitReturnsToTrampoline(a, walker, pop);
      a.goto(chained);
    }
    a.label(pop);
    // r1 (the number of frames) again, after the calls of the check.
    a.emit(ldx('DW', 1, 9, 0));
    popUnwound(a);
  }
  a.label(push);
  const deep = a.fresh('frames.deep');
  a.emit(ldx('DW', 1, 9, 0));
  a.jmpImm('JGE', 1, MAX_FRAMES, deep);
  a.emit(mov64Reg(2, 1), alu64Imm('LSH', 2, 4), alu64Reg('ADD', 2, 9));
  a.emit(ldx('DW', 4, 10, FRAME_DEPTH), stx('DW', 2, 16, 4));
  a.emit(alu64Imm('ADD', 1, 1), stx('DW', 9, 0, 1));
  if (timedAt !== undefined) {
    const timed = a.fresh('frames.timed');
    a.emit(ldx('DW', 3, 10, timedAt));
    a.jmpImm('JNE', 3, 0, timed);
    a.emit(st('DW', 2, 24, 0));
    a.goto(pushed);
    a.label(timed);
  }
  // The time last, so that the handler's own cost is not in the measured call.
  a.emit(mov64Reg(1, 2), stx('DW', 10, FRAME_START, 1), call(BPF_FUNC.ktime_get_ns));
  a.emit(ldx('DW', 2, 10, FRAME_START), stx('DW', 2, 24, 0));
  a.goto(pushed);
  a.label(chained);
  // A frame at the same depth with no start (n, known below MAX_FRAMES, in r1).
  a.emit(ldx('DW', 1, 9, 0));
  a.jmpImm('JGE', 1, MAX_FRAMES, deep);
  a.emit(mov64Reg(2, 1), alu64Imm('LSH', 2, 4), alu64Reg('ADD', 2, 9));
  a.emit(ldx('DW', 4, 10, FRAME_DEPTH), stx('DW', 2, 16, 4), st('DW', 2, 24, 0));
  a.emit(alu64Imm('ADD', 1, 1), stx('DW', 9, 0, 1));
  a.goto(pushed);
  a.label(deep);
  a.emit(ldx('DW', 1, 9, 8), alu64Imm('ADD', 1, 1), stx('DW', 9, 8, 1));
  a.label(pushed);
  addUnwound(a, maps);
  a.goto(out);
  a.label(full);
  countError(a, maps, slots.dropped);
  a.goto(out);
  a.label(fault);
  countError(a, maps, slots.unmatched);
  a.goto(out);
}

/**
 * At a return: pops the deeper calls (unwound), then the call it ends, whose start time goes
 * to FRAME_START (0 when none: a call deeper than the calls kept, counted `deep`, or one
 * whose entry was not seen, counted `unmatched`). Falls through.
 */
export function emitFrameLeave(a: Asm, maps: FrameMaps, slots: FrameErrorSlots): void {
  const unmatched = a.fresh('frames.unmatched');
  const match = a.fresh('frames.match');
  const untracked = a.fresh('frames.untracked');
  const done = a.fresh('frames.done');
  a.emit(st('DW', 10, FRAME_START, 0));
  a.emit(mov64Imm(7, 0));
  emitFrames(a, maps, unmatched, unmatched, unmatched);
  for (let k = 0; k < MAX_FRAMES; k++) {
    a.emit(ldx('DW', 1, 9, 0));
    a.jmpImm('JEQ', 1, 0, match);
    a.jmpImm('JGT', 1, MAX_FRAMES, match);
    topFrame(a);
    a.emit(ldx('DW', 3, 2, 16), ldx('DW', 4, 10, FRAME_DEPTH));
    // Not deeper than the return: this call, or one still running.
    a.jmpReg('JLE', 3, 4, match);
    popUnwound(a);
  }
  a.label(match);
  a.emit(ldx('DW', 1, 9, 0));
  a.jmpImm('JEQ', 1, 0, untracked);
  a.jmpImm('JGT', 1, MAX_FRAMES, untracked);
  topFrame(a);
  a.emit(ldx('DW', 3, 2, 16), ldx('DW', 4, 10, FRAME_DEPTH));
  a.jmpReg('JNE', 3, 4, untracked);
  a.emit(ldx('DW', 5, 2, 24), stx('DW', 10, FRAME_START, 5));
  a.emit(alu64Imm('SUB', 1, 1), stx('DW', 9, 0, 1));
  // Calls deeper than the ones kept have ended too.
  a.emit(ldx('DW', 5, 9, 8), alu64Reg('ADD', 7, 5), st('DW', 9, 8, 0));
  a.goto(done);
  a.label(untracked);
  // A return deeper than the calls kept: one of the calls only counted.
  a.emit(ldx('DW', 5, 9, 8));
  a.jmpImm('JEQ', 5, 0, unmatched);
  a.emit(alu64Imm('SUB', 5, 1), stx('DW', 9, 8, 5));
  countError(a, maps, slots.deep);
  a.goto(done);
  a.label(unmatched);
  countError(a, maps, slots.unmatched);
  a.label(done);
  addUnwound(a, maps);
}

/** Scratch slot shared with the handlers (a map key for one lookup). */
const SCRATCH = -8;
