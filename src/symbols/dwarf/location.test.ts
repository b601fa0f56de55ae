// Location expressions evaluated as DWARF 5 (section 2.6) defines them, for the forms
// compilers write; whether the values read through them are right is checked on programs in
// dwarf-vars.int and go-probes.int.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describeLocation, evaluateLocation } from './location.js';

const REG0 = 0x50;
const BREG0 = 0x70;
const PIECE = 0x93;
const options = (sizeBytes: number | undefined) => ({
  addressSize: 8,
  frameBase: () => 'none' as const,
  cfa: () => 'none' as const,
  indexedAddress: () => 0n,
  atEntry: true,
  sizeBytes,
});

test("a value in pieces (Go's string in %rax and %rbx): each part where it is, in order", () => {
  const location = evaluateLocation(
    new Uint8Array([REG0, PIECE, 8, REG0 + 3, PIECE, 8]),
    options(16),
  );
  assert.deepEqual(location, {
    kind: 'pieces',
    parts: [
      { location: { kind: 'register', register: 0 }, bytes: 8 },
      { location: { kind: 'register', register: 3 }, bytes: 8 },
    ],
  });
  assert.equal(describeLocation(location), '%rax (8 bytes), %rbx (8 bytes)');
});

test('a piece in memory, and an empty piece (that part optimized out)', () => {
  // 16(%rsp) for the first 8 bytes; nothing for the next 4.
  const location = evaluateLocation(
    new Uint8Array([BREG0 + 7, 16, PIECE, 8, PIECE, 4]),
    options(12),
  );
  assert.equal(location.kind, 'pieces');
  if (location.kind !== 'pieces') return;
  assert.deepEqual(location.parts[0], {
    location: { kind: 'memory', address: { base: { kind: 'register', register: 7 }, offset: 16n } },
    bytes: 8,
  });
  assert.equal(location.parts[1]!.location.kind, 'unavailable');
  assert.equal(location.parts[1]!.bytes, 4);
});

test('one piece that covers the whole value is its location; one that covers part of it is a piece', () => {
  assert.deepEqual(evaluateLocation(new Uint8Array([REG0 + 5, PIECE, 8]), options(8)), {
    kind: 'register',
    register: 5,
  });
  assert.equal(evaluateLocation(new Uint8Array([REG0 + 5, PIECE, 4]), options(8)).kind, 'pieces');
});

test('a thread-local variable is said to be one, not an operation not evaluated', () => {
  // DW_OP_const8u 0, DW_OP_form_tls_address (GCC's __thread at -O2).
  const location = evaluateLocation(
    new Uint8Array([0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0x9b]),
    options(4),
  );
  assert.equal(location.kind, 'unavailable');
  assert.match(describeLocation(location), /^it is thread-local \(__thread, thread_local\)/);
});
