import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { openElf } from '../elf/index.js';
import { type CallFrameRow, CallFrames, type RegisterRule } from './call-frames.js';
import { dwarfSections } from './sections.js';

const REGISTERS = ['rax', 'rdx', 'rcx', 'rbx', 'rsi', 'rdi', 'rbp', 'rsp'];

/** A register rule as `readelf --debug-dump=frames-interp` writes it in its table. */
function ruleText(rule: RegisterRule | undefined): string {
  if (rule === undefined || rule.kind === 'undefined') return 'u';
  switch (rule.kind) {
    case 'offset':
      return `c${rule.offset >= 0n ? '+' : ''}${rule.offset}`;
    case 'same':
      return 's';
    case 'register':
      return REGISTERS[rule.register] ?? `r${rule.register}`;
    case 'expression':
      return 'exp';
    case 'val-expression':
      return 'vexp';
    default:
      return `v${rule.offset}`;
  }
}

function cfaText(row: CallFrameRow): string {
  if (row.cfa.kind === 'expression') return 'exp';
  return `${REGISTERS[row.cfa.register] ?? `r${row.cfa.register}`}+${row.cfa.offset}`;
}

describe('CallFrames.rows() against readelf --debug-dump=frames-interp', () => {
  const builds = {
    'O2, no frame pointers': ['-O2', '-fomit-frame-pointer'],
    'O0, frame pointers': ['-O0'],
    'O2, frame pointers': ['-O2', '-fno-omit-frame-pointer'],
  };
  for (const [label, flags] of Object.entries(builds)) {
    test(`every row's CFA, rbx, rbp and return address rules (${label})`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
      const path = compileProgram('unwind-deep', { flags });
      // readelf's table: a header per FDE naming its columns, then one line per row.
      const expected: { pc: bigint; columns: Map<string, string> }[] = [];
      let header: string[] = [];
      for (const line of tool('readelf', ['--debug-dump=frames-interp', path]).split('\n')) {
        if (/^\s+LOC\s+CFA/.test(line)) header = line.trim().split(/\s+/);
        const m = /^([0-9a-f]{16}) (.*)$/.exec(line);
        if (m === null || BigInt(`0x${m[1]}`) === 0n) continue;
        const cells = m[2]!.trim().split(/\s+/);
        expected.push({
          pc: BigInt(`0x${m[1]}`),
          columns: new Map(header.slice(1).map((name, i) => [name, cells[i]!])),
        });
      }
      assert.ok(expected.length >= 8, 'readelf shows FDE rows');
      const elf = openElf(path);
      try {
        const rows = [...new CallFrames(dwarfSections(elf)).rows()];
        for (const { pc, columns } of expected) {
          const row = rows.find((r) => r.low === pc);
          assert.ok(row !== undefined, `a row at 0x${pc.toString(16)}`);
          assert.equal(cfaText(row), columns.get('CFA'), `CFA at 0x${pc.toString(16)}`);
          assert.equal(
            ruleText(row.registers.get(16)),
            columns.get('ra'),
            `ra at 0x${pc.toString(16)}`,
          );
          for (const [name, number] of [
            ['rbx', 3],
            ['rbp', 6],
          ] as const) {
            if (!columns.has(name)) continue;
            assert.equal(
              ruleText(row.registers.get(number)),
              columns.get(name),
              `${name} at 0x${pc.toString(16)}`,
            );
          }
          assert.equal(row.returnColumn, 16);
        }
        // Rows cover their FDE without gaps: each ends where the next begins, or at the FDE's end.
        for (const [i, row] of rows.entries()) {
          assert.ok(row.high > row.low, `row ${i} covers something`);
        }
      } finally {
        elf.close();
      }
    });
  }
});

describe('CallFrames.covers() and cfaAt() over a library of thousands of FDEs', () => {
  test("a program built without .eh_frame for its own code: covered where readelf's .debug_frame FDEs say", (t) => {
    if (!requireHost(t, { commands: ['readelf', 'gcc'] })) return;
    const path = compileProgram('elf-basic', {
      flags: ['-O1', '-fno-asynchronous-unwind-tables', '-fno-unwind-tables'],
    });
    const ranges: { low: bigint; high: bigint }[] = [];
    for (const line of tool('readelf', ['--debug-dump=frames', path]).split('\n')) {
      const m = / FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)$/.exec(line);
      if (m !== null) ranges.push({ low: BigInt(`0x${m[1]}`), high: BigInt(`0x${m[2]}`) });
    }
    const elf = openElf(path);
    try {
      const sections = dwarfSections(elf);
      assert.ok(sections.frame.length > 0, 'it has .debug_frame');
      assert.ok(ranges.length >= 3, `readelf lists ${ranges.length} FDEs`);
      const inside = (pc: bigint) => ranges.some((r) => pc >= r.low && pc < r.high);
      const frames = new CallFrames(sections, { dataRelBase: elf.section('.got')?.addr });
      for (const { low, high } of ranges) {
        for (const pc of [low - 1n, low, high - 1n, high]) {
          assert.equal(frames.covers(pc), inside(pc), `0x${pc.toString(16)}`);
        }
      }
    } finally {
      elf.close();
    }
  });

  test("an address is covered exactly when readelf's FDE ranges hold it", (t) => {
    if (!requireHost(t, { commands: ['readelf', 'g++'] })) return;
    // libstdc++ (a dependency of every C++ test): thousands of FDEs, some of them overlapping.
    const path = '/lib/x86_64-linux-gnu/libstdc++.so.6';
    // readelf's FDE lines: `... FDE cie=00000000 pc=LOW..HIGH`.
    const ranges: { low: bigint; high: bigint }[] = [];
    for (const line of tool('readelf', ['--debug-dump=frames', path]).split('\n')) {
      const m = / FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)$/.exec(line);
      if (m !== null) ranges.push({ low: BigInt(`0x${m[1]}`), high: BigInt(`0x${m[2]}`) });
    }
    assert.ok(ranges.length > 1000, `readelf lists ${ranges.length} FDEs`);
    const inside = (pc: bigint) => ranges.some((r) => pc >= r.low && pc < r.high);
    const elf = openElf(path);
    try {
      const frames = new CallFrames(dwarfSections(elf), { dataRelBase: elf.section('.got')?.addr });
      // Every FDE's first and last byte, and the bytes just outside it (in a gap or the next).
      for (const { low, high } of ranges) {
        for (const pc of [low - 1n, low, high - 1n, high]) {
          assert.equal(frames.covers(pc), inside(pc), `0x${pc.toString(16)}`);
          assert.equal(frames.cfaAt(pc) !== undefined, inside(pc), `0x${pc.toString(16)}`);
        }
      }
    } finally {
      elf.close();
    }
  });
});
