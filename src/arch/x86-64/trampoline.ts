/**
 * The trampolines of inline hooks (the `inject` engine), written as machine code: an entry
 * trampoline per hooked function records the hit into a ring buffer shared with upscope,
 * without a system call or a trap, then runs the function's relocated first instructions
 * and jumps back; one return trampoline per process records the returns of the calls whose
 * return address an entry trampoline swapped for its own.
 *
 * The ring (RING below) is many producers (the target's threads), one consumer (upscope):
 * a thread claims record `head` with `lock cmpxchg` only while `head - tail < capacity`, so
 * a record is never written over before upscope has read it; when the ring is full the hit
 * is counted in its probe's lost counter instead (the target never waits). A record is
 * published by writing its `seq` (its index + 1) last: x86 keeps stores in order.
 *
 * What a record holds: the probe's index and what the record is (RECORD_KIND), the thread
 * id, the TSC, the general registers (at the function's entry, or just after its return),
 * the flags, and STACK_WORDS words: at an entry the first words of the stack (the return
 * address, then the arguments passed on the stack); at a return the address returned to,
 * then the stack pointer the call had at its entry.
 *
 * The thread id comes from the thread's TCB (`fs:[offset]`, glibc's `struct pthread`) when
 * upscope has found where it is (RING.tidOffset, 0 until then), else from gettid(2).
 *
 * Return probes (a probe's byte in RING.returns set): the entry trampoline pushes the real
 * return address and the stack pointer on the thread's shadow stack (SHADOW: a slot per
 * thread, found by thread id in a small hash table, claimed with `lock cmpxchg`) and writes
 * the return trampoline's address in its place; entries at or below that stack pointer are
 * calls a longjmp or an unwind left, dropped first (the ptrace engine and the kernel's
 * uretprobes use the same test), except on an alternate signal stack, where the entries of
 * the stack the signal interrupted are kept wherever that stack lies (see onOtherStack());
 * the record says how many it dropped (RECORD_PROBE). The return trampoline pops the
 * thread's shadow stack down to the entry whose stack pointer is the one the call had (the
 * entries above it are calls made after it and never returned from), writes a return
 * record, and returns to the real address. A call whose return cannot be tracked (no slot
 * for its thread, its shadow stack full, or, timed in the process, a tail call from a
 * function whose return is swapped already) keeps its return address and is counted in
 * RING.untracked; a recorded tail call's entry is recorded, and the tracer ends it with the
 * return of the call it came from (same stack pointer). Entries are
 * written before the depth that covers them is published, and again after it: a signal
 * handler that calls a hooked function in between leaves them whole.
 */
import { jumpBack } from './xol.js';

/** Per-thread shadow stacks of return addresses (see the module's comment). */
export const SHADOW = {
  /** Thread slots, in buckets of 8 by thread id. */
  threads: 256,
  bucket: 8,
  /** Bytes of one thread's slot: a 64-byte header (u64 depth), then its entries. */
  slotBytes: 128 * 1024,
  /** Where the entries start in a slot. */
  entries: 64,
  /**
   * One entry: u64 return address, u64 stack pointer at the entry, u32 probe index, u32 1
   * when the call is timed in the process (no records), u64 the TSC at its entry then.
   */
  entryBytes: 32,
} as const;

/** Entries one thread's shadow stack holds: calls deeper than this are not tracked. */
export const SHADOW_DEPTH = (SHADOW.slotBytes - SHADOW.entries) / SHADOW.entryBytes;

/** Offsets in the shared ring area. */
export const RING = {
  /** u64: the next record to claim (written by producers). */
  head: 0,
  /** u64: the next record upscope reads (written by upscope). */
  tail: 64,
  /** u64: where the thread id is in the TCB (fs-relative), 0 for gettid(2). */
  tidOffset: 128,
  /** u64: calls whose return could not be tracked (see the module's comment). */
  untracked: 192,
  /** u64: nanoseconds per TSC tick, times 2^32 (for the calls timed in the process). */
  tickToNs: 256,
  /**
   * u64: ceil(2^64 / the unit of a timed call's bucket, in ns): a bucket counts units; 0
   * for a unit of 1 ns.
   */
  unitReciprocal: 320,
  /** u8 per probe index: whether its entry trampoline swaps return addresses. */
  returns: 1024,
  /**
   * u8 per probe index: whether its hits are aggregated in the process (STATS, BUCKETS)
   * instead of recorded: entries counted, the calls whose returns are swapped timed.
   */
  inProcess: 2048,
  /** u64 per probe index: hits not recorded because the ring was full. */
  lost: 4096,
  /**
   * u64 per probe index: where the routine is that makes the reads of memory of its return
   * records (see buildEntryTrampoline()), 0 for none.
   */
  returnReads: 4096 + 8 * 1024,
  /** u64 per probe index: the slots of data its return records take (those reads'). */
  returnSlots: 4096 + 16 * 1024,
  /** The most probe indexes one ring serves. */
  maxProbes: 1024,
  /** u32 per thread slot: the thread id that holds it (0: free). */
  shadowTids: 4096 + 24 * 1024,
  /** The thread slots (SHADOW.threads of SHADOW.slotBytes). */
  shadowSlots: 4096 + 24 * 1024 + 4096,
  /** Per probe index, STATS.bytes: what is aggregated in the process. */
  stats: 4096 + 24 * 1024 + 4096 + SHADOW.threads * SHADOW.slotBytes,
  /** Per probe index, BUCKETS.bytes: the timed calls' histogram (histogram.ts's log2). */
  buckets: 4096 + 24 * 1024 + 4096 + SHADOW.threads * SHADOW.slotBytes + 1024 * 128,
  /** Where the records start. */
  records: 4096 + 24 * 1024 + 4096 + SHADOW.threads * SHADOW.slotBytes + 1024 * 128 + 1024 * 8192,
} as const;

/** One probe's aggregates in the process (RING.stats), u64 each, updated with atomic adds. */
export const STATS = {
  /** Entries counted. */
  entries: 0,
  /** Calls timed (returns seen), or values counted (VALUE below). */
  calls: 8,
  /** Their total time, ns, or the values' sum. */
  sum: 16,
  /** The longest, ns, or the largest value's order key (0: none yet). */
  max: 24,
  /** The shortest, ns, or the smallest value's order key, bit-inverted (0: none yet). */
  notMin: 32,
  /** Timed calls a longjmp or an unwind left (no return came). */
  unwound: 40,
  /**
   * What the entry puts in the histogram instead of a time (written by upscope, u64 each):
   * `at` the saved register's offset from the trampoline's %rsp, plus 1 (0: no value);
   * `shift` 64 less the value's width in bits; `signed` 1 for a signed value, whose order key
   * (for min, max and linear bounds) has its top bit flipped; `linear` 1 for linear buckets
   * of `step` from `low` to `high` (order keys), `top` the bucket from `high` on.
   */
  value: { at: 48, shift: 56, signed: 64, linear: 72, low: 80, high: 88, step: 96, top: 104 },
  bytes: 128,
} as const;

/**
 * One probe's histogram (RING.buckets): u64 per bucket index. Log2 buckets of a negative
 * value are at NEGATIVE_OFFSET + its magnitude's bucket.
 */
export const BUCKETS = { count: 1024, bytes: 8192, negativeOffset: 512 } as const;

/** Where each register the trampolines save is, from %rsp once saved (a hist value's place). */
export function savedRegisterOffset(name: string): number | undefined {
  return (PUSHED_REGS as readonly string[]).includes(name) ? SAVED[name] : undefined;
}

