/**
 * Execute-out-of-line (XOL) for a ptrace engine: what to do with the instruction a breakpoint
 * displaced, so that the thread that hit the breakpoint goes on without a second stop.
 *
 * Like the kernel's x86 uprobes (arch/x86/kernel/uprobes.c, `arch_uprobe_analyze_insn`), each
 * instruction is analysed once, when the probe is placed, and gets one of three strategies:
 *
 * - relocate: the instruction is copied to an XOL slot (`slotVaddr`, in an executable page of
 *   the tracee), its %rip-relative operand, if any, re-aimed at the same absolute address, and
 *   followed by a jump back to the instruction after the original. The tracer sets %rip to the
 *   slot and lets the thread run. This fits every instruction whose effect does not depend on
 *   where it runs, once its %rip-relative displacement is fixed. Unlike the kernel, which
 *   single-steps the slot and fixes things up after one trap, nothing here runs after the
 *   slot, so a slot's bytes must be complete: no fix-ups;
 * - emulate: branches, calls and returns depend on where they run (a call pushes its own
 *   address; a relative branch is relative to it). The tracer does what they would do to the
 *   registers (and, for a call, to the stack) and never runs them;
 * - refuse: the instruction cannot be run elsewhere faithfully, or is not worth trying to.
 *
 * Consequences for the engine:
 * - a thread can stay inside a slot for a long time: blocked in a relocated `syscall`, or
 *   running a signal handler whose frame returns into the slot. A slot must stay mapped and
 *   unchanged while the probe exists (per probe, not per thread as in the kernel, whose
 *   single-step keeps each thread in its slot for one instruction only). Its bytes depend only
 *   on the instruction, `vaddr` and `slotVaddr`, so every thread can share one slot;
 * - a fault raised by a relocated instruction (a bad pointer in `mov (%rax),%rbx`) is reported
 *   at the slot's address, not the probed one: the signal's %rip, a core dump, a backtrace;
 * - emulated calls and returns use the ordinary stack only. In a process running with a CET
 *   shadow stack, the matching real `ret` would then fault; the engine would have to push and
 *   pop the shadow stack too (its pointer is in the NT_X86_SHSTK regset), or refuse.
 */
import { InternalError } from '../../errors/index.js';
import { type DecodedInstruction, decodeInstructions, MAX_INSTRUCTION_LENGTH } from './decode.js';
import { type Iced, type IcedInstruction, loadIced } from './iced.js';

/** The registers an emulation reads and writes (a subset of user_regs_struct, as bigints). */
export interface XolRegisters {
  rip: bigint;
  rsp: bigint;
  rflags: bigint;
  rax: bigint;
  rbx: bigint;
  rcx: bigint;
  rdx: bigint;
  rsi: bigint;
  rdi: bigint;
  rbp: bigint;
  r8: bigint;
  r9: bigint;
  r10: bigint;
  r11: bigint;
  r12: bigint;
  r13: bigint;
  r14: bigint;
  r15: bigint;
  fsBase: bigint;
  gsBase: bigint;
}

type GeneralRegister = Exclude<keyof XolRegisters, 'rip' | 'rflags' | 'fsBase' | 'gsBase'>;

/** The conditions of `jcc`, named as in the mnemonics (`jae` is `ae`), in opcode order. */
export const CONDITIONS = [
  'o',
  'no',
  'b',
  'ae',
  'e',
  'ne',
  'be',
  'a',
  's',
  'ns',
  'p',
  'np',
  'l',
  'ge',
  'le',
  'g',
] as const;

type Condition = (typeof CONDITIONS)[number];

/** Where an indirect `call`/`jmp` takes its target from. */
type IndirectOperand =
  | { readonly kind: 'register'; readonly register: GeneralRegister }
  | {
      readonly kind: 'memory';
      /** An fs or gs segment override adds that segment's base; other segments have base 0. */
      readonly segment: 'fs' | 'gs' | undefined;
      readonly base: GeneralRegister | undefined;
      readonly index: GeneralRegister | undefined;
      readonly scale: 1 | 2 | 4 | 8;
      /**
       * The displacement, sign-extended; for a %rip-relative operand, the absolute address it
       * refers to (%rip folded in at planning time, with no base or index).
       */
      readonly displacement: bigint;
      /** 32 with an address-size prefix (0x67): the address is computed modulo 2^32. */
      readonly addressSize: 64 | 32;
    };

