// planXol() and emulate(): the strategy for each class of displaced instruction. The bytes
// were assembled with `as` and their text and targets read back with
// `objdump -D -b binary -m i386:x86-64 --adjust-vma=0x401000` (the comment after each row is
// objdump's line). Relocated slots are checked by decoding them back at the slot address;
// conditional branches are checked against the processor running the tests.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { InternalError } from '../../errors/index.js';
import { decodeInstructions } from './decode.js';
import {
  type Emulation,
  emulate,
  planXol,
  XOL_SLOT_BYTES,
  type XolPlan,
  type XolRegisters,
} from './xol.js';

const VADDR = 0x401000n;
/** A slot 256 MiB above code at VADDR, and one 1 GiB below code at HIGH_VADDR: both within reach of rel32. */
const SLOT_ABOVE = 0x10401000n;
const HIGH_VADDR = 0x7f12_4000_1000n;
const SLOT_BELOW = 0x7f12_0000_0000n;
const INT32_MAX = (1n << 31n) - 1n;
const INT32_MIN = -(1n << 31n);

function hex(text: string): Uint8Array {
  return Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
}

function show(plan: XolPlan): string {
  return JSON.stringify(plan, (_, value: unknown) =>
    typeof value === 'bigint'
      ? `0x${value.toString(16)}`
      : value instanceof Uint8Array
        ? Buffer.from(value).toString('hex')
        : value,
  );
}

function expectRelocate(plan: XolPlan): Extract<XolPlan, { kind: 'relocate' }> {
  assert.equal(plan.kind, 'relocate', show(plan));
  return plan as Extract<XolPlan, { kind: 'relocate' }>;
}

function expectEmulate(plan: XolPlan): Emulation {
  assert.equal(plan.kind, 'emulate', show(plan));
  return (plan as Extract<XolPlan, { kind: 'emulate' }>).emulation;
}

/**
 * The slot ends with a jump from `at` to `to`: `jmp rel32` when `to` is within ±2 GiB,
 * else `jmp *0x0(%rip)` and the 8-byte address it reads. Returns which form it is.
 */
function checkJumpBack(tail: Uint8Array, at: bigint, to: bigint): 'near' | 'far' {
  const [jump] = decodeInstructions(tail, at, { maxCount: 1 });
  assert.ok(jump !== undefined);
  if (jump.text.startsWith('jmp 0x')) {
    assert.equal(tail.length, 5, 'jmp rel32 ends the slot');
    assert.equal(jump.branchTarget, to);
    return 'near';
  }
  assert.equal(jump.text, 'jmp *0x0(%rip)');
  assert.equal(tail.length, 14, 'jmp *0x0(%rip) and its 8-byte target end the slot');
  assert.equal(jump.ripTarget, at + 6n);
  assert.equal(Buffer.from(tail).readBigUInt64LE(6), to);
  return 'far';
}

/** Relocated at `slot`: the same instruction, addressing `ripTarget`, then the jump back. */
function checkSlot(
  plan: Extract<XolPlan, { kind: 'relocate' }>,
  vaddr: bigint,
  slot: bigint,
  original: Uint8Array,
  ripTarget: bigint | undefined,
): 'near' | 'far' {
  assert.ok(plan.slotBytes.length <= XOL_SLOT_BYTES);
  const [moved] = decodeInstructions(plan.slotBytes, slot, { maxCount: 1 });
  assert.ok(moved !== undefined && !moved.invalid);
  assert.equal(moved.length, plan.length);
  assert.equal(moved.ripTarget, ripTarget);
  const [before] = decodeInstructions(original, vaddr, { maxCount: 1 });
  const anyDisplacement = (text: string) => text.replace(/-?0x[0-9a-f]+\(%[re]ip\)/, 'D(%rip)');
  assert.equal(anyDisplacement(moved.text), anyDisplacement(before!.text));
  if (ripTarget === undefined) {
    assert.deepEqual(moved.bytes, Uint8Array.from(original.subarray(0, plan.length)));
  }
  const at = slot + BigInt(plan.length);
  return checkJumpBack(plan.slotBytes.subarray(plan.length), at, vaddr + BigInt(plan.length));
}

// --- relocate: %rip-relative operands ---------------------------------------------------

