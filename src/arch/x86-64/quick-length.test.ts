import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeInstructions } from './decode.js';
import { quickLength } from './quick-length.js';

function hex(text: string): Uint8Array {
  return Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
}

/** What iced makes of the bytes: the length of a valid instruction, or 0. */
function icedLength(bytes: Uint8Array): number {
  const [instruction] = decodeInstructions(bytes, 0x401000n, { maxCount: 1 });
  return instruction === undefined || instruction.invalid ? 0 : instruction.length;
}

test('quickLength() knows a lock prefix on what may take one, with a memory destination, as iced does', () => {
  const known = [
    'f0 0f c1 07', //                lock xadd %eax,(%rdi)
    'f0 48 0f b1 17', //             lock cmpxchg %rdx,(%rdi)
    'f0 0f b0 0a', //                lock cmpxchg %cl,(%rdx)
    'f0 83 47 08 01', //             lock addl $0x1,0x8(%rdi)
    'f0 41 83 6c 24 10 01', //       lock subl $0x1,0x10(%r12)
    'f0 48 01 07', //                lock add %rax,(%rdi)
    'f0 ff 07', //                   lock incl (%rdi)
    'f0 48 ff 0f', //                lock decq (%rdi)
    'f0 f7 1f', //                   lock negl (%rdi)
    'f0 87 07', //                   lock xchg %eax,(%rdi)
    'f0 48 0f ba 2f 03', //          lock btsq $0x3,(%rdi)
    'f0 0f ab 07', //                lock bts %eax,(%rdi)
    '66 f0 0f b1 17', //             lock cmpxchg %dx,(%rdi)
    'f0 81 07 00 01 00 00', //       lock addl $0x100,(%rdi)
  ];
  for (const text of known) {
    const bytes = hex(text);
    assert.equal(icedLength(bytes), bytes.length, `iced: ${text}`);
    assert.equal(quickLength(bytes, 0, bytes.length), bytes.length, text);
  }
});

test('quickLength() leaves to iced a lock on what may not take one, or on a register', () => {
  const unknown = [
    'f0 01 c0', //       lock add %eax,%eax: a register destination
    'f0 39 07', //       lock cmp: never lockable
    'f0 83 3f 01', //    lock cmpl $1,(%rdi): group 1's cmp
    'f0 8b 07', //       lock mov
    'f0 ff 27', //       lock jmp *(%rdi)
    'f0 0f c7 0f', //    lock cmpxchg8b (%rdi): valid, but not this decoder's
    'f2 f0 0f b1 17', // xacquire lock cmpxchg: left to iced
    'f0 90', //          lock nop
    'f0 c3', //          lock ret
  ];
  for (const text of unknown) {
    const bytes = hex(text);
    assert.equal(quickLength(bytes, 0, bytes.length), 0, text);
  }
  // The invalid ones are invalid to iced too (what the quick decoder answers must never
  // differ from it: 0 only means "ask iced").
  for (const text of ['f0 01 c0', 'f0 39 07', 'f0 8b 07', 'f0 90', 'f0 c3']) {
    assert.equal(icedLength(hex(text)), 0, `iced: ${text}`);
  }
});
