/**
 * eBPF instructions as the kernel takes them (`struct bpf_insn`, 8 bytes each: opcode, dst and
 * src registers in one byte, a signed 16-bit offset, a signed 32-bit immediate), with the
 * numbers of include/uapi/linux/bpf.h and bpf_common.h. A 64-bit immediate load takes two
 * slots. Builders only: what a program means is the code generator's business.
 */

/** Instruction classes (the low 3 bits of the opcode). */
export const CLASS = {
  LD: 0x00,
  LDX: 0x01,
  ST: 0x02,
  STX: 0x03,
  ALU: 0x04,
  JMP: 0x05,
  JMP32: 0x06,
  ALU64: 0x07,
} as const;

/** Arithmetic operations (ALU, ALU64). */
export const ALU = {
  ADD: 0x00,
  SUB: 0x10,
  MUL: 0x20,
  DIV: 0x30,
  OR: 0x40,
  AND: 0x50,
  LSH: 0x60,
  RSH: 0x70,
  NEG: 0x80,
  MOD: 0x90,
  XOR: 0xa0,
  MOV: 0xb0,
  ARSH: 0xc0,
} as const;

/** Jump operations (JMP, JMP32). */
export const JMP = {
  JA: 0x00,
  JEQ: 0x10,
  JGT: 0x20,
  JGE: 0x30,
  JSET: 0x40,
  JNE: 0x50,
  JSGT: 0x60,
  JSGE: 0x70,
  CALL: 0x80,
  EXIT: 0x90,
  JLT: 0xa0,
  JLE: 0xb0,
  JSLT: 0xc0,
  JSLE: 0xd0,
} as const;

/** Byte order conversion (ALU class; the source bit picks big-endian, the immediate the width). */
const ALU_END = 0xd0;

/** Operand source: the immediate (K) or the src register (X). */
const SRC_K = 0x00;
const SRC_X = 0x08;

/** Memory access sizes. */
export const SIZE = { W: 0x00, H: 0x08, B: 0x10, DW: 0x18 } as const;
export type Size = keyof typeof SIZE;

/** Memory access modes. */
const MODE_IMM = 0x00;
const MODE_MEM = 0x60;
const MODE_ATOMIC = 0xc0;
/** An atomic operation that also returns the old value. */
const BPF_FETCH = 0x01;

/** `src` of a 64-bit immediate load whose immediate is a map's file descriptor. */
export const PSEUDO_MAP_FD = 1;
/** `src` of a call whose immediate is a subprogram's offset (bpf-to-bpf call). */
export const PSEUDO_CALL = 1;
/** `src` of a 64-bit immediate load whose immediate is a subprogram's offset (a callback). */
export const PSEUDO_FUNC = 4;
/** A call's src_reg: imm is the BTF id of a kernel function (a kfunc) in vmlinux's BTF. */
export const PSEUDO_KFUNC_CALL = 2;

/** Registers: r0 return value, r1-r5 arguments, r6-r9 kept across calls, r10 frame pointer. */
export type Reg = 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10;

export interface Insn {
  readonly code: number;
  readonly dst: Reg;
  readonly src: number;
  readonly off: number;
  readonly imm: number;
}

const INSN_BYTES = 8;

function insn(code: number, dst: Reg, src: number, off: number, imm: number): Insn {
  if (off < -0x8000 || off > 0x7fff) throw new RangeError(`BPF offset ${off} is out of 16 bits`);
  if (imm < -0x8000_0000 || imm > 0xffff_ffff) {
    throw new RangeError(`BPF immediate ${imm} is out of 32 bits`);
  }
  return { code, dst, src, off, imm: imm | 0 };
}

type AluOp = keyof typeof ALU;
type JmpOp = Exclude<keyof typeof JMP, 'JA' | 'CALL' | 'EXIT'>;

/** dst = dst OP imm (64-bit). */
export function alu64Imm(op: AluOp, dst: Reg, imm: number): Insn {
  return insn(CLASS.ALU64 | ALU[op] | SRC_K, dst, 0, 0, imm);
}

/** dst = dst OP src (64-bit). */
export function alu64Reg(op: AluOp, dst: Reg, src: Reg): Insn {
  return insn(CLASS.ALU64 | ALU[op] | SRC_X, dst, src, 0, 0);
}

/** dst = dst OP imm (32-bit; the upper half is zeroed). */
export function alu32Imm(op: AluOp, dst: Reg, imm: number): Insn {
  return insn(CLASS.ALU | ALU[op] | SRC_K, dst, 0, 0, imm);
}

export function mov64Imm(dst: Reg, imm: number): Insn {
  return alu64Imm('MOV', dst, imm);
}

export function mov64Reg(dst: Reg, src: Reg): Insn {
  return alu64Reg('MOV', dst, src);
}

