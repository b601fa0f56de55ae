import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  CFA_KIND,
  type CfiRowInput,
  compileUnwindTable,
  type Located,
  RA_KIND,
  RBP_KIND,
  ruleAt,
  ruleOfRow,
  unwindStack,
} from './unwind.js';

const RA_AT_CFA = { kind: 'offset', offset: -8n } as const;

function row(
  low: bigint,
  high: bigint,
  cfa: CfiRowInput['cfa'],
  registers: [
    number,
    CfiRowInput['registers'] extends ReadonlyMap<number, infer R> ? R : never,
  ][] = [],
): CfiRowInput {
  return {
    low,
    high,
    cfa,
    registers: new Map([[16, RA_AT_CFA], ...registers]),
    returnColumn: 16,
    signalFrame: false,
  };
}

const rsp = (offset: bigint) => ({ kind: 'register', register: 7, offset }) as const;
const rbp = (offset: bigint) => ({ kind: 'register', register: 6, offset }) as const;

describe('ruleOfRow()', () => {
  test('the CFA from rsp or rbp, and where the return address and rbp are saved', () => {
    const prologue = ruleOfRow(row(0n, 1n, rsp(8n)));
    assert.deepEqual(
      [prologue.cfa, prologue.cfaOffset, prologue.ra, prologue.raOffset, prologue.rbp],
      [CFA_KIND.rsp, 8, RA_KIND.atCfa, -8, RBP_KIND.same],
    );
    const framed = ruleOfRow(row(4n, 9n, rbp(16n), [[6, { kind: 'offset', offset: -16n }]]));
    assert.deepEqual(
      [framed.cfa, framed.cfaOffset, framed.rbp, framed.rbpOffset],
      [CFA_KIND.rbp, 16, RBP_KIND.atCfa, -16],
    );
  });

  test("the PLT's expression, and a realigned stack's (the old rsp saved and read back)", () => {
    // DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge;
    // DW_OP_lit3; DW_OP_shl; DW_OP_plus: what binutils writes for .plt.
    const plt = new Uint8Array([0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22]);
    const rule = ruleOfRow(row(0n, 16n, { kind: 'expression', expression: plt }));
    assert.deepEqual([rule.cfa, rule.cfaOffset, rule.cfaAdd], [CFA_KIND.plt, 8, 11]);
    // DW_OP_breg7 -8; DW_OP_deref; DW_OP_plus_uconst 8.
    const realigned = new Uint8Array([0x77, 0x78, 0x06, 0x23, 8]);
    const deref = ruleOfRow(row(0n, 16n, { kind: 'expression', expression: realigned }));
    assert.deepEqual([deref.cfa, deref.cfaOffset, deref.cfaAdd], [CFA_KIND.derefRsp, -8, 8]);
    // rbp saved where rbp points (DW_OP_breg6 0).
    const saved = ruleOfRow(
      row(0n, 16n, rbp(16n), [[6, { kind: 'expression', expression: new Uint8Array([0x76, 0]) }]]),
    );
    assert.deepEqual([saved.rbp, saved.rbpOffset], [RBP_KIND.atRbp, 0]);
  });

  test('an undefined return address ends the stack; rules it cannot follow are unsupported', () => {
    const start = ruleOfRow({
      ...row(0n, 1n, rsp(8n)),
      registers: new Map([[16, { kind: 'undefined' }]]),
    });
    assert.equal(start.ra, RA_KIND.end);
    assert.equal(
      ruleOfRow(row(0n, 1n, { kind: 'register', register: 10, offset: 0n })).cfa,
      CFA_KIND.unsupported,
    );
    const odd = new Uint8Array([0x77, 8, 0x06, 0x06]);
    assert.equal(
      ruleOfRow(row(0n, 1n, { kind: 'expression', expression: odd })).cfa,
      CFA_KIND.unsupported,
    );
    assert.equal(
      ruleOfRow({
        ...row(0n, 1n, rsp(8n)),
        registers: new Map([[16, { kind: 'register', register: 0 }]]),
      }).ra,
      RA_KIND.unsupported,
    );
  });
});