// bytes | objdump text at 0x401000 | the address objdump gives in its "# 0x..." comment
const RIP_RELATIVE: readonly [string, string, bigint][] = [
  ['48 8b 05 d6 2e 00 00', 'mov 0x2ed6(%rip),%rax', 0x403eddn],
  ['89 15 10 00 00 00', 'mov %edx,0x10(%rip)', 0x401016n],
  ['48 8d 3d 34 12 00 00', 'lea 0x1234(%rip),%rdi', 0x40223bn],
  // An immediate after the displacement: %rip counts from the end of the whole instruction.
  ['83 3d 00 01 00 00 07', 'cmpl $0x7,0x100(%rip)', 0x401107n],
  ['80 3d e0 ff ff ff 07', 'cmpb $0x7,-0x20(%rip)', 0x400fe7n],
  ['66 81 3d 00 01 00 00 34 12', 'cmpw $0x1234,0x100(%rip)', 0x401109n],
  ['48 c7 05 f0 ff ff ff 01 00 00 00', 'movq $0x1,-0x10(%rip)', 0x400ffbn],
  ['ff 05 10 00 00 00', 'incl 0x10(%rip)', 0x401016n],
  ['f0 ff 05 10 00 00 00', 'lock incl 0x10(%rip)', 0x401017n],
  // SSE, AVX (VEX) and AVX-512 (EVEX) forms.
  ['f2 0f 10 05 40 00 00 00', 'movsd 0x40(%rip),%xmm0', 0x401048n],
  ['f2 0f 11 05 08 00 00 00', 'movsd %xmm0,0x8(%rip)', 0x401010n],
  ['c5 fe 6f 0d 80 00 00 00', 'vmovdqu 0x80(%rip),%ymm1', 0x401088n],
  ['c5 fe 7f 15 c0 ff ff ff', 'vmovdqu %ymm2,-0x40(%rip)', 0x400fc8n],
  ['c5 f9 70 0d 10 00 00 00 1b', 'vpshufd $0x1b,0x10(%rip),%xmm1', 0x401019n],
  ['62 f1 fe 48 6f 0d 80 00 00 00', 'vmovdqu64 0x80(%rip),%zmm1', 0x40108an],
  // %eip-relative (address-size prefix): the address wraps at 4 GiB.
  ['67 8b 05 10 00 00 00', 'mov 0x10(%eip),%eax', 0x401017n],
];

for (const [bytes, text, target] of RIP_RELATIVE) {
  test(`planXol() relocates "${text}" so that it still addresses 0x${target.toString(16)}`, () => {
    const code = hex(bytes);
    const plan = expectRelocate(planXol(code, VADDR, SLOT_ABOVE));
    assert.equal(plan.length, code.length);
    assert.equal(plan.text, text);
    assert.equal(checkSlot(plan, VADDR, SLOT_ABOVE, code, target), 'near');
    // The same code high in the address space, its slot below it.
    const high = expectRelocate(planXol(code, HIGH_VADDR, SLOT_BELOW));
    const highTarget = target - VADDR + HIGH_VADDR;
    const eip = text.includes('(%eip)');
    checkSlot(high, HIGH_VADDR, SLOT_BELOW, code, eip ? highTarget & 0xffff_ffffn : highTarget);
  });
}

test('planXol() refuses a %rip-relative operand whose target the slot cannot reach', () => {
  // mov 0x2ed6(%rip),%rax; the slot 4 GiB above the code.
  const plan = planXol(hex('48 8b 05 d6 2e 00 00'), VADDR, VADDR + (1n << 32n));
  assert.equal(plan.kind, 'refuse', show(plan));
  assert.equal(plan.length, 7);
  assert.equal(plan.text, 'mov 0x2ed6(%rip),%rax');
  assert.match((plan as { reason: string }).reason, /XOL page must be within ±2 GiB of the code/);
});

test('planXol() relocates a %rip-relative operand up to exactly ±2 GiB from the slot', () => {
  // mov 0x2ed6(%rip),%rax at HIGH_VADDR: 7 bytes, target HIGH_VADDR + 0x2edd. In the slot,
  // the displacement is target - (slot + 7).
  const code = hex('48 8b 05 d6 2e 00 00');
  const target = HIGH_VADDR + 0x2eddn;
  const slotFor = (displacement: bigint) => target - 7n - displacement;
  for (const displacement of [INT32_MAX, INT32_MIN]) {
    const slot = slotFor(displacement);
    const plan = expectRelocate(planXol(code, HIGH_VADDR, slot));
    assert.equal(Buffer.from(plan.slotBytes).readInt32LE(3), Number(displacement));
    checkSlot(plan, HIGH_VADDR, slot, code, target);
  }
  for (const displacement of [INT32_MAX + 1n, INT32_MIN - 1n]) {
    const plan = planXol(code, HIGH_VADDR, slotFor(displacement));
    assert.equal(plan.kind, 'refuse', show(plan));
  }
});

