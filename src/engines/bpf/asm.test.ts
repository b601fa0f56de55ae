import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Asm } from './asm.js';
import { ld64Imm, mov64Imm } from './insn.js';

test('jumps reach their labels, forward and backward, counting 64-bit loads as two slots', () => {
  const a = new Asm();
  a.label('top');
  a.jmpImm('JEQ', 1, 0, 'end'); // slot 0
  a.emit(ld64Imm(2, 1n << 40n)); // slots 1-2
  a.goto('top'); // slot 3
  a.label('end');
  a.returnZero(); // slots 4-5
  const insns = a.finish();
  assert.equal(insns.length, 6);
  assert.equal(insns[0]!.off, 3, 'slot 0 + 1 + 3 = slot 4');
  assert.equal(insns[3]!.off, -4, 'slot 3 + 1 - 4 = slot 0');
  assert.equal(a.isTarget('end'), true);
  assert.equal(a.isTarget('nowhere'), false);
});

test('an undefined or doubly defined label is a bug caught at once', () => {
  const a = new Asm();
  a.goto('missing').emit(mov64Imm(0, 0));
  assert.throws(() => a.finish(), /not defined/);
  assert.throws(() => new Asm().label('x').label('x'), /defined twice/);
});
