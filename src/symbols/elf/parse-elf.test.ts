import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { crc32 } from 'node:zlib';
import { type CompileOptions, compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfFileOffset, readelfLoads, tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import {
  type ElfFile,
  type ElfSymbol,
  openElf,
  parseElf,
  type SymbolTableName,
  symbolDisplayName,
} from './index.js';

// The truth in these tests is what readelf, nm and objcopy say about the same files.

const BINUTILS = ['gcc', 'readelf', 'nm', 'objcopy', 'strip'];
const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';
const NODE = '/usr/bin/node';

const scratch = mkdtempSync(join(tmpdir(), 'upscope-elf-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

interface ReadelfSymbol {
  readonly num: number;
  readonly value: bigint;
  readonly size: bigint;
  readonly type: string;
  readonly binding: string;
  readonly visibility: string;
  readonly sectionIndex: number;
  /** As readelf prints it, without the ` (2)` version index of needed versions. */
  readonly name: string;
}

const TYPES: Record<string, string> = {
  NOTYPE: 'notype',
  OBJECT: 'object',
  FUNC: 'func',
  SECTION: 'section',
  FILE: 'file',
  COMMON: 'common',
  TLS: 'tls',
  IFUNC: 'ifunc',
};
const BINDINGS: Record<string, string> = {
  LOCAL: 'local',
  GLOBAL: 'global',
  WEAK: 'weak',
  UNIQUE: 'unique',
};
const NDX: Record<string, number> = { UND: 0, ABS: 0xfff1, COM: 0xfff2 };

/** `readelf -sW` (or `--dyn-syms -W`) as one list of symbols per table name. */
function readelfSymbols(
  path: string,
  args: readonly string[] = ['-sW'],
): Map<string, ReadelfSymbol[]> {
  const tables = new Map<string, ReadelfSymbol[]>();
  let current: ReadelfSymbol[] | undefined;
  for (const line of tool('readelf', [...args, path]).split('\n')) {
    const header = /^Symbol table '([^']+)' contains (\d+) entries/.exec(line);
    if (header) {
      current = [];
      tables.set(header[1]!, current);
      continue;
    }
    const m =
      /^\s*(\d+):\s+([0-9a-f]+)\s+(0x[0-9a-f]+|\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)(?: (.*))?$/.exec(
        line,
      );
    if (!m || current === undefined) continue;
    current.push({
      num: Number(m[1]),
      value: BigInt(`0x${m[2]}`),
      size: BigInt(m[3]!),
      type: TYPES[m[4]!] ?? 'other',
      binding: BINDINGS[m[5]!] ?? 'other',
      visibility: m[6]!.toLowerCase(),
      sectionIndex: NDX[m[7]!] ?? Number(m[7]),
      name: (m[8] ?? '').replace(/ \(\d+\)$/, ''),
    });
  }
  return tables;
}

/** Our symbol as readelf would print it (readelf names unnamed section symbols after their section). */
function comparable(sym: ElfSymbol, elf: ElfFile): Omit<ReadelfSymbol, 'num'> {
  const name =
    sym.type === 'section' && sym.name === ''
      ? (elf.sections[sym.sectionIndex]?.name ?? '')
      : symbolDisplayName(sym);
  return {
    value: sym.value,
    size: sym.size,
    type: sym.type,
    binding: sym.binding,
    visibility: sym.visibility,
    sectionIndex: sym.sectionIndex,
    name,
  };
}

/** Our table against readelf's, entry by entry (ours omits the null symbol at index 0). */
function assertSameSymbols(
  elf: ElfFile,
  table: SymbolTableName,
  expected: readonly ReadelfSymbol[] | undefined,
): void {
  const ours = elf.symbols(table);
  if (expected === undefined) {
    assert.equal(ours.length, 0, `${table}: readelf shows no such table`);
    return;
  }
  assert.equal(ours.length, expected.length - 1, `${table}: symbol count`);
  for (const want of expected.slice(1)) {
    const sym = ours[want.num - 1]!;
    const { num: _num, ...rest } = want;
    assert.deepEqual(comparable(sym, elf), rest, `${table} symbol ${want.num}`);
    assert.equal(sym.table, table);
    assert.equal(sym.defined, want.sectionIndex !== 0);
  }
}

/** `nm` (or `nm -D`) lines as "value name" strings, sorted; nm leaves out file and section symbols. */
function nmLines(path: string, dynamic: boolean): string[] {
  const out = tool('nm', dynamic ? ['-D', path] : [path]);
  const lines: string[] = [];
  for (const line of out.split('\n')) {
    const m = /^([0-9a-f]{16})?\s+\S\s+(.+)$/.exec(line);
    if (m) lines.push(`${BigInt(`0x${m[1] ?? '0'}`).toString(16)} ${m[2]}`);
  }
  return lines.sort();
}

function ourNmLines(elf: ElfFile, table: SymbolTableName): string[] {
  return elf
    .symbols(table)
    .filter((s) => s.type !== 'file' && s.type !== 'section' && s.name !== '')
    .map((s) => `${s.value.toString(16)} ${symbolDisplayName(s)}`)
    .sort();
}

interface ReadelfSegment {
  typeName: string;
  offset: bigint;
  vaddr: bigint;
  fileSize: bigint;
  memSize: bigint;
  flags: string;
  align: bigint;
}

function readelfSegments(path: string): ReadelfSegment[] {
  const segments: ReadelfSegment[] = [];
  for (const line of tool('readelf', ['-lW', path]).split('\n')) {
    const m =
      /^\s+(\S+)\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+([RWE ]{3})\s+(0x[0-9a-f]+)$/.exec(
        line,
      );
    if (!m) continue;
    segments.push({
      typeName: m[1]!,
      offset: BigInt(m[2]!),
      vaddr: BigInt(m[3]!),
      fileSize: BigInt(m[4]!),
      memSize: BigInt(m[5]!),
      flags: m[6]!.replace(/ /g, ''),
      align: BigInt(m[7]!),
    });
  }
  return segments;
}

interface ReadelfSection {
  index: number;
  name: string;
  typeName: string;
  addr: bigint;
  offset: bigint;
  size: bigint;
  entSize: bigint;
  flags: string;
  link: number;
  info: number;
  addralign: bigint;
}

function readelfSections(path: string): ReadelfSection[] {
  const sections: ReadelfSection[] = [];
  for (const line of tool('readelf', ['-SW', path]).split('\n')) {
    const m =
      /^\s*\[\s*(\d+)\]\s(.*?)\s+([0-9a-f]{16})\s([0-9a-f]+)\s([0-9a-f]+)\s([0-9a-f]+)\s+([A-Za-z]*)\s+(\d+)\s+(\d+)\s+(\d+)$/.exec(
        line,
      );
    if (!m) continue;
    // The type is the last word, except for readelf's one type name with spaces in it.
    const nameAndType = /^(?:(.*?)\s+)?(SYMTAB SECTION INDICES|\S+)$/.exec(m[2]!.trim())!;
    sections.push({
      index: Number(m[1]),
      name: nameAndType[1] ?? '',
      typeName: nameAndType[2]!,
      addr: BigInt(`0x${m[3]}`),
      offset: BigInt(`0x${m[4]}`),
      size: BigInt(`0x${m[5]}`),
      entSize: BigInt(`0x${m[6]}`),
      flags: m[7]!,
      link: Number(m[8]),
      info: Number(m[9]),
      addralign: BigInt(m[10]!),
    });
  }
  return sections;
}

function readelfBuildId(path: string): string | undefined {
  return /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', path]))?.[1];
}

function flagString(s: { readable: boolean; writable: boolean; executable: boolean }): string {
  return `${s.readable ? 'R' : ''}${s.writable ? 'W' : ''}${s.executable ? 'E' : ''}`;
}

interface Build {
  readonly title: string;
  readonly options: CompileOptions;
  readonly program: string;
  readonly type: 'exec' | 'dyn';
}

const BUILDS: readonly Build[] = [
  { title: 'a PIE built at -O0', program: 'elf-basic', options: { flags: ['-O0'] }, type: 'dyn' },
  { title: 'a PIE built at -O2', program: 'elf-basic', options: { flags: ['-O2'] }, type: 'dyn' },
  {
    title: 'a non-PIE executable (-no-pie)',
    program: 'elf-basic',
    options: { flags: ['-O0', '-no-pie'] },
    type: 'exec',
  },
  {
    title: 'a non-PIE executable built at -O2',
    program: 'elf-basic',
    options: { flags: ['-O2', '-no-pie'] },
    type: 'exec',
  },
  {
    title: 'a shared library',
    program: 'elf-lib',
    options: { flags: ['-O2', '-shared', '-fPIC'], suffix: '.so' },
    type: 'dyn',
  },
  {
    title: 'a stripped PIE',
    program: 'elf-basic',
    options: { flags: ['-O2'], strip: true },
    type: 'dyn',
  },
  {
    title: 'a static executable',
    program: 'elf-basic',
    options: { flags: ['-O2', '-static'] },
    type: 'exec',
  },
];

for (const build of BUILDS) {
  describe(`parseElf() on ${build.title}`, () => {
    let cached: { path: string; elf: ElfFile } | undefined;
    const load = (): { path: string; elf: ElfFile } => {
      if (cached === undefined) {
        const path = compileProgram(build.program, build.options);
        cached = { path, elf: parseElf(readFileSync(path), { path }) };
      }
      return cached;
    };

    test('reads the header as readelf does', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      assert.equal(elf.path, path);
      assert.equal(elf.type, build.type);
      assert.equal(elf.fileSize, BigInt(readFileSync(path).length));
      const entry = /Entry point address:\s+(0x[0-9a-f]+)/.exec(
        tool('readelf', ['-hW', path]),
      )?.[1];
      assert.equal(elf.entry, BigInt(entry!));
    });

    test('lists the same symbols as readelf -sW in .symtab and .dynsym', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const tables = readelfSymbols(path);
      assert.equal(elf.hasSymtab, tables.has('.symtab'));
      assert.equal(elf.hasSymtab, build.options.strip !== true);
      assertSameSymbols(elf, 'symtab', tables.get('.symtab'));
      assertSameSymbols(elf, 'dynsym', tables.get('.dynsym'));
      if (build.options.flags?.includes('-static') !== true) {
        assert.ok(elf.symbols('dynsym').length > 0, 'a dynamic file has .dynsym');
      }
    });

    test('gives dynamic symbols the versions readelf --dyn-syms shows', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      assertSameSymbols(elf, 'dynsym', readelfSymbols(path, ['--dyn-syms', '-W']).get('.dynsym'));
      if (build.program === 'elf-basic' && build.options.flags?.includes('-static') !== true) {
        const malloc = elf.symbols('dynsym').find((s) => s.name === 'malloc');
        assert.equal(malloc?.version, 'GLIBC_2.2.5');
        assert.equal(malloc?.defined, false);
        assert.equal(symbolDisplayName(malloc!), 'malloc@GLIBC_2.2.5');
      }
    });

    test('lists the same symbols as nm and nm -D', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      if (elf.hasSymtab) assert.deepEqual(ourNmLines(elf, 'symtab'), nmLines(path, false));
      if (build.options.flags?.includes('-static') !== true) {
        assert.deepEqual(ourNmLines(elf, 'dynsym'), nmLines(path, true));
      }
    });

    test('reads the program headers as readelf -lW does', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const expected = readelfSegments(path);
      assert.ok(expected.length > 0);
      assert.deepEqual(
        elf.segments.map((s) => ({
          typeName: s.typeName,
          offset: s.offset,
          vaddr: s.vaddr,
          fileSize: s.fileSize,
          memSize: s.memSize,
          flags: flagString(s),
          align: s.align,
        })),
        expected,
      );
    });

    test('reads the section headers as readelf -SW does', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const expected = readelfSections(path);
      assert.equal(elf.sections.length, expected.length);
      for (const want of expected) {
        const s = elf.sections[want.index]!;
        assert.equal(s.name, want.name);
        assert.equal(s.typeName, want.typeName);
        assert.equal(s.addr, want.addr);
        assert.equal(s.offset, want.offset);
        assert.equal(s.size, want.size);
        assert.equal(s.entSize, want.entSize);
        assert.equal(s.link, want.link);
        assert.equal(s.info, want.info);
        assert.equal(s.addralign, want.addralign);
        assert.equal(s.executable, want.flags.includes('X'), `${s.name} executable`);
        assert.equal(elf.section(s.name)?.index, expected.find((e) => e.name === s.name)?.index);
      }
    });

    test('maps every function address to the file offset readelf gives', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const functions = [...elf.symbols('symtab'), ...elf.symbols('dynsym')].filter(
        (s) => (s.type === 'func' || s.type === 'ifunc') && s.defined && s.value !== 0n,
      );
      // A stripped executable defines no functions in .dynsym.
      assert.equal(functions.length > 0, build.options.strip !== true);
      // readelfFileOffset() runs readelf once per address: ask it about up to 60 functions and
      // check the rest against readelf's PT_LOAD table directly.
      const loads = readelfLoads(path);
      for (const [i, fn] of functions.entries()) {
        const expected =
          i < 60
            ? readelfFileOffset(path, fn.value)
            : (() => {
                const load = loads.find(
                  (l) => fn.value >= l.vaddr && fn.value < l.vaddr + l.filesz,
                );
                assert.ok(load, `a PT_LOAD holds ${fn.name}`);
                return fn.value - load.vaddr + load.offset;
              })();
        const fileOffset = elf.vaddrToFileOffset(fn.value);
        assert.equal(fileOffset, expected, fn.name);
        assert.equal(elf.fileOffsetToVaddr(fileOffset!), fn.value, fn.name);
        assert.equal(elf.loadSegmentOf(fn.value)?.executable, true, `${fn.name} is in code`);
      }
      assert.equal(elf.vaddrToFileOffset(0xffff_ffff_ffff_0000n), undefined);
      assert.equal(elf.fileOffsetToVaddr(elf.fileSize + 10n), undefined);
    });

    test('reads the build id that readelf -n shows', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const expected = readelfBuildId(path);
      assert.ok(expected, 'gcc links with a build id on this machine');
      assert.equal(elf.buildId(), expected);
    });

    test('openElf() reads the same file lazily with the same results', (t) => {
      if (!requireHost(t, { commands: BINUTILS })) return;
      const { path, elf } = load();
      const lazy = openElf(path);
      try {
        assert.deepEqual(lazy.segments, elf.segments);
        assert.deepEqual(lazy.sections, elf.sections);
        assert.deepEqual(lazy.symbols('symtab'), elf.symbols('symtab'));
        assert.deepEqual(lazy.symbols('dynsym'), elf.symbols('dynsym'));
        assert.equal(lazy.symbols('symtab'), lazy.symbols('symtab'), 'cached per table');
        assert.equal(lazy.buildId(), elf.buildId());
        for (const s of lazy.sections) {
          assert.deepEqual(lazy.sectionBytes(s), elf.sectionBytes(s), s.name);
        }
        assert.deepEqual(lazy.read(0n, 16), elf.read(0n, 16));
      } finally {
        lazy.close();
        lazy.close();
      }
    });
  });
}

