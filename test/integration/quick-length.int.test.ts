// The quick length decoder (src/arch/x86-64/quick-length.ts) against iced on the code of real
// binaries: node, libc, libstdc++, a Go program with its runtime, a Rust program with its std. Every
// instruction it claims to know must have iced's length and control flow; the returns found
// through it must be those found through iced alone; and it must know most of the code (else
// the fast path would be dead weight).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import {
  type CodePart,
  type DecodedInstruction,
  findReturnInstructions,
  sweepInstructions,
} from '../../src/arch/x86-64/index.js';
import { QUICK_FLOW, quick, quickLength } from '../../src/arch/x86-64/quick-length.js';
import { sweptReturnInstructions } from '../../src/arch/x86-64/returns.js';
import { openElf, SymbolIndex } from '../../src/symbols/index.js';
import { compileGo, findGo } from '../helpers/go.js';
import { compileRust, findRustc } from '../helpers/rustc.js';

/** The control flow iced sees in an instruction, in QUICK_FLOW's terms. */
function icedFlow(instruction: DecodedInstruction): number {
  const { mnemonic, branchTarget } = instruction;
  if (mnemonic === 'ret') return QUICK_FLOW.ret;
  if (branchTarget !== undefined) {
    if (mnemonic === 'call') return QUICK_FLOW.call;
    return mnemonic === 'jmp' ? QUICK_FLOW.jmp : QUICK_FLOW.jcc;
  }
  if (mnemonic === 'jmp' && /^((notrack|bnd) )?jmp \*/.test(instruction.text)) {
    return QUICK_FLOW.jmpIndirect;
  }
  return QUICK_FLOW.none;
}

interface Tally {
  functions: number;
  instructions: number;
  known: number;
  quickScans: number;
}

/** Compare on every `stride`-th function of `path`. */
function compare(path: string, stride: number): Tally {
  const elf = openElf(path);
  try {
    const index = new SymbolIndex(elf);
    const tally: Tally = { functions: 0, instructions: 0, known: 0, quickScans: 0 };
    const seen = new Set<bigint>();
    for (let k = 0; k < index.length; k += stride) {
      const fn = index.function(k);
      if (fn.type !== 'func' || fn.sizeBytes === 0n || seen.has(fn.vaddr)) continue;
      seen.add(fn.vaddr);
      const offset = elf.vaddrToFileOffset(fn.vaddr);
      if (offset === undefined || !elf.loadSegmentOf(fn.vaddr)?.executable) continue;
      const bytes = elf.read(offset, Number(fn.sizeBytes));
      tally.functions++;
      const where = `${path} ${fn.name}`;
      let at = 0;
      sweepInstructions(bytes, fn.vaddr, (instruction) => {
        tally.instructions++;
        const length = quickLength(bytes, at, bytes.length);
        if (length !== 0) {
          tally.known++;
          const hex = Buffer.from(instruction.bytes).toString('hex');
          assert.ok(
            !instruction.invalid,
            `${where}+${at}: quick knows ${hex}, iced finds it invalid`,
          );
          assert.equal(
            length,
            instruction.length,
            `${where}+${at}: length of ${hex} (${instruction.text})`,
          );
          assert.equal(
            quick.flow,
            icedFlow(instruction),
            `${where}+${at}: flow of ${hex} (${instruction.text})`,
          );
          if (instruction.branchTarget !== undefined) {
            const target = fn.vaddr + BigInt(at + length + quick.displacement);
            assert.equal(
              target,
              instruction.branchTarget,
              `${where}+${at}: target of ${instruction.text}`,
            );
          }
        }
        at += instruction.length;
        return !instruction.invalid;
      });
      const parts: CodePart[] = [{ vaddr: fn.vaddr, bytes }];
      const fast = findReturnInstructions(parts);
      const slow = sweptReturnInstructions(parts);
      const said = (scan: typeof fast) =>
        scan.ok
          ? scan.exits.map(
              ({ instruction: i, kind }) =>
                `${i.vaddr.toString(16)} ${kind} ${i.text} ${i.mnemonic} ${i.length} ${Buffer.from(i.bytes).toString('hex')} ${i.branchTarget?.toString(16)} ${i.ripRelative} ${i.invalid}`,
            )
          : scan.reason;
      assert.deepEqual(said(fast), said(slow), where);
    }
    return tally;
  } finally {
    elf.close();
  }
}

function check(path: string, stride: number, minimumKnown: number): void {
  const tally = compare(path, stride);
  const share = tally.known / tally.instructions;
  console.log(
    `${path}: ${tally.functions} functions, ${tally.instructions} instructions, ${(share * 100).toFixed(1)}% known to the quick decoder`,
  );
  assert.ok(tally.functions > 100, `${path}: only ${tally.functions} functions compared`);
  assert.ok(
    share >= minimumKnown,
    `${path}: the quick decoder knows ${(share * 100).toFixed(1)}% of its instructions`,
  );
}

test('the quick decoder agrees with iced on the instructions it knows, and returns are found alike: node (every 7th function)', () => {
  check('/usr/bin/node', 7, 0.9);
});

test('... libc and libstdc++ (every function)', () => {
  check('/lib/x86_64-linux-gnu/libc.so.6', 1, 0.9);
  check('/usr/lib/x86_64-linux-gnu/libstdc++.so.6', 1, 0.9);
});

test('... a Go program with its runtime and a Rust program with its std', (t) => {
  const go = findGo();
  const rustc = findRustc();
  if (process.env['CI'] !== 'true' && (go === undefined || rustc === undefined)) {
    t.skip('needs go (golang-go) and rustc');
    return;
  }
  assert.ok(
    go !== undefined && existsSync(go),
    'go is not installed (scripts/setup-host.sh installs golang-go)',
  );
  assert.ok(rustc !== undefined, 'rustc is not installed');
  check(compileGo(go, 'go-returns'), 1, 0.9);
  check(compileRust(rustc, 'rust-unwind'), 1, 0.9);
});