if (
  RING.returnReads !== RING.lost + 8 * RING.maxProbes ||
  RING.returnSlots !== RING.returnReads + 8 * RING.maxProbes ||
  RING.shadowTids !== RING.returnSlots + 8 * RING.maxProbes ||
  RING.buckets !== RING.stats + RING.maxProbes * STATS.bytes ||
  RING.records !== RING.buckets + RING.maxProbes * BUCKETS.bytes ||
  BUCKETS.count * 8 !== BUCKETS.bytes
) {
  throw new Error('RING: its areas overlap or leave gaps');
}

/** Words of the stack a record keeps (the return address, then stack-passed arguments). */
export const STACK_WORDS = 4;

/** What a record is: RECORD.probe's top byte. */
export const RECORD_KIND = {
  /** A function's entry; its return is not tracked. */
  entry: 0,
  /** A function's entry whose return address was swapped: a `return` record will follow. */
  entryWithReturn: 1,
  /** A return through the return trampoline (the probe index is the entry's). */
  return: 2,
} as const;

/**
 * How RECORD.probe is made: the probe index (its low bits), then for an `entryWithReturn` the
 * number of shadow stack entries its trampoline dropped as calls left by a longjmp or an
 * unwind (the reader drops as many: it cannot tell them apart from calls a signal handler's
 * stack is above, see onOtherStack()), then RECORD_KIND (the top byte).
 */
export const RECORD_PROBE = { droppedShift: 12, droppedMask: 0xfff, kindShift: 24 } as const;

/** The registers a record holds, in order, from RECORD.regs. */
export const RECORD_REGS = [
  'rax',
  'rbx',
  'rcx',
  'rdx',
  'rsi',
  'rdi',
  'rbp',
  'rsp',
  'r8',
  'r9',
  'r10',
  'r11',
  'r12',
  'r13',
  'r14',
  'r15',
] as const;

/** One record's layout. */
export const RECORD = {
  /** u64: index + 1 once written. */
  seq: 0,
  /** u32: the probe index, entries dropped, RECORD_KIND (see RECORD_PROBE). */
  probe: 8,
  /** u32. */
  tid: 12,
  /** u64: rdtsc. */
  tsc: 16,
  /** u64 each, RECORD_REGS. */
  regs: 24,
  /** u64 each, STACK_WORDS words (see the module's comment). */
  stack: 24 + 8 * RECORD_REGS.length,
  /** u64. */
  rflags: 24 + 8 * RECORD_REGS.length + 8 * STACK_WORDS,
  bytes: 192,
} as const;

if (RECORD.rflags + 8 > RECORD.bytes) throw new Error('RECORD: its fields do not fit in it');
if (RING.maxProbes > 1 << RECORD_PROBE.droppedShift || SHADOW_DEPTH > RECORD_PROBE.droppedMask) {
  throw new Error('RECORD_PROBE: a probe index or a count of entries does not fit in it');
}

/** What one entry trampoline needs to know. */
export interface EntryTrampolineSpec {
  /** Where the trampoline is written. */
  readonly at: bigint;
  /** The ring area in the target. */
  readonly ring: bigint;
  /** Records in the ring: a power of two. */
  readonly capacity: number;
  /** The probe's index (RECORD.probe; RING.lost + 8 * index). */
  readonly probe: number;
  /** The process's return trampoline (see buildReturnTrampoline()). */
  readonly returnTrampoline: bigint;
  /** The function's first instructions, re-encoded to run at `at + relocatedOffset(...)`. */
  readonly relocated: Uint8Array;
  /** Where the function goes on after them. */
  readonly back: bigint;
  /** The memory each entry's record copies after it (see EntryRead); none by default. */
  readonly reads?: readonly EntryRead[] | undefined;
  /**
   * The memory each return record of its calls copies, with the registers just after the
   * return (the return trampoline calls the trampoline's routine for it, found in
   * RING.returnReads); none by default.
   */
  readonly returnReads?: readonly EntryRead[] | undefined;
}

/** A register whose value at the entry a record holds (RECORD_REGS, or the flags). */
export type RecordRegister = (typeof RECORD_REGS)[number] | 'rflags';

/**
 * A read of the process's memory that an entry trampoline makes for each record, into the
 * record's data (the slots claimed after it): `bytes` bytes at `constant` + each term (the
 * low `bits` of a register's value at the entry, from bit `shift` up, times `scale`) + the 8
 * bytes that read `after` (an earlier one) got. The copy is process_vm_readv(2) of the
 * thread's own process: a page that cannot be read gives a short count or an error, never a
 * fault, and a read that depends on a failed one is not made.
 */
export interface EntryRead {
  readonly constant: bigint;
  readonly terms: readonly {
    readonly register: RecordRegister;
    readonly shift: 0 | 8;
    readonly bits: 8 | 16 | 32 | 64;
    readonly scale: 1 | 2 | 4 | 8;
  }[];
  readonly after?: number | undefined;
  readonly bytes: number;
}

/**
 * How one read is kept in a record's data: u64 the address read, i64 what the system call
 * returned (the bytes copied, or -errno; -EFAULT when the read it depends on failed), then
 * the bytes, padded to 8.
 */
export const READ_DATA = { vaddr: 0, result: 8, bytes: 16 } as const;

/** The most reads one trampoline makes, bytes one read copies, slots a record's data takes. */
export const READ_LIMITS = { reads: 16, bytes: 4096, slots: 24 } as const;

/**
 * Where each read's data starts in a record's data (right after the record, in the slots it
 * claimed with it), and how many slots that data takes. Throws a RangeError past READ_LIMITS.
 */
export function readLayout(reads: readonly EntryRead[]): { offsets: number[]; slots: number } {
  if (reads.length > READ_LIMITS.reads) {
    throw new RangeError(
      `${reads.length} reads: one trampoline makes at most ${READ_LIMITS.reads}`,
    );
  }
  const offsets: number[] = [];
  let at = 0;
  for (const [i, read] of reads.entries()) {
    if (read.bytes <= 0 || read.bytes > READ_LIMITS.bytes) {
      throw new RangeError(`a read of ${read.bytes} bytes is outside 1..${READ_LIMITS.bytes}`);
    }
    if (read.after !== undefined && (read.after >= i || reads[read.after]!.bytes !== 8)) {
      throw new RangeError(`read ${i} depends on read ${read.after}, not an earlier 8-byte one`);
    }
    offsets.push(at);
    at += READ_DATA.bytes + Math.ceil(read.bytes / 8) * 8;
  }
  const slots = Math.ceil(at / RECORD.bytes);
  if (slots > READ_LIMITS.slots) {
    throw new RangeError(
      `reads of ${at} bytes take ${slots} slots of a record's data, more than ${READ_LIMITS.slots}`,
    );
  }
  return { offsets, slots };
}

/** The stack below the entry %rsp the trampolines never touch (the red zone). */
const RED_ZONE = 128;

/** Register numbers as the encoding has them. */
const REG = {
  rax: 0,
  rcx: 1,
  rdx: 2,
  rbx: 3,
  rsp: 4,
  rbp: 5,
  rsi: 6,
  rdi: 7,
  r8: 8,
  r9: 9,
  r10: 10,
  r11: 11,
  r12: 12,
  r13: 13,
  r14: 14,
  r15: 15,
} as const;

/** What the trampolines push, in order (after the flags). */
const PUSHED_REGS = ['rax', 'rcx', 'rdx', 'rsi', 'rdi', 'r8', 'r9', 'r10', 'r11'] as const;
/** Where each pushed register (and the flags) is from %rsp once everything is pushed. */
const SAVED: Record<string, number> = Object.fromEntries([
  ...PUSHED_REGS.map((name, i) => [name, 8 * (PUSHED_REGS.length - 1 - i)]),
  ['rflags', 8 * PUSHED_REGS.length],
]);
/** The bytes pushed: the flags and PUSHED_REGS. */
const PUSHED = 8 * (PUSHED_REGS.length + 1);
/** %rsp as it was before the trampoline ran, from %rsp once everything is pushed. */
const ENTRY_RSP = PUSHED + RED_ZONE;