/**
 * An instruction the tracer carries out itself instead of running it. Addresses are absolute:
 * `next` is the address of the following instruction (vaddr + length), where a branch not
 * taken goes, and where a call returns.
 */
export type Emulation =
  /** `jmp rel8/rel32`. */
  | { readonly kind: 'jmp'; readonly target: bigint }
  /** `call rel32`: push `next`, go to `target`. */
  | { readonly kind: 'call'; readonly target: bigint; readonly next: bigint }
  /** `jcc rel8/rel32`, by the condition on RFLAGS. */
  | {
      readonly kind: 'jcc';
      readonly condition: Condition;
      readonly target: bigint;
      readonly next: bigint;
    }
  /** `loop`, `loope`, `loopne`: decrement %rcx (flags unchanged), branch while it is not zero (and ZF is 1 / 0). */
  | {
      readonly kind: 'loop';
      readonly variant: 'loop' | 'loope' | 'loopne';
      readonly target: bigint;
      readonly next: bigint;
    }
  /** `jrcxz` (64) and `jecxz` (32, with an address-size prefix): branch when the count is zero. */
  | {
      readonly kind: 'jrcxz';
      readonly countBits: 64 | 32;
      readonly target: bigint;
      readonly next: bigint;
    }
  /** `ret`, `ret $imm16`: pop the target, then release `releaseBytes` more bytes of stack. */
  | { readonly kind: 'ret'; readonly releaseBytes: number }
  /** `jmp *%reg`, `jmp *mem`. */
  | { readonly kind: 'jmp-indirect'; readonly operand: IndirectOperand }
  /** `call *%reg`, `call *mem`: the target is read before `next` is pushed. */
  | { readonly kind: 'call-indirect'; readonly operand: IndirectOperand; readonly next: bigint };

export type XolPlan =
  | {
      readonly kind: 'relocate';
      readonly length: number;
      readonly text: string;
      /** Bytes to write at slotVaddr: the re-encoded instruction then the jump back. */
      readonly slotBytes: Uint8Array;
    }
  | {
      readonly kind: 'emulate';
      readonly length: number;
      readonly text: string;
      readonly emulation: Emulation;
    }
  | {
      readonly kind: 'refuse';
      readonly length: number;
      readonly text: string;
      readonly reason: string;
    };

/** What an emulation does to the thread: the registers after it, and at most one 8-byte memory write (a call's pushed return address). */
export interface EmulationResult {
  readonly regs: XolRegisters;
  readonly write?: { readonly vaddr: bigint; readonly value: bigint };
}

/** `jmp rel32`. */
const JMP_REL32_BYTES = 5;
/** `jmp *0x0(%rip)` (ff 25 00 00 00 00) then the 8-byte target it reads. */
const JMP_ABSOLUTE_BYTES = 14;

/**
 * The biggest slotBytes planXol can produce (an instruction re-encoded, up to 15 bytes, plus
 * the 14-byte absolute jump), rounded up to 32; slots are this size.
 */
export const XOL_SLOT_BYTES = 32;

const ADDRESS_LIMIT = 1n << 64n;
const INT32_MIN = -(1n << 31n);
const INT32_MAX = (1n << 31n) - 1n;
const TOO_FAR =
  'the XOL page must be within ±2 GiB of the code: a %rip-relative operand cannot reach its target from the slot';

function hex(value: bigint): string {
  return `0x${value.toString(16)}`;
}

function fitsInt32(value: bigint): boolean {
  return value >= INT32_MIN && value <= INT32_MAX;
}

function u64(value: bigint): bigint {
  return BigInt.asUintN(64, value);
}

/** The signed distance from `from` to `to`, as 64-bit %rip arithmetic sees it (it wraps). */
function distance(from: bigint, to: bigint): bigint {
  return BigInt.asIntN(64, to - from);
}