describe('ELF sections and notes', () => {
  test('sectionBytes() returns each section as objcopy dumps it, and nothing for NOBITS', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = compileProgram('elf-basic', { flags: ['-O0'] });
    const elf = parseElf(readFileSync(path), { path });
    for (const name of ['.text', '.rodata', '.dynstr', '.comment']) {
      const out = join(scratch, `dump-${name.slice(1)}`);
      execFileSync('objcopy', [`--dump-section=${name}=${out}`, path, join(scratch, 'discard')]);
      assert.deepEqual(Buffer.from(elf.sectionBytes(elf.section(name)!)), readFileSync(out), name);
    }
    const bss = elf.section('.bss')!;
    assert.equal(bss.typeName, 'NOBITS');
    assert.equal(elf.sectionBytes(bss).length, 0);
    assert.equal(elf.section('.no-such-section'), undefined);
  });

  test('sectionBytes() inflates zlib-compressed debug sections as objcopy does', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = compileProgram('elf-basic', { flags: ['-O0', '-gz'] });
    const elf = openElf(path);
    try {
      const info = elf.section('.debug_info')!;
      assert.notEqual(info.flags & 0x800n, 0n, '.debug_info is SHF_COMPRESSED');
      const plain = join(scratch, 'decompressed');
      execFileSync('objcopy', ['--decompress-debug-sections', path, plain]);
      for (const name of ['.debug_info', '.debug_line', '.debug_abbrev']) {
        const out = join(scratch, `inflated-${name.slice(1)}`);
        execFileSync('objcopy', [`--dump-section=${name}=${out}`, plain, join(scratch, 'discard')]);
        assert.deepEqual(
          Buffer.from(elf.sectionBytes(elf.section(name)!)),
          readFileSync(out),
          name,
        );
      }
    } finally {
      elf.close();
    }
  });

  test('sectionBytes() refuses zstd-compressed sections with ERR_ELF_UNSUPPORTED', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = join(scratch, 'zstd');
    execFileSync('objcopy', [
      '--compress-debug-sections=zstd',
      compileProgram('elf-basic', { flags: ['-O0'] }),
      path,
    ]);
    const elf = parseElf(readFileSync(path), { path });
    assert.throws(() => elf.sectionBytes(elf.section('.debug_info')!), {
      code: 'ERR_ELF_UNSUPPORTED',
      message: `Cannot use ELF file "${path}": zstd compression of section .debug_info is not supported`,
    });
    assert.ok(elf.symbols('symtab').length > 0, 'the rest of the file stays readable');
  });

  test('openElf() keeps what it read after close() and refuses to read more', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const elf = openElf(compileProgram('elf-basic', { flags: ['-O0'] }));
    const symbols = elf.symbols('symtab');
    elf.close();
    assert.equal(elf.symbols('symtab'), symbols);
    assert.throws(() => elf.sectionBytes(elf.section('.text')!), ProbeError);
  });

  test('debugLink() reads the file name and CRC-32 objcopy --add-gnu-debuglink wrote', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const original = compileProgram('elf-basic', { flags: ['-O2'] });
    const debug = join(scratch, 'elf-basic.debug');
    const stripped = join(scratch, 'elf-basic.stripped');
    execFileSync('objcopy', ['--only-keep-debug', original, debug]);
    execFileSync('objcopy', ['--strip-debug', `--add-gnu-debuglink=${debug}`, original, stripped]);
    const links = tool('readelf', ['--debug-dump=links', stripped]);
    const file = /Separate debug info file: (\S+)/.exec(links)?.[1];
    const crc = /CRC value: (0x[0-9a-f]+)/.exec(links)?.[1];
    assert.ok(file && crc, links);

    const elf = openElf(stripped);
    try {
      const link = elf.debugLink();
      assert.deepEqual(link, { file: basename(debug), crc32: Number(crc) });
      assert.equal(link?.file, file);
      assert.equal(link?.crc32, crc32(readFileSync(debug)));
    } finally {
      elf.close();
    }
    assert.equal(parseElf(readFileSync(original)).debugLink(), undefined);

    // The debug file: same build id and symbols, sections emptied to NOBITS, program headers
    // still describing the original file.
    const separate = openElf(debug);
    const full = parseElf(readFileSync(original));
    try {
      assert.equal(separate.buildId(), readelfBuildId(original));
      assert.deepEqual(separate.symbols('symtab'), full.symbols('symtab'));
      assert.equal(separate.section('.text')?.typeName, 'NOBITS');
    } finally {
      separate.close();
    }
  });

  test('usdtNotes() reads hand-written .note.stapsdt probes as readelf -n does', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    for (const flags of [['-O2'], ['-O2', '-no-pie']]) {
      const path = compileProgram('elf-usdt', { flags });
      const expected = [];
      const notes = tool('readelf', ['-n', path]);
      const re =
        /Provider: (\S+)\s+Name: (\S+)\s+Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), Semaphore: (0x[0-9a-f]+)\s+Arguments: ([^\n]*)/g;
      for (const m of notes.matchAll(re)) {
        expected.push({
          provider: m[1],
          name: m[2],
          pc: BigInt(m[3]!),
          base: BigInt(m[4]!),
          semaphore: BigInt(m[5]!),
          args: m[6],
          vaddr: BigInt(m[3]!),
        });
      }
      assert.equal(expected.length, 2, notes);
      const elf = parseElf(readFileSync(path), { path });
      assert.deepEqual(elf.usdtNotes(), expected);
      // The notes point into the function that holds the sites, and at the semaphore.
      const site = elf.symbols('symtab').find((s) => s.name === 'elf_usdt_site')!;
      const semaphore = elf.symbols('symtab').find((s) => s.name === 'elf_usdt_request_semaphore')!;
      for (const note of elf.usdtNotes()) {
        assert.ok(note.vaddr > site.value && note.vaddr < site.value + site.size);
      }
      assert.equal(elf.usdtNotes()[0]?.semaphore, semaphore.value);
      assert.equal(elf.section('.stapsdt.base')?.addr, elf.usdtNotes()[0]?.base);
    }
  });

  test('reads an object file with more than 65,280 sections (e_shnum 0, SHN_XINDEX)', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = compileProgram('elf-many-sections', { flags: ['-c'], suffix: '.o' });
    const bytes = readFileSync(path);
    assert.equal(bytes.readUInt16LE(60), 0, 'e_shnum is 0: the count is in section 0');
    assert.equal(bytes.readUInt16LE(62), 0xffff, 'e_shstrndx is SHN_XINDEX');
    const elf = parseElf(bytes, { path });
    assert.equal(elf.type, 'rel');
    const header = tool('readelf', ['-hW', path]);
    const count = /Number of section headers:\s+0 \((\d+)\)/.exec(header)?.[1];
    assert.equal(elf.sections.length, Number(count));
    const expected = readelfSections(path);
    assert.equal(expected.length, elf.sections.length);
    for (const want of expected.filter((_, i) => i % 997 === 0 || i > expected.length - 5)) {
      assert.equal(elf.sections[want.index]?.name, want.name);
      assert.equal(elf.sections[want.index]?.offset, want.offset);
    }
    const symtab = readelfSymbols(path).get('.symtab');
    assertSameSymbols(elf, 'symtab', symtab);
    assert.ok(elf.symbols('symtab').some((sym) => sym.sectionIndex > 0xff00));
  });

  test('usdtNotes() is empty for a file without probes', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = compileProgram('elf-basic', { flags: ['-O0'] });
    assert.deepEqual(parseElf(readFileSync(path)).usdtNotes(), []);
  });

  test('read() returns file bytes and refuses ranges past the end', (t) => {
    if (!requireHost(t, { commands: BINUTILS })) return;
    const path = compileProgram('elf-basic', { flags: ['-O0'] });
    const bytes = readFileSync(path);
    const elf = openElf(path);
    try {
      assert.deepEqual(Buffer.from(elf.read(0n, 4)), bytes.subarray(0, 4));
      assert.deepEqual(Buffer.from(elf.read(elf.fileSize - 8n, 8)), bytes.subarray(-8));
      assert.equal(elf.read(elf.fileSize, 0).length, 0);
      assert.throws(() => elf.read(elf.fileSize - 4n, 8), { code: 'ERR_ELF_INVALID' });
      assert.throws(() => elf.read(-1n, 1), { code: 'ERR_ELF_INVALID' });
    } finally {
      elf.close();
    }
  });

  test('openElf() names a missing file in a clear error', () => {
    const missing = join(scratch, 'no-such-binary');
    assert.throws(() => openElf(missing), {
      code: 'ERR_TARGET_NOT_FOUND',
      message: `Cannot open ELF file "${missing}": no such file`,
    });
    assert.throws(() => openElf(scratch), { code: 'ERR_FILE_READ' });
  });
});