function le32(value: number): number[] {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setInt32(0, value | 0, true);
  return [...bytes];
}

function le64(value: bigint): number[] {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigUint64(0, BigInt.asUintN(64, value), true);
  return [...bytes];
}

/** A memory operand `[base + index*scale + disp32]`. */
interface Mem {
  readonly base: number;
  readonly index?: number;
  readonly scale?: 1 | 2 | 4 | 8;
  readonly disp: number;
}

const SCALE_BITS = { 1: 0, 2: 1, 4: 2, 8: 3 } as const;

/**
 * One instruction `prefix opcode ModRM [SIB] [disp32]`: `reg` is the ModRM reg field (a
 * register, or an opcode extension), `rm` a register or memory (always with a 32-bit
 * displacement: every trampoline has the same length whatever its addresses).
 */
function encode(
  opcode: readonly number[],
  reg: number,
  rm: number | Mem,
  wide: boolean,
  prefix: readonly number[] = [],
): number[] {
  let rex = 0x40 | (wide ? 8 : 0) | (reg >= 8 ? 4 : 0);
  let tail: number[];
  if (typeof rm === 'number') {
    rex |= rm >= 8 ? 1 : 0;
    tail = [0xc0 | ((reg & 7) << 3) | (rm & 7)];
  } else {
    const { base, index, scale = 1, disp } = rm;
    rex |= (base >= 8 ? 1 : 0) | (index !== undefined && index >= 8 ? 2 : 0);
    if (index !== undefined || (base & 7) === REG.rsp) {
      const sib = (SCALE_BITS[scale] << 6) | (((index ?? REG.rsp) & 7) << 3) | (base & 7);
      tail = [0x84 | ((reg & 7) << 3), sib, ...le32(disp)];
    } else {
      tail = [0x80 | ((reg & 7) << 3) | (base & 7), ...le32(disp)];
    }
  }
  return [...prefix, ...(rex === 0x40 ? [] : [rex]), ...opcode, ...tail];
}

/** Condition codes of `jcc`. */
const CC = { b: 2, ae: 3, e: 4, ne: 5, be: 6, a: 7, s: 8, ns: 9 } as const;

/** Machine code with labels (every jump is rel32: lengths never depend on distances). */
class Code {
  readonly bytes: number[] = [];
  readonly #labels = new Map<string, number>();
  readonly #fixups: { at: number; label: string }[] = [];

  get length(): number {
    return this.bytes.length;
  }

  emit(...bytes: number[]): void {
    this.bytes.push(...bytes);
  }

  label(name: string): void {
    if (this.#labels.has(name)) throw new Error(`label ${name} twice`);
    this.#labels.set(name, this.bytes.length);
  }

  #rel32(label: string): void {
    this.#fixups.push({ at: this.bytes.length, label });
    this.emit(0, 0, 0, 0);
  }

  jmp(label: string): void {
    this.emit(0xe9);
    this.#rel32(label);
  }

  call(label: string): void {
    this.emit(0xe8);
    this.#rel32(label);
  }

  jcc(cc: keyof typeof CC, label: string): void {
    this.emit(0x0f, 0x80 + CC[cc]);
    this.#rel32(label);
  }

  push(reg: number): void {
    this.emit(...(reg >= 8 ? [0x41, 0x50 + (reg & 7)] : [0x50 + reg]));
  }

  pop(reg: number): void {
    this.emit(...(reg >= 8 ? [0x41, 0x58 + (reg & 7)] : [0x58 + reg]));
  }

  /** `mov reg, [mem]` (64-bit, or 32-bit zero-extended). */
  load(reg: number, mem: Mem, wide = true): void {
    this.emit(...encode([0x8b], reg, mem, wide));
  }

  /** `mov [mem], reg`. */
  store(mem: Mem, reg: number, wide = true): void {
    this.emit(...encode([0x89], reg, mem, wide));
  }

  /** `mov dword/qword [mem], imm32`. */
  storeImm(mem: Mem, value: number, wide: boolean): void {
    this.emit(...encode([0xc7], 0, mem, wide), ...le32(value));
  }

  /** `mov dst, src` (64-bit). */
  move(dst: number, src: number): void {
    this.emit(...encode([0x89], src, dst, true));
  }

  lea(reg: number, mem: Mem): void {
    this.emit(...encode([0x8d], reg, mem, true));
  }

  movabs(reg: number, value: bigint): void {
    this.emit(0x48 | (reg >= 8 ? 1 : 0), 0xb8 + (reg & 7), ...le64(value));
  }

  /** `cmp [mem], reg`: the flags of [mem] - reg. */
  compareMem(mem: Mem, reg: number, wide = true): void {
    this.emit(...encode([0x39], reg, mem, wide));
  }

  /** `cmp a, b`: the flags of a - b. */
  compare(a: number, b: number, wide = true): void {
    this.emit(...encode([0x39], b, a, wide));
  }

  /** `cmp reg, imm32`. */
  compareImm(reg: number, value: number, wide = true): void {
    this.emit(...encode([0x81], 7, reg, wide), ...le32(value));
  }

  /** `cmp byte [mem], imm8`. */
  compareByte(mem: Mem, value: number): void {
    this.emit(...encode([0x80], 7, mem, false), value & 0xff);
  }

  /** `op reg, imm32` for add (0), or (1), and (4), sub (5). */
  arithImm(op: 0 | 1 | 4 | 5, reg: number, value: number, wide = true): void {
    this.emit(...encode([0x81], op, reg, wide), ...le32(value));
  }

  shiftLeft(reg: number, bits: number, wide = true): void {
    this.emit(...encode([0xc1], 4, reg, wide), bits);
  }

  test(a: number, b: number): void {
    this.emit(...encode([0x85], b, a, true));
  }

  increment(reg: number, wide = true): void {
    this.emit(...encode([0xff], 0, reg, wide));
  }

  decrement(reg: number): void {
    this.emit(...encode([0xff], 1, reg, true));
  }

  zero(reg: number): void {
    this.emit(...encode([0x31], reg, reg, false));
  }

  lockIncrement(mem: Mem): void {
    this.emit(...encode([0xff], 0, mem, true, [0xf0]));
  }

  /** `lock add [mem], reg` (64-bit). */
  lockAdd(mem: Mem, reg: number): void {
    this.emit(...encode([0x01], reg, mem, true, [0xf0]));
  }

  /** `bsr dst, src` (64-bit): the index of src's top set bit. */
  bitScanReverse(dst: number, src: number): void {
    this.emit(...encode([0x0f, 0xbd], dst, src, true));
  }

  /** `shr reg, cl` (64-bit). */
  shiftRightByCl(reg: number): void {
    this.emit(...encode([0xd3], 5, reg, true));
  }

  /** `mul reg` (64-bit): rdx:rax = rax * reg, unsigned. */
  multiply(reg: number): void {
    this.emit(...encode([0xf7], 4, reg, true));
  }

  /** `shrd dst, src, imm8` (64-bit): dst shifted right, src's low bits coming in on top. */
  shiftRightDouble(dst: number, src: number, bits: number): void {
    this.emit(...encode([0x0f, 0xac], src, dst, true), bits);
  }

