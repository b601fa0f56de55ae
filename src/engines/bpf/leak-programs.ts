/**
 * The handlers of `leaks`: allocations paired with their frees in the kernel.
 *
 * - At an allocator's entry, its arguments (size, the old block of realloc, the out-pointer
 *   of posix_memalign) and the stack's id wait in the thread's `pending` slot; a call made
 *   inside another allocator call of the same thread (realloc(NULL, n) calls malloc, mmap
 *   serves a large malloc) only deepens the slot, so that the outermost call alone counts.
 * - At its return, the address it gave is recorded in `allocs` (process and address ->
 *   size, time, stack id, thread); realloc's old block is removed first (the record moves).
 * - At free (munmap), the record is removed; an address never seen is counted, not an error.
 *
 * Stacks are unwound as `count --by ustack` unwinds them (unwind-program.ts) and kept once in
 * `stack_ids` (stack key -> id), so that a record holds a 4-byte id, not the whole stack.
 * Every map is bounded: what does not fit is counted in `counters` (LEAK_SLOT), never lost
 * silently. The cookie of each uprobe is the function's kind (ALLOCATOR_KINDS).
 */
import { BPF_FUNC, USER_REGS } from '../../native/index.js';
import { Asm, type Subprogram } from './asm.js';
import {
  alu64Imm,
  alu64Reg,
  atomicFetchAdd,
  call,
  type Insn,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  type Reg,
  st,
  stx,
} from './insn.js';
import { countError, type Filters, processPrologue } from './programs.js';
import type { UnwindMaps } from './unwind-maps.js';
import { emitUnwindKey, emitUnwindLeave, emitUnwindSubprograms } from './unwind-program.js';

/** The functions probed, by the kind their cookie carries (the index here). */
export const ALLOCATOR_KINDS = [
  'malloc',
  'calloc',
  'realloc',
  'reallocarray',
  'posix_memalign',
  'aligned_alloc',
  'memalign',
  'valloc',
  'pvalloc',
  'mmap',
  'free',
  'munmap',
] as const;
export type AllocatorKind = (typeof ALLOCATOR_KINDS)[number];

const KIND = Object.fromEntries(ALLOCATOR_KINDS.map((name, i) => [name, i])) as Record<
  AllocatorKind,
  number
>;

/** Whether a kind gives memory back (an entry probe alone) rather than allocating it. */
export function releases(kind: AllocatorKind): boolean {
  return kind === 'free' || kind === 'munmap';
}

/** Slots of the per-CPU `counters` array. */
export const LEAK_SLOT = {
  /** Allocations recorded. */
  allocations: 0,
  /** Records removed by a free, a munmap or a realloc. */
  frees: 1,
  /** Frees (and reallocs) of an address never recorded. */
  unknownFrees: 2,
  /** Allocations that failed (NULL, MAP_FAILED, an error of posix_memalign). */
  failed: 3,
  /** Allocations not recorded: `allocs` was full. */
  dropped: 4,
  /** Allocations recorded without their stack: `stack_ids` was full. */
  stacksFull: 5,
  /** Calls not followed: the threads' `pending` map could not take the thread. */
  pendingFull: 6,
  /** posix_memalign results whose out-pointer could not be read. */
  faults: 7,
  /** Returns whose entry was not seen (a call in flight when the probes were attached). */
  unmatched: 8,
} as const;
export const LEAK_SLOTS = 9;

/** Bytes of a `pending` value: depth, kind, size, pointer argument, stack id. */
export const PENDING_VALUE_BYTES = 40;
/** Bytes of an `allocs` key: the process (u32), 0 (u32), the address (u64). */
export const ALLOC_KEY_BYTES = 16;
/** Bytes of an `allocs` value: size (u64), time (u64, CLOCK_MONOTONIC ns), stack id, thread. */
export const ALLOC_VALUE_BYTES = 24;

/** Frame layout (offsets from r10), above the unwinder's state (fp-304 to fp-144). */
const PENDING_KEY = -16;
const PENDING_VALUE = PENDING_KEY - PENDING_VALUE_BYTES;
const ALLOC_KEY = PENDING_VALUE - ALLOC_KEY_BYTES;
const ALLOC_VALUE = ALLOC_KEY - ALLOC_VALUE_BYTES;
const NOW = ALLOC_VALUE - 8;
const STACK_ID = NOW - 8;
const PENDING_POINTER = STACK_ID - 8;
const ZERO = PENDING_POINTER - 8;
const OUT_VALUE = ZERO - 8;