test('planXol() relocates an %eip-relative operand from a slot anywhere', () => {
  // mov 0x10(%eip),%eax: the address is computed modulo 2^32, so any slot reaches it.
  const code = hex('67 8b 05 10 00 00 00');
  const plan = expectRelocate(planXol(code, VADDR, HIGH_VADDR));
  assert.equal(checkSlot(plan, VADDR, HIGH_VADDR, code, 0x401017n), 'far');
});

// --- relocate: instructions that do not care where they run -----------------------------

// bytes | objdump text (ours where noted)
const PLAIN: readonly [string, string][] = [
  ['68 78 56 34 12', 'push $0x12345678'],
  ['55', 'push %rbp'],
  ['41 54', 'push %r12'],
  ['48 89 e5', 'mov %rsp,%rbp'],
  ['66 0f 1f 04 00', 'nopw (%rax,%rax,1)'],
  ['66 90', 'xchg %ax,%ax'],
  ['f3 0f 1e fa', 'endbr64'],
  ['c8 10 00 00', 'enter $0x10,$0x0'],
  // syscall returns to the next instruction: the jump back in the slot.
  ['0f 05', 'syscall'],
  // Port I/O, allowed in user space after ioperm(). objdump: "in (%dx),%al".
  ['ec', 'in %dx,%al'],
  ['0f 01 d5', 'xend'],
  ['c6 f8 00', 'xabort $0x0'],
  ['64 48 8b 04 25 28 00 00 00', 'mov %fs:0x28,%rax'],
];

for (const [bytes, text] of PLAIN) {
  test(`planXol() copies "${text}" unchanged into the slot, followed by the jump back`, () => {
    const code = hex(bytes);
    const plan = expectRelocate(planXol(code, VADDR, SLOT_ABOVE));
    assert.equal(plan.length, code.length);
    assert.equal(plan.text, text);
    assert.deepEqual(plan.slotBytes.subarray(0, code.length), code);
    assert.equal(checkSlot(plan, VADDR, SLOT_ABOVE, code, undefined), 'near');
  });
}

test('planXol() leaves its input alone, also when it is a view into a bigger Buffer', () => {
  // mov 0x2ed6(%rip),%rax in the middle of a Buffer.
  const buffer = Buffer.from('909090488b05d62e000090', 'hex');
  const before = Buffer.from(buffer);
  const plan = expectRelocate(planXol(buffer.subarray(3), VADDR, SLOT_ABOVE));
  assert.deepEqual(buffer, before);
  checkSlot(plan, VADDR, SLOT_ABOVE, buffer.subarray(3), 0x403eddn);
});

test('planXol() looks only at the first instruction of the bytes', () => {
  // push %rbp; mov %rsp,%rbp
  const plan = expectRelocate(planXol(hex('55 48 89 e5'), VADDR, SLOT_ABOVE));
  assert.equal(plan.length, 1);
  assert.equal(plan.text, 'push %rbp');
  assert.equal(plan.slotBytes.length, 1 + 5);
});

test('planXol() jumps back with jmp rel32 within ±2 GiB and with an absolute jump beyond', () => {
  // push %rbp (1 byte) at HIGH_VADDR; the jump back sits at slot + 1 and goes to HIGH_VADDR + 1:
  // rel32 = (HIGH_VADDR + 1) - (slot + 1 + 5).
  const code = hex('55');
  const slotFor = (rel: bigint) => HIGH_VADDR - 5n - rel;
  const cases: [bigint, 'near' | 'far'][] = [
    [INT32_MAX, 'near'],
    [INT32_MIN, 'near'],
    [INT32_MAX + 1n, 'far'],
    [INT32_MIN - 1n, 'far'],
    [HIGH_VADDR - 5n - 0x1000n, 'far'], // a slot at 0x1000, far below
  ];
  for (const [rel, form] of cases) {
    const slot = slotFor(rel);
    const plan = expectRelocate(planXol(code, HIGH_VADDR, slot));
    assert.equal(checkSlot(plan, HIGH_VADDR, slot, code, undefined), form, `rel ${rel}`);
    assert.equal(plan.slotBytes.length, form === 'near' ? 6 : 15);
  }
});

