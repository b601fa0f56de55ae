import assert from 'node:assert/strict';
import { test } from 'node:test';
import { changesCallState, planPairSlot, reverseEffect } from './guard.js';

const bytes = (...b: number[]) => new Uint8Array(b);
/** A little-endian int32, as the four bytes of a rel32 or disp32. */
const le32 = (value: bigint) => {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setInt32(0, Number(value), true);
  return [...out];
};

test('reverseEffect() takes back what an instruction did to %rsp; one that writes no register needs nothing', () => {
  const cases: [string, Uint8Array, bigint][] = [
    ['push %rbp', bytes(0x55), 8n],
    ['push %r15', bytes(0x41, 0x57), 8n],
    ['sub $0x8,%rsp', bytes(0x48, 0x83, 0xec, 0x08), 8n],
    ['sub $0x1000,%rsp', bytes(0x48, 0x81, 0xec, 0x00, 0x10, 0x00, 0x00), 0x1000n],
    ['add $-0x80,%rsp', bytes(0x48, 0x83, 0xc4, 0x80), 0x80n],
    ['lea -0x18(%rsp),%rsp', bytes(0x48, 0x8d, 0x64, 0x24, 0xe8), 0x18n],
    ['endbr64', bytes(0xf3, 0x0f, 0x1e, 0xfa), 0n],
    ['nopl (%rax)', bytes(0x0f, 0x1f, 0x00), 0n],
    ['test %rdi,%rdi', bytes(0x48, 0x85, 0xff), 0n],
    // Go's stack check: flags only.
    ['cmp 0x10(%r14),%rsp', bytes(0x49, 0x3b, 0x66, 0x10), 0n],
    ['push (%rax)', bytes(0xff, 0x30), 8n],
    // A counter in memory, as a C++ or Rust function's first instruction may be.
    ['lock addq $0x1,0x2c6b(%rip)', bytes(0xf0, 0x48, 0x83, 0x05, 0x6b, 0x2c, 0, 0, 0x01), 0n],
    ['lock incq 0x10(%rip)', bytes(0xf0, 0x48, 0xff, 0x05, 0x10, 0, 0, 0), 0n],
    ['mov %rdi,-0x8(%rsp)', bytes(0x48, 0x89, 0x7c, 0x24, 0xf8), 0n],
  ];
  for (const [text, code, delta] of cases) {
    assert.deepEqual(reverseEffect(code, 0x1000n), { rspDelta: delta }, text);
  }
});

test('reverseEffect() refuses what overwrites a register, branches, or moves %rsp by other than 8', () => {
  const cases: [string, Uint8Array, RegExp][] = [
    ['mov %rsp,%rbp', bytes(0x48, 0x89, 0xe5), /^"mov %rsp,%rbp" writes rbp, which cannot/],
    ['xor %eax,%eax', bytes(0x31, 0xc0), /writes rax/],
    ['pop %rbx', bytes(0x5b), /writes rbx/],
    ['lea 0x1(%rdi,%rdi,2),%rax', bytes(0x48, 0x8d, 0x44, 0x3f, 0x01), /writes rax/],
    ['sub %rax,%rsp', bytes(0x48, 0x29, 0xc4), /moves %rsp by an amount not known/],
    ['pushw %ax', bytes(0x66, 0x50), /moves %rsp/],
    ['jmp .+2', bytes(0xeb, 0x00), /is a branch/],
    ['call rel32', bytes(0xe8, 0, 0, 0, 0), /is a branch/],
  ];
  for (const [text, code, reason] of cases) {
    const result = reverseEffect(code, 0x1000n);
    assert.equal(typeof result, 'string', text);
    assert.match(result as string, reason, text);
  }
});

