/**
 * The user stack of a hit, walked in the kernel from the unwind tables upscope compiles from
 * each file's call frame information (arch/x86-64/unwind.ts says what each rule means; this
 * is the same walk in BPF):
 *
 * - a `bpf_loop` over frames; per frame, the mapping that holds the pc comes from
 *   `bpf_find_vma` (its file's device and inode, read through the kernel's BTF offsets), kept
 *   while the next pcs stay in it;
 * - the file's rows are found through a page index (a few rows per 4 KiB of code), then a
 *   branch-free binary search among them gives the rule;
 * - anonymous executable memory (JIT code) is walked by frame pointers; the uprobes
 *   trampoline page, a file with no table, an unreadable stack or a rule not followed end the
 *   stack with a marked frame that says why, as the depth limit does.
 *
 * Frames of a file with an id are keyed as (id, file offset), so that they are named from the
 * file itself even after the process has ended or the file was replaced; others as the pc.
 * A file met without an entry is noted in `missing` for user space to load.
 */
import { CFA_KIND, RA_KIND, RBP_KIND, STOP_REASON } from '../../arch/index.js';
import { BPF_FUNC, USER_REGS } from '../../native/index.js';
import type { Asm } from './asm.js';
import {
  alu64Imm,
  alu64Reg,
  call,
  exit,
  ld64Imm,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  type Reg,
  st,
  stx,
  toBigEndian,
} from './insn.js';
import { kernelFacts, type WalkerOffsets } from './kernel-facts.js';
import {
  FILE_HAS_TABLE,
  FILE_TABLE_FULL,
  PAGE_SHIFT,
  type UnwindMaps,
  VM_IO,
  VMA_REGION_SHIFT,
  VMA_VALUE_BYTES,
} from './unwind-maps.js';

/** Frames a stack key holds (its last slot is kept for the mark of a cut). */
export const UNWIND_FRAMES = 63;
/** Bytes of the stack key: probe (u32), pid (u32), then the frames. */
export const UNWIND_KEY_BYTES = 8 + 8 * UNWIND_FRAMES;
/**
 * Where the kind of the mapping that holds the pc (KIND) is kept: in the scratch map's value
 * past the key, not in the walker's state on the stack. The verifier knows what a program
 * stores on its stack, not what it stores in a map: a kind (and an exact flag) kept on the
 * stack made each value a state of its own for every later frame (477,456 instructions
 * processed, 0.45 s a load; 31,295 and 0.06 s with both here).
 */
export const KIND_AT = UNWIND_KEY_BYTES;
/** Whether the pc is exact (the probed one) or a return address, kept beside the kind. */
const EXACT_AT = KIND_AT + 4;

/** A frame keyed by file: this bit, the file's id from bit 40, its file offset below. */
export const FRAME_FILE_BIT = 1n << 63n;
export const FRAME_FILE_ID_SHIFT = 40n;
/** A frame that marks a cut stack: this value or'ed with the reason (STOP_REASON). */
export const FRAME_MARK = 0xffff_ffff_ffff_ff00n;

/** Binary search steps among one page's rows (up to 2^16 rows). */
const SEARCH_STEPS = 16;
/** `-EBUSY` from bpf_find_vma: the memory map's lock was taken. */
const EBUSY = -16;

/** The walker's state, on the main program's stack at `fp + STATE`. */
const STATE = -304;
const S = {
  pc: 0,
  sp: 8,
  bp: 16,
  n: 24,
  vmStart: 32,
  vmEnd: 40,
  fileBase: 48,
  /** The files map key: dev (u32), 0 (u32), ino (u64). */
  dev: 56,
  pad: 60,
  ino: 64,
  rowFirst: 72,
  rowCount: 76,
  pageFirst: 80,
  pageCount: 84,
  basePage: 88,
  fileId: 92,
  // 96-103: unused (the kind and whether the pc is exact are in the scratch value: KIND_AT).
  slot: 104,
  vmFlags: 108,
  /** A u32 map key for the rows, pages and rules lookups. */
  index: 112,
  /** The missing map's value: the pid, then 0. */
  pid: 116,
  pidPad: 120,
  spare: 124,
  /** The uretprobe trampoline's address while the thread has return probes pending, else 0. */
  tramp: 128,
  /** The newest of the thread's uretprobe return instances (kernel address), else 0. */
  ri: 136,
  /** The image id of the process's memory map (see memoryImageId). */
  image: 144,
  /**
   * 0 when the mappings in the ranges trie were read for this image (then, and only then,
   * are they used), else not 0. (Not a flag of constants: the verifier would follow each
   * value through every later frame.)
   */
  mismatch: 152,
} as const;
export const UNWIND_STATE_BYTES = 160;
/** Return instances looked through for a return address a uretprobe replaced. */
const RETURN_INSTANCES = 8;

/**
 * What holds the pc: a file with its table, a file known to have none, anonymous memory,
 * the uprobes page, a file whose table did not fit, a file met for the first time (no id).
 */