test('planXol() slot bytes never exceed XOL_SLOT_BYTES', () => {
  // The longest instruction (15 bytes) with the absolute jump back.
  const code = hex('66 66 66 66 66 66 2e 0f 1f 84 00 00 00 00 00');
  const plan = expectRelocate(planXol(code, VADDR, HIGH_VADDR));
  assert.equal(plan.length, 15);
  assert.equal(plan.slotBytes.length, 15 + 14);
  assert.ok(plan.slotBytes.length <= XOL_SLOT_BYTES);
});

// --- emulate ---------------------------------------------------------------------------

const REGS: Readonly<XolRegisters> = Object.freeze({
  rip: VADDR,
  rsp: 0x7ffd_0000_1000n,
  rflags: 0x202n,
  rax: 0x600000n,
  rbx: 3n,
  rcx: 5n,
  rdx: 0x402222n,
  rsi: 0x1006n,
  rdi: 0x1007n,
  rbp: 0x7ffd_0000_1100n,
  r8: 0x1008n,
  r9: 0x1009n,
  r10: 0x100an,
  r11: 0x100bn,
  r12: 0x100cn,
  r13: 0x100dn,
  r14: 0x100en,
  r15: 0x100fn,
  fsBase: 0x7f00_0000_0000n,
  gsBase: 0x7f00_1000_0000n,
});

/** Tracee memory for the tests: 8-byte words at fixed addresses; anything else is an error. */
function memory(words: Record<string, bigint>): (vaddr: bigint) => bigint {
  return (vaddr) => {
    const value = words[`0x${vaddr.toString(16)}`];
    if (value === undefined) throw new Error(`read of unmapped 0x${vaddr.toString(16)}`);
    return value;
  };
}

interface EmulateCase {
  readonly bytes: string;
  readonly text: string;
  readonly regs?: Partial<XolRegisters>;
  readonly memory?: Record<string, bigint>;
  /** The registers that change, and the return address pushed, if any. */
  readonly after: Partial<XolRegisters>;
  readonly push?: bigint;
}

const PUSHED_AT = REGS.rsp - 8n;

