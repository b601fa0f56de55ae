/**
 * A quick x86-64 length decoder for the common instructions of compiled code: the length of
 * an instruction, whether it is a ret, a direct jmp, jcc or call (and where to), or an
 * indirect jmp; nothing else. It is a fast path for sweeping whole functions (finding every
 * return of tens of thousands of functions decoded each instruction through iced's
 * WebAssembly, several calls per instruction): anything it is not sure of (an opcode outside
 * its list, a prefix or operand form some of whose encodings are invalid, VEX/EVEX, a lock
 * on what may not take one, a truncated instruction) it answers 0, and the caller decodes the
 * function with iced.
 * Tests check it against iced on every function of large real binaries.
 */

/** What a quickly decoded instruction does to the flow of control. */
export const QUICK_FLOW = {
  none: 0,
  ret: 1,
  /** A direct jmp: `quick.displacement` is its target less its end. */
  jmp: 2,
  /** A direct conditional jump (jcc, loop, jrcxz): `quick.displacement` likewise. */
  jcc: 3,
  /** A direct call: `quick.displacement` likewise. */
  call: 4,
  /** An indirect jmp (`ff /4`). */
  jmpIndirect: 5,
} as const;

/**
 * What the last quickLength() found: `flow`, its QUICK_FLOW kind; `displacement`, a direct
 * branch's target less the instruction's end.
 */
export const quick = { flow: 0, displacement: 0 };

const NO_IMMEDIATE = 0;
const IMM8 = 1;
const IMM16 = 2;
/** imm32, or imm16 with the operand-size prefix. */
const IMMZ = 3;

/** The bytes of an immediate of each kind above. */
function immediateBytes(kind: number, operand16: boolean): number {
  switch (kind) {
    case IMM8:
      return 1;
    case IMM16:
      return 2;
    case IMMZ:
      return operand16 ? 2 : 4;
    default:
      return 0;
  }
}

function isLegacyPrefix(byte: number): boolean {
  return (
    byte === 0x66 ||
    byte === 0x67 ||
    byte === 0xf2 ||
    byte === 0xf3 ||
    byte === 0xf0 ||
    byte === 0x2e ||
    byte === 0x36 ||
    byte === 0x3e ||
    byte === 0x26 ||
    byte === 0x64 ||
    byte === 0x65
  );
}

/** Bytes of the ModRM byte at `at` with its SIB and displacement, or -1 past `end`. */
function modrmBytes(bytes: Uint8Array, at: number, end: number): number {
  if (at >= end) return -1;
  const modrm = bytes[at]!;
  const mod = modrm >> 6;
  if (mod === 3) return 1;
  let n = 1;
  if ((modrm & 7) === 4) {
    if (at + 1 >= end) return -1;
    n = 2;
    if (mod === 0 && (bytes[at + 1]! & 7) === 5) n += 4;
  } else if (mod === 0 && (modrm & 7) === 5) {
    n += 4;
  }
  if (mod === 1) n += 1;
  else if (mod === 2) n += 4;
  return n;
}

/**
 * The length of the instruction at `bytes[start]` (the code ends at `end`), with `quick` set;
 * 0 when this decoder does not know it for sure (ask iced).
 */