/**
 * The jump back from a slot to `to`, placed at `at`: `jmp rel32` when `to` is within ±2 GiB,
 * else `jmp *0x0(%rip)` reading the absolute target from the 8 bytes after it (which clobbers
 * no register, unlike `movabs` + `jmp *%reg`).
 */
export function jumpBack(at: bigint, to: bigint): Uint8Array {
  const rel = distance(at + BigInt(JMP_REL32_BYTES), to);
  if (fitsInt32(rel)) {
    const bytes = new Uint8Array(JMP_REL32_BYTES);
    bytes[0] = 0xe9;
    new DataView(bytes.buffer).setInt32(1, Number(rel), true);
    return bytes;
  }
  const bytes = new Uint8Array(JMP_ABSOLUTE_BYTES);
  bytes.set([0xff, 0x25, 0, 0, 0, 0]);
  new DataView(bytes.buffer).setBigUint64(6, to, true);
  return bytes;
}

const LEGACY_PREFIXES = new Set([0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3]);

/** The legacy prefixes before the opcode (REX bytes skipped). */
function legacyPrefixes(bytes: Uint8Array): number[] {
  const prefixes: number[] = [];
  for (const byte of bytes) {
    if (LEGACY_PREFIXES.has(byte)) prefixes.push(byte);
    else if ((byte & 0xf0) !== 0x40) break;
  }
  return prefixes;
}

const GENERAL_REGISTERS: readonly (readonly [string, string, GeneralRegister])[] = [
  ['RAX', 'EAX', 'rax'],
  ['RCX', 'ECX', 'rcx'],
  ['RDX', 'EDX', 'rdx'],
  ['RBX', 'EBX', 'rbx'],
  ['RSP', 'ESP', 'rsp'],
  ['RBP', 'EBP', 'rbp'],
  ['RSI', 'ESI', 'rsi'],
  ['RDI', 'EDI', 'rdi'],
  ['R8', 'R8D', 'r8'],
  ['R9', 'R9D', 'r9'],
  ['R10', 'R10D', 'r10'],
  ['R11', 'R11D', 'r11'],
  ['R12', 'R12D', 'r12'],
  ['R13', 'R13D', 'r13'],
  ['R14', 'R14D', 'r14'],
  ['R15', 'R15D', 'r15'],
];

let registerNames: ReadonlyMap<number, GeneralRegister> | undefined;

/** Our name for an iced 64- or 32-bit general register (32-bit ones appear in addr32 operands). */
function generalRegister(iced: Iced, register: number): GeneralRegister | undefined {
  if (registerNames === undefined) {
    const names = new Map<number, GeneralRegister>();
    const byName = iced.Register as unknown as Record<string, number>;
    for (const [wide, narrow, name] of GENERAL_REGISTERS) {
      names.set(byName[wide]!, name);
      names.set(byName[narrow]!, name);
    }
    registerNames = names;
  }
  return registerNames.get(register);
}

let conditionNames: ReadonlyMap<number, Condition> | undefined;

function condition(iced: Iced, code: number): Condition | undefined {
  if (conditionNames === undefined) {
    const names = new Map<number, Condition>();
    for (const name of CONDITIONS) names.set(iced.ConditionCode[name], name);
    conditionNames = names;
  }
  return conditionNames.get(code);
}

/** What planning needs to know about the instruction, besides iced's view of it. */
interface Site {
  readonly bytes: Uint8Array;
  readonly vaddr: bigint;
  readonly slotVaddr: bigint;
  readonly decoded: DecodedInstruction;
}

type Outcome =
  | { readonly kind: 'relocate'; readonly slotBytes: Uint8Array }
  | { readonly kind: 'emulate'; readonly emulation: Emulation }
  | { readonly kind: 'refuse'; readonly reason: string };

function refuse(reason: string): Outcome {
  return { kind: 'refuse', reason };
}

/**
 * Plan the displaced instruction that starts at bytes[0] (bytes: at least the instruction, up
 * to 15; more are ignored), at `vaddr`, to run from an XOL slot of XOL_SLOT_BYTES at
 * `slotVaddr`. The bytes are the original code, not the breakpoint. Pure: no I/O.
 *
 * Returns a `refuse` plan for code it will not move; throws InternalError only when called
 * wrongly (no bytes, an address outside the 64-bit space).
 */
