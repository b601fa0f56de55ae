/**
 * How the Linux kernel's x86 uprobes (arch/x86/kernel/uprobes.c, `arch_uprobe_analyze_insn`)
 * will treat a probe placed on one instruction. The kernel analyses the instruction once,
 * when the probe is installed, and picks one of three ways:
 *
 * - emulate: it does what the instruction would do itself (nops, `push %reg`, relative `jmp`,
 *   `call` and conditional jumps) and never runs it: about 0.5 µs per hit on this kind of
 *   machine;
 * - single-step: it copies the instruction to a page of its own (the XOL area), runs it there
 *   with the trap flag set and fixes %rip, the return address of a call, or a %rip-relative
 *   operand afterwards: a trap more per hit, about 16 µs in a virtual machine;
 * - refuse: registering the probe fails with ENOTSUPP (524).
 *
 * A fourth answer is ours, not the kernel's: `unsafe` is for instructions the kernel accepts
 * but mishandles. Its opcode checks look only at the opcode byte, so a VEX- or EVEX-encoded
 * instruction whose opcode byte equals a short jump (0x70-0x7f), `call` (0xe8) or `jmp` (0xe9,
 * 0xeb) is "emulated" as that branch with a zero displacement: the instruction is skipped
 * (`vmovdqu %ymm0,(%rdi)`, `vpcmpeqb`, `vpor`...), and for 0xe8 (`vpsubsb`) a return address
 * is pushed too. Checked on Linux 6.18: the probed instruction never ran. The same holds for
 * `xchg %eax,%r8d` (41 90) and VEX opcode 0x90 (`kmovw`) before Linux 6.19, which the kernel
 * skipped as nops. upscope must not place probes there.
 *
 * The rules follow the kernel's source, by version:
 * - all 6.x: prefixes, opcode tables, branch and push emulation as below;
 * - 6.16+: the kernel's own nop patterns of 1-8 bytes are emulated, besides opcode 0x90;
 * - 6.18+: a 5-byte nop is optimised after its first hit into a call to a trampoline;
 * - 6.19+: nops are recognised by form (nop, nopl, mov %reg,%reg, lea 0(%reg),%reg, jmp +0)
 *   instead of by opcode 0x90, so `pause` and `xchg %eax,%r8d` are no longer skipped.
 */
import type { DecodedInstruction } from './decode.js';

/**
 * `label` (refuse, unsafe) names the class of instruction in a few words (`lock prefix`,
 * `int3`), for summaries that count them; `reason` says why in a sentence.
 */
export type KernelHandling =
  | { strategy: 'emulate'; what: string }
  | { strategy: 'single-step'; what: string; ripRelative: boolean }
  | { strategy: 'refuse'; label: string; reason: string }
  | { strategy: 'unsafe'; what: string; label: string; reason: string };

export interface KernelHandlingOptions {
  /**
   * The kernel whose rules apply (host's `kernelVersion()`). Without it, the newest rules
   * known here apply (Linux 6.19).
   */
  readonly kernel?: { readonly major: number; readonly minor: number };
}

type Refusal = readonly [label: string, reason: string];

const INVALID_64: Refusal = ['invalid opcode', 'an opcode that is invalid in 64-bit mode'];
const PORT_IO: Refusal = ['port I/O', 'port I/O (in, out, ins, outs), which faults in user space'];

/**
 * One-byte opcodes the kernel refuses in 64-bit processes (its `good_insns_64` table), with a
 * label and the reason.
 */
const REFUSED_OPCODES: ReadonlyMap<number, Refusal> = new Map<number, Refusal>([
  ...[0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62].map(
    (op): [number, Refusal] => [op, INVALID_64],
  ),
  ...[0x82, 0x9a, 0xce, 0xd4, 0xd5, 0xd6, 0xea].map((op): [number, Refusal] => [op, INVALID_64]),
  ...[0x6c, 0x6d, 0x6e, 0x6f, 0xe4, 0xe5, 0xe6, 0xe7, 0xec, 0xed, 0xee, 0xef].map(
    (op): [number, Refusal] => [op, PORT_IO],
  ),
  [0xcc, ['int3', 'int3, the breakpoint instruction uprobes itself uses']],
  [0xcd, ['int N', 'int N, a software interrupt']],
  [0xcf, ['iret', 'iret']],
  [0xf1, ['int1', 'int1, a debug trap']],
  [0xf4, ['hlt', 'hlt, which faults in user space']],
  [0xfa, ['cli', 'cli, which faults in user space']],
  [0xfb, ['sti', 'sti, which faults in user space']],
]);

