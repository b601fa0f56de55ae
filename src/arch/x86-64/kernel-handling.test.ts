// How the kernel's x86 uprobes handle each class of instruction. The expectations come from
// arch/x86/kernel/uprobes.c of each kernel version; the 6.18 rows were also observed on a
// 6.18 kernel (a refused probe fails to enable with ENOTSUPP; a single-stepped one makes the
// kernel map its "[uprobes]" XOL page into the process; an emulated one does not), and the
// kernel-handling.int.test.ts suite checks them again on the machine running the tests.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeInstructions } from './decode.js';
import { analyzeKernelHandling, type KernelHandling } from './kernel-handling.js';

const V6_18 = { major: 6, minor: 18 };
const V6_19 = { major: 6, minor: 19 };
const V6_16 = { major: 6, minor: 16 };
const V6_1 = { major: 6, minor: 1 };

function handle(bytes: string, kernel = V6_18, vaddr = 0x401000n): KernelHandling {
  const code = Uint8Array.from(Buffer.from(bytes.replace(/\s+/g, ''), 'hex'));
  const [insn] = decodeInstructions(code, vaddr, { maxCount: 1 });
  assert.ok(insn !== undefined && insn.length === code.length, `${bytes} is one instruction`);
  return analyzeKernelHandling(insn, { kernel });
}

type Expect =
  | { strategy: 'emulate'; what?: string | RegExp }
  | { strategy: 'single-step'; what?: string | RegExp; ripRelative?: boolean }
  | { strategy: 'refuse'; reason: RegExp }
  | { strategy: 'unsafe'; reason: RegExp };

function check(actual: KernelHandling, expected: Expect, label: string): void {
  assert.equal(actual.strategy, expected.strategy, `${label}: ${JSON.stringify(actual)}`);
  if ('what' in expected && expected.what !== undefined && 'what' in actual) {
    if (typeof expected.what === 'string') assert.equal(actual.what, expected.what, label);
    else assert.match(actual.what, expected.what, label);
  }
  if ('reason' in expected && 'reason' in actual)
    assert.match(actual.reason, expected.reason, label);
  if (expected.strategy === 'single-step' && expected.ripRelative !== undefined) {
    assert.ok(actual.strategy === 'single-step');
    assert.equal(actual.ripRelative, expected.ripRelative, label);
  }
}