const EMULATED: readonly EmulateCase[] = [
  { bytes: 'e8 00 01 00 00', text: 'call 0x401105', after: { rip: 0x401105n }, push: 0x401005n },
  { bytes: 'eb 10', text: 'jmp 0x401012', after: { rip: 0x401012n } },
  { bytes: 'e9 00 10 00 00', text: 'jmp 0x402005', after: { rip: 0x402005n } },
  { bytes: 'e9 fb ff ff ff', text: 'jmp 0x401000', after: { rip: 0x401000n } },
  { bytes: 'f2 e9 00 10 00 00', text: 'bnd jmp 0x402006', after: { rip: 0x402006n } },
  {
    bytes: 'c3',
    text: 'ret',
    memory: { [`0x${REGS.rsp.toString(16)}`]: 0x401234n },
    after: { rip: 0x401234n, rsp: REGS.rsp + 8n },
  },
  {
    bytes: 'c2 10 00',
    text: 'ret $0x10',
    memory: { [`0x${REGS.rsp.toString(16)}`]: 0x401234n },
    after: { rip: 0x401234n, rsp: REGS.rsp + 24n },
  },
  {
    bytes: 'f3 c3',
    text: 'repz ret',
    memory: { [`0x${REGS.rsp.toString(16)}`]: 0x401234n },
    after: { rip: 0x401234n, rsp: REGS.rsp + 8n },
  },
  { bytes: 'ff d0', text: 'call *%rax', after: { rip: 0x600000n }, push: 0x401002n },
  {
    bytes: 'ff 15 10 00 00 00',
    text: 'call *0x10(%rip)', // # 0x401016
    memory: { '0x401016': 0x405000n },
    after: { rip: 0x405000n },
    push: 0x401006n,
  },
  {
    bytes: 'ff 24 d8',
    text: 'jmp *(%rax,%rbx,8)',
    memory: { '0x600018': 0x406000n },
    after: { rip: 0x406000n },
  },
  {
    bytes: 'ff 25 10 00 00 00',
    text: 'jmp *0x10(%rip)', // # 0x401016
    memory: { '0x401016': 0x407000n },
    after: { rip: 0x407000n },
  },
  { bytes: '3e ff e0', text: 'notrack jmp *%rax', after: { rip: 0x600000n } },
  { bytes: 'f2 ff e2', text: 'bnd jmp *%rdx', after: { rip: 0x402222n } },
  { bytes: '41 ff d3', text: 'call *%r11', after: { rip: 0x100bn }, push: 0x401003n },
  {
    // The operand is read with %rsp as it was before the push.
    bytes: 'ff 54 24 08',
    text: 'call *0x8(%rsp)',
    memory: { [`0x${(REGS.rsp + 8n).toString(16)}`]: 0x408000n },
    after: { rip: 0x408000n },
    push: 0x401004n,
  },
  {
    bytes: '48 ff 24 c5 f0 ff ff ff',
    text: 'jmp *-0x10(,%rax,8)', // objdump: "rex.W jmp *-0x10(,%rax,8)"
    regs: { rax: 4n },
    memory: { '0x10': 0x409000n },
    after: { rip: 0x409000n },
  },
  {
    // Address-size prefix: the address is %eax, the low half of %rax.
    bytes: '67 ff 20',
    text: 'jmp *(%eax)',
    regs: { rax: 0xdead_0060_1000n },
    memory: { '0x601000': 0x40a000n },
    after: { rip: 0x40a000n },
  },
  {
    // Address-size prefix, no base: the displacement is a 32-bit address, not sign-extended.
    bytes: '67 ff 24 25 f0 ff ff ff',
    text: 'jmpq *0xfffffff0', // objdump: "jmp *0xfffffff0(,%eiz,1)"
    memory: { '0xfffffff0': 0x40a800n },
    after: { rip: 0x40a800n },
  },
  {
    bytes: '64 ff 14 25 10 00 00 00',
    text: 'callq *%fs:0x10', // objdump: "call *%fs:0x10"
    memory: { '0x7f0000000010': 0x40b000n },
    after: { rip: 0x40b000n },
    push: 0x401008n,
  },
  {
    bytes: '65 ff 20',
    text: 'jmpq *%gs:(%rax)', // objdump: "jmp *%gs:(%rax)"
    memory: { '0x7f0010600000': 0x40c000n },
    after: { rip: 0x40c000n },
  },
  // loop: %rcx - 1, branch while not zero; loope/loopne also need ZF set/clear.
  { bytes: 'e2 ee', text: 'loop 0x400ff0', after: { rcx: 4n, rip: 0x400ff0n } },
  { bytes: 'e2 ee', text: 'loop 0x400ff0', regs: { rcx: 1n }, after: { rcx: 0n, rip: 0x401002n } },
  {
    bytes: 'e2 ee',
    text: 'loop 0x400ff0',
    regs: { rcx: 0n },
    after: { rcx: 0xffff_ffff_ffff_ffffn, rip: 0x400ff0n },
  },
  {
    bytes: 'e1 0e',
    text: 'loope 0x401010',
    regs: { rflags: 0x246n },
    after: { rcx: 4n, rip: 0x401010n },
  },
  { bytes: 'e1 0e', text: 'loope 0x401010', after: { rcx: 4n, rip: 0x401002n } },
  { bytes: 'e0 0e', text: 'loopne 0x401010', after: { rcx: 4n, rip: 0x401010n } },
  {
    bytes: 'e0 0e',
    text: 'loopne 0x401010',
    regs: { rflags: 0x246n },
    after: { rcx: 4n, rip: 0x401002n },
  },
  { bytes: 'e3 1e', text: 'jrcxz 0x401020', regs: { rcx: 0n }, after: { rip: 0x401020n } },
  { bytes: 'e3 1e', text: 'jrcxz 0x401020', regs: { rcx: 1n << 32n }, after: { rip: 0x401002n } },
  {
    bytes: '67 e3 1d',
    text: 'jecxz 0x401020',
    regs: { rcx: 1n << 32n },
    after: { rip: 0x401020n },
  },
  { bytes: '67 e3 1d', text: 'jecxz 0x401020', regs: { rcx: 1n }, after: { rip: 0x401003n } },
];

for (const c of EMULATED) {
  const label = `${c.text}${c.regs === undefined ? '' : ` with ${JSON.stringify(c.regs, (_, v) => (typeof v === 'bigint' ? `0x${v.toString(16)}` : v))}`}`;
  test(`planXol() emulates "${label}"`, () => {
    const code = hex(c.bytes);
    const plan = planXol(code, VADDR, SLOT_ABOVE);
    assert.equal(plan.text, c.text);
    assert.equal(plan.length, code.length);
    const emulation = expectEmulate(plan);
    const regs = Object.freeze({ ...REGS, ...c.regs });
    const result = emulate(emulation, regs, memory(c.memory ?? {}));
    const expected = { ...regs, ...c.after };
    if (c.push !== undefined) expected.rsp = PUSHED_AT;
    assert.deepEqual(result.regs, expected);
    assert.deepEqual(
      result.write,
      c.push === undefined ? undefined : { vaddr: PUSHED_AT, value: c.push },
    );
  });
}