const KIND = { table: 1, noTable: 2, anonymous: 3, uprobes: 4, tableFull: 5, unknown: 6 } as const;

/** Offsets of the kernel struct members the walker reads, from this kernel's BTF. */
function kernelOffsets(): WalkerOffsets {
  const walker = kernelFacts().walker;
  if ('missing' in walker) throw new Error(walker.missing);
  return walker;
}

/**
 * Where the memory map is locked, the mapping of the pc comes from the ranges read from
 * /proc/PID/maps (vmaRanges in unwind-maps.ts) or from the pages walks cached (vmaCache):
 * their keys and a value to cache, in the frame callback's own stack (free while the mapping
 * is looked up: the rule step uses it after).
 */
const VMA_KEY = -16;
const VMA_VALUE = -72;
/** The state's fields a mapping restores, from S.vmStart (vmStart to ino), then its flags. */
const VMA_CACHED_BYTES = S.ino + 8 - S.vmStart;
/** Where the image id is in a cached page's value. */
const VMA_CACHED_IMAGE = VMA_VALUE_BYTES;

/** The cache key of an address (in `reg`, r6 the pc by default) in this process: its 2 MiB region, at fp + VMA_KEY. */
function emitVmaCacheKey(a: Asm, reg: Reg = 6): void {
  a.emit(mov64Reg(2, reg), ldx('W', 1, 9, S.pid), stx('W', 10, VMA_KEY, 1));
  a.emit(st('W', 10, VMA_KEY + 4, 0), alu64Imm('RSH', 2, VMA_REGION_SHIFT));
  a.emit(stx('DW', 10, VMA_KEY + 8, 2));
}

/** The ranges trie's key of the pc (r6) in this process, at fp + VMA_KEY: every bit. */
function emitVmaRangeKey(a: Asm): void {
  a.emit(st('W', 10, VMA_KEY, 32 + 64), ldx('W', 1, 9, S.pid), stx('W', 10, VMA_KEY + 4, 1));
  a.emit(mov64Reg(1, 6), toBigEndian(1, 64), stx('DW', 10, VMA_KEY + 8, 1));
}

/** A mapping (r0 points at one: VMA_VALUE_BYTES) into the state. */
function emitVmaRestore(a: Asm): void {
  for (let at = 0; at < VMA_CACHED_BYTES; at += 8) {
    a.emit(ldx('DW', 1, 0, at), stx('DW', 9, S.vmStart + at, 1));
  }
  a.emit(ldx('W', 1, 0, VMA_CACHED_BYTES), stx('W', 9, S.vmFlags, 1));
}

/**
 * Once per walk, before it (in the main program: the state at fp + STATE, the pid in it):
 * the image id of the process's memory map (start_code ^ arg_start, as memoryImageId reads
 * them from /proc), and whether the process's ranges in the trie were read for that image
 * (S.mismatch 0). Clobbers r0-r5.
 */
function emitImage(a: Asm, maps: UnwindMaps): void {
  const o = kernelOffsets();
  const at = (field: number) => STATE + field;
  const done = a.fresh('unwind.imaged');
  a.emit(call(BPF_FUNC.get_current_task_btf), ldx('DW', 1, 0, o.taskMm));
  a.emit(ldx('DW', 2, 1, o.mmStartCode), ldx('DW', 3, 1, o.mmArgStart), alu64Reg('XOR', 2, 3));
  a.emit(stx('DW', 10, at(S.image), 2), alu64Imm('OR', 2, 1), stx('DW', 10, at(S.mismatch), 2));
  a.emit(ldMapFd(1, maps.vmaPids.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, at(S.pid)));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, done);
  a.emit(ldx('DW', 1, 0, 0), ldx('DW', 2, 10, at(S.image)), alu64Reg('XOR', 1, 2));
  a.emit(stx('DW', 10, at(S.mismatch), 1));
  a.label(done);
}

/** Names of the walker's subprograms (labels of the program they are appended to). */
const FRAME = 'unwind.frame';
const VMA = 'unwind.vma';

/**
 * Build the stack key of this hit in the per-CPU scratch map and leave its address in r9:
 * the probe index (from r8) and pid in its header, then the frames. r6 holds the context;
 * r7 is used for the nesting slot and must not be changed until `emitUnwindLeave`. Jumps to
 * `full` when the handler is nested too deep to have a slot (counted by the caller).
 */