const BPF_NOEXIST = 1;

export interface LeakMaps {
  readonly counters: number;
  readonly pending: number;
  readonly allocs: number;
  readonly stackIds: number;
  readonly nextId: number;
  readonly unwind: UnwindMaps;
  readonly followed?: number | undefined;
}

function count(a: Asm, maps: LeakMaps, slot: number): void {
  countError(a, { errors: maps.counters }, slot);
}

function mapCall(a: Asm, helper: number, map: number, keyAt: number, valueAt?: number, flags = 0) {
  a.emit(ldMapFd(1, map), mov64Reg(2, 10), alu64Imm('ADD', 2, keyAt));
  if (valueAt !== undefined) {
    a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, valueAt), mov64Imm(4, flags));
  }
  a.emit(call(helper));
}

/**
 * r9 = the thread's pending slot (made when missing); jumps to `out` when the map cannot
 * take it (counted).
 */
function emitPendingSlot(a: Asm, maps: LeakMaps, out: string): void {
  const have = a.fresh('pending.have');
  a.emit(call(BPF_FUNC.get_current_pid_tgid), stx('DW', 10, PENDING_KEY, 0));
  mapCall(a, BPF_FUNC.map_lookup_elem, maps.pending, PENDING_KEY);
  a.jmpImm('JNE', 0, 0, have);
  for (let at = 0; at < PENDING_VALUE_BYTES; at += 8) a.emit(st('DW', 10, PENDING_VALUE + at, 0));
  mapCall(a, BPF_FUNC.map_update_elem, maps.pending, PENDING_KEY, PENDING_VALUE, BPF_NOEXIST);
  mapCall(a, BPF_FUNC.map_lookup_elem, maps.pending, PENDING_KEY);
  a.jmpImm('JNE', 0, 0, have);
  count(a, maps, LEAK_SLOT.pendingFull);
  a.goto(out);
  a.label(have);
  a.emit(mov64Reg(9, 0));
}

/** Jump to `to` when the cookie (r8) is one of `kinds`. */
function ifKind(a: Asm, kinds: readonly AllocatorKind[], to: string): void {
  for (const kind of kinds) a.jmpImm('JEQ', 8, KIND[kind], to);
}

/** `dst` = the saved argument register. */
function arg(a: Asm, dst: Reg, register: 'rdi' | 'rsi' | 'rdx'): void {
  a.emit(ldx('DW', dst, 6, USER_REGS[register]));
}

/**
 * Remove the record of this process's block at the address in r1 (none for 0): counted as a
 * free, or as a free of an unknown address.
 */
function emitRelease(a: Asm, maps: LeakMaps): void {
  const done = a.fresh('release.done');
  const unknown = a.fresh('release.unknown');
  a.jmpImm('JEQ', 1, 0, done);
  a.emit(stx('DW', 10, ALLOC_KEY + 8, 1));
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
  a.emit(stx('W', 10, ALLOC_KEY, 0), st('W', 10, ALLOC_KEY + 4, 0));
  mapCall(a, BPF_FUNC.map_delete_elem, maps.allocs, ALLOC_KEY);
  a.jmpImm('JNE', 0, 0, unknown);
  count(a, maps, LEAK_SLOT.frees);
  a.goto(done);
  a.label(unknown);
  count(a, maps, LEAK_SLOT.unknownFrees);
  a.label(done);
}

/**
 * The entry handler of every probed function (its kind in the cookie): a free removes its
 * record; an allocation's arguments and stack wait in the thread's slot for its return.
 */