test('planXol() describes emulations with absolute addresses and the operand parts', () => {
  const plan = (bytes: string) => expectEmulate(planXol(hex(bytes), VADDR, SLOT_ABOVE));
  assert.deepEqual(plan('e8 00 01 00 00'), { kind: 'call', target: 0x401105n, next: 0x401005n });
  assert.deepEqual(plan('c2 10 00'), { kind: 'ret', releaseBytes: 16 });
  assert.deepEqual(plan('ff 24 d8'), {
    kind: 'jmp-indirect',
    operand: {
      kind: 'memory',
      segment: undefined,
      base: 'rax',
      index: 'rbx',
      scale: 8,
      displacement: 0n,
      addressSize: 64,
    },
  });
  assert.deepEqual(plan('ff 15 10 00 00 00'), {
    kind: 'call-indirect',
    operand: {
      kind: 'memory',
      segment: undefined,
      base: undefined,
      index: undefined,
      scale: 1,
      displacement: 0x401016n,
      addressSize: 64,
    },
    next: 0x401006n,
  });
});

test('emulate() lets a failed memory read through', () => {
  const emulation = expectEmulate(planXol(hex('c3'), VADDR, SLOT_ABOVE));
  assert.throws(() => emulate(emulation, REGS, memory({})), /unmapped/);
});

// --- jcc: every condition, flags set and clear ------------------------------------------

const CF = 0x1n;
const PF = 0x4n;
const ZF = 0x40n;
const SF = 0x80n;
const OF = 0x800n;

// Condition (the low nibble of the opcode) | mnemonic | flags that take the branch | flags
// that do not (Intel SDM vol. 2, "Jcc": the condition each mnemonic tests).
const CONDITIONS: readonly [number, string, bigint[], bigint[]][] = [
  [0x0, 'jo', [OF], [0n, CF | ZF | SF | PF]],
  [0x1, 'jno', [0n, CF | ZF | SF | PF], [OF]],
  [0x2, 'jb', [CF], [0n, ZF | SF | OF | PF]],
  [0x3, 'jae', [0n, ZF], [CF]],
  [0x4, 'je', [ZF], [0n, CF | SF | OF | PF]],
  [0x5, 'jne', [0n, CF], [ZF]],
  [0x6, 'jbe', [CF, ZF, CF | ZF], [0n, SF | OF | PF]],
  [0x7, 'ja', [0n, SF | OF | PF], [CF, ZF]],
  [0x8, 'js', [SF], [0n, CF | ZF | OF | PF]],
  [0x9, 'jns', [0n, OF], [SF]],
  [0xa, 'jp', [PF], [0n, CF | ZF | SF | OF]],
  [0xb, 'jnp', [0n, CF], [PF]],
  [0xc, 'jl', [SF, OF], [0n, SF | OF]],
  [0xd, 'jge', [0n, SF | OF], [SF, OF]],
  [0xe, 'jle', [ZF, SF, OF, ZF | SF | OF], [0n, SF | OF]],
  [0xf, 'jg', [0n, SF | OF], [ZF, SF, OF, ZF | SF | OF]],
];

for (const [cc, name, taken, notTaken] of CONDITIONS) {
  test(`planXol() emulates ${name} rel8 and rel32 from RFLAGS`, () => {
    // 7x 10: jcc 0x401012; 0f 8x 00 01 00 00: jcc 0x401106.
    const forms: [Uint8Array, bigint][] = [
      [Uint8Array.of(0x70 + cc, 0x10), 0x401012n],
      [Uint8Array.of(0x0f, 0x80 + cc, 0x00, 0x01, 0x00, 0x00), 0x401106n],
    ];
    for (const [code, target] of forms) {
      const plan = planXol(code, VADDR, SLOT_ABOVE);
      assert.equal(plan.text, `${name} 0x${target.toString(16)}`);
      const emulation = expectEmulate(plan);
      const next = VADDR + BigInt(code.length);
      for (const [flags, rip] of [
        ...taken.map((f) => [f, target] as const),
        ...notTaken.map((f) => [f, next] as const),
      ]) {
        const regs = { ...REGS, rflags: 0x202n | flags };
        const result = emulate(emulation, regs, memory({}));
        assert.equal(result.regs.rip, rip, `${name} with rflags 0x${regs.rflags.toString(16)}`);
        assert.deepEqual(result.regs, { ...regs, rip });
        assert.equal(result.write, undefined);
      }
    }
  });
}