export function quickLength(bytes: Uint8Array, start: number, end: number): number {
  quick.flow = QUICK_FLOW.none;
  let i = start;
  let operand16 = false;
  let address32 = false;
  let rep = 0;
  let lock = false;
  for (;;) {
    if (i >= end) return 0;
    const byte = bytes[i]!;
    if (!isLegacyPrefix(byte)) break;
    // lock: valid on few instructions, with a memory destination (checked below)
    if (byte === 0xf0) lock = true;
    else if (byte === 0x66) operand16 = true;
    else if (byte === 0x67) address32 = true;
    else if (byte === 0xf2 || byte === 0xf3) rep = byte;
    i++;
  }
  let rexW = false;
  if ((bytes[i]! & 0xf0) === 0x40) {
    rexW = (bytes[i]! & 8) !== 0;
    i++;
    if (i >= end) return 0;
    // A prefix after REX makes the REX void: rare, left to iced.
    const next = bytes[i]!;
    if (isLegacyPrefix(next) || (next & 0xf0) === 0x40) return 0;
  }
  const op = bytes[i++]!;
  let modrm = false;
  let immediate = NO_IMMEDIATE;
  /** The instruction ends with a rel8 or rel32 displacement. */
  let rel = 0;
  /** The ModRM's reg field must be one of these (a bit per value), else 0. */
  let regs = 0xff;
  /** 1: register form only; 2: memory form only. */
  let form = 0;
  // A lock with rep (xacquire, xrelease) is left to iced.
  if (lock && (rep !== 0 || (op !== 0x0f && LOCKABLE_REGS[op] === 0))) return 0;
  if (op === 0x0f) return twoByte(bytes, start, i, end, operand16, rep, lock);
  if (op < 0x40) {
    const low = op & 7;
    if (low <= 3) modrm = true;
    else if (low === 4) immediate = IMM8;
    else if (low === 5) immediate = IMMZ;
    else return 0;
  } else if (op < 0x50) {
    return 0;
  } else if (op < 0x60) {
    // push/pop
  } else if (op === 0x63) {
    modrm = true;
  } else if (op === 0x68) {
    immediate = IMMZ;
  } else if (op === 0x69) {
    modrm = true;
    immediate = IMMZ;
  } else if (op === 0x6a) {
    immediate = IMM8;
  } else if (op === 0x6b) {
    modrm = true;
    immediate = IMM8;
  } else if (op >= 0x6c && op <= 0x6f) {
    // ins/outs
  } else if (op >= 0x70 && op <= 0x7f) {
    if (operand16) return 0;
    rel = 1;
    quick.flow = QUICK_FLOW.jcc;
  } else if (op === 0x80 || op === 0x83) {
    modrm = true;
    immediate = IMM8;
  } else if (op === 0x81) {
    modrm = true;
    immediate = IMMZ;
  } else if (op >= 0x84 && op <= 0x8b) {
    modrm = true;
  } else if (op === 0x8d) {
    modrm = true;
    form = 2;
  } else if (op === 0x8f) {
    modrm = true;
    regs = 1;
  } else if (op >= 0x90 && op <= 0x99) {
    // nop, xchg, cbw, cwd
  } else if (op >= 0x9b && op <= 0x9f) {
    // fwait, pushf, popf, sahf, lahf
  } else if (op >= 0xa0 && op <= 0xa3) {
    // A 64-bit address (32-bit with 0x67), no ModRM.
    const length = i - start + (address32 ? 4 : 8);
    return start + length <= end && length <= 15 ? length : 0;
  } else if (op >= 0xa4 && op <= 0xaf) {
    if (op === 0xa8) immediate = IMM8;
    else if (op === 0xa9) immediate = IMMZ;
  } else if (op >= 0xb0 && op <= 0xb7) {
    immediate = IMM8;
  } else if (op >= 0xb8 && op <= 0xbf) {
    if (rexW) {
      const length = i - start + 8;
      return start + length <= end && length <= 15 ? length : 0;
    }
    immediate = IMMZ;
  } else if (op === 0xc0 || op === 0xc1) {
    modrm = true;
    immediate = IMM8;
    regs = 0xbf; // /6 is not a shift
  } else if (op === 0xc2) {
    immediate = IMM16;
    quick.flow = QUICK_FLOW.ret;
  } else if (op === 0xc3) {
    quick.flow = QUICK_FLOW.ret;
  } else if (op === 0xc6) {
    modrm = true;
    immediate = IMM8;
    regs = 1;
  } else if (op === 0xc7) {
    modrm = true;
    immediate = IMMZ;
    regs = 1;
  } else if (op === 0xc8) {
    // enter: imm16, imm8
    const length = i - start + 3;
    return start + length <= end && length <= 15 ? length : 0;
  } else if (op === 0xc9 || op === 0xcc) {
    // leave, int3
  } else if (op === 0xcd) {
    immediate = IMM8;
  } else if (op >= 0xd0 && op <= 0xd3) {
    modrm = true;
    regs = 0xbf;
  } else if (op === 0xd7) {
    // xlat
  } else if (op >= 0xd8 && op <= 0xdf) {
    // x87: every memory form is valid; some register forms are not.
    modrm = true;
    form = 2;
  } else if (op >= 0xe0 && op <= 0xe3) {
    if (operand16 || address32) return 0;
    rel = 1;
    quick.flow = QUICK_FLOW.jcc;
  } else if (op >= 0xe4 && op <= 0xe7) {
    immediate = IMM8;
  } else if (op === 0xe8 || op === 0xe9) {
    if (operand16) return 0;
    rel = 4;
    quick.flow = op === 0xe8 ? QUICK_FLOW.call : QUICK_FLOW.jmp;
  } else if (op === 0xeb) {
    if (operand16) return 0;
    rel = 1;
    quick.flow = QUICK_FLOW.jmp;
  } else if (op >= 0xec && op <= 0xef) {
    // in/out through dx
  } else if (op === 0xf4 || op === 0xf5 || (op >= 0xf8 && op <= 0xfd)) {
    // hlt, cmc, clc, stc, cli, sti, cld, std
  } else if (op === 0xf6 || op === 0xf7) {
    modrm = true;
    regs = 0xfd; // /1 is an undocumented test, left to iced
    if (i < end && ((bytes[i]! >> 3) & 7) === 0) immediate = op === 0xf6 ? IMM8 : IMMZ;
  } else if (op === 0xfe) {
    modrm = true;
    regs = 3;
  } else if (op === 0xff) {
    modrm = true;
    regs = 0x57; // inc, dec, call, jmp, push
    if (i < end && ((bytes[i]! >> 3) & 7) === 4) quick.flow = QUICK_FLOW.jmpIndirect;
  } else {
    return 0;
  }
  if (lock) {
    regs &= LOCKABLE_REGS[op]!;
    form = 2;
  }
  return finish(bytes, start, i, end, modrm, regs, form, immediate, operand16, rel);
}