  /** `shl/shr/sar reg, cl` (64-bit): `kind` 4, 5, 7. */
  shiftByCl(kind: 4 | 5 | 7, reg: number): void {
    this.emit(...encode([0xd3], kind, reg, true));
  }

  /** `cmp reg, [mem]` (64-bit): the flags of reg - [mem]. */
  compareWithMem(reg: number, mem: Mem): void {
    this.emit(...encode([0x3b], reg, mem, true));
  }

  /** `cmp qword [mem], 0`. */
  compareMemZero(mem: Mem): void {
    this.emit(...encode([0x81], 7, mem, true), ...le32(0));
  }

  /** `neg reg` (64-bit). */
  negate(reg: number): void {
    this.emit(...encode([0xf7], 3, reg, true));
  }

  /** `div qword [mem]`: rax = rdx:rax / [mem], unsigned. */
  divideByMem(mem: Mem): void {
    this.emit(...encode([0xf7], 6, mem, true));
  }

  /** `not reg` (64-bit). */
  not(reg: number): void {
    this.emit(...encode([0xf7], 2, reg, true));
  }

  /** `lock cmpxchg [mem], reg`. */
  lockCompareExchange(mem: Mem, reg: number, wide: boolean): void {
    this.emit(...encode([0x0f, 0xb1], reg, mem, wide, [0xf0]));
  }

  /** Where a label was placed. */
  offsetOf(label: string): number {
    const at = this.#labels.get(label);
    if (at === undefined) throw new Error(`label ${label} not placed`);
    return at;
  }

  finish(): number[] {
    for (const { at, label } of this.#fixups) {
      const target = this.#labels.get(label);
      if (target === undefined) throw new Error(`label ${label} not placed`);
      this.bytes.splice(at, 4, ...le32(target - (at + 4)));
    }
    return this.bytes;
  }
}

const { rax, rcx, rdx, rsi, rdi, rsp, r8, r9, r10, r11 } = REG;

/** Leave the red zone alone, save the flags and every register the trampoline uses. */
function saveAll(code: Code): void {
  code.lea(rsp, { base: rsp, disp: -RED_ZONE });
  code.emit(0x9c); // pushfq
  for (const name of PUSHED_REGS) code.push(REG[name]);
}

/** Put back what saveAll() saved (the red zone is skipped back by the caller). */
function restoreAll(code: Code): void {
  for (const name of [...PUSHED_REGS].reverse()) code.pop(REG[name]);
  code.emit(0x9d); // popfq
}

/**
 * Claim the next record and `extra` slots after it for its data (rdi: the ring): rsi its
 * address, r8 the seq that publishes it; to `full` when the ring has no room. The data of a
 * record near the ring's end runs on past it (the ring has READ_LIMITS.slots spare slots
 * there): a record's data is always in one piece. Clobbers rax, rcx, rdx.
 */
function claimRecord(code: Code, capacity: number, prefix: string, extra = 0): void {
  code.label(`${prefix}retry`);
  code.load(rax, { base: rdi, disp: RING.head });
  code.load(rcx, { base: rdi, disp: RING.tail });
  code.move(rdx, rax);
  code.emit(...encode([0x29], rcx, rdx, true)); // sub rdx,rcx
  // Below the tail: the head read is stale (this thread was interrupted between the two
  // reads while others claimed records and upscope read them), not a full ring.
  code.jcc('s', `${prefix}retry`);
  code.compareImm(rdx, capacity - extra);
  code.jcc('ae', `${prefix}full`);
  code.lea(rdx, { base: rax, disp: 1 + extra });
  code.lockCompareExchange({ base: rdi, disp: RING.head }, rdx, true);
  code.jcc('ne', `${prefix}retry`);
  code.move(rsi, rax);
  code.arithImm(4, rsi, capacity - 1);
  code.emit(...encode([0x69], rsi, rsi, true), ...le32(RECORD.bytes)); // imul rsi,rsi,bytes
  code.lea(rsi, { base: rdi, index: rsi, disp: RING.records });
  code.lea(r8, { base: rax, disp: 1 });
}

/**
 * claimRecord() for a return record of probe r9 (its index): the record and the slots its
 * reads' data takes (RING.returnSlots). Clobbers rax, rcx, rdx.
 */
function claimReturnRecord(code: Code, capacity: number): void {
  const slots: Mem = { base: rdi, index: r9, scale: 8, disp: RING.returnSlots };
  code.label('r_retry');
  code.load(rax, { base: rdi, disp: RING.head });
  code.load(rcx, { base: rdi, disp: RING.tail });
  code.move(rdx, rax);
  code.emit(...encode([0x29], rcx, rdx, true)); // sub rdx,rcx
  code.jcc('s', 'r_retry'); // a stale head (see claimRecord())
  code.emit(...encode([0x03], rdx, slots, true)); // add rdx,[slots]
  code.compareImm(rdx, capacity);
  code.jcc('ae', 'r_full');
  code.load(rdx, slots);
  code.lea(rdx, { base: rax, index: rdx, disp: 1 });
  code.lockCompareExchange({ base: rdi, disp: RING.head }, rdx, true);
  code.jcc('ne', 'r_retry');
  code.move(rsi, rax);
  code.arithImm(4, rsi, capacity - 1);
  code.emit(...encode([0x69], rsi, rsi, true), ...le32(RECORD.bytes)); // imul rsi,rsi,bytes
  code.lea(rsi, { base: rdi, index: rsi, disp: RING.records });
  code.lea(r8, { base: rax, disp: 1 });
}

/** eax: the thread's id, from its TCB once its place is known, else gettid(2) (clobbers rcx, r11). */
function threadId(code: Code, prefix: string): void {
  code.load(rax, { base: rdi, disp: RING.tidOffset });
  code.test(rax, rax);
  code.jcc('e', `${prefix}gettid`);
  code.emit(0x64, 0x8b, 0x00); // mov eax,fs:[rax]
  code.jmp(`${prefix}tid`);
  code.label(`${prefix}gettid`);
  code.emit(0xb8, ...le32(186)); // mov eax,SYS_gettid
  code.emit(0x0f, 0x05); // syscall
  code.label(`${prefix}tid`);
}

/**
 * r9: the shadow slot of the thread whose id is in eax (r11 gets the id), found in its
 * bucket, or (`claim`) a free one of the bucket taken for it; to `none` when there is
 * none. After a claim the bucket is searched again from its start, so that a slot a signal
 * handler of the same thread claimed meanwhile is the one both use. Clobbers rax, rcx.
 */
function shadowSlot(code: Code, claim: boolean, none: string, prefix: string): void {
  const tids = (index: number): Mem => ({
    base: rdi,
    index,
    scale: 4,
    disp: RING.shadowTids,
  });
  code.emit(...encode([0x89], rax, r11, false)); // mov r11d,eax
  code.label(`${prefix}search`);
  code.emit(...encode([0x89], r11, rcx, false)); // mov ecx,r11d
  code.arithImm(4, rcx, SHADOW.threads / SHADOW.bucket - 1, false);
  code.shiftLeft(rcx, Math.log2(SHADOW.bucket), false);
  code.lea(r9, { base: rcx, disp: SHADOW.bucket });
  code.label(`${prefix}find`);
  code.compareMem(tids(rcx), r11, false);
  code.jcc('e', `${prefix}found`);
  code.increment(rcx, false);
  code.compare(rcx, r9, false);
  code.jcc('b', `${prefix}find`);
  if (claim) {
    code.arithImm(5, rcx, SHADOW.bucket, false);
    code.label(`${prefix}claim`);
    code.zero(rax);
    code.lockCompareExchange(tids(rcx), r11, false);
    code.jcc('e', `${prefix}search`);
    code.increment(rcx, false);
    code.compare(rcx, r9, false);
    code.jcc('b', `${prefix}claim`);
  }
  code.jmp(none);
  code.label(`${prefix}found`);
  code.move(r9, rcx);
  code.shiftLeft(r9, Math.log2(SHADOW.slotBytes));
  code.lea(r9, { base: rdi, index: r9, disp: RING.shadowSlots });
}

