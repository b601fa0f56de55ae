// passableAtEntry() against iced, on the first instructions of every function of real binaries
// (node, libc, libstdc++, python3): each instruction it lets an entry probe pass must, as iced
// decodes it, fall through to the next, touch no stack, write no memory and no general
// register but %rax or %r11 (none for `flags`), and be no instruction the kernel emulates;
// and it must know the common ones (else entries would stay single-stepped for nothing).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { openElf, SymbolIndex } from '../../symbols/index.js';
import { decodeInstructions } from './decode.js';
import { passableAtEntry } from './entry-pass.js';
import { withInstruction, writtenBy } from './guard.js';
import { analyzeKernelHandling } from './kernel-handling.js';

const BINARIES = [
  '/usr/bin/node',
  '/lib/x86_64-linux-gnu/libc.so.6',
  '/usr/lib/x86_64-linux-gnu/libstdc++.so.6',
  '/usr/bin/python3',
];

/** What iced says the instruction does, in passableAtEntry()'s terms. */
function icedChange(bytes: Uint8Array, vaddr: bigint): string {
  return withInstruction(bytes, vaddr, (iced, instruction) => {
    if (instruction.flowControl !== iced.FlowControl.Next) return 'a branch';
    if (instruction.isStackInstruction || instruction.isSaveRestoreInstruction) return 'stack';
    const written = writtenBy(iced, instruction);
    if (written.memory) return 'memory';
    const registers = written.registers
      .filter((register) => iced.RegisterExt.isGPR(register))
      .map((register) => iced.RegisterExt.fullRegister(register));
    if (registers.length === 0) return 'flags';
    const scratch = [iced.Register.RAX, iced.Register.R11];
    return registers.every((register) => scratch.includes(register))
      ? 'scratch'
      : `writes ${registers.map((register) => iced.Register[register]).join(',')}`;
  });
}

test('what passableAtEntry() lets an entry probe pass changes only the flags, %rax or %r11, as iced says', () => {
  for (const path of BINARIES.filter((file) => existsSync(file))) {
    const elf = openElf(path);
    try {
      const index = new SymbolIndex(elf);
      let instructions = 0;
      let passed = 0;
      const seen = new Set<bigint>();
      for (let k = 0; k < index.length; k++) {
        const fn = index.function(k);
        if (fn.type !== 'func' || fn.sizeBytes === 0n || seen.has(fn.vaddr)) continue;
        seen.add(fn.vaddr);
        const offset = elf.vaddrToFileOffset(fn.vaddr);
        if (offset === undefined || !elf.loadSegmentOf(fn.vaddr)?.executable) continue;
        const bytes = elf.read(offset, Math.min(Number(fn.sizeBytes), 64));
        for (const instruction of decodeInstructions(bytes, fn.vaddr, { maxCount: 5 })) {
          if (instruction.invalid) break;
          instructions++;
          const at = Number(instruction.vaddr - fn.vaddr);
          const pass = passableAtEntry(bytes, at, bytes.length);
          if (pass === undefined) continue;
          passed++;
          const where = `${path} ${fn.name}+${at}: ${instruction.text}`;
          assert.equal(pass.length, instruction.length, where);
          assert.equal(icedChange(instruction.bytes, instruction.vaddr), pass.change, where);
          assert.equal(
            analyzeKernelHandling(instruction, { kernel: { major: 6, minor: 18 } }).strategy,
            'single-step',
            where,
          );
        }
      }
      console.log(`${path}: ${passed} of ${instructions} first instructions passable`);
      assert.ok(passed > instructions / 10, `${path}: only ${passed} of ${instructions}`);
    } finally {
      elf.close();
    }
  }
});

test('passableAtEntry() on hand-made encodings', () => {
  const pass = (...bytes: number[]) => passableAtEntry(Uint8Array.from(bytes), 0, bytes.length);
  // test %rdi,%rdi; cmp $0xb,%esi; testb $0x4,0x34(%rdi)
  assert.deepEqual(pass(0x48, 0x85, 0xff), { length: 3, change: 'flags' });
  assert.deepEqual(pass(0x83, 0xfe, 0x0b), { length: 3, change: 'flags' });
  assert.deepEqual(pass(0xf6, 0x47, 0x34, 0x04), { length: 4, change: 'flags' });
  // mov %rdx,%rax; mov 0x28(%rdi),%rax; lea -0x1(%rdi),%rax; xor %eax,%eax; mov $1,%eax
  assert.deepEqual(pass(0x48, 0x89, 0xd0), { length: 3, change: 'scratch' });
  assert.deepEqual(pass(0x48, 0x8b, 0x47, 0x28), { length: 4, change: 'scratch' });
  assert.deepEqual(pass(0x48, 0x8d, 0x47, 0xff), { length: 4, change: 'scratch' });
  assert.deepEqual(pass(0x31, 0xc0), { length: 2, change: 'scratch' });
  assert.deepEqual(pass(0xb8, 1, 0, 0, 0), { length: 5, change: 'scratch' });
  // mov %rdi,%r11
  assert.deepEqual(pass(0x49, 0x89, 0xfb), { length: 3, change: 'scratch' });
  // Not: mov %rdi,%rdx (an argument's register); mov %rax,(%rdi) (memory); xor %eax,(%rdi);
  // sub $8,%rsp (the stack); push %rbp; lea into %r10 (a nested function's static chain);
  // cmp with a lock or rep prefix; `not` (f7 /2).
  assert.equal(pass(0x48, 0x89, 0xfa), undefined);
  assert.equal(pass(0x48, 0x89, 0x07), undefined);
  assert.equal(pass(0x31, 0x07), undefined);
  assert.equal(pass(0x48, 0x83, 0xec, 0x08), undefined);
  assert.equal(pass(0x55), undefined);
  assert.equal(pass(0x4c, 0x8d, 0x57, 0x08), undefined);
  assert.equal(pass(0xf3, 0x48, 0x85, 0xff), undefined);
  assert.equal(pass(0xf7, 0xd0), undefined);
});