/**
 * The one-byte opcodes a lock prefix is valid on (with a memory destination), as the ModRM
 * reg values allowed (a bit per value): add, or, adc, sbb, and, sub, xor (r/m, reg), the
 * immediate group 1 but cmp, xchg, not and neg, inc and dec.
 */
const LOCKABLE_REGS = (() => {
  const regs = new Uint8Array(256);
  for (const op of [0x00, 0x01, 0x08, 0x09, 0x10, 0x11, 0x18, 0x19]) regs[op] = 0xff;
  for (const op of [0x20, 0x21, 0x28, 0x29, 0x30, 0x31, 0x86, 0x87]) regs[op] = 0xff;
  for (const op of [0x80, 0x81, 0x83]) regs[op] = 0x7f;
  regs[0xf6] = 0x0c;
  regs[0xf7] = 0x0c;
  regs[0xfe] = 0x03;
  regs[0xff] = 0x03;
  return regs;
})();

/**
 * The 0F-map opcodes a lock prefix is valid on (with a memory destination), as LOCKABLE_REGS:
 * cmpxchg, xadd, bts, btr, btc, and the bit-test group's bts, btr, btc (cmpxchg8b/16b is
 * left to iced).
 */
const LOCKABLE_TWO_BYTE_REGS = (() => {
  const regs = new Uint8Array(256);
  for (const op of [0xb0, 0xb1, 0xc0, 0xc1, 0xab, 0xb3, 0xbb]) regs[op] = 0xff;
  regs[0xba] = 0xe0;
  return regs;
})();

/** The rest of an instruction from its ModRM (if any) on: its length, or 0. */
function finish(
  bytes: Uint8Array,
  start: number,
  at: number,
  end: number,
  modrm: boolean,
  regs: number,
  form: number,
  immediate: number,
  operand16: boolean,
  rel: number,
): number {
  let i = at;
  if (modrm) {
    const n = modrmBytes(bytes, i, end);
    if (n < 0) return 0;
    const byte = bytes[i]!;
    if ((regs & (1 << ((byte >> 3) & 7))) === 0) return 0;
    const register = byte >> 6 === 3;
    if ((form === 1 && !register) || (form === 2 && register)) return 0;
    i += n;
  }
  i += immediateBytes(immediate, operand16);
  if (rel !== 0) {
    if (i + rel > end) return 0;
    quick.displacement =
      rel === 1
        ? (bytes[i]! << 24) >> 24
        : bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
    i += rel;
  }
  const length = i - start;
  return i <= end && length <= 15 ? length : 0;
}

