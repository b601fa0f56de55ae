import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type CodePart, findReturnInstructions, sweptReturnInstructions } from './returns.js';

const BASE = 0x401000n;

function hex(text: string): Uint8Array {
  return Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
}

function part(text: string, vaddr = BASE): CodePart {
  return { vaddr, bytes: hex(text) };
}

/** The exits found, as "0xADDR kind text". */
function exits(...parts: CodePart[]): string[] {
  const scan = findReturnInstructions(parts);
  assert.ok(scan.ok, scan.ok ? '' : scan.reason);
  return scan.exits.map(
    (e) => `0x${e.instruction.vaddr.toString(16)} ${e.kind} ${e.instruction.text}`,
  );
}

test('findReturnInstructions() finds every ret, with its prefixes and a stack release', () => {
  //   401000: 48 85 ff        test %rdi,%rdi
  //   401003: 74 02           je 0x401007
  //   401005: f3 c3           repz ret
  //   401007: c2 08 00        ret $0x8
  assert.deepEqual(exits(part('48 85 ff  74 02  f3 c3  c2 08 00')), [
    '0x401005 ret repz ret',
    '0x401007 ret ret $0x8',
  ]);
});

test('findReturnInstructions() takes a jmp out of the function for a tail call, and one inside for a branch', () => {
  //   401000: 48 85 ff        test %rdi,%rdi
  //   401003: 7e 05           jle 0x40100a       (inside: a branch)
  //   401005: e9 f6 0f 00 00  jmp 0x402000       (outside: a tail call)
  //   40100a: eb f4           jmp 0x401000       (inside: a loop)
  assert.deepEqual(exits(part('48 85 ff  7e 05  e9 f6 0f 00 00  eb f4')), [
    '0x401005 tail-call jmp 0x402000',
  ]);
});

test('findReturnInstructions() takes indirect jumps through a GOT slot or a pointer for tail calls', () => {
  //   401000: ff 25 fa 0f 00 00   jmp *0xffa(%rip)   (a GOT slot)
  //   401006: ff 60 10            jmp *0x10(%rax)    (a virtual call)
  //   401009: ff e0               jmp *%rax          (a function pointer)
  assert.deepEqual(exits(part('ff 25 fa 0f 00 00  ff 60 10  ff e0')), [
    '0x401000 tail-call jmp *0xffa(%rip)',
    '0x401006 tail-call jmp *0x10(%rax)',
    '0x401009 tail-call jmp *%rax',
  ]);
});

test('findReturnInstructions() leaves jumps through a switch table inside the function', () => {
  // gcc, PIC: the entry loaded from the table indexed by %rdi, added to the table's base.
  //   401000: 48 63 04 ba     movslq (%rdx,%rdi,4),%rax
  //   401004: 48 01 d0        add %rdx,%rax
  //   401007: ff e0           jmp *%rax
  //   401009: c3              ret
  // gcc, non-PIC: one indexed jump. Go 1.19: a load indexed by %rcx into %rdx, then jmp.
  //   40100a: ff 24 fd 00 20 40 00  jmp *0x402000(,%rdi,8)
  //   401011: 48 8b 14 ca     mov (%rdx,%rcx,8),%rdx
  //   401015: ff e2           jmp *%rdx
  //   401017: c3              ret
  assert.deepEqual(
    exits(part('48 63 04 ba  48 01 d0  ff e0  c3  ff 24 fd 00 20 40 00  48 8b 14 ca  ff e2  c3')),
    ['0x401009 ret ret', '0x401017 ret ret'],
  );
});

test('findReturnInstructions() reads a cold part as the function: jumps between the parts stay inside', () => {
  //   401000: 85 ff           test %edi,%edi
  //   401002: 0f 88 f8 0f 00 00  js 0x402000   (into f.cold)
  //   401008: c3              ret
  //   402000 (f.cold): 31 c0  xor %eax,%eax
  //   402002: e9 01 f0 ff ff  jmp 0x401008     (back)
  //   402007: c3              ret
  const hot = part('85 ff  0f 88 f8 0f 00 00  c3');
  const cold = part('31 c0  e9 01 f0 ff ff  c3', 0x402000n);
  assert.deepEqual(exits(hot, cold), ['0x401008 ret ret', '0x402007 ret ret']);
});

test('findReturnInstructions() refuses code it cannot decode, a conditional jump out, and code with no way out', () => {
  const bad = findReturnInstructions([part('48 85 ff  0f 0b  c3  06')]);
  assert.ok(!bad.ok);
  assert.match(bad.reason, /the bytes at 0x401006 are not an instruction/);
  //   401000: 0f 85 fa 0f 00 00  jne 0x402000  (a conditional tail call)
  const conditional = findReturnInstructions([part('0f 85 fa 0f 00 00  c3')]);
  assert.ok(!conditional.ok);
  assert.match(conditional.reason, /conditional jump to another function \("jne 0x402000"/);
  assert.equal(conditional.at, 0x401000n);
  //   401000: eb fe  jmp 0x401000
  const loop = findReturnInstructions([part('eb fe')]);
  assert.ok(!loop.ok);
  assert.match(loop.reason, /no ret or jump out of it/);
});

test('findReturnInstructions() tells the lowest of its first bytes a jmp or jcc goes back to, not a call', () => {
  // The quick decoder's answer, and iced's the same.
  const startJump = (...parts: CodePart[]) => {
    const scan = findReturnInstructions(parts);
    const swept = sweptReturnInstructions(parts);
    assert.ok(scan.ok && swept.ok);
    assert.equal(swept.startJump, scan.startJump);
    return scan.startJump;
  };
  //   401000: ff cf           dec %edi
  //   401002: 75 fc           jne 0x401000       (the loop's head is the entry)
  //   401004: c3              ret
  assert.equal(startJump(part('ff cf  75 fc  c3')), BASE);
  //   401000: 55              push %rbp
  //   401001: ff cf           dec %edi
  //   401003: 75 fc           jne 0x401001       (the second instruction)
  //   401005: 5d              pop %rbp
  //   401006: c3              ret
  assert.equal(startJump(part('55  ff cf  75 fc  5d  c3')), BASE + 1n);
  //   401000: e8 fb ff ff ff  call 0x401000      (a call to itself: a call, not a loop)
  //   401005: c3              ret
  assert.equal(startJump(part('e8 fb ff ff ff  c3')), undefined);
  //   401000: 85 ff           test %edi,%edi
  //   401002: 74 05           je 0x401009        (forward, within the first bytes: told)
  //   401004: e8 f7 ff ff ff  call 0x401000
  //   401009: c3              ret
  assert.equal(startJump(part('85 ff  74 05  e8 f7 ff ff ff  c3')), BASE + 9n);
  // A cold part jumping back to the function's start.
  //   402000: eb fe ... jmp 0x401000 from the cold part: e9 fb ef ff ff
  assert.equal(startJump(part('85 ff  74 01  c3  c3'), part('e9 fb ef ff ff', 0x402000n)), BASE);
});