/** Store the registers as the saved ones and the live ones are, with %rsp from `rspFrom`. */
function storeRegisters(code: Code, rspFrom: Mem): void {
  for (const [i, name] of RECORD_REGS.entries()) {
    const disp = RECORD.regs + 8 * i;
    if (name === 'rsp') {
      code.lea(rax, rspFrom);
      code.store({ base: rsi, disp }, rax);
    } else if (name in SAVED) {
      code.load(rax, { base: rsp, disp: SAVED[name]! });
      code.store({ base: rsi, disp }, rax);
    } else {
      code.store({ base: rsi, disp }, REG[name]);
    }
  }
  code.load(rax, { base: rsp, disp: SAVED.rflags! });
  code.store({ base: rsi, disp: RECORD.rflags }, rax);
}

/** The TSC into `into` (clobbers rax, rdx). */
function readTsc(code: Code, into: number): void {
  code.emit(0x0f, 0x31); // rdtsc
  code.shiftLeft(rdx, 32);
  code.emit(...encode([0x09], rdx, rax, true)); // or rax,rdx
  if (into !== rax) code.move(into, rax);
}

/**
 * Count a timed call that a longjmp or an unwind left, while the shadow stack drops it:
 * `entry` is its shadow entry (rax may be part of it; clobbers rax).
 */
function countUnwound(code: Code, entry: Mem, prefix: string): void {
  code.compareByte({ ...entry, disp: entry.disp + 20 }, 0);
  code.jcc('e', `${prefix}counted`);
  code.load(rax, { ...entry, disp: entry.disp + 16 }, false);
  code.shiftLeft(rax, Math.log2(STATS.bytes));
  code.lockIncrement({ base: rdi, index: rax, disp: RING.stats + STATS.unwound });
  code.label(`${prefix}counted`);
}

/** How a call's entry is kept: its thread id, and whether the process times it. */
interface SwapPath {
  /** Labels' prefix (each path of a trampoline has its own). */
  readonly prefix: string;
  /** Puts the thread id in eax (may clobber rax, rcx, r11). */
  readonly threadId: (code: Code) => void;
  /** The call is timed in the process: the entry TSC is in rsi, no record is written. */
  readonly timed: boolean;
}

/** Linux's `stack_t` (sigaltstack(2)): where its fields are (24 bytes), and SS_ONSTACK. */
const STACK_T = { sp: 0, flags: 8, size: 16, onStack: 1 } as const;

/**
 * With the top entry of the shadow stack (r9: the slot) at or below the new call's stack
 * pointer: to `keep` when the thread runs on its alternate signal stack (sigaltstack(2)
 * says SS_ONSTACK) and that entry's stack pointer is outside it. Such an entry is a call on
 * the stack the signal interrupted, which may lie anywhere below or above the signal stack:
 * it has not been left. Otherwise (not on a signal stack, or the entry on it too, or the
 * system call failed) it goes on: the entry was left by a longjmp or an unwind. Only runs
 * where an entry would be dropped, which a longjmp or an unwind makes, not a plain call. A
 * signal stack set up with SS_AUTODISARM is not reported while in use, nor are stacks a
 * program switches between itself (coroutines): their calls are taken for left ones, as the
 * kernel's uretprobes take them. rdx, rsi, rdi as they were (saved around the system
 * call), rcx the depth again; clobbers rax and r11. `prefix` names its labels.
 */
function onOtherStack(code: Code, keep: string, prefix: string): void {
  code.push(rdi);
  code.push(rsi);
  code.push(rdx);
  code.lea(rsp, { base: rsp, disp: -32 });
  code.zero(rdi); // no new stack: only the current one is read
  code.move(rsi, rsp);
  code.emit(0xb8, ...le32(131)); // mov eax,SYS_sigaltstack
  code.emit(0x0f, 0x05); // syscall
  code.test(rax, rax);
  code.jcc('ne', `${prefix}alt_drop`);
  code.load(rax, { base: rsp, disp: STACK_T.flags }, false);
  code.arithImm(4, rax, STACK_T.onStack, false);
  code.jcc('e', `${prefix}alt_drop`);
  // The top entry's stack pointer, against [ss_sp, ss_sp + ss_size).
  code.load(rcx, { base: r9, disp: 0 });
  code.move(rax, rcx);
  code.shiftLeft(rax, Math.log2(SHADOW.entryBytes));
  code.load(rdx, { base: r9, index: rax, disp: SHADOW.entries - SHADOW.entryBytes + 8 });
  code.load(rax, { base: rsp, disp: STACK_T.sp });
  code.compare(rdx, rax);
  code.jcc('b', `${prefix}alt_keep`);
  code.emit(...encode([0x03], rax, { base: rsp, disp: STACK_T.size }, true)); // add rax,[ss_size]
  code.compare(rdx, rax);
  code.jcc('ae', `${prefix}alt_keep`);
  code.label(`${prefix}alt_drop`);
  code.zero(rax);
  code.jmp(`${prefix}alt_done`);
  code.label(`${prefix}alt_keep`);
  code.emit(0xb8, ...le32(1)); // mov eax,1
  code.label(`${prefix}alt_done`);
  code.lea(rsp, { base: rsp, disp: 32 });
  code.pop(rdx);
  code.pop(rsi);
  code.pop(rdi);
  code.load(rcx, { base: r9, disp: 0 });
  code.test(rax, rax);
  code.jcc('ne', keep);
}

/**
 * Swap the return address for the return trampoline when the probe asks for its returns,
 * pushing the real one on the thread's shadow stack: ecx gets the record's kind (shifted
 * into place). Clobbers rax, rcx, rdx, r9-r11.
 */
