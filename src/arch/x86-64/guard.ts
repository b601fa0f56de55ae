/**
 * Guards for a ptrace engine's breakpoints, so that it counts every hit beside another
 * tracer's breakpoint on the same instruction (a kernel uprobe: bpftrace, perf, the kernel
 * engines). Whoever owns the int3 at an address gets its trap: the kernel's uprobes take
 * every trap at an address where one of theirs is registered, run their own handlers, run
 * the instruction (emulated, or out of line from their copy of the file's bytes) and go on
 * at the next instruction. A second breakpoint there, the guard, sees those passages.
 *
 * The engine's own passages must not meet the guard: its slot runs the probed instruction
 * and the one after it, then jumps past both (the pair slot). So the guard traps only when
 * something else ran the probed instruction, and its registers, with that instruction's
 * effect taken back (reverseEffect()), are those the probe would have seen.
 *
 * Pure: bytes in, bytes and numbers out.
 */
import { decodeInstructions } from './decode.js';
import { type Iced, type IcedInstruction, loadIced } from './iced.js';
import { CONDITIONS, jumpBack, planXol, XOL_SLOT_BYTES } from './xol.js';

/** What the probed instruction did to the registers, to take back at the guard. */
export interface ReversibleEffect {
  /** Added to %rsp after the instruction gives %rsp before it. */
  readonly rspDelta: bigint;
}

/** A slot that runs two instructions, then jumps back past both. */
export interface PairSlot {
  readonly slotBytes: Uint8Array;
  /**
   * Where each instruction starts in the slot, and the original address it stands for; the
   * last entry is the jump back, standing for the address after the pair.
   */
  readonly slotMap: readonly { readonly slotOffset: number; readonly vaddr: bigint }[];
  /** The lengths of the two instructions. */
  readonly lengths: readonly [number, number];
}

/**
 * How to see the registers as they were before the instruction at bytes[0] ran, from those
 * after it: for an instruction that writes no general register, or only %rsp by a known
 * amount (push, sub/add of an immediate, lea off %rsp). Memory it wrote stays written (it
 * ran once, as it should); flags at a probe mean nothing. Anything else: why not.
 */
export function reverseEffect(bytes: Uint8Array, vaddr: bigint): ReversibleEffect | string {
  return withInstruction(bytes, vaddr, (iced, instruction) => {
    const { Mnemonic, OpKind, Register, FlowControl } = iced;
    const text = decodeInstructions(bytes, vaddr, { maxCount: 1 })[0]?.text ?? '?';
    if (instruction.flowControl !== FlowControl.Next) return `"${text}" is a branch`;
    if (instruction.isSaveRestoreInstruction) return `"${text}" restores registers`;
    const cannot = (what: string) => `"${text}" ${what}, which cannot be taken back`;
    const written = writtenBy(iced, instruction).registers;
    const other = written.find((register) => register !== Register.RSP);
    if (other !== undefined) {
      return cannot(`writes ${(Register[other] ?? 'a register').toLowerCase()}`);
    }
    if (written.length === 0) return { rspDelta: 0n };
    const rsp = (operand: number) =>
      instruction.opKind(operand) === OpKind.Register &&
      instruction.opRegister(operand) === Register.RSP;
    const immediate = (operand: number): bigint | undefined => {
      const kind = instruction.opKind(operand);
      if (
        kind === OpKind.Immediate8to64 ||
        kind === OpKind.Immediate32to64 ||
        kind === OpKind.Immediate8 ||
        kind === OpKind.Immediate32
      ) {
        return BigInt.asIntN(64, instruction.immediate(operand));
      }
      return undefined;
    };
    const moves = cannot('moves %rsp by an amount not known here');
    switch (instruction.mnemonic) {
      case Mnemonic.Push:
        // 8 bytes, unless a 16-bit push (0x66), which no compiler emits.
        return instruction.stackPointerIncrement === -8 ? { rspDelta: 8n } : moves;
      case Mnemonic.Sub:
      case Mnemonic.Add: {
        const value = rsp(0) ? immediate(1) : undefined;
        if (value === undefined) return moves;
        return { rspDelta: instruction.mnemonic === Mnemonic.Sub ? value : -value };
      }
      case Mnemonic.Lea:
        if (
          rsp(0) &&
          instruction.memoryBase === Register.RSP &&
          instruction.memoryIndex === Register.None
        ) {
          return { rspDelta: -BigInt.asIntN(64, instruction.memoryDisplacement) };
        }
        return moves;
      default:
        return moves;
    }
  });
}

/**
 * Why a probe on the instruction after the one at bytes[0] would not see what a probe on it
 * sees, or undefined when it would: the instruction falls through to the next (no branch,
 * nothing that faults in user space) and writes no
 * general register (arguments, %rsp) and no memory (the stack, what arguments point at),
 * only vector, mask or flag registers (`vpbroadcastb %esi,%zmm16`, `vmovd %esi,%xmm0`,
 * `vpxor %xmm0,%xmm0,%xmm0`), which no fetch reads at a function's entry.
 */
export function changesCallState(bytes: Uint8Array, vaddr: bigint): string | undefined {
  const why = withInstruction(bytes, vaddr, (iced, instruction) => {
    const { FlowControl, Register, RegisterExt } = iced;
    if (instruction.flowControl !== FlowControl.Next) return 'it is a branch';
    // hlt, cli, in, out...: the program does not run on past it.
    if (instruction.isPrivileged) return 'it faults in user space';
    if (instruction.isSaveRestoreInstruction || instruction.isStackInstruction) {
      return 'it changes the stack';
    }
    const written = writtenBy(iced, instruction);
    if (written.memory) return 'it writes memory';
    const general = written.registers.find((register) => RegisterExt.isGPR(register));
    if (general !== undefined) {
      return `it writes %${(Register[general] ?? 'a register').toLowerCase()}`;
    }
    return KEPT;
  });
  return why === KEPT ? undefined : why;
}