/** dst = dst in big-endian byte order (`BPF_ALU | BPF_END | BPF_TO_BE`, `imm` the width). */
export function toBigEndian(dst: Reg, bits: 16 | 32 | 64): Insn {
  return insn(CLASS.ALU | ALU_END | SRC_X, dst, 0, 0, bits);
}

/** dst = *(size *)(src + off). */
export function ldx(size: Size, dst: Reg, src: Reg, off: number): Insn {
  return insn(CLASS.LDX | SIZE[size] | MODE_MEM, dst, src, off, 0);
}

/** *(size *)(dst + off) = src. */
export function stx(size: Size, dst: Reg, off: number, src: Reg): Insn {
  return insn(CLASS.STX | SIZE[size] | MODE_MEM, dst, src, off, 0);
}

/** *(size *)(dst + off) = imm. */
export function st(size: Size, dst: Reg, off: number, imm: number): Insn {
  return insn(CLASS.ST | SIZE[size] | MODE_MEM, dst, 0, off, imm);
}

/** *(size *)(dst + off) += src, atomically (`lock xadd`); W or DW only. */
export function atomicAdd(size: 'W' | 'DW', dst: Reg, off: number, src: Reg): Insn {
  return insn(CLASS.STX | SIZE[size] | MODE_ATOMIC, dst, src, off, ALU.ADD);
}

/**
 * `src = atomic_fetch_add((u64 *)(dst + off), src)`: adds atomically and leaves the old value
 * in `src` (BPF_ADD | BPF_FETCH, kernel 5.12+).
 */
export function atomicFetchAdd(dst: Reg, off: number, src: Reg): Insn {
  return insn(CLASS.STX | SIZE.DW | MODE_ATOMIC, dst, src, off, ALU.ADD | BPF_FETCH);
}

/** dst = a 64-bit immediate: two slots, the high half in the second one's imm. */
export function ld64Imm(dst: Reg, value: bigint, src = 0): [Insn, Insn] {
  const bits = BigInt.asUintN(64, value);
  const low = Number(bits & 0xffff_ffffn);
  const high = Number(bits >> 32n);
  return [insn(CLASS.LD | SIZE.DW | MODE_IMM, dst, src, 0, low), insn(0, 0, 0, 0, high)];
}

/** dst = the map whose file descriptor is `fd` (the kernel puts its address there). */
export function ldMapFd(dst: Reg, fd: number): [Insn, Insn] {
  return ld64Imm(dst, BigInt(fd), PSEUDO_MAP_FD);
}

/** if (dst OP imm) goto +off (64-bit compare). */
export function jmpImm(op: JmpOp, dst: Reg, imm: number, off: number): Insn {
  return insn(CLASS.JMP | JMP[op] | SRC_K, dst, 0, off, imm);
}

/** if (dst OP src) goto +off (64-bit compare). */
export function jmpReg(op: JmpOp, dst: Reg, src: Reg, off: number): Insn {
  return insn(CLASS.JMP | JMP[op] | SRC_X, dst, src, off, 0);
}

/** goto +off. */
export function ja(off: number): Insn {
  return insn(CLASS.JMP | JMP.JA, 0, 0, off, 0);
}

/** Call helper function number `helper` (arguments in r1-r5, result in r0). */
export function call(helper: number): Insn {
  return insn(CLASS.JMP | JMP.CALL, 0, 0, 0, helper);
}

/** Call the subprogram `off` instructions after this one (arguments r1-r5, result r0). */
export function callSub(off: number): Insn {
  return insn(CLASS.JMP | JMP.CALL, 0, PSEUDO_CALL, 0, off);
}

/** Call the kfunc whose type id in vmlinux's BTF is `btfId` (arguments r1-r5, result r0). */
export function callKfunc(btfId: number): Insn {
  return insn(CLASS.JMP | JMP.CALL, 0, PSEUDO_KFUNC_CALL, 0, btfId);
}

/** Return r0. */
export function exit(): Insn {
  return insn(CLASS.JMP | JMP.EXIT, 0, 0, 0, 0);
}

/** The bytes the kernel's bpf(BPF_PROG_LOAD) takes for these instructions (little-endian). */
export function encode(insns: readonly (Insn | readonly Insn[])[]): Uint8Array {
  const flat = insns.flat() as Insn[];
  const bytes = new Uint8Array(flat.length * INSN_BYTES);
  const view = new DataView(bytes.buffer);
  for (const [i, one] of flat.entries()) {
    const at = i * INSN_BYTES;
    view.setUint8(at, one.code);
    view.setUint8(at + 1, (one.src << 4) | one.dst);
    view.setInt16(at + 2, one.off, true);
    view.setInt32(at + 4, one.imm, true);
  }
  return bytes;
}