function swapReturn(code: Code, probe: number, returnTrampoline: bigint, path: SwapPath): void {
  const p = path.prefix;
  const entry = (at: number): Mem => ({ base: r11, disp: at });
  code.compareByte({ base: rdi, disp: RING.returns + probe }, 0);
  code.jcc('e', `${p}plain`);
  code.load(rdx, { base: rsp, disp: ENTRY_RSP });
  code.movabs(rax, returnTrampoline);
  // A tail call from a function whose return is swapped already: that one returns for both.
  // Its entry is recorded as any (the tracer pairs it with that return: same stack pointer);
  // timed in the process, it cannot be.
  code.compare(rdx, rax);
  code.jcc('e', path.timed ? `${p}untracked` : `${p}plain`);
  path.threadId(code);
  shadowSlot(code, true, `${p}untracked`, `${p}e_`);
  code.lea(r10, { base: rsp, disp: ENTRY_RSP });
  // Entries at or below this stack pointer are calls a longjmp or an unwind left.
  code.label(`${p}trim`);
  code.load(rcx, { base: r9, disp: 0 });
  code.test(rcx, rcx);
  code.jcc('e', `${p}push`);
  code.move(rax, rcx);
  code.shiftLeft(rax, Math.log2(SHADOW.entryBytes));
  code.compareMem({ base: r9, index: rax, disp: SHADOW.entries - SHADOW.entryBytes + 8 }, r10);
  code.jcc('a', `${p}push`);
  // Unless this call runs on an alternate signal stack and that entry's stack pointer is not
  // on it: a call the handler interrupted, on the thread's own stack (below the signal stack
  // or not), still to return.
  onOtherStack(code, `${p}push`, p);
  if (path.timed) {
    code.move(rax, rcx);
    code.shiftLeft(rax, Math.log2(SHADOW.entryBytes));
    countUnwound(code, { base: r9, index: rax, disp: SHADOW.entries - SHADOW.entryBytes }, p);
  } else {
    // Counted in the record (add dword [probe], 1 << droppedShift).
    code.emit(...encode([0x81], 0, { base: rsi, disp: RECORD.probe }, false));
    code.emit(...le32(1 << RECORD_PROBE.droppedShift));
  }
  code.decrement(rcx);
  code.store({ base: r9, disp: 0 }, rcx);
  code.jmp(`${p}trim`);
  code.label(`${p}push`);
  code.compareImm(rcx, SHADOW_DEPTH);
  code.jcc('ae', `${p}untracked`);
  code.move(rax, rcx);
  code.shiftLeft(rax, Math.log2(SHADOW.entryBytes));
  code.lea(r11, { base: r9, index: rax, disp: SHADOW.entries });
  const fill = () => {
    code.store(entry(0), rdx);
    code.store(entry(8), r10);
    code.storeImm(entry(16), probe, false);
    code.storeImm(entry(20), path.timed ? 1 : 0, false);
    if (path.timed) code.store(entry(24), rsi);
  };
  fill();
  code.lea(rax, { base: rcx, disp: 1 });
  code.store({ base: r9, disp: 0 }, rax);
  fill();
  code.movabs(rax, returnTrampoline);
  code.store({ base: r10, disp: 0 }, rax);
  code.emit(0xb9, ...le32(RECORD_KIND.entryWithReturn << RECORD_PROBE.kindShift)); // mov ecx,kind
  code.jmp(`${p}kind`);
  code.label(`${p}untracked`);
  code.lockIncrement({ base: rdi, disp: RING.untracked });
  code.label(`${p}plain`);
  code.zero(rcx);
  code.label(`${p}kind`);
}

/** The code that records an entry and restores every register, up to the relocated instructions. */
function entryBody(
  ring: bigint,
  capacity: number,
  probe: number,
  returnTrampoline: bigint,
  reads: readonly EntryRead[] = [],
  returnReads: readonly EntryRead[] = [],
): { bytes: number[]; returnReadsAt: number | undefined } {
  const layout = readLayout(reads);
  const code = new Code();
  saveAll(code);
  code.movabs(rdi, ring);
  code.compareByte({ base: rdi, disp: RING.inProcess + probe }, 0);
  code.jcc('e', 'record');
  // Aggregated in the process: the entry counted, its call timed if its return is wanted.
  code.lockIncrement({ base: rdi, disp: RING.stats + probe * STATS.bytes + STATS.entries });
  countValue(code, probe);
  readTsc(code, rsi);
  swapReturn(code, probe, returnTrampoline, {
    prefix: 'a_',
    threadId: (c) => threadId(c, 'a_'),
    timed: true,
  });
  code.jmp('done');
  code.label('record');
  claimRecord(code, capacity, '', layout.slots);
  threadId(code, '');
  code.store({ base: rsi, disp: RECORD.tid }, rax, false);
  readTsc(code, rax);
  code.store({ base: rsi, disp: RECORD.tsc }, rax);
  storeRegisters(code, { base: rsp, disp: ENTRY_RSP });
  for (let i = 0; i < STACK_WORDS; i++) {
    code.load(rax, { base: rsp, disp: ENTRY_RSP + 8 * i });
    code.store({ base: rsi, disp: RECORD.stack + 8 * i }, rax);
  }
  if (reads.length > 0) code.call('e_reads');
  // The probe word: the entries swapReturn() drops are counted in it, then the kind and
  // the index go in (RECORD_PROBE).
  code.storeImm({ base: rsi, disp: RECORD.probe }, 0, false);
  swapReturn(code, probe, returnTrampoline, {
    prefix: '',
    threadId: (c) => c.load(rax, { base: rsi, disp: RECORD.tid }, false),
    timed: false,
  });
  code.arithImm(1, rcx, probe, false);
  code.emit(...encode([0x09], rcx, { base: rsi, disp: RECORD.probe }, false)); // or [probe],ecx
  code.store({ base: rsi, disp: RECORD.seq }, r8); // publish
  code.jmp('done');
  if (reads.length > 0) readMemory(code, reads, layout.offsets, 'e_');
  if (returnReads.length > 0) readMemory(code, returnReads, readLayout(returnReads).offsets, 'r_');
  code.label('full');
  code.lockIncrement({ base: rdi, disp: RING.lost + 8 * probe });
  code.label('done');
  restoreAll(code);
  code.lea(rsp, { base: rsp, disp: RED_ZONE });
  const returnReadsAt = returnReads.length > 0 ? code.offsetOf('r_reads') : undefined;
  return { bytes: code.finish(), returnReadsAt };
}

/** Where a register's value at the entry is in a record. */
function recordRegisterAt(register: RecordRegister): number {
  return register === 'rflags'
    ? RECORD.rflags
    : RECORD.regs + 8 * (RECORD_REGS as readonly string[]).indexOf(register);
}

/** Linux's process_vm_readv(2), and EFAULT. */
const SYS_PROCESS_VM_READV = 310;
const EFAULT = 14;

/**
 * The subroutine (label `${prefix}reads`, called with rsi: the record, its registers and
 * thread id written) that makes each read into the record's data: each address from the record's
 * registers and the reads before it, then process_vm_readv(2) of the thread's own id, one
 * local and one remote iovec (on the stack), so a page that cannot be read is a short count
 * or an error, never a fault. Keeps rdi, rsi, r8; clobbers rax, rcx, rdx, r9-r11.
 */
function readMemory(
  code: Code,
  reads: readonly EntryRead[],
  offsets: readonly number[],
  prefix: string,
): void {
  const { rbx } = REG;
  code.label(`${prefix}reads`);
  code.push(rdi);
  code.push(rsi);
  code.push(r8);
  code.push(rbx);
  code.move(rbx, rsi);
  for (const [j, read] of reads.entries()) {
    const data = RECORD.bytes + offsets[j]!;
    const p = `${prefix}rd${j}_`;
    code.movabs(rax, read.constant);
    for (const term of read.terms) {
      code.load(rcx, { base: rbx, disp: recordRegisterAt(term.register) });
      if (term.shift > 0) code.emit(...encode([0xc1], 5, rcx, true), term.shift); // shr rcx,n
      if (term.bits === 32) code.emit(...encode([0x89], rcx, rcx, false)); // mov ecx,ecx
      if (term.bits === 16) code.emit(...encode([0x0f, 0xb7], rcx, rcx, false)); // movzx ecx,cx
      if (term.bits === 8) code.emit(...encode([0x0f, 0xb6], rcx, rcx, false)); // movzx ecx,cl
      if (term.scale > 1) code.shiftLeft(rcx, Math.log2(term.scale));
      code.emit(...encode([0x01], rcx, rax, true)); // add rax,rcx
    }
    code.lea(rcx, { base: rbx, disp: data });
    if (read.after !== undefined) {
      const after = RECORD.bytes + offsets[read.after]!;
      // cmp qword [result], 8: the pointer it reads through was read whole, or no read.
      code.emit(...encode([0x81], 7, { base: rbx, disp: after + READ_DATA.result }, true));
      code.emit(...le32(8));
      code.jcc('ne', `${p}failed`);
      code.emit(...encode([0x03], rax, { base: rbx, disp: after + READ_DATA.bytes }, true)); // add
    }
    code.emit(0xba, ...le32(read.bytes)); // mov edx,bytes
    code.call(`${prefix}copy`);
    if (read.after !== undefined) {
      code.jmp(`${p}next`);
      code.label(`${p}failed`);
      code.storeImm({ base: rcx, disp: READ_DATA.vaddr }, 0, true);
      code.storeImm({ base: rcx, disp: READ_DATA.result }, -EFAULT, true);
      code.label(`${p}next`);
    }
  }
  code.pop(rbx);
  code.pop(r8);
  code.pop(rsi);
  code.pop(rdi);
  code.emit(0xc3); // ret
  // copy: rdx bytes from address rax into a read's data at rcx (its address, the system
  // call's result, the bytes), through iovecs on the stack; rbx the record.
  code.label(`${prefix}copy`);
  code.lea(rsp, { base: rsp, disp: -40 }); // iovec local, iovec remote, the data's address
  code.store({ base: rcx, disp: READ_DATA.vaddr }, rax);
  code.store({ base: rsp, disp: 32 }, rcx);
  code.lea(rcx, { base: rcx, disp: READ_DATA.bytes });
  code.store({ base: rsp, disp: 0 }, rcx);
  code.store({ base: rsp, disp: 8 }, rdx);
  code.store({ base: rsp, disp: 16 }, rax);
  code.store({ base: rsp, disp: 24 }, rdx);
  code.load(rdi, { base: rbx, disp: RECORD.tid }, false);
  code.move(rsi, rsp);
  code.emit(0xba, ...le32(1)); // mov edx,1
  code.lea(r10, { base: rsp, disp: 16 });
  code.emit(0x41, 0xb8, ...le32(1)); // mov r8d,1
  code.zero(r9);
  code.emit(0xb8, ...le32(SYS_PROCESS_VM_READV)); // mov eax,SYS_process_vm_readv
  code.emit(0x0f, 0x05); // syscall
  code.load(rcx, { base: rsp, disp: 32 });
  code.store({ base: rcx, disp: READ_DATA.result }, rax);
  code.lea(rsp, { base: rsp, disp: 40 });
  code.emit(0xc3); // ret
}