const KEPT = 'kept';

/** What iced's InstructionInfo.usedRegisters() holds (usedMemory()'s have `access` too). */
interface IcedUsedRegister {
  readonly register: number;
  readonly access: number;
  free(): void;
}

/** The registers an instruction writes (iced's Register values), and whether it writes memory. */
export function writtenBy(
  iced: Iced,
  instruction: IcedInstruction,
): { registers: number[]; memory: boolean } {
  const { OpAccess } = iced;
  const writes = (access: number) =>
    access === OpAccess.Write ||
    access === OpAccess.CondWrite ||
    access === OpAccess.ReadWrite ||
    access === OpAccess.ReadCondWrite;
  const registers: number[] = [];
  let memory = false;
  const factory = new iced.InstructionInfoFactory();
  try {
    const info = factory.info(instruction);
    try {
      for (const used of info.usedRegisters() as IcedUsedRegister[]) {
        if (writes(used.access)) registers.push(used.register);
        used.free();
      }
      for (const used of info.usedMemory() as { access: number; free(): void }[]) {
        if (writes(used.access)) memory = true;
        used.free();
      }
    } finally {
      info.free();
    }
  } finally {
    factory.free();
  }
  return { registers, memory };
}

/**
 * A slot at `slotVaddr` that runs the instruction at `vaddr` (bytes[0]) and the one after it
 * (both relocated as planXol() would, or the second a conditional jump re-aimed from the
 * slot), then jumps to the address after both. Why not, when it cannot: either instruction
 * cannot run there, or the slot would not hold them.
 */
export function planPairSlot(
  bytes: Uint8Array,
  vaddr: bigint,
  slotVaddr: bigint,
): PairSlot | string {
  const first = planXol(bytes, vaddr, slotVaddr);
  if (first.kind !== 'relocate') {
    return first.kind === 'refuse' ? first.reason : `"${first.text}" is a branch`;
  }
  const length1 = first.length;
  const rest = bytes.subarray(length1);
  if (rest.length === 0) return 'the instruction after it is not known';
  const vaddr2 = vaddr + BigInt(length1);
  const slot2 = slotVaddr + BigInt(length1);
  const second = planXol(rest, vaddr2, slot2);
  const after = vaddr2 + BigInt(second.length);
  // The second instruction as it runs in the slot (the jump back comes after it).
  let moved: Uint8Array;
  if (second.kind === 'relocate') {
    moved = second.slotBytes.subarray(0, second.length);
  } else if (second.kind === 'emulate' && second.emulation.kind === 'jcc') {
    // A conditional jump re-aimed from the slot at the same target (jcc rel32).
    const jcc = conditionalJump(second.emulation.condition, slot2, second.emulation.target);
    if (jcc === undefined) {
      return 'its next instruction, a conditional jump, cannot reach its target from the slot';
    }
    moved = jcc;
  } else {
    return second.kind === 'refuse'
      ? `its next instruction "${second.text}" cannot run out of line: ${second.reason}`
      : `its next instruction "${second.text}" is a branch`;
  }
  const backAt = length1 + moved.length;
  const back = jumpBack(slotVaddr + BigInt(backAt), after);
  const slotBytes = new Uint8Array(backAt + back.length);
  slotBytes.set(first.slotBytes.subarray(0, length1));
  slotBytes.set(moved, length1);
  slotBytes.set(back, backAt);
  if (slotBytes.length > XOL_SLOT_BYTES) return 'the two instructions do not fit in one slot';
  return {
    slotBytes,
    slotMap: [
      { slotOffset: 0, vaddr },
      { slotOffset: length1, vaddr: vaddr2 },
      { slotOffset: backAt, vaddr: after },
    ],
    lengths: [length1, second.length],
  };
}

/** `jcc rel32` at `at` to `target` (0f 80+cc), or undefined beyond ±2 GiB. */
function conditionalJump(condition: string, at: bigint, target: bigint): Uint8Array | undefined {
  const cc = CONDITIONS.indexOf(condition as (typeof CONDITIONS)[number]);
  const rel = BigInt.asIntN(64, target - (at + 6n));
  if (cc < 0 || rel < -(1n << 31n) || rel >= 1n << 31n) return undefined;
  const bytes = new Uint8Array(6);
  bytes[0] = 0x0f;
  bytes[1] = 0x80 + cc;
  new DataView(bytes.buffer).setInt32(2, Number(rel), true);
  return bytes;
}

/** Decode the instruction at bytes[0] with iced and use it (freed after); why not, when invalid. */
export function withInstruction<T>(
  bytes: Uint8Array,
  vaddr: bigint,
  use: (iced: Iced, instruction: IcedInstruction) => T | string,
): T | string {
  const iced = loadIced();
  const decoder = new iced.Decoder(64, bytes.subarray(0, 15), iced.DecoderOptions.None);
  try {
    decoder.ip = vaddr;
    const instruction = decoder.decode();
    try {
      if (instruction.isInvalid) return 'the bytes are not a valid instruction';
      return use(iced, instruction);
    } finally {
      instruction.free();
    }
  } finally {
    decoder.free();
  }
}