export function planXol(bytes: Uint8Array, vaddr: bigint, slotVaddr: bigint): XolPlan {
  const window = bytes.subarray(0, MAX_INSTRUCTION_LENGTH);
  if (window.length === 0) {
    throw new InternalError(`Cannot plan XOL for the instruction at ${hex(vaddr)}: no bytes given`);
  }
  if (vaddr < 0n || vaddr + BigInt(window.length) > ADDRESS_LIMIT) {
    throw new InternalError(
      `Cannot plan XOL for the instruction at ${hex(vaddr)}: not a 64-bit address`,
    );
  }
  if (slotVaddr < 0n || slotVaddr + BigInt(XOL_SLOT_BYTES) > ADDRESS_LIMIT) {
    throw new InternalError(
      `Cannot plan XOL for the instruction at ${hex(vaddr)}: slot ${hex(slotVaddr)} is not a 64-bit address`,
    );
  }
  const [decoded] = decodeInstructions(window, vaddr, { maxCount: 1 });
  if (decoded === undefined) {
    throw new InternalError(
      `Cannot plan XOL for the instruction at ${hex(vaddr)}: nothing decoded`,
    );
  }
  const iced = loadIced();
  const owned: { free(): void }[] = [];
  const keep = <T extends { free(): void }>(object: T): T => {
    owned.push(object);
    return object;
  };
  let outcome: Outcome;
  try {
    const decoder = keep(new iced.Decoder(64, window, iced.DecoderOptions.None));
    decoder.ip = vaddr;
    const instruction = keep(decoder.decode());
    if (instruction.isInvalid || decoded.invalid) {
      outcome = refuse(
        endsEarly(iced, window)
          ? `the ${window.length} bytes given end before the instruction does`
          : 'the bytes are not a valid x86-64 instruction',
      );
    } else {
      outcome = classify(iced, instruction, { bytes: window, vaddr, slotVaddr, decoded }, () =>
        keep(decoder.getConstantOffsets(instruction)),
      );
    }
  } finally {
    for (const object of owned.reverse()) object.free();
  }
  const { length, text } = decoded;
  switch (outcome.kind) {
    case 'relocate':
      return { kind: 'relocate', length, text, slotBytes: outcome.slotBytes };
    case 'emulate':
      return { kind: 'emulate', length, text, emulation: outcome.emulation };
    case 'refuse':
      return { kind: 'refuse', length, text, reason: outcome.reason };
  }
}

/**
 * Whether invalid bytes are only the start of a longer instruction: padded with zeros to the
 * longest length, they decode as one that ends after them. (iced's own "no more bytes" error
 * also comes for opcodes that are invalid whatever follows, such as 0x06.)
 */
function endsEarly(iced: Iced, bytes: Uint8Array): boolean {
  if (bytes.length >= MAX_INSTRUCTION_LENGTH) return false;
  const padded = new Uint8Array(MAX_INSTRUCTION_LENGTH);
  padded.set(bytes);
  const decoder = new iced.Decoder(64, padded, iced.DecoderOptions.None);
  try {
    const instruction = decoder.decode();
    try {
      return !instruction.isInvalid && instruction.length > bytes.length;
    } finally {
      instruction.free();
    }
  } finally {
    decoder.free();
  }
}

