import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { type ReadelfSection, readelfSection, tool } from '../../../test/helpers/tools.js';
import { openElf } from '../elf/index.js';
import { DwarfFormatError, LineTable } from './index.js';

// Broken line tables made from a real binary by patching .debug_line where readelf says it is
// (DWARF 5 as gcc writes it: a 4-byte unit length, version, address and selector sizes, header
// length, then the parameters, the directory and file tables, and the program). Each must fail
// with a DwarfFormatError that says where and what, never another exception, a hang or a huge
// allocation.

const scratch = mkdtempSync(join(tmpdir(), 'upscope-line-bad-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** Program start of the first unit, from readelf's "Prologue Length". */
function programStart(path: string): number {
  const m = /Prologue Length:\s+(\d+)/.exec(tool('readelf', ['--debug-dump=rawline', path]));
  assert.ok(m);
  return 12 + Number(m[1]);
}

interface Case {
  readonly title: string;
  readonly reason: RegExp;
  /** Patch the file; `at` is where .debug_line starts in it. */
  readonly patch: (bytes: Buffer, at: number, line: ReadelfSection, program: number) => void;
}

const CASES: readonly Case[] = [
  {
    title: 'a unit length past the end of the section',
    reason: /^\.debug_line at 0x0: unit length \d+ runs past the end of the section/,
    patch: (b, at, line) => b.writeUInt32LE(line.size + 100, at),
  },
  {
    title: 'a reserved unit length',
    reason: /reserved unit length 0xfffffff0/,
    patch: (b, at) => b.writeUInt32LE(0xfffffff0, at),
  },
  {
    title: 'a section cut inside the first header',
    reason: /^\.debug_line at 0x0: unit length \d+ runs past the end of the section \(16 left\)/,
    patch: (b, _at, line) => b.writeBigUInt64LE(20n, line.headerOffset + 32),
  },
  {
    title: 'an unknown version',
    reason: /unsupported line table version 9/,
    patch: (b, at) => b.writeUInt16LE(9, at + 4),
  },
  {
    title: 'a header length past the unit',
    reason: /header length \d+ runs past the unit's end/,
    patch: (b, at) => b.writeUInt32LE(0x00ff_ffff, at + 8),
  },
  {
    title: 'a line_range of 0',
    reason: /line_range is 0/,
    patch: (b, at) => b.writeUInt8(0, at + 16),
  },
  {
    title: 'a segment selector size',
    reason: /segment selectors \(size 4\) are not supported/,
    patch: (b, at) => b.writeUInt8(4, at + 7),
  },
  {
    title: 'a directory count larger than the header',
    reason: /127 directory entries in a \d+-byte header/,
    patch: (b, at) => b.writeUInt8(0x7f, at + 33),
  },
  {
    title: 'a directory name offset past .debug_line_str',
    reason: /^\.debug_line_str at 0xfffff00: string offset past the end/,
    patch: (b, at) => b.writeUInt32LE(0x0fff_ff00, at + 34),
  },
  {
    title: 'an extended opcode longer than the program',
    reason: /needs \d+ bytes, \d+ left/,
    patch: (b, at, _line, program) => {
      // ULEB128 0x7ff: 2047 bytes, more than the program holds.
      b.writeUInt8(0, at + program);
      b.writeUInt8(0xff, at + program + 1);
      b.writeUInt8(0x0f, at + program + 2);
    },
  },
  {
    title: 'an extended opcode of length 0',
    reason: /extended opcode of length 0/,
    patch: (b, at, _line, program) => {
      b.writeUInt8(0, at + program);
      b.writeUInt8(0, at + program + 1);
    },
  },
  {
    title: 'a set_address with a 3-byte operand',
    reason: /set_address with a 3-byte operand/,
    patch: (b, at, _line, program) => {
      b.writeUInt8(0, at + program);
      b.writeUInt8(4, at + program + 1);
      b.writeUInt8(2, at + program + 2);
    },
  },
  {
    title: 'a unit cut inside its last opcode',
    reason: /^\.debug_line at 0x[0-9a-f]+: needs 1 bytes, 0 left$/,
    patch: (b, at, line) => {
      // The unit and the section end one byte early, inside the final end_sequence.
      b.writeUInt32LE(line.size - 4 - 1, at);
      b.writeBigUInt64LE(BigInt(line.size - 1), line.headerOffset + 32);
    },
  },
];

describe('a malformed .debug_line', () => {
  for (const c of CASES) {
    test(`${c.title}: a DwarfFormatError saying where and why`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
      const original = compileProgram('lines', { flags: ['-O0'] });
      const bytes = readFileSync(original);
      const line = readelfSection(original, bytes, '.debug_line');
      const copy = Buffer.from(bytes);
      c.patch(copy, line.offset, line, programStart(original));
      const path = join(scratch, c.title.replace(/\W+/g, '-'));
      writeFileSync(path, copy);
      const elf = openElf(path);
      try {
        const table = LineTable.of(elf);
        assert.throws(
          () => {
            const [file] = table.matchFiles('lines.c');
            if (file !== undefined) table.rowsOfLine(file, 10);
            table.rowsInRange(0n, 1n << 47n);
            table.locationOf(elf.entry);
          },
          (err: unknown) => {
            assert.ok(err instanceof DwarfFormatError, `${err}`);
            assert.match(err.message, c.reason);
            return true;
          },
        );
      } finally {
        elf.close();
      }
    });
  }

  test('a program without end_sequence: its open sequence is left out, nothing throws', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const original = compileProgram('lines', { flags: ['-O0'] });
    const bytes = Buffer.from(readFileSync(original));
    const line = readelfSection(original, bytes, '.debug_line');
    // The unit ends with "00 01 01" (end_sequence); overwrite it with three DW_LNS_copy.
    const end = line.offset + line.size;
    assert.deepEqual([...bytes.subarray(end - 3, end)], [0, 1, 1]);
    bytes.fill(1, end - 3, end);
    const path = join(scratch, 'no-end-sequence');
    writeFileSync(path, bytes);
    const elf = openElf(path);
    try {
      const table = LineTable.of(elf);
      assert.deepEqual(table.rowsInRange(0n, 1n << 47n), []);
      assert.equal(table.locationOf(elf.entry), undefined);
    } finally {
      elf.close();
    }
  });
});
