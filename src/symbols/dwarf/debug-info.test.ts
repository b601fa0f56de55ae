import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { openElf } from '../elf/index.js';
import { DW_AT } from './constants.js';
import { DwarfFormatError } from './cursor.js';
import { DwarfReader } from './dwarf-reader.js';
import { declaration } from './dwarf-types.js';
import { type DwarfSections, dwarfSections } from './sections.js';

// The truth here is what binutils say about the same files: readelf --debug-dump=info for
// DIEs, objdump --dwarf=frames-interp for the CFA at every pc where it changes.

const BUILDS: Record<string, string[]> = {
  'DWARF 5 -O0': ['-O0'],
  'DWARF 5 -O2': ['-O2'],
  'DWARF 4 -O2': ['-O2', '-gdwarf-4'],
  '64-bit DWARF 5 -O2': ['-O2', '-gdwarf64'],
  'DWARF 5 -O2 PIE off': ['-O2', '-no-pie'],
};

interface ReadelfDie {
  readonly depth: number;
  readonly tag: string;
  readonly attrs: Map<string, string>;
}

/** The DIEs readelf prints, in order, each with its attribute values as text. */
function readelfDies(path: string): ReadelfDie[] {
  const dies: ReadelfDie[] = [];
  let current: ReadelfDie | undefined;
  for (const line of tool('readelf', ['--debug-dump=info', '-wi', path]).split('\n')) {
    const head = /^\s*<(\d+)><[0-9a-f]+>: Abbrev Number: \d+ \((DW_TAG_\w+)\)/.exec(line);
    if (head !== null) {
      current = { depth: Number(head[1]), tag: head[2]!, attrs: new Map() };
      dies.push(current);
      continue;
    }
    const attr = /^\s*<[0-9a-f]+>\s+(DW_AT_\w+)\s*:\s*(.*)$/.exec(line);
    if (attr !== null && current !== undefined) current.attrs.set(attr[1]!, attr[2]!.trim());
  }
  return dies;
}

/** A name as readelf shows it: `(indirect string, offset: 0x2a3): handle` or `handle`. */
function nameOf(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const m = /\):\s*(.*)$/.exec(value);
  return m === null ? value : m[1]!;
}

/** Functions with code per readelf: name, low_pc, high_pc, parameter names. */
function readelfFunctions(path: string) {
  const dies = readelfDies(path);
  const out: { name: string; low: bigint; high: bigint; params: string[] }[] = [];
  for (let i = 0; i < dies.length; i++) {
    const die = dies[i]!;
    if (die.tag !== 'DW_TAG_subprogram') continue;
    const low = die.attrs.get('DW_AT_low_pc');
    const high = die.attrs.get('DW_AT_high_pc');
    const name = nameOf(die.attrs.get('DW_AT_name'));
    if (low === undefined || high === undefined || name === undefined) continue;
    const lowPc = BigInt(low);
    // readelf prints a high_pc of class constant as the length, of class address as an address.
    const highPc = BigInt(high) < lowPc ? lowPc + BigInt(high) : BigInt(high);
    const params: string[] = [];
    for (let k = i + 1; k < dies.length && dies[k]!.depth > die.depth; k++) {
      const child = dies[k]!;
      if (child.depth === die.depth + 1 && child.tag === 'DW_TAG_formal_parameter') {
        const paramName = nameOf(child.attrs.get('DW_AT_name'));
        if (paramName !== undefined) params.push(paramName);
      }
    }
    out.push({ name, low: lowPc, high: highPc, params });
  }
  return out;
}

