// The encoder against the byte patterns the eBPF instruction set document gives (opcode 0xb7
// is mov64 with an immediate, 0x95 exit, 0x79/0x7b ldxdw/stxdw, 0x18 lddw, 0x85 call...):
// these are what the kernel's BPF_* macros in filter.h produce.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  alu64Imm,
  atomicFetchAdd,
  call,
  encode,
  exit,
  jmpImm,
  jmpReg,
  ld64Imm,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  st,
  stx,
  toBigEndian,
} from './insn.js';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex').match(/.{16}/g);

test('instructions encode as the instruction-set document lays them out', () => {
  assert.deepEqual(
    hex(
      encode([
        mov64Imm(0, 0), // BPF_MOV64_IMM(BPF_REG_0, 0)
        ldx('DW', 1, 1, 112), // BPF_LDX_MEM(BPF_DW, BPF_REG_1, BPF_REG_1, 112)
        stx('DW', 10, -8, 0), // BPF_STX_MEM(BPF_DW, BPF_REG_10, BPF_REG_0, -8)
        st('W', 10, -4, 0), // BPF_ST_MEM(BPF_W, BPF_REG_10, -4, 0)
        alu64Imm('ADD', 2, -8), // BPF_ALU64_IMM(BPF_ADD, BPF_REG_2, -8)
        mov64Reg(2, 10), // BPF_MOV64_REG(BPF_REG_2, BPF_REG_10)
        call(1), // BPF_EMIT_CALL(BPF_FUNC_map_lookup_elem)
        jmpImm('JEQ', 0, 0, 2), // BPF_JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 2)
        jmpReg('JGT', 3, 4, -3), // BPF_JMP_REG(BPF_JGT, BPF_REG_3, BPF_REG_4, -3)
        exit(), // BPF_EXIT_INSN()
      ]),
    ),
    [
      'b700000000000000',
      '7911700000000000',
      '7b0af8ff00000000',
      '620afcff00000000',
      '07020000f8ffffff',
      'bfa2000000000000',
      '8500000001000000',
      '1500020000000000',
      '2d43fdff00000000',
      '9500000000000000',
    ],
  );
});

test('a 64-bit immediate takes two slots; a map fd load is marked BPF_PSEUDO_MAP_FD', () => {
  assert.deepEqual(hex(encode([ld64Imm(3, 0x1122334455667788n)])), [
    '1803000088776655',
    '0000000044332211',
  ]);
  // BPF_LD_MAP_FD(BPF_REG_1, 5)
  assert.deepEqual(hex(encode([ldMapFd(1, 5)])), ['1811000005000000', '0000000000000000']);
  assert.deepEqual(hex(encode([ld64Imm(0, -1n)])), ['18000000ffffffff', '00000000ffffffff']);
});

test('offsets and immediates that do not fit are refused, not wrapped', () => {
  assert.throws(() => jmpImm('JEQ', 0, 0, 0x8000), /offset 32768 is out of 16 bits/);
  assert.throws(() => mov64Imm(0, 2 ** 32), /immediate 4294967296 is out of 32 bits/);
  assert.deepEqual(hex(encode([mov64Imm(1, 0xffff_ffff)])), ['b7010000ffffffff']);
});

test('atomicFetchAdd() is BPF_ATOMIC_OP(BPF_DW, BPF_ADD | BPF_FETCH, ...)', () => {
  // opcode 0xdb (STX | DW | ATOMIC), dst r0, src r1, off 0, imm 0x01 (BPF_ADD | BPF_FETCH).
  assert.deepEqual(hex(encode([atomicFetchAdd(0, 0, 1)])), ['db10000001000000']);
});

test('toBigEndian() is BPF_ENDIAN(BPF_TO_BE, ...)', () => {
  // opcode 0xdc (ALU | END | TO_BE), dst r1, imm 64: what the kernel's `be64 r1` is.
  assert.deepEqual(hex(encode([toBigEndian(1, 64)])), ['dc01000040000000']);
});