/** An instruction of the 0F map (`at` is past 0F): its length, or 0. */
function twoByte(
  bytes: Uint8Array,
  start: number,
  at: number,
  end: number,
  operand16: boolean,
  rep: number,
  lock: boolean,
): number {
  if (at >= end) return 0;
  const op = bytes[at]!;
  const i = at + 1;
  const lockable = lock ? LOCKABLE_TWO_BYTE_REGS[op]! : 0xff;
  if (lockable === 0) return 0;
  const plain = rep === 0 && !operand16;
  const sse = rep === 0; // none or 66
  let immediate = NO_IMMEDIATE;
  let form = 0;
  let regs = 0xff;
  if (op === 0x05 || op === 0x0b || op === 0x31 || op === 0xa2) {
    // syscall, ud2, rdtsc, cpuid
    return plain ? finish(bytes, start, i, end, false, regs, 0, 0, false, 0) : 0;
  }
  if (op >= 0x80 && op <= 0x8f) {
    if (operand16) return 0;
    quick.flow = QUICK_FLOW.jcc;
    return finish(bytes, start, i, end, false, regs, 0, 0, false, 4);
  }
  if (op >= 0xc8 && op <= 0xcf) {
    return rep === 0 ? finish(bytes, start, i, end, false, regs, 0, 0, false, 0) : 0;
  }
  if (op === 0x1e || op === 0x1f || op === 0x10 || op === 0x11 || op === 0x14 || op === 0x15) {
    // endbr/nop, movups/movss/movupd/movsd, unpcklps/unpckhps(pd)
    if ((op === 0x14 || op === 0x15) && !sse) return 0;
  } else if (op === 0x12 || op === 0x16) {
    if (operand16) form = 2;
  } else if (op === 0x13 || op === 0x17 || op === 0x2b || op === 0xe7 || op === 0xc3) {
    if (op !== 0xc3 && !sse) return 0;
    if (op === 0xc3 && !plain) return 0;
    if (op === 0xe7 && !sse) return 0;
    form = 2;
  } else if (op === 0x18) {
    if (rep !== 0) return 0;
    form = 2;
    regs = 0x0f;
  } else if (op >= 0x28 && op <= 0x2f) {
    if ((op === 0x28 || op === 0x29 || op === 0x2e || op === 0x2f) && !sse) return 0;
  } else if (op >= 0x40 && op <= 0x4f) {
    // cmovcc
  } else if (op === 0x50) {
    if (!sse) return 0;
    form = 1;
  } else if (op === 0x51 || (op >= 0x58 && op <= 0x5a) || (op >= 0x5c && op <= 0x5f)) {
    // every prefix
  } else if (op === 0x52 || op === 0x53) {
    if (operand16 || rep === 0xf2) return 0;
  } else if (op >= 0x54 && op <= 0x57) {
    if (!sse) return 0;
  } else if (op === 0x5b) {
    if (rep === 0xf2) return 0;
  } else if (op >= 0x60 && op <= 0x6f) {
    if (op === 0x6f) {
      if (rep === 0xf2) return 0;
    } else if (!sse) {
      return 0;
    }
    if ((op === 0x6c || op === 0x6d) && !operand16) return 0;
  } else if (op === 0x70) {
    immediate = IMM8;
  } else if (op >= 0x71 && op <= 0x73) {
    if (!sse) return 0;
    immediate = IMM8;
    form = 1;
    regs = op === 0x73 ? (operand16 ? 0xcc : 0x44) : 0x54;
  } else if (op >= 0x74 && op <= 0x76) {
    if (!sse) return 0;
  } else if (op === 0x7e || op === 0x7f) {
    if (rep === 0xf2 || (op === 0x7e && rep === 0xf3 && operand16)) return 0;
  } else if (op >= 0x90 && op <= 0x9f) {
    // setcc
    if (rep !== 0) return 0;
  } else if (
    op === 0xa3 ||
    op === 0xab ||
    op === 0xb3 ||
    op === 0xbb ||
    op === 0xa5 ||
    op === 0xad ||
    op === 0xaf ||
    op === 0xb0 ||
    op === 0xb1 ||
    op === 0xb6 ||
    op === 0xb7 ||
    op === 0xbe ||
    op === 0xbf ||
    op === 0xc0 ||
    op === 0xc1
  ) {
    if (rep !== 0) return 0;
  } else if (op === 0xbc || op === 0xbd) {
    if (rep === 0xf2) return 0;
  } else if (op === 0xb8) {
    if (rep !== 0xf3) return 0;
  } else if (op === 0xa4 || op === 0xac) {
    if (rep !== 0) return 0;
    immediate = IMM8;
  } else if (op === 0xba) {
    if (rep !== 0) return 0;
    immediate = IMM8;
    regs = 0xf0;
  } else if (op === 0xc2) {
    immediate = IMM8;
  } else if (op === 0xc4) {
    if (!sse) return 0;
    immediate = IMM8;
  } else if (op === 0xc5) {
    if (!sse) return 0;
    immediate = IMM8;
    form = 1;
  } else if (op === 0xc6) {
    if (!sse) return 0;
    immediate = IMM8;
  } else if (op === 0xd6) {
    if (!operand16 || rep !== 0) return 0;
  } else if (op === 0xd7 || op === 0xf7) {
    if (!sse) return 0;
    form = 1;
  } else if (op >= 0xd1 && op <= 0xfe && op !== 0xe6 && op !== 0xf0) {
    if (!sse) return 0;
  } else {
    return 0;
  }
  if (lock) {
    regs &= lockable;
    form = 2;
  }
  return finish(bytes, start, i, end, true, regs, form, immediate, false, 0);
}