describe('the machine libc', () => {
  test('has the dynamic symbols and versions readelf --dyn-syms -W shows', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const elf = openElf(LIBC);
    try {
      assertSameSymbols(elf, 'dynsym', readelfSymbols(LIBC, ['--dyn-syms', '-W']).get('.dynsym'));
      const dynsym = elf.symbols('dynsym');
      const malloc = dynsym.find((s) => s.name === 'malloc')!;
      assert.equal(malloc.version, 'GLIBC_2.2.5');
      assert.equal(malloc.versionHidden, false);
      assert.equal(symbolDisplayName(malloc), 'malloc@@GLIBC_2.2.5');
      const memcpys = dynsym
        .filter((s) => s.name === 'memcpy')
        .map(symbolDisplayName)
        .sort();
      assert.deepEqual(memcpys, ['memcpy@@GLIBC_2.14', 'memcpy@GLIBC_2.2.5']);
      assert.equal(dynsym.find((s) => s.name === 'strlen')?.type, 'ifunc');
      assert.equal(elf.buildId(), readelfBuildId(LIBC));
    } finally {
      elf.close();
    }
  });
});

describe('the machine node binary', () => {
  test('has as many .symtab symbols as readelf -sW shows, with the same values', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const started = performance.now();
    const elf = openElf(NODE);
    let symtab: readonly ElfSymbol[];
    try {
      symtab = elf.symbols('symtab');
    } finally {
      elf.close();
    }
    t.diagnostic(`openElf + symbols('symtab'): ${(performance.now() - started).toFixed(1)} ms`);
    const expected = readelfSymbols(NODE).get('.symtab')!;
    assert.equal(symtab.length, expected.length - 1);
    // A seeded sample of a thousand entries, plus the first and last.
    let seed = 12345;
    const picks = [1, expected.length - 1];
    for (let i = 0; i < 1000; i++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      picks.push(1 + (seed % (expected.length - 1)));
    }
    for (const num of picks) {
      const { num: _num, ...want } = expected[num]!;
      assert.deepEqual(comparable(symtab[num - 1]!, elf), want, `symbol ${num}`);
    }
  });

  test('openElf() reads only the headers and the sections asked for', () => {
    const before = process.memoryUsage().arrayBuffers;
    const elf = openElf(NODE);
    try {
      assert.ok(elf.fileSize > 50_000_000n, 'node is a large binary');
      elf.symbols('symtab');
      const grown = process.memoryUsage().arrayBuffers - before;
      const needed = ['.symtab', '.strtab'].reduce((n, s) => n + Number(elf.section(s)!.size), 0);
      assert.ok(grown < needed * 2, `read ${grown} bytes for ${needed} bytes of symbol tables`);
    } finally {
      elf.close();
    }
  });
});
