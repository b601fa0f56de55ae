import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkInstructionBoundary } from './boundary.js';

const BASE = 0x401000n;

function hex(text: string): Uint8Array {
  return Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
}

// A small function, as objdump shows it:
//   401000: 55                      push %rbp
//   401001: 48 89 e5                mov %rsp,%rbp
//   401004: 48 c7 45 f8 01 00 00 00 movq $0x1,-0x8(%rbp)
//   40100c: e8 00 00 00 00          call 0x401011
//   401011: c9                      leave
//   401012: c3                      ret
const FUNCTION = hex('55  48 89 e5  48 c7 45 f8 01 00 00 00  e8 00 00 00 00  c9  c3');

test('checkInstructionBoundary() accepts the start of every instruction', () => {
  for (const [vaddr, text] of [
    [0x401000n, 'push %rbp'],
    [0x401001n, 'mov %rsp,%rbp'],
    [0x401004n, 'movq $0x1,-0x8(%rbp)'],
    [0x40100cn, 'call 0x401011'],
    [0x401011n, 'leave'],
    [0x401012n, 'ret'],
  ] as const) {
    const check = checkInstructionBoundary(FUNCTION, BASE, vaddr);
    assert.ok(check.ok, `0x${vaddr.toString(16)}`);
    assert.equal(check.instruction.vaddr, vaddr);
    assert.equal(check.instruction.text, text);
  }
});

test('checkInstructionBoundary() names the instruction an offset falls inside and its boundaries', () => {
  // 0x401007 is byte 3 of the 8-byte movq at 0x401004.
  const check = checkInstructionBoundary(FUNCTION, BASE, 0x401007n);
  assert.equal(check.ok, false);
  assert.ok(!check.ok && check.reason === 'inside-instruction');
  assert.equal(check.containing.vaddr, 0x401004n);
  assert.equal(check.containing.length, 8);
  assert.equal(check.containing.text, 'movq $0x1,-0x8(%rbp)');
  assert.equal(check.previous, 0x401004n);
  assert.equal(check.next, 0x40100cn);
});

test('checkInstructionBoundary() finds the last byte of an instruction inside it', () => {
  const check = checkInstructionBoundary(FUNCTION, BASE, 0x401010n);
  assert.ok(!check.ok && check.reason === 'inside-instruction');
  assert.equal(check.containing.text, 'call 0x401011');
  assert.equal(check.previous, 0x40100cn);
  assert.equal(check.next, 0x401011n);
});

test('checkInstructionBoundary() reports an address outside the function as past its end', () => {
  for (const vaddr of [0x401013n, 0x402000n, 0x400fffn]) {
    const check = checkInstructionBoundary(FUNCTION, BASE, vaddr);
    assert.deepEqual(check, { ok: false, reason: 'past-end', lastGood: 0x401012n });
  }
  assert.deepEqual(checkInstructionBoundary(new Uint8Array(0), BASE, BASE), {
    ok: false,
    reason: 'past-end',
    lastGood: undefined,
  });
});

test('checkInstructionBoundary() reports bytes it cannot decode before the target', () => {
  // push %rbp; 0x06 (not an instruction in 64-bit mode); nop; ret
  const code = hex('55  06  90  c3');
  const check = checkInstructionBoundary(code, BASE, 0x401003n);
  assert.deepEqual(check, { ok: false, reason: 'undecodable', lastGood: 0x401000n });
  // An undecodable first instruction leaves no good boundary at all.
  assert.deepEqual(checkInstructionBoundary(hex('06 c3'), BASE, 0x401001n), {
    ok: false,
    reason: 'undecodable',
    lastGood: undefined,
  });
});

test('checkInstructionBoundary() accepts a boundary before bytes it cannot decode', () => {
  const check = checkInstructionBoundary(hex('55  90  06'), BASE, 0x401001n);
  assert.ok(check.ok);
  assert.equal(check.instruction.text, 'nop');
});