export function leakEntryProgram(
  maps: LeakMaps,
  filters: Filters,
): { insns: Insn[]; subprograms: readonly Subprogram[] } {
  const a = new Asm();
  const out = 'out';
  processPrologue(a, filters, out, maps.followed);
  emitPendingSlot(a, maps, out);
  a.emit(ldx('DW', 1, 9, 0));
  const allocation = 'allocation';
  a.jmpImm('JLT', 8, KIND.free, allocation);
  // free, munmap: not inside another allocator call (realloc's own free is realloc's).
  a.jmpImm('JNE', 1, 0, out);
  arg(a, 1, 'rdi');
  emitRelease(a, maps);
  a.goto(out);

  a.label(allocation);
  const outermost = 'outermost';
  a.jmpImm('JEQ', 1, 0, outermost);
  a.emit(alu64Imm('ADD', 1, 1), stx('DW', 9, 0, 1));
  a.goto(out);
  a.label(outermost);
  a.emit(mov64Imm(1, 1), stx('DW', 9, 0, 1), stx('DW', 9, 8, 8));
  // The size (r1) and the pointer argument (r2) of each kind.
  const sized = 'sized';
  const cases: { kinds: AllocatorKind[]; emit: () => void }[] = [
    { kinds: ['malloc', 'valloc', 'pvalloc'], emit: () => arg(a, 1, 'rdi') },
    {
      kinds: ['calloc'],
      emit: () => {
        arg(a, 1, 'rdi');
        arg(a, 3, 'rsi');
        a.emit(alu64Reg('MUL', 1, 3));
      },
    },
    {
      kinds: ['realloc'],
      emit: () => {
        arg(a, 1, 'rsi');
        arg(a, 2, 'rdi');
      },
    },
    {
      kinds: ['reallocarray'],
      emit: () => {
        arg(a, 1, 'rsi');
        arg(a, 3, 'rdx');
        a.emit(alu64Reg('MUL', 1, 3));
        arg(a, 2, 'rdi');
      },
    },
    {
      kinds: ['posix_memalign'],
      emit: () => {
        arg(a, 1, 'rdx');
        arg(a, 2, 'rdi');
      },
    },
    { kinds: ['aligned_alloc', 'memalign', 'mmap'], emit: () => arg(a, 1, 'rsi') },
  ];
  a.emit(mov64Imm(1, 0), mov64Imm(2, 0));
  const labels = cases.map(() => a.fresh('kind'));
  cases.forEach((c, i) => {
    ifKind(a, c.kinds, labels[i]!);
  });
  a.goto(sized);
  cases.forEach((c, i) => {
    a.label(labels[i]!);
    c.emit();
    a.goto(sized);
  });
  a.label(sized);
  a.emit(stx('DW', 9, 16, 1), stx('DW', 9, 24, 2), st('DW', 9, 32, 0));
  // The stack: unwound into a key, then its id (a new one for a stack not seen yet).
  a.emit(stx('DW', 10, PENDING_POINTER, 9));
  const full = 'nested';
  emitUnwindKey(a, maps.unwind, full, out);
  // One key per stack, whichever function it ends in: the probe's slot of the header is 0.
  a.emit(st('W', 9, 0, 0), st('DW', 10, STACK_ID, 0));
  const have = 'stack.have';
  const keep = 'stack.keep';
  a.emit(ldMapFd(1, maps.stackIds), mov64Reg(2, 9), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, 'stack.new');
  a.emit(ldx('DW', 1, 0, 0), stx('DW', 10, STACK_ID, 1));
  a.goto(keep);
  a.label('stack.new');
  a.emit(st('W', 10, ZERO, 0));
  mapCall(a, BPF_FUNC.map_lookup_elem, maps.nextId, ZERO);
  a.jmpImm('JEQ', 0, 0, have);
  a.emit(mov64Imm(1, 1), atomicFetchAdd(0, 0, 1), alu64Imm('ADD', 1, 1));
  a.emit(stx('DW', 10, STACK_ID, 1));
  a.emit(ldMapFd(1, maps.stackIds), mov64Reg(2, 9), mov64Reg(3, 10));
  a.emit(alu64Imm('ADD', 3, STACK_ID), mov64Imm(4, BPF_NOEXIST), call(BPF_FUNC.map_update_elem));
  a.jmpImm('JEQ', 0, 0, keep);
  // Another CPU kept the same stack first, or the map is full.
  a.emit(st('DW', 10, STACK_ID, 0));
  a.emit(ldMapFd(1, maps.stackIds), mov64Reg(2, 9), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, have);
  a.emit(ldx('DW', 1, 0, 0), stx('DW', 10, STACK_ID, 1));
  a.label(have);
  a.label(keep);
  emitUnwindLeave(a);
  a.emit(ldx('DW', 9, 10, PENDING_POINTER), ldx('DW', 1, 10, STACK_ID), stx('DW', 9, 32, 1));
  a.jmpImm('JNE', 1, 0, out);
  count(a, maps, LEAK_SLOT.stacksFull);
  a.goto(out);
  a.label(full);
  // Nested too deep on this CPU to unwind: recorded without a stack.
  count(a, maps, LEAK_SLOT.stacksFull);
  a.label(out);
  a.returnZero();
  emitUnwindSubprograms(a, maps.unwind);
  return { insns: a.finish(), subprograms: a.subprograms };
}

/**
 * The return handler of every allocating function: the outermost call's result recorded
 * under its address, with the size, time and stack its entry kept; realloc's old block
 * removed (the record moves), realloc(p, 0)'s freed.
 */