// bytes | instruction | expected on 6.18
const ROWS: readonly [string, string, Expect][] = [
  // Emulated: push of a register (alone, or with REX 0x41 only).
  ['55', 'push %rbp', { strategy: 'emulate', what: 'push %rbp' }],
  ['41 54', 'push %r12', { strategy: 'emulate', what: 'push %r12' }],
  ['48 50', 'rex.W push %rax', { strategy: 'single-step', what: 'push' }],
  ['66 50', 'push %ax', { strategy: 'single-step', what: 'push' }],
  // Emulated: relative call and jmp, conditional jumps short and near.
  ['e8 00 00 00 00', 'call rel32', { strategy: 'emulate', what: 'call' }],
  ['e9 10 00 00 00', 'jmp rel32', { strategy: 'emulate', what: 'jmp' }],
  ['eb 10', 'jmp rel8', { strategy: 'emulate', what: 'jmp' }],
  ['f2 e9 00 00 00 00', 'bnd jmp rel32', { strategy: 'emulate', what: 'jmp' }],
  ['74 05', 'je rel8', { strategy: 'emulate', what: 'je' }],
  ['0f 85 10 00 00 00', 'jne rel32', { strategy: 'emulate', what: 'jne' }],
  [
    '66 e8 00 00 00 00',
    'call with a 0x66 prefix',
    { strategy: 'refuse', reason: /operand-size prefix/ },
  ],
  // Nops: opcode 0x90 in any form, and the kernel's own nop patterns of 1-8 bytes.
  ['90', 'nop', { strategy: 'emulate', what: 'nop' }],
  ['66 90', 'xchg %ax,%ax', { strategy: 'emulate' }],
  ['0f 1f 40 00', 'nopl 0x0(%rax)', { strategy: 'emulate', what: 'nop' }],
  ['0f 1f 80 00 00 00 00', 'nopl 0x0(%rax)', { strategy: 'emulate', what: 'nop' }],
  ['0f 1f 41 00', 'nopl 0x0(%rcx)', { strategy: 'single-step', what: 'nopl' }],
  ['66 0f 1f 84 00 00 00 00 00', 'nopw 0x0(%rax,%rax,1)', { strategy: 'single-step' }],
  ['f3 90', 'pause', { strategy: 'emulate', what: /pause/ }],
  ['48 89 c0', 'mov %rax,%rax', { strategy: 'single-step', what: 'mov' }],
  ['48 8d 40 00', 'lea 0x0(%rax),%rax', { strategy: 'single-step', what: 'lea' }],
  // 5-byte nops: emulated, then rewritten into a call to the uprobe trampoline.
  ['0f 1f 44 00 00', 'nopl 0x0(%rax,%rax,1)', { strategy: 'emulate', what: /trampoline/ }],
  ['66 66 66 66 90', 'data16 ... xchg %ax,%ax', { strategy: 'emulate', what: /trampoline/ }],
  // Single-stepped out of line, with fixups.
  ['48 89 e5', 'mov %rsp,%rbp', { strategy: 'single-step', what: 'mov', ripRelative: false }],
  ['48 8b 05 10 00 00 00', 'mov 0x10(%rip),%rax', { strategy: 'single-step', ripRelative: true }],
  [
    'ff 15 10 00 00 00',
    'call *0x10(%rip)',
    { strategy: 'single-step', what: 'indirect call', ripRelative: true },
  ],
  ['ff d0', 'call *%rax', { strategy: 'single-step', what: 'indirect call', ripRelative: false }],
  ['ff e0', 'jmp *%rax', { strategy: 'single-step', what: 'indirect jmp' }],
  ['c3', 'ret', { strategy: 'single-step', what: 'ret' }],
  ['9d', 'popf', { strategy: 'single-step', what: 'popf' }],
  ['0f 05', 'syscall', { strategy: 'single-step', what: 'syscall' }],
  ['0f 0b', 'ud2', { strategy: 'single-step', what: 'ud2' }],
  ['0f a2', 'cpuid', { strategy: 'single-step', what: 'cpuid' }],
  [
    '64 48 8b 04 25 28 00 00 00',
    'mov %fs:0x28,%rax',
    { strategy: 'single-step', ripRelative: false },
  ],
  ['62 f1 75 48 fe d0', 'vpaddd %zmm0,%zmm1,%zmm2', { strategy: 'single-step', what: 'vpaddd' }],
  // Refused (ENOTSUPP).
  ['cc', 'int3', { strategy: 'refuse', reason: /int3/ }],
  ['f4', 'hlt', { strategy: 'refuse', reason: /hlt/ }],
  ['e4 00', 'in $0x0,%al', { strategy: 'refuse', reason: /port I\/O/ }],
  ['8e d0', 'mov %eax,%ss', { strategy: 'refuse', reason: /%ss/ }],
  ['f0 48 0f b1 0a', 'lock cmpxchg %rcx,(%rdx)', { strategy: 'refuse', reason: /lock prefix/ }],
  ['3e ff e0', 'notrack jmp *%rax', { strategy: 'refuse', reason: /ds segment prefix/ }],
  ['66 2e 0f 1f 84 00 00 00 00 00', 'cs nopw', { strategy: 'refuse', reason: /cs segment prefix/ }],
  // VEX/EVEX instructions are checked by their opcode byte against the one-byte table.
  ['c5 fe 6f 06', 'vmovdqu (%rsi),%ymm0', { strategy: 'refuse', reason: /VEX.*0x6f/ }],
  ['c5 f9 ef c0', 'vpxor %xmm0,%xmm0,%xmm0', { strategy: 'refuse', reason: /VEX.*0xef/ }],
  ['62 f1 fe 48 6f 06', 'vmovdqu64 (%rsi),%zmm0', { strategy: 'refuse', reason: /EVEX.*0x6f/ }],
  // ... and ones whose opcode byte is a branch's are "emulated" as that branch: skipped.
  [
    'c5 f9 74 c8',
    'vpcmpeqb %xmm0,%xmm0,%xmm1',
    { strategy: 'unsafe', reason: /conditional jump and skips it/ },
  ],
  ['c5 fa 7f 44 24 f0', 'vmovdqu %xmm0,-0x10(%rsp)', { strategy: 'unsafe', reason: /skips it/ }],
  ['c5 f9 7e c0', 'vmovd %xmm0,%eax', { strategy: 'unsafe', reason: /skips it/ }],
  ['c5 f8 77', 'vzeroupper', { strategy: 'unsafe', reason: /skips it/ }],
  [
    'c5 f1 eb c8',
    'vpor %xmm0,%xmm1,%xmm1',
    { strategy: 'unsafe', reason: /relative jmp and skips it/ },
  ],
  [
    'c5 f1 e8 c8',
    'vpsubsb %xmm0,%xmm1,%xmm1',
    { strategy: 'unsafe', reason: /bogus return address/ },
  ],
  [
    '62 f1 fe 08 7f 44 24 ff',
    'vmovdqu64 %xmm0,-0x10(%rsp)',
    { strategy: 'unsafe', reason: /EVEX/ },
  ],
  ['c5 f8 90 c8', 'kmovw %k0,%k1', { strategy: 'unsafe', reason: /nop and skips it/ }],
  ['41 90', 'xchg %eax,%r8d', { strategy: 'unsafe', reason: /never exchanged/ }],
];