export function emitUnwindKey(a: Asm, maps: UnwindMaps, full: string, out: string): void {
  const state = (field: number) => STATE + field;
  for (let at = 0; at < UNWIND_STATE_BYTES; at += 8) a.emit(st('DW', 10, state(at), 0));
  // Nesting: r7 = this CPU's counter, its old value into the state's slot.
  a.emit(st('W', 10, state(S.index), 0), ldMapFd(1, maps.nest.fd), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, state(S.index)), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, out);
  a.emit(mov64Reg(7, 0), ldx('DW', 1, 7, 0));
  a.jmpImm('JGE', 1, 2, full);
  a.emit(stx('W', 10, state(S.slot), 1), mov64Reg(2, 1), alu64Imm('ADD', 2, 1));
  a.emit(stx('DW', 7, 0, 2));
  a.emit(ldMapFd(1, maps.scratch.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, state(S.slot)));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  const have = a.fresh('unwind.slot');
  a.jmpImm('JNE', 0, 0, have);
  emitUnwindLeave(a);
  a.goto(out);
  a.label(have);
  a.emit(mov64Reg(9, 0));
  // The key: header, frames zeroed.
  a.emit(stx('W', 9, 0, 8), call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
  a.emit(stx('W', 9, 4, 0), stx('W', 10, state(S.pid), 0), st('W', 10, state(S.pidPad), 0));
  for (let at = 8; at < UNWIND_KEY_BYTES; at += 8) a.emit(st('DW', 9, at, 0));
  // The walker's state: the registers, nothing mapped yet.
  a.emit(st('W', 9, EXACT_AT, 1));
  a.emit(ldx('DW', 1, 6, USER_REGS.rip), stx('DW', 10, state(S.pc), 1));
  a.emit(ldx('DW', 1, 6, USER_REGS.rsp), stx('DW', 10, state(S.sp), 1));
  a.emit(ldx('DW', 1, 6, USER_REGS.rbp), stx('DW', 10, state(S.bp), 1));
  emitReturnInstances(a);
  emitImage(a, maps);
  a.emit(mov64Imm(1, UNWIND_FRAMES));
  a.loadCallback(2, FRAME);
  a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, STATE), mov64Imm(4, 0), call(BPF_FUNC.loop));
}

/**
 * `*(u64 *)(fp + at) = *(u64 *)(r3 + off)` from kernel memory; a failed read jumps to `fail`
 * (r3 is clobbered).
 */
function readKernel(a: Asm, at: number, off: number, fail: string): void {
  a.emit(alu64Imm('ADD', 3, off), mov64Reg(1, 10), alu64Imm('ADD', 1, at), mov64Imm(2, 8));
  a.emit(call(BPF_FUNC.probe_read_kernel));
  a.jmpImm('JNE', 0, 0, fail);
}

/**
 * When the thread has uretprobes pending (return addresses on its stack replaced by the
 * trampoline), the trampoline's address and the newest return instance into the state, so
 * that the walker can put the replaced addresses back as the kernel saved them.
 */
function emitReturnInstances(a: Asm): void {
  const o = kernelOffsets();
  const none = a.fresh('unwind.noreturns');
  const at = (field: number) => STATE + field;
  // The task (kept in the trampoline's slot until it is read), its utask, the newest instance.
  a.emit(call(BPF_FUNC.get_current_task), stx('DW', 10, at(S.tramp), 0), mov64Reg(3, 0));
  readKernel(a, at(S.ri), o.taskUtask, none);
  a.emit(ldx('DW', 3, 10, at(S.ri)));
  a.jmpImm('JEQ', 3, 0, none);
  readKernel(a, at(S.ri), o.utaskReturnInstances, none);
  a.emit(ldx('DW', 1, 10, at(S.ri)));
  a.jmpImm('JEQ', 1, 0, none);
  // The trampoline: task->mm->uprobes_state.xol_area->vaddr.
  a.emit(ldx('DW', 3, 10, at(S.tramp)));
  readKernel(a, at(S.tramp), o.taskMm, none);
  a.emit(ldx('DW', 3, 10, at(S.tramp)));
  a.jmpImm('JEQ', 3, 0, none);
  readKernel(a, at(S.tramp), o.mmXolArea, none);
  a.emit(ldx('DW', 3, 10, at(S.tramp)));
  a.jmpImm('JEQ', 3, 0, none);
  readKernel(a, at(S.tramp), o.xolVaddr, none);
  const done = a.fresh('unwind.returns');
  a.goto(done);
  a.label(none);
  a.emit(st('DW', 10, at(S.tramp), 0), st('DW', 10, at(S.ri), 0));
  a.label(done);
}

/** Give back the nesting slot taken by `emitUnwindKey` (r7 the counter, the slot saved). */
export function emitUnwindLeave(a: Asm): void {
  a.emit(ldx('W', 1, 10, STATE + S.slot), stx('DW', 7, 0, 1));
}

/** The walker's subprograms, appended after the main program's last instruction. */
export function emitUnwindSubprograms(a: Asm, maps: UnwindMaps): void {
  emitFrame(a, maps);
  emitVma(a);
}

/** `*(u64 *)(key + 8 + n * 8) = value`, with n in `n` (at most UNWIND_FRAMES - 1). */
function storeFrame(a: Asm, n: Reg, value: Reg): void {
  a.emit(mov64Reg(1, n), alu64Imm('AND', 1, 63), alu64Imm('LSH', 1, 3), alu64Reg('ADD', 1, 8));
  a.emit(stx('DW', 1, 8, value));
}

/**
 * One frame (callback of bpf_loop: r1 the index, r2 the state). Registers: r9 the state, r8
 * the key, r6 and r7 as noted. Returns 1 to end the walk.
 */