/** Legacy prefixes the kernel refuses (`is_prefix_bad`): label, what it is. */
const REFUSED_PREFIXES: ReadonlyMap<number, Refusal> = new Map<number, Refusal>([
  [0x26, ['es prefix', 'an es segment prefix (0x26)']],
  [0x2e, ['cs prefix', 'a cs segment prefix (0x2e), as in "cs nopw"']],
  [0x36, ['ss prefix', 'an ss segment prefix (0x36)']],
  [0x3e, ['ds prefix', 'a ds segment prefix (0x3e), which is also "notrack"']],
  [0xf0, ['lock prefix', 'a lock prefix (0xf0)']],
]);

const LEGACY_PREFIXES = new Set([0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3]);

/** The kernel's own nops for x86-64 (`x86_nops`, arch/x86/include/asm/nops.h), by length. */
const KERNEL_NOPS: readonly (readonly number[])[] = [
  [],
  [0x90],
  [0x66, 0x90],
  [0x0f, 0x1f, 0x00],
  [0x0f, 0x1f, 0x40, 0x00],
  [0x0f, 0x1f, 0x44, 0x00, 0x00],
  [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
  [0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
  [0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

const PAGE_SIZE = 4096n;

/** The parts of an instruction's encoding the kernel's rules look at. */
interface Layout {
  readonly prefixes: readonly number[];
  readonly rex: number;
  readonly encoding: 'legacy' | 'vex' | 'evex' | 'xop';
  /** `OPCODE1` in the kernel: the first opcode byte, or the opcode after a VEX/EVEX prefix. */
  readonly opcode1: number;
  readonly opcode2: number;
  readonly opcodeBytes: number;
  /** Offset of the ModRM byte (when the opcode has one). */
  readonly modrmOffset: number;
}

function parseLayout(bytes: Uint8Array): Layout | undefined {
  const prefixes: number[] = [];
  let rex = 0;
  let i = 0;
  for (; i < bytes.length; i++) {
    const byte = bytes[i]!;
    if (LEGACY_PREFIXES.has(byte)) {
      prefixes.push(byte);
      rex = 0; // a REX prefix counts only right before the opcode
    } else if ((byte & 0xf0) === 0x40) {
      rex = byte;
    } else {
      break;
    }
  }
  const first = bytes[i];
  if (first === undefined) return undefined;
  let encoding: Layout['encoding'] = 'legacy';
  let prefixLength = 0;
  if (first === 0xc5) prefixLength = 2;
  else if (first === 0xc4) prefixLength = 3;
  else if (first === 0x62) prefixLength = 4;
  else if (first === 0x8f && ((bytes[i + 1] ?? 0) & 0x1f) >= 8) prefixLength = 3;
  if (prefixLength > 0) {
    encoding = first === 0x62 ? 'evex' : first === 0x8f ? 'xop' : 'vex';
    const opcode1 = bytes[i + prefixLength];
    if (opcode1 === undefined) return undefined;
    return {
      prefixes,
      rex,
      encoding,
      opcode1,
      opcode2: 0,
      opcodeBytes: 1,
      modrmOffset: i + prefixLength + 1,
    };
  }
  let opcodeBytes = 1;
  let opcode2 = 0;
  if (first === 0x0f) {
    opcode2 = bytes[i + 1] ?? -1;
    if (opcode2 < 0) return undefined;
    opcodeBytes = opcode2 === 0x38 || opcode2 === 0x3a ? 3 : 2;
  }
  return {
    prefixes,
    rex,
    encoding,
    opcode1: first,
    opcode2,
    opcodeBytes,
    modrmOffset: i + opcodeBytes,
  };
}

type Era = 'before-6.16' | '6.16' | '6.18' | '6.19';

function eraOf(kernel: KernelHandlingOptions['kernel']): Era {
  if (kernel === undefined) return '6.19';
  const version = kernel.major * 1000 + kernel.minor;
  if (version >= 6019) return '6.19';
  if (version >= 6018) return '6.18';
  if (version >= 6016) return '6.16';
  return 'before-6.16';
}

function hexByte(byte: number): string {
  return `0x${byte.toString(16).padStart(2, '0')}`;
}

function sameBytes(bytes: Uint8Array, expected: readonly number[]): boolean {
  return bytes.length === expected.length && expected.every((byte, i) => bytes[i] === byte);
}

/**
 * The nops the kernel recognises from Linux 6.19 (`insn_is_nop`, arch/x86/lib/insn-eval.c):
 * `nop` (not `pause`, not `xchg` with r8), `nopl`, `mov %reg,%reg` and `lea 0(%reg),%reg` at
 * 64-bit size, and `jmp` to the next instruction. It must never call a real instruction a nop.
 */
function isNopByForm(bytes: Uint8Array, layout: Layout): boolean {
  if (layout.encoding !== 'legacy') return false;
  const rexW = (layout.rex & 0x08) !== 0;
  const rexR = (layout.rex & 0x04) !== 0 ? 8 : 0;
  const rexX = (layout.rex & 0x02) !== 0 ? 8 : 0;
  const rexB = (layout.rex & 0x01) !== 0 ? 8 : 0;
  const modrm = bytes[layout.modrmOffset] ?? 0;
  const mod = modrm >> 6;
  const reg = ((modrm >> 3) & 7) + rexR;
  let rm = (modrm & 7) + rexB;
  const operand64 = rexW; // 64-bit operand size: REX.W (it overrides 0x66)
  switch (layout.opcode1) {
    case 0x0f:
      return layout.opcodeBytes === 2 && layout.opcode2 === 0x1f && reg === 0;
    case 0x89:
      return mod === 3 && operand64 && reg === rm;
    case 0x8d: {
      if (mod === 0 || mod === 3 || !operand64) return false;
      if (layout.prefixes.some((p) => p !== 0x3e)) return false;
      let offset = layout.modrmOffset + 1;
      if ((modrm & 7) === 4) {
        const sib = bytes[offset] ?? 0;
        offset++;
        const scale = sib >> 6;
        const index = ((sib >> 3) & 7) + rexX;
        if (scale !== 0 || index !== 4) return false;
        rm = (sib & 7) + rexB;
      }
      const size = mod === 1 ? 1 : 4;
      for (let k = 0; k < size; k++) if ((bytes[offset + k] ?? 1) !== 0) return false;
      return reg === rm;
    }
    case 0x90:
      return rexB === 0 && !layout.prefixes.includes(0xf3);
    case 0xe9:
    case 0xeb: {
      const size = layout.opcode1 === 0xeb ? 1 : bytes.length - layout.modrmOffset;
      if (size !== 1 && size !== 4) return false;
      for (let k = 0; k < size; k++) if (bytes[layout.modrmOffset + k] !== 0) return false;
      return true;
    }
    default:
      return false;
  }
}

/** Whether the kernel takes this instruction for a nop and skips it. */
function isKernelNop(bytes: Uint8Array, layout: Layout, era: Era): boolean {
  if (era === '6.19') return isNopByForm(bytes, layout);
  if (era !== 'before-6.16' && bytes.length < KERNEL_NOPS.length) {
    if (sameBytes(bytes, KERNEL_NOPS[bytes.length]!)) return true;
  }
  return layout.opcode1 === 0x90;
}

/** A 5-byte nop the kernel (6.18+) rewrites into a call to its trampoline after one hit. */
function isOptimizableNop(instruction: DecodedInstruction, layout: Layout, era: Era): boolean {
  if (era === 'before-6.16' || era === '6.16' || instruction.length !== 5) return false;
  if (PAGE_SIZE - (instruction.vaddr % PAGE_SIZE) < 5n) return false;
  if (era === '6.19') return isNopByForm(instruction.bytes, layout);
  const nop = layout.encoding === 'legacy' && layout.opcodeBytes === 1 && layout.opcode1 === 0x90;
  const modrm = instruction.bytes[layout.modrmOffset] ?? 0xff;
  const nopl =
    layout.encoding === 'legacy' &&
    layout.opcodeBytes === 2 &&
    layout.opcode2 === 0x1f &&
    ((modrm >> 3) & 7) === 0;
  return nop || nopl;
}

const CONDITIONAL_JUMPS = new Set([
  0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f,
]);

function nopHandling(
  instruction: DecodedInstruction,
  layout: Layout,
  era: Era,
): KernelHandling | undefined {
  if (!isKernelNop(instruction.bytes, layout, era)) return undefined;
  const name = instruction.mnemonic;
  if (layout.encoding !== 'legacy') {
    return {
      strategy: 'unsafe',
      what: name,
      label: `${layout.encoding.toUpperCase()} taken for a nop`,
      reason: `the kernel takes this ${layout.encoding.toUpperCase()} instruction (opcode byte 0x90) for a nop and skips it`,
    };
  }
  if (layout.opcode1 === 0x90 && (layout.rex & 0x01) !== 0) {
    return {
      strategy: 'unsafe',
      what: name,
      label: 'xchg taken for a nop',
      reason: `the kernel takes "${instruction.text}" (opcode 0x90 with REX.B) for a nop and skips it, so the registers are never exchanged`,
    };
  }
  if (layout.opcode1 === 0x90 && layout.prefixes.includes(0xf3)) {
    return { strategy: 'emulate', what: 'pause (skipped as a nop)' };
  }
  if (isOptimizableNop(instruction, layout, era)) {
    return {
      strategy: 'emulate',
      what: 'nop (5 bytes: after the first hit the kernel rewrites it into a call to its uprobe trampoline)',
    };
  }
  return { strategy: 'emulate', what: name.startsWith('nop') ? 'nop' : `${name} (a nop)` };
}

function branchHandling(
  instruction: DecodedInstruction,
  layout: Layout,
): KernelHandling | undefined {
  let opcode = layout.opcode1;
  if (layout.encoding === 'legacy' && opcode === 0x0f) {
    if (layout.opcodeBytes !== 2) return undefined;
    opcode = (layout.opcode2 - 0x10) & 0xff; // jcc rel32 (0f 8x) checks what jcc rel8 (7x) does
  }
  const isCall = opcode === 0xe8 && layout.opcode1 === 0xe8;
  const isJump = (opcode === 0xe9 || opcode === 0xeb) && layout.opcode1 === opcode;
  if (!isCall && !isJump && !CONDITIONAL_JUMPS.has(opcode)) return undefined;
  if (layout.encoding !== 'legacy') {
    const as = isCall ? 'a relative call' : isJump ? 'a relative jmp' : 'a conditional jump';
    return {
      strategy: 'unsafe',
      what: instruction.mnemonic,
      label: `${layout.encoding.toUpperCase()} taken for a branch`,
      reason: `the kernel takes this ${layout.encoding.toUpperCase()} instruction (opcode byte ${hexByte(layout.opcode1)}) for ${as} and skips it${isCall ? ', pushing a bogus return address' : ''}`,
    };
  }
  if (layout.prefixes.includes(0x66)) {
    return {
      strategy: 'refuse',
      label: 'branch with 0x66 prefix',
      reason: 'the kernel refuses branches with an operand-size prefix (0x66)',
    };
  }
  if (isCall) return { strategy: 'emulate', what: 'call' };
  if (isJump) return { strategy: 'emulate', what: 'jmp' };
  return { strategy: 'emulate', what: instruction.mnemonic };
}

function pushHandling(instruction: DecodedInstruction, layout: Layout): KernelHandling | undefined {
  if (layout.encoding !== 'legacy' || layout.opcode1 < 0x50 || layout.opcode1 > 0x57) {
    return undefined;
  }
  const bytes = instruction.bytes;
  if (bytes.length === 1 || (bytes.length === 2 && bytes[0] === 0x41)) {
    // Spelled from the opcode: most functions start with one, and spelling each instruction's
    // text was a good part of planning every function of a large program.
    const register = PUSHED[(layout.opcode1 - 0x50) | (bytes.length === 2 ? 8 : 0)];
    return { strategy: 'emulate', what: `push ${register}` };
  }
  return undefined;
}

/** The register a one-byte push (0x50 + r, with REX.B for r8-r15) saves. */
const PUSHED = [
  '%rax',
  '%rcx',
  '%rdx',
  '%rbx',
  '%rsp',
  '%rbp',
  '%rsi',
  '%rdi',
  '%r8',
  '%r9',
  '%r10',
  '%r11',
  '%r12',
  '%r13',
  '%r14',
  '%r15',
];

function singleStepWhat(instruction: DecodedInstruction, layout: Layout): string {
  if (layout.encoding === 'legacy' && layout.opcodeBytes === 1) {
    const reg = ((instruction.bytes[layout.modrmOffset] ?? 0) >> 3) & 7;
    switch (layout.opcode1) {
      case 0x9d:
        return 'popf';
      case 0xc2:
      case 0xc3:
        return 'ret';
      case 0xca:
      case 0xcb:
        return 'far ret';
      case 0xff:
        if (reg === 2) return 'indirect call';
        if (reg === 3) return 'far indirect call';
        if (reg === 4) return 'indirect jmp';
        if (reg === 5) return 'far indirect jmp';
        break;
    }
  }
  return instruction.mnemonic;
}

/**
 * How the kernel's x86 uprobes will handle a probe on `instruction`: emulate it, single-step
 * it out of line (with a %rip-relative fixup when `ripRelative`), refuse it (ENOTSUPP), or
 * accept it but mishandle it (`unsafe`, see above). `options.kernel` picks the rules of a
 * kernel version; without it the newest rules known apply.
 */
export function analyzeKernelHandling(
  instruction: DecodedInstruction,
  options: KernelHandlingOptions = {},
): KernelHandling {
  const invalid = {
    strategy: 'refuse',
    label: 'not an instruction',
    reason: 'the bytes are not a valid instruction',
  } as const;
  if (instruction.invalid) return invalid;
  const layout = parseLayout(instruction.bytes);
  if (layout === undefined) return invalid;
  if (layout.encoding === 'xop') {
    return {
      strategy: 'unsafe',
      what: instruction.mnemonic,
      label: 'XOP encoding',
      reason: "the kernel's instruction decoder does not know AMD XOP encodings",
    };
  }
  if (new Set(layout.prefixes).size > 4) {
    return {
      strategy: 'refuse',
      label: 'over four prefixes',
      reason: "the kernel's decoder rejects more than four different prefixes",
    };
  }
  for (const prefix of layout.prefixes) {
    const refused = REFUSED_PREFIXES.get(prefix);
    if (refused !== undefined) {
      return {
        strategy: 'refuse',
        label: refused[0],
        reason: `the kernel refuses instructions with ${refused[1]}`,
      };
    }
  }
  const modrmReg = ((instruction.bytes[layout.modrmOffset] ?? 0) >> 3) & 7;
  if (layout.opcode1 === 0x8e && modrmReg === 2) {
    return {
      strategy: 'refuse',
      label: 'load of %ss',
      reason:
        layout.encoding === 'legacy'
          ? 'the kernel refuses instructions that load %ss (they hold off traps for one instruction)'
          : `the kernel takes this ${layout.encoding.toUpperCase()} instruction (opcode byte 0x8e) for a load of %ss and refuses it`,
    };
  }
  const refusedOpcode = REFUSED_OPCODES.get(layout.opcode1);
  if (refusedOpcode !== undefined) {
    if (layout.encoding === 'legacy') {
      return {
        strategy: 'refuse',
        label: refusedOpcode[0],
        reason: `the kernel refuses ${refusedOpcode[1]}`,
      };
    }
    return {
      strategy: 'refuse',
      label: `${layout.encoding.toUpperCase()} opcode ${hexByte(layout.opcode1)}`,
      reason: `the kernel checks the opcode byte of ${layout.encoding.toUpperCase()} instructions against its one-byte opcode table, where ${hexByte(layout.opcode1)} is not allowed`,
    };
  }
  const era = eraOf(options.kernel);
  const handled =
    nopHandling(instruction, layout, era) ??
    branchHandling(instruction, layout) ??
    pushHandling(instruction, layout);
  if (handled !== undefined) return handled;
  return {
    strategy: 'single-step',
    what: isOptimizableNop(instruction, layout, era)
      ? 'nop (5 bytes: single-stepped on the first hit, then rewritten into a call to the uprobe trampoline)'
      : singleStepWhat(instruction, layout),
    ripRelative: instruction.ripRelative,
  };
}