describe('DwarfReader against readelf', () => {
  for (const [label, flags] of Object.entries(BUILDS)) {
    test(`finds every subprogram's low_pc/high_pc and parameters (${label})`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
      const path = compileProgram('dwarf-vars', { flags });
      const expected = readelfFunctions(path);
      assert.ok(
        expected.some((fn) => fn.name === 'handle'),
        'readelf lists handle',
      );
      const elf = openElf(path);
      try {
        const reader = DwarfReader.fromElf(elf);
        for (const fn of expected) {
          const found = reader.functionsNamed(fn.name).filter((f) => !f.inlined);
          assert.equal(found.length, 1, fn.name);
          const die = found[0]!.die;
          assert.equal(found[0]!.entryPc, fn.low, `${fn.name} entry`);
          assert.deepEqual(reader.info.ranges(die), [{ low: fn.low, high: fn.high }], fn.name);
          const scopes = reader.scopesAt(fn.low);
          assert.equal(scopes[0]?.name, fn.name, `scope at ${fn.name}`);
          assert.equal(reader.scopesAt(fn.high - 1n)[0]?.name, fn.name);
          const params = reader
            .variablesAt(fn.low)
            .filter((v) => v.parameter)
            .map((v) => v.name);
          assert.deepEqual(params, fn.params, `parameters of ${fn.name}`);
          assert.equal(reader.inlineContextAt(fn.low)?.name, fn.name);
        }
      } finally {
        elf.close();
      }
    });
  }

  test('finds the unit of an address the same with and without .debug_aranges', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const path = compileProgram('dwarf-vars', { flags: ['-O2'] });
    const elf = openElf(path);
    try {
      const sections = dwarfSections(elf);
      const withAranges = new DwarfReader(sections);
      const without = new DwarfReader({ ...plain(sections), aranges: new Uint8Array(0) });
      for (const fn of readelfFunctions(path)) {
        for (const reader of [withAranges, without]) {
          assert.equal(reader.info.unitForAddress(fn.low)?.offset, 0);
          assert.equal(reader.scopesAt(fn.low)[0]?.name, fn.name);
        }
      }
      assert.equal(without.info.unitForAddress(0x10n), undefined);
    } finally {
      elf.close();
    }
  });

  test('types and locations of the parameters of handle, as C declares them', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    for (const flags of [['-O0'], ['-O2'], ['-O2', '-gdwarf-4']]) {
      const path = compileProgram('dwarf-vars', { flags });
      const elf = openElf(path);
      try {
        const reader = DwarfReader.fromElf(elf);
        const [handle] = reader.functionsNamed('handle');
        assert.ok(handle !== undefined);
        const declared = reader
          .variablesAt(handle.entryPc)
          .filter((v) => v.parameter)
          .map((v) => reader.types.typeOf(v.die))
          .map((type, i) => [type, i] as const);
        assert.equal(declared.length, 6);
        // The source (test/programs/dwarf-vars.c) is the truth for the declarations.
        const text = reader
          .variablesAt(handle.entryPc)
          .filter((v) => v.parameter)
          .map((v) => declarationOf(reader, v.die));
        assert.deepEqual(text, [
          'int n',
          'size_type size',
          'char *label',
          'struct request *req',
          'enum color c',
          '_Bool flag',
        ]);
      } finally {
        elf.close();
      }
    }
  });
});

function declarationOf(reader: DwarfReader, die: Parameters<DwarfReader['types']['typeOf']>[0]) {
  const name = reader.info.name(die) ?? '?';
  return declaration(reader.types.typeOf(die), name);
}

/** The sections as a plain object (the getters read once), to replace some in tests. */
function plain(sections: DwarfSections): DwarfSections {
  return {
    info: sections.info,
    abbrev: sections.abbrev,
    line: sections.line,
    lineStr: sections.lineStr,
    str: sections.str,
    strOffsets: sections.strOffsets,
    addr: sections.addr,
    ranges: sections.ranges,
    rngLists: sections.rngLists,
    loc: sections.loc,
    locLists: sections.locLists,
    aranges: sections.aranges,
    frame: sections.frame,
    ehFrame: sections.ehFrame,
    ehFrameVaddr: sections.ehFrameVaddr,
  };
}