function emitFrame(a: Asm, maps: UnwindMaps): void {
  const stop = 'unwind.stop';
  const end = 'unwind.end';
  const marked = (reason: number) => {
    const label = `unwind.mark.${reason}`;
    return label;
  };
  const reasons: number[] = Object.values(STOP_REASON);
  a.subprogram(FRAME, 2);
  // The loop's index is the number of frames stored (each pass that goes on stores one): the
  // verifier knows it only as a bounded number, and checks the callback once for all passes.
  a.emit(mov64Reg(9, 2), stx('DW', 10, -8, 1));
  a.emit(ldMapFd(1, maps.scratch.fd), mov64Reg(2, 9), alu64Imm('ADD', 2, S.slot));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, end);
  a.emit(mov64Reg(8, 0));
  a.emit(ldx('DW', 7, 10, -8), ldx('DW', 6, 9, S.pc));
  a.jmpImm('JEQ', 6, 0, end);
  a.jmpImm('JGE', 7, UNWIND_FRAMES - 1, marked(STOP_REASON.depth));
  // The mapping: kept while the pc stays in it.
  const lookup = a.fresh('unwind.vma');
  const recorded = a.fresh('unwind.cached');
  a.emit(ldx('DW', 1, 9, S.vmStart));
  a.jmpReg('JLT', 6, 1, lookup);
  a.emit(ldx('DW', 1, 9, S.vmEnd));
  a.jmpReg('JLT', 6, 1, recorded);
  a.label(lookup);
  a.emit(call(BPF_FUNC.get_current_task_btf), mov64Reg(1, 0), mov64Reg(2, 6));
  a.loadCallback(3, VMA);
  a.emit(mov64Reg(4, 9), mov64Imm(5, 0), call(BPF_FUNC.find_vma));
  const found = a.fresh('unwind.found');
  const remember = a.fresh('unwind.remember');
  const busy = a.fresh('unwind.busy');
  const unmapped = a.fresh('unwind.unmapped');
  const noRange = a.fresh('unwind.norange');
  a.jmpImm('JEQ', 0, 0, remember);
  a.jmpImm('JNE', 0, EBUSY, unmapped);
  // The memory map was locked (another thread maps or protects memory): the mapping as
  // /proc/PID/maps showed it for this image, or as a walk of this image saw it before.
  a.emit(ldx('DW', 1, 9, S.mismatch));
  a.jmpImm('JNE', 1, 0, noRange);
  emitVmaRangeKey(a);
  a.emit(ldMapFd(1, maps.vmaRanges.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, VMA_KEY));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, noRange);
  emitVmaRestore(a);
  a.goto(found);
  // The mapping a walk of this image found last in the pc's 2 MiB region, if it holds the pc.
  a.label(noRange);
  emitVmaCacheKey(a);
  a.emit(ldMapFd(1, maps.vmaCache.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, VMA_KEY));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, busy);
  a.emit(ldx('DW', 1, 0, VMA_CACHED_IMAGE), ldx('DW', 2, 9, S.image));
  a.jmpReg('JNE', 1, 2, busy);
  // pc - vmStart < vmEnd - vmStart, without a comparison of the pc the verifier would follow
  // (bounds it learns of r6 split its states): the sign bits of the differences.
  a.emit(mov64Reg(1, 6), ldx('DW', 2, 0, 0), alu64Reg('SUB', 1, 2), ldx('DW', 3, 0, 8));
  a.emit(alu64Reg('SUB', 3, 2), mov64Reg(2, 1), alu64Reg('SUB', 2, 3));
  a.emit(alu64Imm('RSH', 2, 63), alu64Imm('RSH', 1, 63), alu64Imm('XOR', 1, 1));
  a.emit(alu64Reg('AND', 2, 1));
  a.jmpImm('JEQ', 2, 0, busy);
  emitVmaRestore(a);
  a.goto(found);
  // Nothing mapped there, or the map was locked and the mapping not known: the pc is the
  // last frame, and user space is asked to read the process's mappings again.
  a.label(busy);
  a.emit(st('DW', 10, VMA_KEY, 1), ldMapFd(1, maps.vmaResync.fd), mov64Reg(2, 9));
  a.emit(alu64Imm('ADD', 2, S.pid), mov64Reg(3, 10), alu64Imm('ADD', 3, VMA_KEY));
  a.emit(mov64Imm(4, 0), call(BPF_FUNC.map_update_elem));
  storeFrame(a, 7, 6);
  a.emit(alu64Imm('ADD', 7, 1));
  a.goto(marked(STOP_REASON.busy));
  a.label(unmapped);
  storeFrame(a, 7, 6);
  a.emit(alu64Imm('ADD', 7, 1));
  a.goto(marked(STOP_REASON.unmapped));
  // Found: cached by region, for the mappings the ranges do not hold yet (those of a command
  // before user space has read its map, a library loaded since it last did).
  a.label(remember);
  for (let at = 0; at < VMA_CACHED_BYTES; at += 8) {
    a.emit(ldx('DW', 1, 9, S.vmStart + at), stx('DW', 10, VMA_VALUE + at, 1));
  }
  a.emit(ldx('W', 1, 9, S.vmFlags), stx('DW', 10, VMA_VALUE + VMA_CACHED_BYTES, 1));
  a.emit(ldx('DW', 1, 9, S.image), stx('DW', 10, VMA_VALUE + VMA_CACHED_IMAGE, 1));
  // Under the regions of its first and last bytes: every region of a mapping of 2 MiB or
  // less (most libraries' code), whatever page of it the next walk meets first.
  for (const end of [false, true]) {
    a.emit(ldx('DW', 3, 9, end ? S.vmEnd : S.vmStart));
    if (end) a.emit(alu64Imm('SUB', 3, 1));
    emitVmaCacheKey(a, 3);
    a.emit(ldMapFd(1, maps.vmaCache.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, VMA_KEY));
    a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, VMA_VALUE), mov64Imm(4, 0));
    a.emit(call(BPF_FUNC.map_update_elem));
  }
  a.label(found);
  const classified = a.fresh('unwind.classified');
  const hasFile = a.fresh('unwind.file');
  a.emit(ldx('DW', 1, 9, S.ino));
  a.jmpImm('JNE', 1, 0, hasFile);
  a.emit(st('W', 8, KIND_AT, KIND.anonymous), ldx('W', 1, 9, S.vmFlags));
  a.emit(alu64Imm('AND', 1, VM_IO));
  a.jmpImm('JEQ', 1, 0, recorded);
  a.emit(st('W', 8, KIND_AT, KIND.uprobes));
  a.goto(recorded);
  a.label(hasFile);
  a.emit(st('W', 9, S.pad, 0), ldMapFd(1, maps.files.fd), mov64Reg(2, 9));
  a.emit(alu64Imm('ADD', 2, S.dev), call(BPF_FUNC.map_lookup_elem));
  const known = a.fresh('unwind.known');
  a.jmpImm('JNE', 0, 0, known);
  // Met for the first time: user space is told (once), the stack ends here for now.
  a.emit(st('W', 8, KIND_AT, KIND.unknown));
  a.emit(ldMapFd(1, maps.missing.fd), mov64Reg(2, 9), alu64Imm('ADD', 2, S.dev));
  a.emit(mov64Reg(3, 9), alu64Imm('ADD', 3, S.pid), mov64Imm(4, 1), call(BPF_FUNC.map_update_elem));
  a.goto(recorded);
  a.label(known);
  for (const field of [S.rowFirst, S.rowCount, S.pageFirst, S.pageCount, S.basePage, S.fileId]) {
    a.emit(ldx('W', 1, 0, field - S.rowFirst), stx('W', 9, field, 1));
  }
  a.emit(ldx('W', 1, 0, 24), st('W', 8, KIND_AT, KIND.table));
  a.jmpImm('JEQ', 1, FILE_HAS_TABLE, classified);
  a.emit(st('W', 8, KIND_AT, KIND.noTable));
  a.jmpImm('JNE', 1, FILE_TABLE_FULL, classified);
  a.emit(st('W', 8, KIND_AT, KIND.tableFull));
  a.label(classified);
  a.label(recorded);
  // The frame: (file id, file offset) when the file has an id, else the pc. The uprobes page
  // is no frame: a return address the walker could not put back.
  const raw = a.fresh('unwind.raw');
  const store = a.fresh('unwind.store');
  a.emit(ldx('W', 1, 8, KIND_AT), mov64Reg(2, 6));
  a.jmpImm('JEQ', 1, KIND.anonymous, store);
  a.jmpImm('JEQ', 1, KIND.uprobes, marked(STOP_REASON.uretprobe));
  a.jmpImm('JEQ', 1, KIND.unknown, raw);
  a.emit(ldx('W', 1, 9, S.fileId));
  a.emit(ldx('DW', 3, 9, S.fileBase), alu64Reg('SUB', 2, 3));
  a.emit(alu64Imm('LSH', 1, Number(FRAME_FILE_ID_SHIFT)), alu64Reg('OR', 2, 1));
  a.emit(ld64Imm(1, FRAME_FILE_BIT), alu64Reg('OR', 2, 1));
  a.goto(store);
  a.label(raw);
  a.emit(mov64Reg(2, 6));
  a.label(store);
  a.emit(mov64Reg(3, 2));
  storeFrame(a, 7, 3);
  a.emit(alu64Imm('ADD', 7, 1), stx('DW', 9, S.n, 7));
  // The step to the caller, by what holds the pc.
  const anonymous = a.fresh('unwind.fp');
  a.emit(ldx('W', 1, 8, KIND_AT));
  a.jmpImm('JEQ', 1, KIND.anonymous, anonymous);
  a.jmpImm('JEQ', 1, KIND.uprobes, marked(STOP_REASON.uretprobe));
  a.jmpImm('JEQ', 1, KIND.tableFull, marked(STOP_REASON.tableFull));
  a.jmpImm('JNE', 1, KIND.table, marked(STOP_REASON.noTable));
  emitRuleStep(a, maps, marked, stop, anonymous);
  // JIT code keeps frame pointers (V8's, and the builtins it embeds in a file without
  // unwind info for them): the caller's rbp at rbp, its pc above it.
  a.label(anonymous);
  a.emit(ldx('DW', 1, 9, S.bp), ldx('DW', 2, 9, S.sp));
  a.jmpReg('JLE', 1, 2, marked(STOP_REASON.badFrame));
  a.emit(mov64Reg(3, 1), mov64Reg(1, 10), alu64Imm('ADD', 1, -16), mov64Imm(2, 16));
  a.emit(call(BPF_FUNC.probe_read_user));
  a.jmpImm('JNE', 0, 0, marked(STOP_REASON.unreadable));
  a.emit(ldx('DW', 1, 9, S.bp), alu64Imm('ADD', 1, 16), stx('DW', 9, S.sp, 1));
  a.emit(ldx('DW', 1, 10, -16), stx('DW', 9, S.bp, 1));
  a.emit(ldx('DW', 1, 10, -8), stx('DW', 9, S.pc, 1), st('W', 8, EXACT_AT, 0));
  a.emit(mov64Imm(0, 0), exit());
  // The marks: the reason in the slot after the last frame (r7 frames are stored); the
  // depth limit's in the last slot.
  a.label(marked(STOP_REASON.depth));
  a.emit(ld64Imm(3, FRAME_MARK | BigInt(STOP_REASON.depth)));
  a.emit(stx('DW', 8, 8 + 8 * (UNWIND_FRAMES - 1), 3));
  a.goto(end);
  for (const reason of reasons) {
    // The verifier refuses code nothing reaches: a mark only where some jump goes.
    if (reason === STOP_REASON.depth || !a.isTarget(marked(reason))) continue;
    a.label(marked(reason));
    a.emit(ld64Imm(3, FRAME_MARK | BigInt(reason)));
    storeFrame(a, 7, 3);
    a.goto(end);
  }
  a.label(stop);
  a.label(end);
  a.emit(mov64Imm(0, 1), exit());
}