for (const [bytes, name, expected] of ROWS) {
  test(`analyzeKernelHandling() on Linux 6.18: ${name} (${bytes}) is ${expected.strategy}`, () => {
    check(handle(bytes), expected, name);
  });
}

// The same instructions where the rules of other versions differ.
const BY_VERSION: readonly [string, string, { major: number; minor: number }, Expect][] = [
  // 6.19 recognises nops by form and no longer by opcode 0x90.
  ['f3 90', 'pause', V6_19, { strategy: 'single-step', what: 'pause' }],
  ['41 90', 'xchg %eax,%r8d', V6_19, { strategy: 'single-step', what: 'xchg' }],
  ['c5 f8 90 c8', 'kmovw %k0,%k1', V6_19, { strategy: 'single-step', what: 'kmovw' }],
  ['0f 1f 41 00', 'nopl 0x0(%rcx)', V6_19, { strategy: 'emulate', what: 'nop' }],
  ['66 0f 1f 84 00 00 00 00 00', 'nopw (9 bytes)', V6_19, { strategy: 'emulate', what: 'nop' }],
  ['48 89 c0', 'mov %rax,%rax', V6_19, { strategy: 'emulate', what: /mov/ }],
  ['89 c0', 'mov %eax,%eax (zero-extends: not a nop)', V6_19, { strategy: 'single-step' }],
  ['48 8d 40 00', 'lea 0x0(%rax),%rax', V6_19, { strategy: 'emulate', what: /lea/ }],
  ['48 8d 40 01', 'lea 0x1(%rax),%rax', V6_19, { strategy: 'single-step', what: 'lea' }],
  ['eb 00', 'jmp +0', V6_19, { strategy: 'emulate' }],
  ['0f 1f 44 00 00', 'nopl (5 bytes)', V6_19, { strategy: 'emulate', what: /trampoline/ }],
  ['c5 f9 74 c8', 'vpcmpeqb', V6_19, { strategy: 'unsafe', reason: /skips it/ }],
  // 6.16 and 6.17 emulate the kernel's nop patterns but do not optimise 5-byte nops.
  ['0f 1f 44 00 00', 'nopl (5 bytes)', V6_16, { strategy: 'emulate', what: 'nop' }],
  // Before 6.16 only opcode 0x90 counts as a nop.
  ['0f 1f 44 00 00', 'nopl (5 bytes)', V6_1, { strategy: 'single-step', what: 'nopl' }],
  ['0f 1f 40 00', 'nopl 0x0(%rax)', V6_1, { strategy: 'single-step', what: 'nopl' }],
  ['66 90', 'xchg %ax,%ax', V6_1, { strategy: 'emulate' }],
  ['f3 90', 'pause', V6_1, { strategy: 'emulate', what: /pause/ }],
  ['55', 'push %rbp', V6_1, { strategy: 'emulate', what: 'push %rbp' }],
];

for (const [bytes, name, kernel, expected] of BY_VERSION) {
  test(`analyzeKernelHandling() on Linux ${kernel.major}.${kernel.minor}: ${name} (${bytes}) is ${expected.strategy}`, () => {
    check(handle(bytes, kernel), expected, name);
  });
}

test('analyzeKernelHandling() uses the newest rules without a kernel version', () => {
  const [insn] = decodeInstructions(Uint8Array.of(0xf3, 0x90), 0x1000n);
  assert.equal(analyzeKernelHandling(insn!).strategy, 'single-step');
});

test('analyzeKernelHandling() does not promise the trampoline for a 5-byte nop across a page boundary', () => {
  // 4 bytes left in the page: the kernel cannot rewrite it atomically, so it only emulates.
  check(handle('0f 1f 44 00 00', V6_18, 0x401ffcn), { strategy: 'emulate', what: 'nop' }, 'nop5');
  check(
    handle('0f 1f 44 00 00', V6_18, 0x401ffbn),
    { strategy: 'emulate', what: /trampoline/ },
    'nop5',
  );
});

test('analyzeKernelHandling() refuses bytes that are not an instruction', () => {
  const [insn] = decodeInstructions(Uint8Array.of(0x06), 0x1000n);
  assert.ok(insn?.invalid);
  check(
    analyzeKernelHandling(insn),
    { strategy: 'refuse', reason: /not a valid instruction/ },
    '06',
  );
});
