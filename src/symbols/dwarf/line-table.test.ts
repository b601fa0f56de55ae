import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { gdbBreakpoints, tool } from '../../../test/helpers/tools.js';
import { openElf } from '../elf/index.js';
import { fileMatcher, firstAddressPerContext, LineTable, nearestLines } from './index.js';

// The line tables of test/programs/lines.c as gcc emits them in several forms, checked row by
// row against binutils (objdump --dwarf=decodedline, addr2line) and, where gdb is there,
// against where gdb puts a breakpoint on a line.

const SOURCE = new URL('../../../test/programs/lines.c', import.meta.url).pathname;

/** Line numbers of the MARK:name comments in lines.c. */
function marks(): Map<string, number> {
  const found = new Map<string, number>();
  readFileSync(SOURCE, 'utf8')
    .split('\n')
    .forEach((text, i) => {
      const m = /MARK:(\w+)/.exec(text);
      if (m !== null && !text.startsWith(' *')) found.set(m[1]!, i + 1);
    });
  return found;
}

const VARIANTS = {
  'DWARF 5, -O0': ['-O0'],
  'DWARF 5, -O2': ['-O2'],
  'DWARF 4, -O2': ['-O2', '-gdwarf-4'],
  'DWARF 5, -O2, compressed (-gz=zlib)': ['-O2', '-gz=zlib'],
  'DWARF 4, -O0, compressed': ['-O0', '-gdwarf-4', '-gz=zlib'],
} as const;

interface Row {
  readonly file: string;
  readonly line: number;
  readonly vaddr: bigint;
  readonly stmt: boolean;
}

/** Every row of `objdump --dwarf=decodedline` but the end-of-sequence ones. */
function objdumpRows(path: string): Row[] {
  const rows: Row[] = [];
  for (const text of tool('objdump', ['--dwarf=decodedline', path]).split('\n')) {
    const m = /^(\S+)\s+(\d+)\s+(0x[0-9a-f]+)(?:\s+\d+)?(\s+x)?\s*$/.exec(text);
    if (m !== null) {
      rows.push({
        file: m[1]!,
        line: Number(m[2]),
        vaddr: BigInt(m[3]!),
        stmt: m[4] !== undefined,
      });
    }
  }
  return rows;
}

/** Function symbols from readelf: name, start and end. */
function functions(path: string): { name: string; low: bigint; high: bigint }[] {
  const found = [];
  for (const text of tool('readelf', ['-sW', path]).split('\n')) {
    const f = text.trim().split(/\s+/);
    if (f[3] === 'FUNC' && f[6] !== 'UND' && Number(f[2]) > 0) {
      const low = BigInt(`0x${f[1]}`);
      found.push({ name: f[7]!, low, high: low + BigInt(f[2]!) });
    }
  }
  return found;
}

/** Instruction addresses of a function, from objdump -d. */
function instructions(path: string, low: bigint, high: bigint): bigint[] {
  const out = tool('objdump', [
    '-d',
    `--start-address=0x${low.toString(16)}`,
    `--stop-address=0x${high.toString(16)}`,
    path,
  ]);
  return [...out.matchAll(/^\s+([0-9a-f]+):\t/gm)].map((m) => BigInt(`0x${m[1]}`));
}

const key = (r: Row) =>
  `${basename(r.file)} ${r.line} 0x${r.vaddr.toString(16)}${r.stmt ? ' x' : ''}`;