/**
 * The offset in an entry trampoline where the relocated instructions go: the same for every
 * trampoline with the same reads.
 */
export function relocatedOffset(
  reads: readonly EntryRead[] = [],
  returnReads: readonly EntryRead[] = [],
): number {
  return entryBody(0n, 2 * READ_LIMITS.slots + 4, 0, 0n, reads, returnReads).bytes.length;
}

/**
 * An entry trampoline's bytes: record the hit (and swap the return address when the probe's
 * returns are wanted), restore, run the relocated instructions (which must have been
 * planned for `at + relocatedOffset()`), jump back to `back`.
 */
export function buildEntryTrampoline(spec: EntryTrampolineSpec): {
  bytes: Uint8Array;
  /** Where the routine for its return records' reads is, from `at` (RING.returnReads). */
  returnReadsAt: number | undefined;
} {
  if (spec.capacity <= 0 || (spec.capacity & (spec.capacity - 1)) !== 0) {
    throw new RangeError(`ring capacity ${spec.capacity} is not a power of two`);
  }
  if (spec.probe < 0 || spec.probe >= RING.maxProbes) {
    throw new RangeError(`probe index ${spec.probe} is outside 0..${RING.maxProbes - 1}`);
  }
  for (const reads of [spec.reads ?? [], spec.returnReads ?? []]) {
    const { slots } = readLayout(reads);
    if (slots + 1 > spec.capacity / 2) {
      throw new RangeError(`a record with ${slots} slots of data would take half the ring or more`);
    }
  }
  const { bytes: code, returnReadsAt } = entryBody(
    spec.ring,
    spec.capacity,
    spec.probe,
    spec.returnTrampoline,
    spec.reads ?? [],
    spec.returnReads ?? [],
  );
  code.push(...spec.relocated);
  code.push(...jumpBack(spec.at + BigInt(code.length), spec.back));
  if (code.length > TRAMPOLINE_MAX_BYTES) {
    throw new RangeError(`an entry trampoline of ${code.length} bytes exceeds its slot`);
  }
  return { bytes: Uint8Array.from(code), returnReadsAt };
}

/**
 * `[mem] = max([mem], reg)`, unsigned, with `lock cmpxchg` (clobbers rax); `prefix` names
 * its labels.
 */
function atomicMax(code: Code, mem: Mem, reg: number, prefix: string): void {
  code.load(rax, mem);
  code.label(`${prefix}retry`);
  code.compare(rax, reg);
  code.jcc('ae', `${prefix}kept`);
  code.lockCompareExchange(mem, reg, true);
  code.jcc('ne', `${prefix}retry`);
  code.label(`${prefix}kept`);
}

/**
 * rax: histogram.ts's log2 bucket of the magnitude in rax (m below 8 is bucket m; else with
 * k = floor(log2 m), 8 + (k - 3) * 8 + the 3 bits after the top one). Clobbers rcx, rdx.
 */
function log2Bucket(code: Code, prefix: string): void {
  code.compareImm(rax, 8);
  code.jcc('b', `${prefix}bucket`);
  code.bitScanReverse(rcx, rax);
  code.arithImm(5, rcx, 3);
  code.move(rdx, rax);
  code.shiftRightByCl(rdx);
  code.arithImm(4, rdx, 7);
  code.lea(rax, { base: rdx, index: rcx, scale: 8, disp: 8 });
  code.label(`${prefix}bucket`);
}

/**
 * An entry aggregated in the process whose probe has a value (STATS.value): read it from the
 * saved register, cut to its width and sign, and add it to the probe's count, sum, min, max
 * and histogram bucket. Clobbers rax, rcx, rdx, rsi, r8.
 */
function countValue(code: Code, probe: number): void {
  const at = RING.stats + probe * STATS.bytes;
  const field = (offset: number): Mem => ({ base: rdi, disp: at + offset });
  const V = STATS.value;
  code.load(rax, field(V.at));
  code.test(rax, rax);
  code.jcc('e', 'v_none');
  code.load(rax, { base: rsp, index: rax, disp: -1 });
  code.load(rcx, field(V.shift));
  code.shiftByCl(4, rax);
  code.compareMemZero(field(V.signed));
  code.jcc('e', 'v_unsigned');
  code.shiftByCl(7, rax);
  code.jmp('v_cut');
  code.label('v_unsigned');
  code.shiftByCl(5, rax);
  code.label('v_cut');
  code.move(rsi, rax);
  code.lockIncrement(field(STATS.calls));
  code.lockAdd(field(STATS.sum), rsi);
  // The order key (rdx): the value, its top bit flipped when signed.
  code.move(rdx, rsi);
  code.compareMemZero(field(V.signed));
  code.jcc('e', 'v_key');
  code.movabs(rax, 1n << 63n);
  code.emit(...encode([0x31], rax, rdx, true)); // xor rdx,rax
  code.label('v_key');
  atomicMax(code, field(STATS.max), rdx, 'v_max');
  code.move(rcx, rdx);
  code.not(rcx);
  atomicMax(code, field(STATS.notMin), rcx, 'v_min');
  code.compareMemZero(field(V.linear));
  code.jcc('ne', 'v_linear');
  // Log2: a negative value's magnitude, in the negative buckets.
  code.zero(r8);
  code.move(rax, rsi);
  code.compareMemZero(field(V.signed));
  code.jcc('e', 'v_magnitude');
  code.test(rax, rax);
  code.jcc('ns', 'v_magnitude');
  code.negate(rax);
  code.emit(0x41, 0xb8, ...le32(BUCKETS.negativeOffset)); // mov r8d,imm32
  code.label('v_magnitude');
  log2Bucket(code, 'v_');
  code.emit(...encode([0x01], r8, rax, true)); // add rax,r8
  code.jmp('v_count');
  // Linear, in order keys: below `low` bucket 0, from `high` on `top`, else 1 + steps.
  code.label('v_linear');
  code.compareWithMem(rdx, field(V.low));
  code.jcc('b', 'v_below');
  code.compareWithMem(rdx, field(V.high));
  code.jcc('ae', 'v_above');
  code.move(rax, rdx);
  code.emit(...encode([0x2b], rax, field(V.low), true)); // sub rax,[low]
  code.zero(rdx);
  code.divideByMem(field(V.step));
  code.increment(rax);
  code.jmp('v_count');
  code.label('v_below');
  code.zero(rax);
  code.jmp('v_count');
  code.label('v_above');
  code.load(rax, field(V.top));
  code.label('v_count');
  code.lockIncrement({
    base: rdi,
    index: rax,
    scale: 8,
    disp: RING.buckets + probe * BUCKETS.bytes,
  });
  code.label('v_none');
}