describe('CallFrames against objdump --dwarf=frames-interp', () => {
  for (const [label, flags] of Object.entries(BUILDS)) {
    test(`the CFA at every row of every FDE (${label})`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
      const path = compileProgram('dwarf-vars', { flags });
      const rows: { pc: bigint; cfa: string }[] = [];
      for (const line of tool('objdump', ['--dwarf=frames-interp', path]).split('\n')) {
        const m = /^([0-9a-f]{16}) (\S+)/.exec(line);
        if (m !== null && BigInt(`0x${m[1]}`) !== 0n)
          rows.push({ pc: BigInt(`0x${m[1]}`), cfa: m[2]! });
      }
      assert.ok(rows.length >= 5, 'objdump shows FDE rows');
      const elf = openElf(path);
      try {
        const reader = DwarfReader.fromElf(elf);
        for (const row of rows) {
          const rule = reader.frames.cfaAt(row.pc);
          const text =
            rule === undefined
              ? 'none'
              : rule.kind === 'expression'
                ? 'exp'
                : `${['rax', 'rdx', 'rcx', 'rbx', 'rsi', 'rdi', 'rbp', 'rsp'][rule.register] ?? `r${rule.register}`}+${rule.offset}`;
          assert.equal(text, row.cfa, `CFA at 0x${row.pc.toString(16)}`);
        }
      } finally {
        elf.close();
      }
    });
  }
});

/** A deterministic generator of pseudo-random numbers (xorshift32). */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

/** Everything a caller asks of the reader for one function. */
function readAll(reader: DwarfReader): void {
  for (const unit of reader.info.units()) reader.info.tree(unit);
  for (const fn of reader.functionsNamed('handle')) {
    for (const v of reader.variablesAt(fn.entryPc)) {
      reader.locate(v, fn.entryPc);
      reader.types.typeOf(v.die);
      reader.info.string(v.die, DW_AT.name);
    }
  }
}

describe('malformed DWARF', () => {
  test('damaged .debug_info and .debug_abbrev fail with DwarfFormatError, never another exception', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const path = compileProgram('dwarf-vars', { flags: ['-O2'] });
    const elf = openElf(path);
    try {
      const sections = plain(dwarfSections(elf));
      const next = random(12345);
      let failures = 0;
      for (let i = 0; i < 300; i++) {
        const which = i % 2 === 0 ? 'info' : 'abbrev';
        const bytes = Uint8Array.from(sections[which]);
        const flips = 1 + Math.floor(next() * 4);
        for (let k = 0; k < flips; k++) {
          bytes[Math.floor(next() * bytes.length)] = Math.floor(next() * 256);
        }
        const cut = i % 7 === 0 ? bytes.subarray(0, Math.floor(next() * bytes.length)) : bytes;
        try {
          readAll(new DwarfReader({ ...sections, [which]: cut }));
        } catch (err) {
          if (!(err instanceof DwarfFormatError)) throw err;
          failures++;
        }
      }
      assert.ok(failures > 20, `${failures} of 300 damaged copies were refused`);
    } finally {
      elf.close();
    }
  });

  test('a unit length past the section, an unknown form and an undefined abbreviation are named', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const path = compileProgram('dwarf-vars', { flags: ['-O2'] });
    const elf = openElf(path);
    try {
      const sections = plain(dwarfSections(elf));
      const lying = Uint8Array.from(sections.info);
      new DataView(lying.buffer).setUint32(0, lying.length + 100, true);
      assert.throws(
        () => new DwarfReader({ ...sections, info: lying }).info.units(),
        (err: unknown) => err instanceof DwarfFormatError && /needs \d+ bytes/.test(err.message),
      );
      // The first abbreviation's first attribute form (code, tag, children, then name, form).
      const abbrev = Uint8Array.from(sections.abbrev);
      abbrev[4] = 0x7f;
      assert.throws(
        () => readAll(new DwarfReader({ ...sections, abbrev })),
        (err: unknown) =>
          err instanceof DwarfFormatError && /unknown attribute form 0x7f/.test(err.message),
      );
      // The first DIE's abbreviation code, past the unit header of DWARF 5 (12 bytes).
      const info = Uint8Array.from(sections.info);
      info[12] = 0x7e;
      assert.throws(
        () => readAll(new DwarfReader({ ...sections, info })),
        (err: unknown) =>
          err instanceof DwarfFormatError && /undefined abbreviation code 126/.test(err.message),
      );
    } finally {
      elf.close();
    }
  });
});