/** `r0 = 8 bytes of user memory at r3` into fp-8; a failure jumps to the unreadable mark. */
function read8(a: Asm, fail: string): void {
  a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, -8), mov64Imm(2, 8), call(BPF_FUNC.probe_read_user));
  a.jmpImm('JNE', 0, 0, fail);
  a.emit(ldx('DW', 0, 10, -8));
}

/** Sign-extend the low 32 bits of `reg`. */
function signExtend(a: Asm, reg: Reg): void {
  a.emit(alu64Imm('LSH', reg, 32), alu64Imm('ARSH', reg, 32));
}

/**
 * The rule for the pc (its file offset, less one after a call), and the caller's registers
 * from it. r7 holds the frames stored (for the marks).
 */
function emitRuleStep(
  a: Asm,
  maps: UnwindMaps,
  marked: (reason: number) => string,
  stop: string,
  framePointers: string,
): void {
  // Code no CFI covers is walked by its frame pointers, as JIT code is.
  const noInfo = framePointers;
  const unsupported = marked(STOP_REASON.unsupported);
  const unreadable = marked(STOP_REASON.unreadable);
  // r6 = the file offset to look up.
  a.emit(ldx('DW', 1, 9, S.fileBase), alu64Reg('SUB', 6, 1));
  a.emit(ldx('W', 1, 8, EXACT_AT), alu64Imm('XOR', 1, 1), alu64Reg('SUB', 6, 1));
  // The page's rows: [pages[p], pages[p + 1]].
  a.emit(mov64Reg(1, 6), alu64Imm('RSH', 1, PAGE_SHIFT), ldx('W', 2, 9, S.basePage));
  a.emit(alu64Reg('SUB', 1, 2), ldx('W', 2, 9, S.pageCount));
  a.jmpReg('JGE', 1, 2, noInfo);
  a.emit(ldx('W', 2, 9, S.pageFirst), alu64Reg('ADD', 1, 2), stx('W', 9, S.index, 1));
  const lookupAt = (map: number) => {
    a.emit(ldMapFd(1, map), mov64Reg(2, 9), alu64Imm('ADD', 2, S.index));
    a.emit(call(BPF_FUNC.map_lookup_elem));
    a.jmpImm('JEQ', 0, 0, unsupported);
  };
  lookupAt(maps.pages.fd);
  // The low end and the count on the callback's own stack: fp-24 lo, fp-32 count.
  a.emit(ldx('W', 1, 0, 0), stx('DW', 10, -24, 1));
  a.emit(ldx('W', 1, 9, S.index), alu64Imm('ADD', 1, 1), stx('W', 9, S.index, 1));
  lookupAt(maps.pages.fd);
  a.emit(ldx('W', 1, 0, 0), ldx('DW', 2, 10, -24), alu64Reg('SUB', 1, 2), alu64Imm('ADD', 1, 1));
  a.emit(stx('DW', 10, -32, 1));
  // Branch-free binary search for the last row starting at or before r6.
  const found = a.fresh('unwind.row');
  for (let step = 0; step < SEARCH_STEPS; step++) {
    a.emit(ldx('DW', 1, 10, -32));
    a.jmpImm('JLE', 1, 1, found);
    a.emit(alu64Imm('RSH', 1, 1), stx('DW', 10, -40, 1));
    a.emit(ldx('DW', 2, 10, -24), alu64Reg('ADD', 2, 1), stx('W', 9, S.index, 2));
    lookupAt(maps.rows.fd);
    // r3 = all ones when the row starts at or before the offset.
    a.emit(ldx('W', 2, 0, 0), mov64Reg(3, 6), alu64Reg('SUB', 3, 2));
    a.emit(alu64Imm('ARSH', 3, 63), alu64Imm('XOR', 3, -1));
    a.emit(ldx('DW', 1, 10, -40), mov64Reg(4, 1), alu64Reg('AND', 4, 3));
    a.emit(ldx('DW', 2, 10, -24), alu64Reg('ADD', 2, 4), stx('DW', 10, -24, 2));
    a.emit(ldx('DW', 2, 10, -32), alu64Imm('AND', 2, 1), alu64Reg('AND', 2, 3));
    a.emit(alu64Reg('ADD', 2, 1), stx('DW', 10, -32, 2));
  }
  a.label(found);
  a.emit(ldx('DW', 1, 10, -24), stx('W', 9, S.index, 1));
  lookupAt(maps.rows.fd);
  a.emit(ldx('W', 1, 0, 0));
  a.jmpReg('JGT', 1, 6, noInfo);
  a.emit(ldx('W', 1, 0, 4), stx('W', 9, S.index, 1));
  lookupAt(maps.rules.fd);
  a.emit(mov64Reg(6, 0));
  // r6 = the rule. Kinds it cannot follow end the walk.
  a.emit(ldx('B', 1, 6, 0));
  a.jmpImm('JEQ', 1, CFA_KIND.none, noInfo);
  a.jmpImm('JGE', 1, CFA_KIND.unsupported, unsupported);
  a.emit(ldx('B', 2, 6, 2));
  a.jmpImm('JGE', 2, RA_KIND.unsupported, unsupported);
  // r3 = the base register's value: rbp for the rbp kinds, else rsp.
  const baseSp = a.fresh('unwind.sp');
  const based = a.fresh('unwind.based');
  a.emit(ldx('DW', 3, 9, S.sp));
  a.jmpImm('JEQ', 1, CFA_KIND.rbp, baseSp);
  a.jmpImm('JNE', 1, CFA_KIND.derefRbp, based);
  a.label(baseSp);
  a.emit(ldx('DW', 3, 9, S.bp));
  a.label(based);
  a.emit(ldx('W', 4, 6, 4));
  signExtend(a, 4);
  a.emit(alu64Reg('ADD', 3, 4));
  // r7 is the frame count (for marks); the CFA goes to fp-48.
  const cfaDone = a.fresh('unwind.cfa');
  const notPlt = a.fresh('unwind.notplt');
  a.emit(stx('DW', 10, -48, 3));
  a.jmpImm('JLE', 1, CFA_KIND.rbp, cfaDone);
  a.jmpImm('JNE', 1, CFA_KIND.plt, notPlt);
  // PLT: 8 more once the entry's push has run ((pc & 15) >= cfaAdd).
  a.emit(ldx('DW', 2, 9, S.pc), alu64Imm('AND', 2, 15), ldx('W', 4, 6, 8));
  a.jmpReg('JLT', 2, 4, cfaDone);
  a.emit(alu64Imm('ADD', 3, 8), stx('DW', 10, -48, 3));
  a.goto(cfaDone);
  a.label(notPlt);
  // Dereferenced: the saved rsp, plus cfaAdd.
  read8(a, unreadable);
  a.emit(ldx('W', 4, 6, 8));
  signExtend(a, 4);
  a.emit(alu64Reg('ADD', 0, 4), stx('DW', 10, -48, 0));
  a.label(cfaDone);
  // The outermost frame: done, nothing cut.
  a.emit(ldx('B', 2, 6, 2));
  a.jmpImm('JEQ', 2, RA_KIND.end, stop);
  // The return address, at CFA or rsp + raOffset, to fp-56.
  const raCfa = a.fresh('unwind.racfa');
  a.emit(ldx('DW', 3, 10, -48));
  a.jmpImm('JEQ', 2, RA_KIND.atCfa, raCfa);
  a.emit(ldx('DW', 3, 9, S.sp));
  a.label(raCfa);
  a.emit(ldx('W', 4, 6, 12));
  signExtend(a, 4);
  a.emit(alu64Reg('ADD', 3, 4), stx('DW', 10, -64, 3));
  read8(a, unreadable);
  a.emit(stx('DW', 10, -56, 0));
  emitReturnAddressFix(a, marked(STOP_REASON.uretprobe));
  // The caller's rbp, into the state at once (nothing reads the callee's after this).
  const rbpDone = a.fresh('unwind.rbp');
  const rbpRead = a.fresh('unwind.rbpread');
  a.emit(ldx('B', 1, 6, 1), ldx('W', 4, 6, 16));
  signExtend(a, 4);
  a.jmpImm('JEQ', 1, RBP_KIND.same, rbpDone);
  a.emit(ldx('DW', 3, 10, -48));
  a.jmpImm('JEQ', 1, RBP_KIND.atCfa, rbpRead);
  a.emit(ldx('DW', 3, 9, S.bp));
  a.jmpImm('JEQ', 1, RBP_KIND.atRbp, rbpRead);
  a.emit(ldx('DW', 3, 9, S.sp));
  a.jmpImm('JEQ', 1, RBP_KIND.atRsp, rbpRead);
  a.emit(st('DW', 9, S.bp, 0));
  a.goto(rbpDone);
  a.label(rbpRead);
  a.emit(alu64Reg('ADD', 3, 4));
  read8(a, unreadable);
  a.emit(stx('DW', 9, S.bp, 0));
  a.label(rbpDone);
  // A caller's frame is above its callee's, but after a signal frame.
  const moved = a.fresh('unwind.moved');
  a.emit(ldx('B', 1, 6, 3), ldx('DW', 2, 10, -48), ldx('DW', 3, 9, S.sp));
  a.jmpImm('JNE', 1, 0, moved);
  a.jmpReg('JLE', 2, 3, marked(STOP_REASON.badFrame));
  a.label(moved);
  a.emit(stx('DW', 9, S.sp, 2), ldx('DW', 2, 10, -56), stx('DW', 9, S.pc, 2));
  a.emit(stx('W', 8, EXACT_AT, 1));
  a.emit(mov64Imm(0, 0), exit());
}