/** Pick the strategy by iced's flow-control class of the instruction. */
function classify(
  iced: Iced,
  instruction: IcedInstruction,
  site: Site,
  constantOffsets: () => { readonly displacementOffset: number; readonly displacementSize: number },
): Outcome {
  const { FlowControl, Mnemonic } = iced;
  const flow = instruction.flowControl;
  const mnemonic = instruction.mnemonic;
  const next = u64(site.vaddr + BigInt(instruction.length));
  const branch =
    flow === FlowControl.UnconditionalBranch ||
    flow === FlowControl.ConditionalBranch ||
    flow === FlowControl.IndirectBranch ||
    flow === FlowControl.Call ||
    flow === FlowControl.IndirectCall ||
    flow === FlowControl.Return;
  // Intel ignores an operand-size prefix on near branches in 64-bit mode; AMD honours it and
  // truncates %rip (and the pushed or popped address) to 16 bits. Compilers never emit it.
  if (branch && mnemonic !== Mnemonic.Syscall && legacyPrefixes(site.bytes).includes(0x66)) {
    return refuse(
      'a branch with an operand-size prefix (0x66) behaves differently on Intel and AMD processors',
    );
  }
  switch (flow) {
    case FlowControl.Next:
      return planNext(iced, instruction, site, constantOffsets);
    case FlowControl.UnconditionalBranch:
      // Direct far jumps do not exist in 64-bit mode; iced would call them invalid.
      if (!instruction.isJmpShortOrNear) return refuse('a far jump');
      return { kind: 'emulate', emulation: { kind: 'jmp', target: instruction.nearBranchTarget } };
    case FlowControl.ConditionalBranch:
      return planConditional(iced, instruction, next);
    case FlowControl.Call:
      if (instruction.isCallNear) {
        return {
          kind: 'emulate',
          emulation: { kind: 'call', target: instruction.nearBranchTarget, next },
        };
      }
      // syscall returns to the instruction after it (the jump back in the slot), so it can
      // run there. It leaves that slot address in %rcx, which the syscall ABI says is
      // clobbered anyway. A restarted system call re-runs the syscall in the slot: fine,
      // slots stay while the probe does.
      if (mnemonic === Mnemonic.Syscall) return relocate(site, instruction.length);
      // In a 64-bit process, Linux returns from sysenter to the 32-bit vDSO, not to the next
      // instruction: no 64-bit code uses it.
      if (mnemonic === Mnemonic.Sysenter) {
        return refuse('sysenter, which does not return to the next instruction in 64-bit code');
      }
      return refuse('a far call');
    case FlowControl.IndirectBranch:
    case FlowControl.IndirectCall: {
      if (instruction.isJmpFarIndirect || instruction.isCallFarIndirect) {
        return refuse(
          `a far ${flow === FlowControl.IndirectCall ? 'call' : 'jump'} through memory`,
        );
      }
      const addressSize = legacyPrefixes(site.bytes).includes(0x67) ? 32 : 64;
      const operand = indirectOperand(iced, instruction, addressSize);
      if (typeof operand === 'string') return refuse(operand);
      return {
        kind: 'emulate',
        emulation:
          flow === FlowControl.IndirectCall
            ? { kind: 'call-indirect', operand, next }
            : { kind: 'jmp-indirect', operand },
      };
    }
    case FlowControl.Return:
      if (instruction.code === iced.Code.Retnq) {
        return { kind: 'emulate', emulation: { kind: 'ret', releaseBytes: 0 } };
      }
      if (instruction.code === iced.Code.Retnq_imm16) {
        return {
          kind: 'emulate',
          emulation: { kind: 'ret', releaseBytes: instruction.immediate16 },
        };
      }
      if (mnemonic === Mnemonic.Retf) return refuse('a far return (lret)');
      if (
        mnemonic === Mnemonic.Iret ||
        mnemonic === Mnemonic.Iretd ||
        mnemonic === Mnemonic.Iretq
      ) {
        return refuse('iret, a return from an interrupt that reloads cs and ss');
      }
      return refuse('a privileged return (sysret, sysexit), which faults in user space');
    case FlowControl.Interrupt:
      // int3 is what a probe is made of: placed over it, the original trap would be lost or
      // taken for a probe hit. int1 and int n raise a signal (or, int $0x80, make a 32-bit
      // system call) whose handler or core dump would see the slot's address; the kernel
      // refuses them too.
      if (mnemonic === Mnemonic.Int3) {
        return refuse('int3, the breakpoint instruction a probe itself is made of');
      }
      return refuse(
        'a software interrupt (int, int1), which would report the XOL slot as where it came from',
      );
    case FlowControl.XbeginXabortXend:
      // xbegin's abort address is relative to %rip, like a branch. It could be re-encoded
      // for the slot (the transaction would then take in the jump back), but TSX is off on
      // most current processors and nobody probes it: not done. xabort only means something
      // inside a transaction, which the breakpoint has already aborted: it runs anywhere.
      if (mnemonic === Mnemonic.Xbegin) {
        return refuse(
          'xbegin, whose %rip-relative abort address is not re-encoded (not supported)',
        );
      }
      return relocate(site, instruction.length);
    case FlowControl.Exception:
      // ud2 and friends exist to raise SIGILL; in the slot the signal would name the slot.
      return refuse(
        'an instruction that always traps (ud0, ud1, ud2), which would report the XOL slot as where it came from',
      );
    default:
      throw new InternalError(
        `Cannot plan XOL for "${site.decoded.text}": unknown flow control ${flow}`,
      );
  }
}

