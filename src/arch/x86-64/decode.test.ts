import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runFreshProcess } from '../../../test/helpers/fresh-process.js';
import { ProbeError } from '../../errors/index.js';
import { atAddress, decodeInstructions, recurringKey, ripRelativeTargets } from './decode.js';

const BASE = 0x1000n;

function hex(text: string): Uint8Array {
  return Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
}

// Bytes in, what objdump -d prints out (checked with `objdump -D -b binary -m i386:x86-64
// --adjust-vma=0x1000`), with branch targets written with 0x as our text has them.
const CASES: readonly { bytes: string; length: number; text: string; mnemonic: string }[] = [
  { bytes: '55', length: 1, text: 'push %rbp', mnemonic: 'push' },
  { bytes: '48 89 e5', length: 3, text: 'mov %rsp,%rbp', mnemonic: 'mov' },
  { bytes: '41 54', length: 2, text: 'push %r12', mnemonic: 'push' },
  { bytes: 'e8 00 00 00 00', length: 5, text: 'call 0x1005', mnemonic: 'call' },
  { bytes: '48 8b 05 10 00 00 00', length: 7, text: 'mov 0x10(%rip),%rax', mnemonic: 'mov' },
  { bytes: 'f3 0f 1e fa', length: 4, text: 'endbr64', mnemonic: 'endbr64' },
  { bytes: '66 0f 1f 44 00 00', length: 6, text: 'nopw 0x0(%rax,%rax,1)', mnemonic: 'nopw' },
  // Padding between functions: the cs prefix (and extra 0x66) print as words.
  {
    bytes: '66 2e 0f 1f 84 00 00 00 00 00',
    length: 10,
    text: 'cs nopw 0x0(%rax,%rax,1)',
    mnemonic: 'nopw',
  },
  {
    bytes: '66 66 2e 0f 1f 84 00 00 00 00 00',
    length: 11,
    text: 'data16 cs nopw 0x0(%rax,%rax,1)',
    mnemonic: 'nopw',
  },
  { bytes: '74 05', length: 2, text: 'je 0x1007', mnemonic: 'je' },
  { bytes: '0f 85 10 00 00 00', length: 6, text: 'jne 0x1016', mnemonic: 'jne' },
  { bytes: 'c3', length: 1, text: 'ret', mnemonic: 'ret' },
  { bytes: '48 c7 45 f8 01 00 00 00', length: 8, text: 'movq $0x1,-0x8(%rbp)', mnemonic: 'movq' },
  {
    bytes: '48 b8 88 77 66 55 44 33 22 11',
    length: 10,
    text: 'movabs $0x1122334455667788,%rax',
    mnemonic: 'movabs',
  },
  { bytes: 'ff 25 10 00 00 00', length: 6, text: 'jmp *0x10(%rip)', mnemonic: 'jmp' },
  { bytes: 'ff d0', length: 2, text: 'call *%rax', mnemonic: 'call' },
  { bytes: '3e ff e0', length: 3, text: 'notrack jmp *%rax', mnemonic: 'jmp' },
  { bytes: 'f3 48 ab', length: 3, text: 'rep stos %rax,%es:(%rdi)', mnemonic: 'stos' },
  { bytes: 'c5 fe 6f 06', length: 4, text: 'vmovdqu (%rsi),%ymm0', mnemonic: 'vmovdqu' },
  { bytes: '62 f1 fe 48 6f 06', length: 6, text: 'vmovdqu64 (%rsi),%zmm0', mnemonic: 'vmovdqu64' },
  { bytes: '64 48 8b 04 25 28 00 00 00', length: 9, text: 'mov %fs:0x28,%rax', mnemonic: 'mov' },
  { bytes: 'd1 e8', length: 2, text: 'shr %eax', mnemonic: 'shr' },
  { bytes: '6b c0 0a', length: 3, text: 'imul $0xa,%eax,%eax', mnemonic: 'imul' },
  { bytes: 'cc', length: 1, text: 'int3', mnemonic: 'int3' },
  { bytes: '0f 0b', length: 2, text: 'ud2', mnemonic: 'ud2' },
  { bytes: 'f0 48 0f b1 0a', length: 5, text: 'lock cmpxchg %rcx,(%rdx)', mnemonic: 'cmpxchg' },
  { bytes: 'f3 90', length: 2, text: 'pause', mnemonic: 'pause' },
  { bytes: '41 90', length: 2, text: 'xchg %eax,%r8d', mnemonic: 'xchg' },
];