/**
 * A return address a uretprobe replaced (fp-56, read from the slot at fp-64) put back: the
 * return instance whose saved stack pointer is that slot holds the original. One not found
 * among the newest few ends the walk with its mark.
 */
function emitReturnAddressFix(a: Asm, notFound: string): void {
  const o = kernelOffsets();
  const fixed = a.fresh('unwind.rafixed');
  a.emit(ldx('DW', 1, 9, S.tramp));
  a.jmpImm('JEQ', 1, 0, fixed);
  a.emit(ldx('DW', 2, 10, -56));
  a.jmpReg('JNE', 1, 2, fixed);
  // fp-72: the instance looked at.
  a.emit(ldx('DW', 1, 9, S.ri), stx('DW', 10, -72, 1));
  const found = a.fresh('unwind.rafound');
  for (let i = 0; i < RETURN_INSTANCES; i++) {
    a.emit(ldx('DW', 3, 10, -72));
    a.jmpImm('JEQ', 3, 0, notFound);
    readKernel(a, -8, o.riStack, notFound);
    a.emit(ldx('DW', 1, 10, -8), ldx('DW', 2, 10, -64));
    a.jmpReg('JEQ', 1, 2, found);
    a.emit(ldx('DW', 3, 10, -72));
    readKernel(a, -72, o.riNext, notFound);
  }
  a.goto(notFound);
  a.label(found);
  a.emit(ldx('DW', 3, 10, -72));
  readKernel(a, -56, o.riOrigRetVaddr, notFound);
  a.label(fixed);
}