/** iced's mnemonics for port I/O. */
const PORT_IO: ReadonlySet<string> = new Set([
  'In',
  'Insb',
  'Insw',
  'Insd',
  'Out',
  'Outsb',
  'Outsw',
  'Outsd',
]);

/** Instructions that go on to the next one: relocate, fixing a %rip-relative operand. */
function planNext(
  iced: Iced,
  instruction: IcedInstruction,
  site: Site,
  constantOffsets: () => { readonly displacementOffset: number; readonly displacementSize: number },
): Outcome {
  if (instruction.isPrivileged) {
    // Port I/O works in user space after ioperm()/iopl(), and does not care where it runs.
    if (!PORT_IO.has(iced.Mnemonic[instruction.mnemonic] ?? '')) {
      return refuse(
        'a privileged instruction, which faults in user space and would report the XOL slot as where it came from',
      );
    }
  }
  const length = instruction.length;
  if (!instruction.isIpRelMemoryOperand) return relocate(site, length);

  // Keep every byte and change only the 32-bit displacement, so that the operand addresses
  // the same absolute target from the slot. The length stays, so an immediate after the
  // displacement (`cmpl $0x7,0x100(%rip)`) moves nothing: %rip-relative addresses count
  // from the end of the instruction, here and in the slot alike.
  const target = instruction.ipRelMemoryAddress;
  const offsets = constantOffsets();
  if (offsets.displacementSize !== 4) {
    throw new InternalError(
      `Cannot relocate "${site.decoded.text}": its %rip-relative displacement is ${offsets.displacementSize} bytes, not 4`,
    );
  }
  const end = site.slotVaddr + BigInt(length);
  // With an address-size prefix (0x67) the operand is %eip-relative and the address wraps at
  // 4 GiB: any slot reaches the target modulo 2^32.
  const addressSize32 = legacyPrefixes(site.bytes).includes(0x67);
  const displacement = addressSize32 ? BigInt.asIntN(32, target - end) : distance(end, target);
  if (!fitsInt32(displacement)) return refuse(TOO_FAR);
  // A copy (Uint8Array.from: a Buffer's slice() would share the caller's memory).
  const copy = Uint8Array.from(site.bytes.subarray(0, length));
  new DataView(copy.buffer).setInt32(offsets.displacementOffset, Number(displacement), true);
  checkRelocated(iced, instruction, copy, site, target);
  return relocate(site, length, copy);
}

/** The slot: the instruction (as is, or as re-encoded), then the jump back. */
function relocate(site: Site, length: number, instruction?: Uint8Array): Outcome {
  const code = instruction ?? site.bytes.subarray(0, length);
  const back = jumpBack(site.slotVaddr + BigInt(length), u64(site.vaddr + BigInt(length)));
  const slotBytes = new Uint8Array(code.length + back.length);
  slotBytes.set(code);
  slotBytes.set(back, code.length);
  return { kind: 'relocate', slotBytes };
}

/** Decode the re-encoded instruction at the slot: the same instruction, the same target. */
function checkRelocated(
  iced: Iced,
  original: IcedInstruction,
  copy: Uint8Array,
  site: Site,
  target: bigint,
): void {
  const decoder = new iced.Decoder(64, copy, iced.DecoderOptions.None);
  try {
    decoder.ip = site.slotVaddr;
    const moved = decoder.decode();
    try {
      if (
        moved.code !== original.code ||
        moved.length !== original.length ||
        !moved.isIpRelMemoryOperand ||
        moved.ipRelMemoryAddress !== target
      ) {
        throw new InternalError(
          `Cannot relocate "${site.decoded.text}" from ${hex(site.vaddr)} to ${hex(site.slotVaddr)}: the re-encoded instruction does not address ${hex(target)}`,
        );
      }
    } finally {
      moved.free();
    }
  } finally {
    decoder.free();
  }
}