test('decodeInstructions() does not load the decoder before it is first needed', () => {
  // A fresh process: importing the arch folder must not load iced-x86.
  const printed = runFreshProcess([
    "const arch = await import('./src/arch/index.ts');",
    'const before = arch.isIcedLoaded();',
    'arch.decodeInstructions(new Uint8Array([0x90]), 0n);',
    'console.log(JSON.stringify([before, arch.isIcedLoaded()]));',
  ]);
  assert.deepEqual(printed, [false, true]);
});

for (const c of CASES) {
  test(`decodeInstructions() decodes ${c.bytes} as "${c.text}"`, () => {
    const [insn, ...rest] = decodeInstructions(hex(c.bytes), BASE);
    assert.equal(rest.length, 0);
    assert.ok(insn !== undefined);
    assert.equal(insn.vaddr, BASE);
    assert.equal(insn.length, c.length);
    assert.deepEqual(insn.bytes, hex(c.bytes));
    assert.equal(insn.text, c.text);
    assert.equal(insn.mnemonic, c.mnemonic);
    assert.equal(insn.invalid, false);
  });
}

test('decodeInstructions() sweeps a function linearly from its start', () => {
  // push %rbp; mov %rsp,%rbp; call 0x1009; leave; ret
  const code = hex('55  48 89 e5  e8 00 00 00 00  c9  c3');
  const insns = decodeInstructions(code, BASE);
  assert.deepEqual(
    insns.map((i) => [i.vaddr, i.length, i.text]),
    [
      [0x1000n, 1, 'push %rbp'],
      [0x1001n, 3, 'mov %rsp,%rbp'],
      [0x1004n, 5, 'call 0x1009'],
      [0x1009n, 1, 'leave'],
      [0x100an, 1, 'ret'],
    ],
  );
  assert.equal(insns[2]!.branchTarget, 0x1009n);
  assert.equal(insns[0]!.branchTarget, undefined);
});

test('decodeInstructions() stops after maxCount instructions', () => {
  const code = hex('55  48 89 e5  c9  c3');
  assert.deepEqual(
    decodeInstructions(code, BASE, { maxCount: 2 }).map((i) => i.text),
    ['push %rbp', 'mov %rsp,%rbp'],
  );
  assert.deepEqual(decodeInstructions(code, BASE, { maxCount: 0 }), []);
  assert.throws(() => decodeInstructions(code, BASE, { maxCount: -1 }), ProbeError);
  assert.throws(() => decodeInstructions(code, BASE, { maxCount: 1.5 }), ProbeError);
});

test('decodeInstructions() marks an undecodable instruction invalid and stops there', () => {
  // push %rbp; then 0x06 (push %es, not an instruction in 64-bit mode); then ret
  const insns = decodeInstructions(hex('55  06  c3'), BASE);
  assert.equal(insns.length, 2);
  assert.equal(insns[1]!.vaddr, 0x1001n);
  assert.equal(insns[1]!.invalid, true);
  assert.equal(insns[1]!.text, '(bad)');
  assert.ok(insns[1]!.length >= 1);
});

test('decodeInstructions() marks an instruction cut off by the end of the bytes invalid', () => {
  // nop; then the first 3 of the 5 bytes of a call
  const insns = decodeInstructions(hex('90  e8 00 00'), BASE);
  assert.equal(insns.length, 2);
  assert.equal(insns[1]!.invalid, true);
  assert.equal(insns[1]!.vaddr, 0x1001n);
  assert.ok(insns[1]!.vaddr + BigInt(insns[1]!.length) <= 0x1004n);
});

test('decodeInstructions() rejects an instruction longer than 15 bytes', () => {
  const insns = decodeInstructions(hex(`${'66'.repeat(15)} 90`), BASE);
  assert.equal(insns[0]!.invalid, true);
});