describe('LineTable', () => {
  for (const [title, flags] of Object.entries(VARIANTS)) {
    describe(title, () => {
      test('reads the same rows as objdump --dwarf=decodedline', (t) => {
        if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
        const path = compileProgram('lines', { flags });
        const elf = openElf(path);
        try {
          const ours = LineTable.of(elf)
            .rowsInRange(0n, 1n << 47n)
            .map((r) => key({ ...r, stmt: r.isStmt }));
          const theirs = objdumpRows(path).map(key);
          assert.ok(theirs.length > 20, 'objdump shows rows');
          assert.deepEqual(ours.sort(), theirs.sort());
        } finally {
          elf.close();
        }
      });

      test('says what addr2line says for every instruction of work() and main()', (t) => {
        if (!requireHost(t, { commands: ['gcc', 'objdump', 'addr2line', 'readelf'] })) return;
        const path = compileProgram('lines', { flags });
        const addresses = functions(path)
          .filter((fn) => fn.name === 'work' || fn.name === 'main')
          .flatMap((fn) => instructions(path, fn.low, fn.high));
        assert.ok(addresses.length > 10);
        const truth = tool('addr2line', [
          '-e',
          path,
          ...addresses.map((a) => `0x${a.toString(16)}`),
        ]).split('\n');
        const elf = openElf(path);
        try {
          const table = LineTable.of(elf);
          addresses.forEach((vaddr, i) => {
            const where = table.locationOf(vaddr);
            const expected = truth[i]!.replace(/ \(discriminator \d+\)$/, '');
            assert.ok(where !== undefined, `a location for 0x${vaddr.toString(16)}`);
            assert.equal(
              `${basename(where.file)}:${where.line}`,
              basename(expected),
              `0x${vaddr.toString(16)}`,
            );
          });
          assert.equal(table.locationOf(0x10n), undefined, 'no row covers the ELF header');
        } finally {
          elf.close();
        }
      });

      test('gives one address per function for each marked line: the lowest is_stmt one', (t) => {
        if (!requireHost(t, { commands: ['gcc', 'objdump', 'readelf'] })) return;
        const path = compileProgram('lines', { flags });
        const fns = functions(path);
        const functionOf = (vaddr: bigint) =>
          fns.find((f) => vaddr >= f.low && vaddr < f.high)?.name;
        const rows = objdumpRows(path).filter((r) => basename(r.file) === 'lines.c');
        const elf = openElf(path);
        try {
          const table = LineTable.of(elf);
          const [file] = table.matchFiles('lines.c');
          assert.ok(file !== undefined);
          for (const [name, line] of marks()) {
            // The rule over objdump's rows and readelf's function symbols.
            const lowest = new Map<string | undefined, bigint>();
            for (const r of rows) {
              if (r.line !== line || !r.stmt) continue;
              const fn = functionOf(r.vaddr);
              const known = lowest.get(fn);
              if (known === undefined || r.vaddr < known) lowest.set(fn, r.vaddr);
            }
            const expected = [...lowest.values()].sort((a, b) => (a < b ? -1 : 1));
            const picked = firstAddressPerContext(table.rowsOfLine(file, line), functionOf);
            assert.deepEqual(
              picked.map((r) => r.vaddr),
              expected,
              `MARK:${name} (line ${line})`,
            );
            if (name === 'no_code') assert.equal(picked.length, 0, 'a comment has no code');
            else assert.ok(picked.length > 0, `MARK:${name} has code`);
          }
          // add_twice is inlined into work() (twice) and main(): a copy per function here.
          const inline = firstAddressPerContext(
            table.rowsOfLine(file, marks().get('inline_body')!),
            functionOf,
          );
          assert.deepEqual(inline.map((r) => functionOf(r.vaddr)).sort(), ['main', 'work']);
          // The lines with code are the lines objdump shows an is_stmt row for.
          const withCode = [...new Set(rows.filter((r) => r.stmt).map((r) => r.line))].sort(
            (a, b) => a - b,
          );
          assert.deepEqual(table.linesWithCode(file), withCode);
        } finally {
          elf.close();
        }
      });
    });
  }

  test('places the probes of a line where gdb puts its breakpoint locations', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'gdb', 'readelf'] })) return;
    for (const flags of [['-O0'], ['-O2'], ['-O2', '-gdwarf-4']]) {
      const path = compileProgram('lines', { flags });
      const fns = functions(path);
      const functionOf = (vaddr: bigint) => fns.find((f) => vaddr >= f.low && vaddr < f.high)?.name;
      const elf = openElf(path);
      try {
        const table = LineTable.of(elf);
        const file = table.matchFiles('lines.c')[0]!;
        // Lines inside a function body; gdb moves a breakpoint on a function's first line past
        // the prologue. (Copies split by inlined instance: src/plan/resolve-line.test.ts.)
        for (const name of ['loop_body', 'work_first']) {
          const line = marks().get(name)!;
          const gdb = gdbBreakpoints(path, `lines.c:${line}`);
          const ours = firstAddressPerContext(table.rowsOfLine(file, line), functionOf).map(
            (r) => r.vaddr,
          );
          assert.deepEqual(ours, gdb, `${name} ${flags}`);
        }
      } finally {
        elf.close();
      }
    }
  });

  test('matches file names on whole trailing path components, or the whole absolute path', () => {
    const path = '/work/src/net/io.c';
    const yes = [
      'io.c',
      'net/io.c',
      'src/net/io.c',
      '/work/src/net/io.c',
      './io.c',
      'net/../net/io.c',
    ];
    const no = ['o.c', 't/io.c', '/src/net/io.c', 'io.h', 'work/io.c'];
    for (const q of yes) assert.ok(fileMatcher(q)(path), q);
    for (const q of no) assert.ok(!fileMatcher(q)(path), q);
  });

  test('finds the nearest lines with code on each side', () => {
    assert.deepEqual(nearestLines([3, 5, 9, 12], 7), [5, 9]);
    assert.deepEqual(nearestLines([3, 5], 9), [5]);
    assert.deepEqual(nearestLines([3, 5], 1), [3]);
    assert.deepEqual(nearestLines([], 1), []);
  });

  test('reads DWARF 4 file names relative to the compilation directory it is told', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    // A relative source path: DWARF 4 keeps the compilation directory in .debug_info only.
    const dir = mkdtempSync(join(tmpdir(), 'upscope-lines-'));
    try {
      mkdirSync(join(dir, 'src'));
      copyFileSync(SOURCE, join(dir, 'src', 'lines.c'));
      execFileSync('gcc', ['-g', '-gdwarf-4', '-O0', '-o', 'app', 'src/lines.c'], { cwd: dir });
      const elf = openElf(join(dir, 'app'));
      try {
        assert.deepEqual(LineTable.of(elf).matchFiles('lines.c'), ['src/lines.c']);
        const told = LineTable.of(elf, { compDirOf: () => dir });
        assert.deepEqual(told.matchFiles(join(dir, 'src/lines.c')), [join(dir, 'src/lines.c')]);
        assert.deepEqual(told.matchFiles('ines.c'), []);
      } finally {
        elf.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