/**
 * The find_vma callback (r1 the task, r2 the vma, r3 the state): the mapping's bounds, the
 * base its file offsets are counted from, its flags, and its file's device and inode (0 for
 * anonymous memory).
 */
function emitVma(a: Asm): void {
  const o = kernelOffsets();
  const done = 'unwind.vma.done';
  a.subprogram(VMA, 3);
  a.emit(ldx('DW', 4, 2, o.vmStart), stx('DW', 3, S.vmStart, 4));
  a.emit(ldx('DW', 5, 2, o.vmEnd), stx('DW', 3, S.vmEnd, 5));
  a.emit(ldx('DW', 5, 2, o.vmPgoff), alu64Imm('LSH', 5, 12), alu64Reg('SUB', 4, 5));
  a.emit(stx('DW', 3, S.fileBase, 4));
  a.emit(ldx('DW', 4, 2, o.vmFlags), stx('W', 3, S.vmFlags, 4));
  a.emit(st('DW', 3, S.ino, 0), st('W', 3, S.dev, 0));
  a.emit(ldx('DW', 4, 2, o.vmFile));
  a.jmpImm('JEQ', 4, 0, done);
  a.emit(ldx('DW', 4, 4, o.fInode));
  a.jmpImm('JEQ', 4, 0, done);
  a.emit(ldx('DW', 5, 4, o.iIno), stx('DW', 3, S.ino, 5));
  a.emit(ldx('DW', 4, 4, o.iSb));
  a.jmpImm('JEQ', 4, 0, done);
  a.emit(ldx('W', 5, 4, o.sDev), stx('W', 3, S.dev, 5));
  a.label(done);
  a.returnZero();
}