test('decodeInstructions() returns nothing for no bytes', () => {
  assert.deepEqual(decodeInstructions(new Uint8Array(0), BASE), []);
});

test('decodeInstructions() rejects code that would run past the end of the address space', () => {
  assert.throws(
    () => decodeInstructions(hex('90 90'), (1n << 64n) - 1n),
    (err: unknown) => err instanceof ProbeError && err.code === 'ERR_DECODE',
  );
  assert.throws(() => decodeInstructions(hex('90'), -1n), ProbeError);
});

test('decodeInstructions() reports %rip-relative operands and where they point', () => {
  // mov 0x10(%rip),%rax  (next instruction at 0x1007, so it reads 0x1017); then mov %rsp,%rbp
  const [riprel, plain] = decodeInstructions(hex('48 8b 05 10 00 00 00  48 89 e5'), BASE);
  assert.equal(riprel!.ripRelative, true);
  assert.equal(riprel!.ripTarget, 0x1017n);
  assert.equal(plain!.ripRelative, false);
  assert.equal(plain!.ripTarget, undefined);
});

test('ripRelativeTargets() lists the addresses %rip-relative operands refer to', () => {
  // lea 0x100(%rip),%rax at 0x1000 (-> 0x1107); nop; lea -0x10(%rip),%rdx at 0x1008 (-> 0x0fff)
  const code = hex('48 8d 05 00 01 00 00  90  48 8d 15 f0 ff ff ff');
  assert.deepEqual(ripRelativeTargets(code, BASE), [0x1107n, 0x0fffn]);
});

test('recurringKey() keys an instruction by its bytes alone, and none that means something else elsewhere', () => {
  // The same instruction followed by different bytes: one key; another instruction: another.
  assert.equal(recurringKey(hex('41 57 41 56')), recurringKey(hex('41 57 55')));
  assert.notEqual(recurringKey(hex('41 57')), recurringKey(hex('41 56')));
  assert.notEqual(recurringKey(hex('55')), undefined);
  assert.notEqual(recurringKey(hex('48 81 ec 18 01 00 00')), undefined); // sub $0x118,%rsp
  assert.equal(recurringKey(hex('e8 00 00 00 00')), undefined); // call: a branch
  assert.equal(recurringKey(hex('eb fe')), undefined); // jmp: a branch
  assert.equal(recurringKey(hex('0f 1f 44 00 00')), undefined); // 5 bytes: the kernel's nop rule
  assert.equal(recurringKey(hex('48 8d 44 00 00')), undefined); // lea 0x0(%rax,%rax,1),%rax
  assert.equal(recurringKey(hex('c4 e2 79 18 05 00 00 00 00')), undefined); // VEX: not quick's
  // A function that only returns (4,444 of node's), and mov $imm32 into a register (never a
  // nop), keyed: the same wherever they are.
  assert.notEqual(recurringKey(hex('c3')), undefined);
  assert.notEqual(recurringKey(hex('c2 08 00')), recurringKey(hex('c3')));
  assert.notEqual(recurringKey(hex('b8 01 00 00 00')), undefined);
  assert.notEqual(recurringKey(hex('b8 01 00 00 00')), recurringKey(hex('b8 02 00 00 00')));
});

test('atAddress() is the instruction decoded there, for one with a key and no %rip-relative operand', () => {
  for (const bytes of [
    '55',
    'f3 0f 1e fa',
    '48 83 ec 18',
    '41 57',
    '48 81 ec 18 01 00 00',
    'c3',
    'c2 08 00',
    'b8 01 00 00 00',
  ]) {
    const [template] = decodeInstructions(hex(bytes), BASE);
    const there = 0x7f00_1234n;
    const [decoded] = decodeInstructions(hex(bytes), there);
    const moved = atAddress(template!, there);
    assert.deepEqual(
      { ...moved, vaddr: moved.vaddr, text: moved.text, bytes: moved.bytes },
      {
        vaddr: decoded!.vaddr,
        length: decoded!.length,
        mnemonic: decoded!.mnemonic,
        invalid: false,
        ripRelative: false,
        ripTarget: undefined,
        branchTarget: undefined,
        text: decoded!.text,
        bytes: decoded!.bytes,
      },
      bytes,
    );
  }
});