// The processor's own answers: a program sets every combination of CF, PF, ZF, SF and OF
// with popfq and runs each jcc, and runs loop/loope/loopne/jrcxz/jecxz on chosen %rcx
// values with ZF set and clear.
const CPU_PROGRAM = String.raw`
#include <stdio.h>
static const unsigned long counts[] = {0, 1, 2, 0x100000000ul, 0x100000001ul};
int main(void) {
  for (unsigned m = 0; m < 32; m++) {
    unsigned long fl = 0x202;
    if (m & 1) fl |= 0x1;
    if (m & 2) fl |= 0x4;
    if (m & 4) fl |= 0x40;
    if (m & 8) fl |= 0x80;
    if (m & 16) fl |= 0x800;
    printf("jcc %lx", fl);
#define J(cc) { int t; __asm__ volatile("push %1; popfq; mov $1, %0; j" #cc " 1f; mov $0, %0; 1:" : "=&r"(t) : "r"(fl) : "cc"); printf(" %d", t); }
    J(o) J(no) J(b) J(ae) J(e) J(ne) J(be) J(a) J(s) J(ns) J(p) J(np) J(l) J(ge) J(le) J(g)
    printf("\n");
  }
  for (int z = 0; z < 2; z++) {
    unsigned long fl = z ? 0x246 : 0x202;
    for (unsigned i = 0; i < sizeof counts / sizeof counts[0]; i++) {
      printf("count %lx %lx", fl, counts[i]);
#define L(insn) { unsigned long c = counts[i]; int t; __asm__ volatile("push %2; popfq; mov $1, %1; " insn " 1f; mov $0, %1; 1:" : "+c"(c), "=&r"(t) : "r"(fl) : "cc"); printf(" %d:%lx", t, c); }
      L("loop") L("loope") L("loopne") L("jrcxz") L("jecxz")
      printf("\n");
    }
  }
  return 0;
}
`;

test('emulate() branches as this processor does for every jcc, loop and jrcxz', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const source = join(mkdtempSync(join(tmpdir(), 'upscope-xol-')), 'xol-flags.c');
  writeFileSync(source, CPU_PROGRAM);
  // No red zone: the inline asm pushes below %rsp.
  const program = compileProgram(source, { flags: ['-O1', '-mno-red-zone'] });
  const lines = execFileSync(program, { encoding: 'utf8' }).trim().split('\n');
  const jcc = lines.filter((line) => line.startsWith('jcc '));
  const counts = lines.filter((line) => line.startsWith('count '));
  assert.equal(jcc.length, 32);
  assert.equal(counts.length, 10);
  for (const line of jcc) {
    const [, flags, ...outcomes] = line.split(' ');
    const rflags = BigInt(`0x${flags}`);
    for (const [cc, name] of CONDITIONS) {
      const emulation = expectEmulate(planXol(Uint8Array.of(0x70 + cc, 0x10), VADDR, VADDR));
      const { regs } = emulate(emulation, { ...REGS, rflags }, memory({}));
      const cpu = outcomes[cc] === '1' ? 0x401012n : 0x401002n;
      assert.equal(regs.rip, cpu, `${name} with rflags 0x${flags}`);
    }
  }
  // loop 0x401010, loope, loopne, jrcxz, jecxz: rel8 0x0e from the end of each.
  const forms = ['e2 0e', 'e1 0e', 'e0 0e', 'e3 0e', '67 e3 0d'];
  for (const line of counts) {
    const [, flags, count, ...outcomes] = line.split(' ');
    const regs = { ...REGS, rflags: BigInt(`0x${flags}`), rcx: BigInt(`0x${count}`) };
    forms.forEach((bytes, i) => {
      const code = hex(bytes);
      const emulation = expectEmulate(planXol(code, VADDR, SLOT_ABOVE));
      const [taken, rcx] = outcomes[i]!.split(':');
      const after = emulate(emulation, regs, memory({})).regs;
      const label = `${bytes} with rcx 0x${count}, rflags 0x${flags}`;
      assert.equal(after.rip, taken === '1' ? 0x401010n : VADDR + BigInt(code.length), label);
      assert.equal(after.rcx, BigInt(`0x${rcx}`), label);
    });
  }
});

// --- refuse ----------------------------------------------------------------------------