test('planPairSlot() runs two instructions, a %rip-relative one re-aimed, then jumps past both', () => {
  // 1400: sub $0x8,%rsp ; 1404: lock addq $0x1,0x2c6b(%rip) # 4078 ; 140d: call ...
  const code = bytes(0x48, 0x83, 0xec, 0x08, 0xf0, 0x48, 0x83, 0x05, ...le32(0x2c6bn), 0x01);
  const slot = 0x10000n;
  const pair = planPairSlot(code, 0x1400n, slot);
  assert.notEqual(typeof pair, 'string', String(pair));
  if (typeof pair === 'string') return;
  assert.deepEqual(pair.lengths, [4, 9]);
  assert.deepEqual(
    [...pair.slotBytes],
    [
      ...[0x48, 0x83, 0xec, 0x08], // sub $0x8,%rsp
      ...[0xf0, 0x48, 0x83, 0x05, ...le32(0x4078n - (slot + 13n)), 0x01], // lock addq $1,0x4078
      ...[0xe9, ...le32(0x140dn - (slot + 18n))], // jmp 0x140d
    ],
  );
  assert.deepEqual(pair.slotMap, [
    { slotOffset: 0, vaddr: 0x1400n },
    { slotOffset: 4, vaddr: 0x1404n },
    { slotOffset: 13, vaddr: 0x140dn },
  ]);
});

test('planPairSlot() re-aims a conditional jump after the first instruction (Go’s stack check)', () => {
  // 4000: cmp 0x10(%r14),%rsp ; 4004: jbe 4040 (76 3a) ; 4006: ...
  const code = bytes(0x49, 0x3b, 0x66, 0x10, 0x76, 0x3a, 0x90);
  const slot = 0x20000n;
  const pair = planPairSlot(code, 0x4000n, slot);
  if (typeof pair === 'string') assert.fail(pair);
  assert.deepEqual(
    [...pair.slotBytes],
    [
      ...[0x49, 0x3b, 0x66, 0x10], // cmp 0x10(%r14),%rsp
      ...[0x0f, 0x86, ...le32(0x4040n - (slot + 10n))], // jbe 0x4040
      ...[0xe9, ...le32(0x4006n - (slot + 15n))], // jmp 0x4006
    ],
  );
  assert.deepEqual(pair.slotMap.at(-1), { slotOffset: 10, vaddr: 0x4006n });
});

test('planPairSlot() says why two instructions cannot share a slot', () => {
  // A call first, or a call second: neither runs out of line.
  assert.match(String(planPairSlot(bytes(0xe8, 0, 0, 0, 0, 0x90), 0x1000n, 0x2000n)), /branch/);
  assert.match(String(planPairSlot(bytes(0x55, 0xe8, 0, 0, 0, 0), 0x1000n, 0x2000n)), /branch/);
  assert.match(String(planPairSlot(bytes(0x55), 0x1000n, 0x2000n)), /not known/);
});

test('changesCallState(): vector, mask and flag writes leave what a probe reads alone; a general register, the stack, memory or a branch do not', () => {
  // Assembled with `as`, read back with objdump -d.
  const kept: [string, Uint8Array][] = [
    ['vpbroadcastb %esi,%zmm16', bytes(0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6)],
    ['vmovd %esi,%xmm0', bytes(0xc5, 0xf9, 0x6e, 0xc6)],
    ['vpxor %xmm15,%xmm15,%xmm15', bytes(0xc4, 0x41, 0x01, 0xef, 0xff)],
    ['vzeroupper', bytes(0xc5, 0xf8, 0x77)],
    ['kmovw %k1,%k2', bytes(0xc5, 0xf8, 0x90, 0xd1)],
    // Reads memory (what an argument points at), writes a vector register.
    ['vpcmpeqb (%rdi),%ymm0,%ymm1', bytes(0xc5, 0xfd, 0x74, 0x0f)],
    ['test %rdi,%rdi', bytes(0x48, 0x85, 0xff)],
  ];
  for (const [text, code] of kept) assert.equal(changesCallState(code, 0x401000n), undefined, text);
  const changed: [string, Uint8Array, string][] = [
    ['vmovd %xmm0,%eax', bytes(0xc5, 0xf9, 0x7e, 0xc0), 'it writes %rax'],
    ['mov %rdi,%rax', bytes(0x48, 0x89, 0xf8), 'it writes %rax'],
    ['vmovdqu64 %zmm16,(%rdi)', bytes(0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x07), 'it writes memory'],
    ['lock addl $0x1,(%rdi)', bytes(0xf0, 0x83, 0x07, 0x01), 'it writes memory'],
    ['push %rbp', bytes(0x55), 'it changes the stack'],
    ['ret', bytes(0xc3), 'it is a branch'],
    ['hlt', bytes(0xf4), 'it faults in user space'],
    ['in $0x10,%al', bytes(0xe4, 0x10), 'it faults in user space'],
  ];
  for (const [text, code, why] of changed) {
    assert.equal(changesCallState(code, 0x401000n), why, text);
  }
});