/** jcc, loop, loope, loopne, jrcxz, jecxz. */
function planConditional(iced: Iced, instruction: IcedInstruction, next: bigint): Outcome {
  const { Code } = iced;
  const target = instruction.nearBranchTarget;
  const code = instruction.code;
  if (instruction.isJccShortOrNear) {
    const cc = condition(iced, instruction.conditionCode);
    if (cc === undefined) {
      throw new InternalError(
        `Cannot plan XOL for a jcc: unknown condition code ${instruction.conditionCode}`,
      );
    }
    return { kind: 'emulate', emulation: { kind: 'jcc', condition: cc, target, next } };
  }
  const loops: [number, 'loop' | 'loope' | 'loopne'][] = [
    [Code.Loop_rel8_64_RCX, 'loop'],
    [Code.Loope_rel8_64_RCX, 'loope'],
    [Code.Loopne_rel8_64_RCX, 'loopne'],
  ];
  for (const [loopCode, variant] of loops) {
    if (code === loopCode)
      return { kind: 'emulate', emulation: { kind: 'loop', variant, target, next } };
  }
  if (code === Code.Jrcxz_rel8_64) {
    return { kind: 'emulate', emulation: { kind: 'jrcxz', countBits: 64, target, next } };
  }
  if (code === Code.Jecxz_rel8_64) {
    return { kind: 'emulate', emulation: { kind: 'jrcxz', countBits: 32, target, next } };
  }
  // Loops that count in %ecx: whether the upper half of %rcx survives the decrement is not
  // something to guess; compilers do not emit them.
  if (instruction.isLoop || instruction.isLoopcc) {
    return refuse('a loop with an address-size prefix (0x67), which counts in %ecx');
  }
  return refuse('a conditional branch this engine does not know how to emulate');
}

/** The operand of `call *x` / `jmp *x`, or why it cannot be emulated. */
function indirectOperand(
  iced: Iced,
  instruction: IcedInstruction,
  addressSize: 64 | 32,
): IndirectOperand | string {
  const { OpKind, Register } = iced;
  if (instruction.op0Kind === OpKind.Register) {
    const register = generalRegister(iced, instruction.op0Register);
    if (register === undefined) return 'an indirect branch through a register that is not 64-bit';
    return { kind: 'register', register };
  }
  if (instruction.op0Kind !== OpKind.Memory) {
    return 'an indirect branch with an operand this engine does not know how to emulate';
  }
  const segmentRegister = instruction.memorySegment;
  const segment =
    segmentRegister === Register.FS ? 'fs' : segmentRegister === Register.GS ? 'gs' : undefined;
  const scale = instruction.memoryIndexScale;
  if (scale !== 1 && scale !== 2 && scale !== 4 && scale !== 8) {
    throw new InternalError(`Cannot plan XOL for an indirect branch: index scale ${scale}`);
  }
  if (instruction.isIpRelMemoryOperand) {
    return {
      kind: 'memory',
      segment,
      base: undefined,
      index: undefined,
      scale: 1,
      displacement: instruction.ipRelMemoryAddress,
      addressSize,
    };
  }
  let base: GeneralRegister | undefined;
  let index: GeneralRegister | undefined;
  if (instruction.memoryBase !== Register.None) {
    base = generalRegister(iced, instruction.memoryBase);
    if (base === undefined)
      return 'an indirect branch through memory with an unusual base register';
  }
  if (instruction.memoryIndex !== Register.None) {
    index = generalRegister(iced, instruction.memoryIndex);
    if (index === undefined)
      return 'an indirect branch through memory with an unusual index register';
  }
  return {
    kind: 'memory',
    segment,
    base,
    index,
    scale,
    displacement: BigInt.asIntN(addressSize, instruction.memoryDisplacement),
    addressSize,
  };
}

const CF = 1n << 0n;
const PF = 1n << 2n;
const ZF = 1n << 6n;
const SF = 1n << 7n;
const OF = 1n << 11n;