// bytes | our text (objdump's where it spells it otherwise) | the reason, roughly
const REFUSED: readonly [string, string, RegExp][] = [
  ['cc', 'int3', /int3/],
  ['cd 80', 'int $0x80', /software interrupt/],
  ['f1', 'int1', /software interrupt/],
  ['0f 0b', 'ud2', /always traps/],
  ['0f b9 c0', 'ud1 %eax,%eax', /always traps/],
  ['cb', 'lretl', /far return/], // objdump: "lret"
  ['ca 08 00', 'lretl $0x8', /far return/], // objdump: "lret $0x8"
  ['48 cf', 'iretq', /iret/],
  ['ff 18', 'lcalll *(%rax)', /far call/], // objdump: "lcall *(%rax)"
  ['ff 28', 'ljmpl *(%rax)', /far jump/], // objdump: "ljmp *(%rax)"
  ['c7 f8 1a 00 00 00', 'xbegin 0x401020', /xbegin/],
  ['0f 34', 'sysenter', /sysenter/],
  ['f4', 'hlt', /privileged/],
  ['fa', 'cli', /privileged/],
  ['0f 07', 'sysretl', /privileged/],
  // objdump decodes these as AMD does (callw rel16, retw): 16-bit %rip on AMD, not Intel.
  ['66 e8 00 00 00 00', 'call 0x401006', /operand-size prefix/],
  ['66 c3', 'ret', /operand-size prefix/],
  ['66 ff d0', 'call *%rax', /operand-size prefix/],
  // loopl: counts in %ecx.
  ['67 e2 0d', 'loopl 0x401010', /address-size prefix/],
  ['06', '(bad)', /not a valid x86-64 instruction/],
  ['0f ff', '(bad)', /end before the instruction does/],
  ['e8 00 01', '(bad)', /3 bytes given end before the instruction does/],
];

for (const [bytes, text, reason] of REFUSED) {
  test(`planXol() refuses ${bytes} ("${text}")`, () => {
    const plan = planXol(hex(bytes), VADDR, SLOT_ABOVE);
    assert.equal(plan.kind, 'refuse', show(plan));
    assert.equal(plan.text, text);
    assert.match((plan as { reason: string }).reason, reason);
    if (text !== '(bad)') assert.equal(plan.length, hex(bytes).length);
  });
}

test('planXol() throws InternalError when called without bytes or with bad addresses', () => {
  assert.throws(() => planXol(new Uint8Array(), VADDR, SLOT_ABOVE), InternalError);
  assert.throws(() => planXol(hex('55'), -1n, SLOT_ABOVE), InternalError);
  assert.throws(() => planXol(hex('55'), VADDR, 1n << 64n), InternalError);
});

// --- every instruction of real code ------------------------------------------------------

const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';

test("planXol() round-trips every instruction of libc's first 32 KiB of .text", (t) => {
  if (!existsSync(LIBC)) {
    t.skip(`no ${LIBC}`);
    return;
  }
  if (!requireHost(t, { commands: ['readelf'] })) return;
  const m = /\.text\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)/.exec(
    tool('readelf', ['-SW', LIBC]),
  );
  assert.ok(m !== null, 'readelf lists .text');
  // Loaded where a shared library would be, with its XOL page 1 GiB below it.
  const vaddr = 0x7f00_0000_0000n + BigInt(`0x${m[1]}`);
  const offset = Number.parseInt(m[2]!, 16);
  const text = readFileSync(LIBC).subarray(offset, offset + 32 * 1024);
  const kinds = { relocate: 0, emulate: 0, refuse: 0 };
  for (const insn of decodeInstructions(text, vaddr)) {
    if (insn.invalid) break;
    const at = Number(insn.vaddr - vaddr);
    const bytes = text.subarray(at, at + 15);
    const slot = insn.vaddr - 0x4000_0000n;
    const plan = planXol(bytes, insn.vaddr, slot);
    kinds[plan.kind]++;
    assert.equal(plan.length, insn.length);
    assert.equal(plan.text, insn.text);
    if (plan.kind === 'relocate') {
      checkSlot(plan, insn.vaddr, slot, bytes, insn.ripTarget);
    } else if (plan.kind === 'emulate' && insn.branchTarget !== undefined) {
      assert.equal((plan.emulation as { target?: bigint }).target, insn.branchTarget, insn.text);
    }
  }
  assert.ok(kinds.relocate > 1000 && kinds.emulate > 100, JSON.stringify(kinds));
});