describe('compileUnwindTable()', () => {
  test('rows by file offset, merged where equal, a none row where no FDE covers', () => {
    const table = compileUnwindTable(
      [
        row(0x1000n, 0x1001n, rsp(8n)),
        row(0x1001n, 0x1010n, rsp(16n)),
        row(0x1010n, 0x1011n, rsp(8n)),
        // A function right after, starting as the last row ended: merged with it.
        row(0x1011n, 0x1020n, rsp(8n)),
        // A gap before the next.
        row(0x1030n, 0x1040n, rsp(8n)),
      ],
      (vaddr) => vaddr - 0x1000n + 0x400n,
    );
    assert.deepEqual([...table.starts], [0x400, 0x401, 0x410, 0x420, 0x430, 0x440]);
    const offsets = [...table.rules].map((i) => table.ruleSet[i]!.cfaOffset);
    assert.deepEqual(offsets.slice(0, 3), [8, 16, 8]);
    assert.equal(table.ruleSet[table.rules[3]!]!.cfa, CFA_KIND.none);
    assert.equal(table.ruleSet[table.rules[5]!]!.cfa, CFA_KIND.none);
    assert.equal(ruleAt(table, 0x3ff).cfa, CFA_KIND.none);
    assert.equal(ruleAt(table, 0x40f).cfaOffset, 16);
    assert.equal(ruleAt(table, 0x425).cfa, CFA_KIND.none);
    assert.equal(ruleAt(table, 0x435).cfa, CFA_KIND.rsp);
  });

  test('where two FDEs cover the same addresses, the first read wins', () => {
    const table = compileUnwindTable(
      [row(0x10n, 0x20n, rsp(8n)), row(0x10n, 0x20n, rsp(24n))],
      (vaddr) => vaddr,
    );
    assert.equal(ruleAt(table, 0x18).cfaOffset, 8);
  });
});

describe('unwindStack()', () => {
  // Two functions of one file: f at 0x100 (CFA rsp+16 once its push has run at 0x101), and
  // main at 0x200 (CFA rsp+8 throughout); the stack below is what f's call left.
  const table = compileUnwindTable(
    [
      row(0x100n, 0x101n, rsp(8n)),
      row(0x101n, 0x140n, rsp(16n), [[6, { kind: 'offset', offset: -16n }]]),
      row(0x200n, 0x240n, rsp(8n)),
    ],
    (vaddr) => vaddr,
  );
  const file = { name: 'app' };
  const locate = (pc: bigint): Located<typeof file> | undefined => {
    if (pc >= 0x100n && pc < 0x300n) return { kind: 'file', file, fileOffset: pc, table };
    if (pc >= 0x9000n && pc < 0xa000n) return { kind: 'anonymous' };
    return undefined;
  };
  const memory = new Map<bigint, bigint>();
  const read64 = (address: bigint) => memory.get(address);

  test("the caller's registers from each frame's rule, until an undefined pc", () => {
    memory.clear();
    // In f after its push: [rsp] = saved rbp, [rsp+8] = return address into main (0x210).
    memory.set(0x7f00n, 0x7fa0n);
    memory.set(0x7f08n, 0x210n);
    // main's return address: 0 ends the stack.
    memory.set(0x7f10n, 0n);
    const { frames, stop } = unwindStack(
      { pc: 0x120n, sp: 0x7f00n, bp: 0x1n },
      { read64, locate, maxFrames: 63 },
    );
    assert.deepEqual(
      frames.map((f) => f.pc),
      [0x120n, 0x210n],
    );
    assert.equal(stop, undefined);
  });

  test('JIT code is walked by frame pointers; what cannot be read or is not mapped is a stop', () => {
    memory.clear();
    // A JIT frame: rbp -> [saved rbp, return address into f].
    memory.set(0x7e00n, 0x7e80n);
    memory.set(0x7e08n, 0x120n);
    const jit = unwindStack(
      { pc: 0x9100n, sp: 0x7df0n, bp: 0x7e00n },
      { read64, locate, maxFrames: 63 },
    );
    assert.deepEqual(
      jit.frames.map((f) => f.pc),
      [0x9100n, 0x120n],
    );
    // f's frame at CFA 0x7e10 + ... is not in memory: unreadable.
    assert.equal(jit.stop, 'unreadable');
    const lost = unwindStack(
      { pc: 0x5000n, sp: 0x7000n, bp: 0n },
      { read64, locate, maxFrames: 63 },
    );
    assert.deepEqual([lost.frames.length, lost.stop], [1, 'unmapped']);
  });

  test('a caller frame not above its callee is a bad frame; the depth limit keeps a slot for its mark', () => {
    memory.clear();
    // main calling itself forever: each frame's return address is main again, 8 bytes up.
    for (let i = 0n; i < 100n; i++) memory.set(0x7000n + i * 8n, 0x210n);
    const deep = unwindStack(
      { pc: 0x210n, sp: 0x7000n, bp: 0n },
      { read64, locate, maxFrames: 10 },
    );
    assert.deepEqual([deep.frames.length, deep.stop], [9, 'depth']);
    // A JIT frame whose rbp is below its rsp.
    const bad = unwindStack(
      { pc: 0x9100n, sp: 0x7000n, bp: 0x6000n },
      { read64, locate, maxFrames: 10 },
    );
    assert.equal(bad.stop, 'badFrame');
  });
});