/** Whether `jcc` branches, from RFLAGS (Intel SDM vol. 2, Jcc, and its condition table). */
function conditionHolds(cc: Condition, rflags: bigint): boolean {
  const cf = (rflags & CF) !== 0n;
  const pf = (rflags & PF) !== 0n;
  const zf = (rflags & ZF) !== 0n;
  const sf = (rflags & SF) !== 0n;
  const of = (rflags & OF) !== 0n;
  switch (cc) {
    case 'o':
      return of;
    case 'no':
      return !of;
    case 'b':
      return cf;
    case 'ae':
      return !cf;
    case 'e':
      return zf;
    case 'ne':
      return !zf;
    case 'be':
      return cf || zf;
    case 'a':
      return !cf && !zf;
    case 's':
      return sf;
    case 'ns':
      return !sf;
    case 'p':
      return pf;
    case 'np':
      return !pf;
    case 'l':
      return sf !== of;
    case 'ge':
      return sf === of;
    case 'le':
      return zf || sf !== of;
    case 'g':
      return !zf && sf === of;
  }
}

function effectiveAddress(
  operand: Extract<IndirectOperand, { kind: 'memory' }>,
  regs: XolRegisters,
): bigint {
  let address = operand.displacement;
  if (operand.base !== undefined) address += regs[operand.base];
  if (operand.index !== undefined) address += regs[operand.index] * BigInt(operand.scale);
  address = BigInt.asUintN(operand.addressSize, address);
  if (operand.segment === 'fs') address += regs.fsBase;
  if (operand.segment === 'gs') address += regs.gsBase;
  return u64(address);
}

function branchTarget(
  operand: IndirectOperand,
  regs: XolRegisters,
  readU64: (vaddr: bigint) => bigint,
): bigint {
  if (operand.kind === 'register') return regs[operand.register];
  return u64(readU64(effectiveAddress(operand, regs)));
}

/**
 * Apply an emulation to registers; `readU64(vaddr)` reads the tracee's memory (for ret, and
 * for indirect call/jmp through memory) and may throw, which this lets through. Returns new
 * registers (a copy; the input is not modified) and, for a call, the return address to write
 * at the new %rsp: the caller writes it before setting the registers.
 */
export function emulate(
  emulation: Emulation,
  regs: XolRegisters,
  readU64: (vaddr: bigint) => bigint,
): EmulationResult {
  const after: XolRegisters = { ...regs };
  switch (emulation.kind) {
    case 'jmp':
      after.rip = emulation.target;
      return { regs: after };
    case 'call': {
      after.rsp = u64(regs.rsp - 8n);
      after.rip = emulation.target;
      return { regs: after, write: { vaddr: after.rsp, value: emulation.next } };
    }
    case 'jcc':
      after.rip = conditionHolds(emulation.condition, regs.rflags)
        ? emulation.target
        : emulation.next;
      return { regs: after };
    case 'loop': {
      // loop leaves the flags alone; loope/loopne read ZF as the instruction before left it.
      after.rcx = u64(regs.rcx - 1n);
      const zf = (regs.rflags & ZF) !== 0n;
      const taken =
        after.rcx !== 0n &&
        (emulation.variant === 'loop' || (emulation.variant === 'loope' ? zf : !zf));
      after.rip = taken ? emulation.target : emulation.next;
      return { regs: after };
    }
    case 'jrcxz': {
      const count = BigInt.asUintN(emulation.countBits, regs.rcx);
      after.rip = count === 0n ? emulation.target : emulation.next;
      return { regs: after };
    }
    case 'ret':
      after.rip = u64(readU64(regs.rsp));
      after.rsp = u64(regs.rsp + 8n + BigInt(emulation.releaseBytes));
      return { regs: after };
    case 'jmp-indirect':
      after.rip = branchTarget(emulation.operand, regs, readU64);
      return { regs: after };
    case 'call-indirect': {
      // The target is computed from the registers before the push (`call *0x8(%rsp)` reads
      // the old %rsp).
      after.rip = branchTarget(emulation.operand, regs, readU64);
      after.rsp = u64(regs.rsp - 8n);
      return { regs: after, write: { vaddr: after.rsp, value: emulation.next } };
    }
  }
}
