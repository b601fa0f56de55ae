/**
 * The entry trampoline of an inline hook (the `inject` engine), written as machine code: it
 * records the hit into a ring buffer shared with upscope, without a system call or a trap,
 * then runs the function's relocated first instructions and jumps back.
 *
 * The ring (RING below) is many producers (the target's threads), one consumer (upscope):
 * a thread claims record `head` with `lock cmpxchg` only while `head - tail < capacity`, so
 * a record is never written over before upscope has read it; when the ring is full the hit
 * is counted in its probe's lost counter instead (the target never waits). A record is
 * published by writing its `seq` (its index + 1) last: x86 keeps stores in order.
 *
 * What a record holds: the probe's index, the thread id, the TSC, the general registers as
 * they were at the function's entry (so every register and argument fetch works), its
 * flags, and the first STACK_WORDS words of the stack (the return address, then the
 * arguments passed on the stack).
 *
 * The thread id comes from the thread's TCB (`fs:[offset]`, glibc's `struct pthread`) when
 * upscope has found where it is (RING.tidOffset, 0 until then), else from gettid(2).
 */
import { jumpBack } from './xol.js';

/** Offsets in the shared ring area. */
export const RING = {
  /** u64: the next record to claim (written by producers). */
  head: 0,
  /** u64: the next record upscope reads (written by upscope). */
  tail: 64,
  /** u64: where the thread id is in the TCB (fs-relative), 0 for gettid(2). */
  tidOffset: 128,
  /** u64 per probe index: hits not recorded because the ring was full. */
  lost: 4096,
  /** The most probe indexes one ring serves. */
  maxProbes: 1024,
  /** Where the records start. */
  records: 4096 + 8 * 1024,
} as const;

/** Words of the stack a record keeps (the return address, then stack-passed arguments). */
export const STACK_WORDS = 4;

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
  /** u32. */
  probe: 8,
  /** u32. */
  tid: 12,
  /** u64: rdtsc. */
  tsc: 16,
  /** u64 each, RECORD_REGS. */
  regs: 24,
  /** u64 each, STACK_WORDS words from %rsp. */
  stack: 24 + 8 * RECORD_REGS.length,
  /** u64. */
  rflags: 24 + 8 * RECORD_REGS.length + 8 * STACK_WORDS,
  bytes: 192,
} as const;

if (RECORD.rflags + 8 > RECORD.bytes) throw new Error('RECORD: its fields do not fit in it');

/** What one trampoline needs to know. */
export interface EntryTrampolineSpec {
  /** Where the trampoline is written. */
  readonly at: bigint;
  /** The ring area in the target. */
  readonly ring: bigint;
  /** Records in the ring: a power of two. */
  readonly capacity: number;
  /** The probe's index (RECORD.probe; RING.lost + 8 * index). */
  readonly probe: number;
  /** The function's first instructions, re-encoded to run at `at + relocatedOffset(...)`. */
  readonly relocated: Uint8Array;
  /** Where the function goes on after them. */
  readonly back: bigint;
}

/** The stack below the entry %rsp the trampoline never touches (the red zone). */
const RED_ZONE = 128;
/** What the trampoline pushes: rflags and 7 registers. */
const PUSHED = 8 * 8;

/** Little-endian bytes of a 32-bit value. */
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

/** `mov [rsi+disp32], reg64`. */
function storeToRecord(reg: number, disp: number): number[] {
  return [0x48 | (reg >= 8 ? 4 : 0), 0x89, 0x80 | ((reg & 7) << 3) | 6, ...le32(disp)];
}

/** `mov rax, [rsp+disp32]`. */
function loadFromStack(disp: number): number[] {
  return [0x48, 0x8b, 0x84, 0x24, ...le32(disp)];
}

/** The offset in the trampoline where the relocated instructions go (fixed for a ring). */
export function relocatedOffset(): number {
  return body(0n, 1, 0).length;
}

/**
 * The code that records a hit and restores every register, up to the relocated
 * instructions (whose place does not depend on them).
 */