/**
 * A call timed in the process has returned (r9: its probe index, rsi: its entry TSC): add it
 * to the probe's STATS and BUCKETS. Clobbers rax, rcx, rdx, rsi, r8, r9.
 */
function timeCall(code: Code): void {
  readTsc(code, rax);
  code.emit(...encode([0x29], rsi, rax, true)); // sub rax,rsi
  // A TSC behind the entry's (another CPU's, a little off): no time.
  code.jcc('ae', 't_ticks');
  code.zero(rax);
  code.label('t_ticks');
  code.load(rcx, { base: rdi, disp: RING.tickToNs });
  code.multiply(rcx);
  code.shiftRightDouble(rax, rdx, 32);
  code.move(rsi, rax);
  code.move(r8, r9);
  code.shiftLeft(r8, Math.log2(STATS.bytes));
  code.lea(r8, { base: rdi, index: r8, disp: RING.stats });
  code.lockIncrement({ base: r8, disp: STATS.calls });
  code.lockAdd({ base: r8, disp: STATS.sum }, rsi);
  atomicMax(code, { base: r8, disp: STATS.max }, rsi, 't_max');
  code.move(rcx, rsi);
  code.not(rcx);
  atomicMax(code, { base: r8, disp: STATS.notMin }, rcx, 't_min');
  // The bucket counts units of RING.unitReciprocal's: ns * (2^64 / unit) / 2^64.
  code.move(rax, rsi);
  code.load(rcx, { base: rdi, disp: RING.unitReciprocal });
  code.test(rcx, rcx);
  code.jcc('e', 't_units');
  code.multiply(rcx);
  code.move(rax, rdx);
  code.label('t_units');
  log2Bucket(code, 't_');
  code.shiftLeft(r9, Math.log2(BUCKETS.bytes));
  code.lea(r9, { base: rdi, index: r9, disp: RING.buckets });
  code.lockIncrement({ base: r9, index: rax, scale: 8, disp: 0 });
}

/**
 * The return trampoline of a process's ring: where a call whose return address an entry
 * trampoline swapped returns to. It pops the thread's shadow stack to the call's entry (by
 * stack pointer), records the return (or times the call, when the process aggregates it),
 * and returns to the real address (put back where the return address was, so that the
 * stack is as an untraced return leaves it). No entry for the call (which cannot be, short
 * of a program that rewrites its own stack) ends in `ud2`: there is no address to go on from.
 */
export function buildReturnTrampoline(ring: bigint, capacity: number): Uint8Array {
  const code = new Code();
  saveAll(code);
  code.movabs(rdi, ring);
  threadId(code, 'r_');
  shadowSlot(code, false, 'bad', 'r_');
  // The return popped our address: the call's entry stack pointer is 8 below.
  code.lea(r10, { base: rsp, disp: ENTRY_RSP - 8 });
  code.label('pop');
  code.load(rcx, { base: r9, disp: 0 });
  code.test(rcx, rcx);
  code.jcc('e', 'bad');
  code.move(rax, rcx);
  code.shiftLeft(rax, Math.log2(SHADOW.entryBytes));
  code.lea(rdx, { base: r9, index: rax, disp: SHADOW.entries - SHADOW.entryBytes });
  code.compareMem({ base: rdx, disp: 8 }, r10);
  code.jcc('e', 'match');
  // A call made after this one and not returned from: a longjmp or an unwind left it.
  countUnwound(code, { base: rdx, disp: 0 }, 'pop_');
  code.decrement(rcx);
  code.store({ base: r9, disp: 0 }, rcx);
  code.jmp('pop');
  code.label('match');
  code.load(rax, { base: rdx, disp: 0 });
  code.store({ base: r10, disp: 0 }, rax);
  code.load(r8, { base: rdx, disp: 16 }, false);
  // Read before the entry is given back (a signal handler's call may take its place).
  code.load(rsi, { base: rdx, disp: 24 });
  code.load(rdx, { base: rdx, disp: 20 }, false);
  code.decrement(rcx);
  code.store({ base: r9, disp: 0 }, rcx);
  code.emit(...encode([0x89], r8, r9, false)); // mov r9d,r8d: the probe index
  code.test(rdx, rdx);
  code.jcc('e', 'r_record');
  timeCall(code);
  code.jmp('done');
  code.label('r_record');
  claimReturnRecord(code, capacity);
  code.emit(...encode([0x89], r9, rax, false)); // mov eax,r9d
  code.arithImm(1, rax, RECORD_KIND.return << RECORD_PROBE.kindShift, false);
  code.store({ base: rsi, disp: RECORD.probe }, rax, false);
  code.store({ base: rsi, disp: RECORD.tid }, r11, false);
  readTsc(code, rax);
  code.store({ base: rsi, disp: RECORD.tsc }, rax);
  storeRegisters(code, { base: r10, disp: 8 });
  code.load(rax, { base: r10, disp: 0 });
  code.store({ base: rsi, disp: RECORD.stack }, rax);
  code.store({ base: rsi, disp: RECORD.stack + 8 }, r10);
  for (let i = 2; i < STACK_WORDS; i++) {
    code.load(rax, { base: r10, disp: 8 * (i - 1) });
    code.store({ base: rsi, disp: RECORD.stack + 8 * i }, rax);
  }
  // The probe's reads of memory at its returns, made by a routine of its entry trampoline.
  code.load(rax, { base: rdi, index: r9, scale: 8, disp: RING.returnReads });
  code.test(rax, rax);
  code.jcc('e', 'r_publish');
  code.emit(0xff, 0xd0); // call rax
  code.label('r_publish');
  code.store({ base: rsi, disp: RECORD.seq }, r8); // publish
  code.jmp('done');
  code.label('r_full');
  code.lockIncrement({ base: rdi, index: r9, scale: 8, disp: RING.lost });
  code.label('done');
  restoreAll(code);
  // %rsp to where the real return address now is, and return to it.
  code.lea(rsp, { base: rsp, disp: RED_ZONE - 8 });
  code.emit(0xc3); // ret
  code.label('bad');
  code.emit(0x0f, 0x0b); // ud2
  const bytes = code.finish();
  if (bytes.length > TRAMPOLINE_MAX_BYTES) {
    throw new RangeError(`the return trampoline of ${bytes.length} bytes exceeds its slot`);
  }
  return Uint8Array.from(bytes);
}

/**
 * The bytes a trampoline takes at most (an entry trampoline's body, about 1,650 bytes with
 * its two paths, and about 60 to 100 more per read of memory; 15 x 3 relocated bytes; the
 * jump back). buildEntryTrampoline() checks it.
 */
export const TRAMPOLINE_MAX_BYTES = 4096;