export function leakReturnProgram(maps: LeakMaps, filters: Filters): Insn[] {
  const a = new Asm();
  const out = 'out';
  // The time first.
  a.emit(mov64Reg(6, 1), call(BPF_FUNC.ktime_get_ns), stx('DW', 10, NOW, 0), mov64Reg(1, 6));
  processPrologue(a, filters, out, maps.followed);
  a.emit(call(BPF_FUNC.get_current_pid_tgid), stx('DW', 10, PENDING_KEY, 0));
  mapCall(a, BPF_FUNC.map_lookup_elem, maps.pending, PENDING_KEY);
  const unmatched = 'unmatched';
  a.jmpImm('JEQ', 0, 0, unmatched);
  a.emit(mov64Reg(9, 0), ldx('DW', 1, 9, 0));
  a.jmpImm('JEQ', 1, 0, unmatched);
  a.emit(alu64Imm('SUB', 1, 1), stx('DW', 9, 0, 1));
  a.jmpImm('JNE', 1, 0, out);
  // r7 = the block's address.
  a.emit(ldx('DW', 7, 6, USER_REGS.rax));
  const failed = 'failed';
  const have = 'have';
  const checked = 'checked';
  a.jmpImm('JNE', 8, KIND.posix_memalign, 'not.memalign');
  // posix_memalign: 0 for success, the block at its out-pointer.
  a.jmpImm('JNE', 7, 0, failed);
  a.emit(st('DW', 10, OUT_VALUE, 0), mov64Reg(1, 10), alu64Imm('ADD', 1, OUT_VALUE));
  a.emit(mov64Imm(2, 8), ldx('DW', 3, 9, 24), call(BPF_FUNC.probe_read_user));
  a.jmpImm('JNE', 0, 0, 'fault');
  a.emit(ldx('DW', 7, 10, OUT_VALUE));
  a.goto(checked);
  a.label('not.memalign');
  a.jmpImm('JNE', 8, KIND.mmap, checked);
  a.jmpImm('JEQ', 7, -1, failed);
  a.label(checked);
  a.jmpImm('JNE', 7, 0, have);
  // NULL: realloc(p, 0) freed p; anything else failed.
  ifKind(a, ['realloc', 'reallocarray'], 'null.realloc');
  a.goto(failed);
  a.label('null.realloc');
  a.emit(ldx('DW', 1, 9, 16));
  a.jmpImm('JNE', 1, 0, failed);
  a.emit(ldx('DW', 1, 9, 24));
  emitRelease(a, maps);
  a.goto(out);

  a.label(have);
  const record = 'record';
  ifKind(a, ['realloc', 'reallocarray'], 'moved');
  a.goto(record);
  a.label('moved');
  a.emit(ldx('DW', 1, 9, 24));
  emitRelease(a, maps);
  a.label(record);
  a.emit(call(BPF_FUNC.get_current_pid_tgid), mov64Reg(1, 0), alu64Imm('RSH', 1, 32));
  a.emit(
    stx('W', 10, ALLOC_KEY, 1),
    st('W', 10, ALLOC_KEY + 4, 0),
    stx('DW', 10, ALLOC_KEY + 8, 7),
  );
  // The value: size, time, stack id (u32) and thread (u32).
  a.emit(ldx('DW', 1, 9, 16), stx('DW', 10, ALLOC_VALUE, 1));
  a.emit(ldx('DW', 1, 10, NOW), stx('DW', 10, ALLOC_VALUE + 8, 1));
  a.emit(ldx('DW', 1, 9, 32), stx('W', 10, ALLOC_VALUE + 16, 1), stx('W', 10, ALLOC_VALUE + 20, 0));
  mapCall(a, BPF_FUNC.map_update_elem, maps.allocs, ALLOC_KEY, ALLOC_VALUE, 0);
  a.jmpImm('JEQ', 0, 0, 'recorded');
  count(a, maps, LEAK_SLOT.dropped);
  a.goto(out);
  a.label('recorded');
  count(a, maps, LEAK_SLOT.allocations);
  a.goto(out);

  a.label(failed);
  count(a, maps, LEAK_SLOT.failed);
  a.goto(out);
  a.label('fault');
  count(a, maps, LEAK_SLOT.faults);
  a.goto(out);
  a.label(unmatched);
  count(a, maps, LEAK_SLOT.unmatched);
  a.label(out);
  a.returnZero();
  return a.finish();
}