function body(ring: bigint, capacity: number, probe: number): number[] {
  const code: number[] = [];
  const emit = (...bytes: number[]) => code.push(...bytes);
  // Leave the red zone alone, save what is used.
  emit(0x48, 0x8d, 0x64, 0x24, 0x80); // lea rsp,[rsp-128]
  emit(0x9c); // pushfq
  emit(0x50, 0x51, 0x52, 0x56, 0x57, 0x41, 0x50, 0x41, 0x53); // push rax,rcx,rdx,rsi,rdi,r8,r11
  // Stack now: r11, r8, rdi, rsi, rdx, rcx, rax, rflags (each 8 bytes from %rsp).
  const saved = { r11: 0, r8: 8, rdi: 16, rsi: 24, rdx: 32, rcx: 40, rax: 48, rflags: 56 };
  const entryRsp = PUSHED + RED_ZONE;
  emit(0x48, 0xbf, ...le64(ring)); // movabs rdi, ring
  const retry = code.length;
  emit(0x48, 0x8b, 0x87, ...le32(RING.head)); // mov rax,[rdi+head]
  emit(0x48, 0x8b, 0x8f, ...le32(RING.tail)); // mov rcx,[rdi+tail]
  emit(0x48, 0x89, 0xc2); // mov rdx,rax
  emit(0x48, 0x29, 0xca); // sub rdx,rcx
  emit(0x48, 0x81, 0xfa, ...le32(capacity)); // cmp rdx,capacity
  const jaeFull = code.length;
  emit(0x0f, 0x83, 0, 0, 0, 0); // jae full
  emit(0x48, 0x8d, 0x50, 0x01); // lea rdx,[rax+1]
  emit(0xf0, 0x48, 0x0f, 0xb1, 0x97, ...le32(RING.head)); // lock cmpxchg [rdi+head],rdx
  emit(0x0f, 0x85, ...le32(retry - (code.length + 6))); // jne retry
  emit(0x48, 0x89, 0xc6); // mov rsi,rax
  emit(0x48, 0x81, 0xe6, ...le32(capacity - 1)); // and rsi,capacity-1
  emit(0x48, 0x69, 0xf6, ...le32(RECORD.bytes)); // imul rsi,rsi,RECORD.bytes
  emit(0x48, 0x8d, 0xb4, 0x37, ...le32(RING.records)); // lea rsi,[rdi+rsi+records]
  emit(0x49, 0x89, 0xd0); // mov r8,rdx (the seq to publish)
  emit(0xc7, 0x46, RECORD.probe, ...le32(probe)); // mov dword [rsi+probe],probe
  // The thread id: fs:[tidOffset] once known, else gettid(2) (clobbers rcx, r11: saved).
  emit(0x48, 0x8b, 0x87, ...le32(RING.tidOffset)); // mov rax,[rdi+tidOffset]
  emit(0x48, 0x85, 0xc0); // test rax,rax
  emit(0x74, 0x05); // je +5 (to gettid)
  emit(0x64, 0x8b, 0x00); // mov eax,fs:[rax]
  emit(0xeb, 0x07); // jmp +7 (over gettid)
  emit(0xb8, ...le32(186)); // mov eax,SYS_gettid
  emit(0x0f, 0x05); // syscall
  emit(0x89, 0x46, RECORD.tid); // mov [rsi+tid],eax
  emit(0x0f, 0x31); // rdtsc
  emit(0x48, 0xc1, 0xe2, 0x20); // shl rdx,32
  emit(0x48, 0x09, 0xd0); // or rax,rdx
  emit(0x48, 0x89, 0x46, RECORD.tsc); // mov [rsi+tsc],rax
  for (const [i, name] of RECORD_REGS.entries()) {
    const disp = RECORD.regs + 8 * i;
    if (name === 'rsp') {
      emit(0x48, 0x8d, 0x84, 0x24, ...le32(entryRsp)); // lea rax,[rsp+entryRsp]
      emit(...storeToRecord(REG.rax, disp));
    } else if (name in saved) {
      emit(...loadFromStack(saved[name as keyof typeof saved]));
      emit(...storeToRecord(REG.rax, disp));
    } else {
      emit(...storeToRecord(REG[name], disp));
    }
  }
  for (let i = 0; i < STACK_WORDS; i++) {
    emit(...loadFromStack(entryRsp + 8 * i));
    emit(...storeToRecord(REG.rax, RECORD.stack + 8 * i));
  }
  emit(...loadFromStack(saved.rflags));
  emit(...storeToRecord(REG.rax, RECORD.rflags));
  emit(0x4c, 0x89, 0x06); // mov [rsi],r8: publish
  const jmpDone = code.length;
  emit(0xeb, 0); // jmp done
  const full = code.length;
  emit(0xf0, 0x48, 0xff, 0x87, ...le32(RING.lost + 8 * probe)); // lock inc qword [rdi+lost]
  const done = code.length;
  code[jmpDone + 1] = done - (jmpDone + 2);
  code.splice(jaeFull + 2, 4, ...le32(full - (jaeFull + 6)));
  emit(0x41, 0x5b, 0x41, 0x58, 0x5f, 0x5e, 0x5a, 0x59, 0x58); // pop r11,r8,rdi,rsi,rdx,rcx,rax
  emit(0x9d); // popfq
  emit(0x48, 0x8d, 0xa4, 0x24, ...le32(RED_ZONE)); // lea rsp,[rsp+128]
  return code;
}

/**
 * The trampoline's bytes: record the hit, restore, run the relocated instructions (which
 * must have been planned for `at + relocatedOffset()`), jump back to `back`.
 */
export function buildEntryTrampoline(spec: EntryTrampolineSpec): Uint8Array {
  if (spec.capacity <= 0 || (spec.capacity & (spec.capacity - 1)) !== 0) {
    throw new RangeError(`ring capacity ${spec.capacity} is not a power of two`);
  }
  if (spec.probe < 0 || spec.probe >= RING.maxProbes) {
    throw new RangeError(`probe index ${spec.probe} is outside 0..${RING.maxProbes - 1}`);
  }
  const code = body(spec.ring, spec.capacity, spec.probe);
  code.push(...spec.relocated);
  const tail = jumpBack(spec.at + BigInt(code.length), spec.back);
  code.push(...tail);
  return Uint8Array.from(code);
}

/** The bytes a trampoline takes at most (its body, 15 x 3 relocated bytes, the jump back). */
export const TRAMPOLINE_MAX_BYTES = 512;
