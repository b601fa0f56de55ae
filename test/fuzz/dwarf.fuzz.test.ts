import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ProbeError } from '../../src/errors/index.js';
import {
  CallFrames,
  DwarfFormatError,
  DwarfReader,
  type DwarfSections,
  dwarfSections,
  LineTable,
  parseElf,
} from '../../src/symbols/index.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { type ByteSeed, fuzz, mutatedSeed } from './harness.js';

// The DWARF readers over binaries gcc built here with one debug section damaged at a time:
// the line table (header, file tables, program), .debug_info with its abbreviations, strings,
// address, range and location lists, and the call frames of .eh_frame and .debug_frame.

type SectionKey = Exclude<keyof DwarfSections, 'ehFrameVaddr'>;

const KEYS: readonly SectionKey[] = [
  'info',
  'abbrev',
  'line',
  'lineStr',
  'str',
  'strOffsets',
  'addr',
  'ranges',
  'rngLists',
  'loc',
  'locLists',
  'aranges',
  'frame',
  'ehFrame',
];

interface Binary {
  readonly label: string;
  readonly sections: DwarfSections;
  /** Where the code is: sequences of the line table outside it are dropped. */
  readonly code: readonly { readonly low: number; readonly high: number }[];
  /** Function addresses (from the symbol table) and a few others to ask about. */
  readonly addresses: readonly bigint[];
  readonly names: readonly string[];
}

interface SectionSeed extends ByteSeed {
  readonly binary: Binary;
  readonly key: SectionKey;
}

function binary(label: string, path: string): Binary {
  const elf = parseElf(readFileSync(path));
  const lazy = dwarfSections(elf);
  const sections = { ehFrameVaddr: lazy.ehFrameVaddr } as Record<string, unknown>;
  for (const key of KEYS) sections[key] = Uint8Array.from(lazy[key]);
  const functions = elf.symbols('symtab').filter((s) => s.type === 'func' && s.value !== 0n);
  const addresses = functions.flatMap((f) => [f.value, f.value + 4n, f.value + f.size - 1n]);
  return {
    label,
    sections: sections as unknown as DwarfSections,
    code: elf.sections
      .filter((s) => s.executable && s.size > 0n)
      .map((s) => ({ low: Number(s.addr), high: Number(s.addr + s.size) })),
    addresses: [0n, ...addresses.slice(0, 24)],
    names: functions.slice(0, 6).map((f) => f.name),
  };
}

function seeds(b: Binary): SectionSeed[] {
  return KEYS.filter((key) => b.sections[key].length > 0).map((key) => ({
    label: `${b.label} ${key}`,
    binary: b,
    key,
    bytes: b.sections[key],
    // The unit headers and the first entries, where lengths and versions are.
    hotspots: [[0, 64]],
  }));
}

function withSection(b: Binary, key: SectionKey, bytes: Uint8Array): DwarfSections {
  return { ...b.sections, [key]: bytes };
}

function readLines(b: Binary, sections: DwarfSections): void {
  const table = new LineTable(sections, {
    keepSequence: (vaddr) => b.code.some((s) => vaddr >= s.low && vaddr < s.high),
  });
  if (!table.present) return;
  const files = table.sourceFiles();
  for (const file of files.slice(0, 3)) {
    table.matchFiles(file);
    const lines = table.linesWithCode(file);
    for (const line of lines.slice(0, 4)) table.rowsOfLine(file, line);
    table.rowsOfLines(file, 1, 50);
  }
  for (const vaddr of b.addresses) table.locationOf(vaddr);
  table.rowsInRange(0n, 0xffffffffn);
}

function readInfo(b: Binary, sections: DwarfSections): void {
  const reader = new DwarfReader(sections);
  if (!reader.hasInfo) return;
  for (const unit of reader.info.units()) reader.info.tree(unit);
  reader.functionNames();
  for (const name of b.names) reader.functionsNamed(name);
  for (const vaddr of b.addresses) {
    reader.scopesAt(vaddr);
    reader.inlineContextAt(vaddr);
    reader.producerAt(vaddr);
    reader.cfaAt(vaddr);
    for (const variable of reader.variablesAt(vaddr).slice(0, 8)) {
      reader.typeOf(variable);
      reader.locate(variable, vaddr);
    }
  }
}

function readFrames(b: Binary, sections: DwarfSections): void {
  const frames = new CallFrames(sections);
  for (const vaddr of b.addresses) frames.cfaAt(vaddr);
}

const expected = (err: unknown): boolean =>
  err instanceof DwarfFormatError || (err instanceof ProbeError && err.code !== 'ERR_INTERNAL');

test('fuzz: the DWARF readers throw only DwarfFormatError on damaged sections', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const binaries = [
    binary('dwarf-vars -O0', compileProgram('dwarf-vars')),
    binary('dwarf-vars -O2', compileProgram('dwarf-vars', { flags: ['-O2'] })),
    binary('lines -O2 -gdwarf-4', compileProgram('lines', { flags: ['-O2', '-gdwarf-4'] })),
    binary('elf-basic -gdwarf-4', compileProgram('elf-basic', { flags: ['-gdwarf-4'] })),
  ];
  const all = binaries.flatMap(seeds);
  const input = mutatedSeed(all);
  const lineSeeds = all.filter((s) => s.key === 'line' || s.key === 'lineStr' || s.key === 'str');
  fuzz(t, {
    name: 'dwarf-line',
    input: mutatedSeed(lineSeeds),
    run: ({ seed, bytes }) => readLines(seed.binary, withSection(seed.binary, seed.key, bytes)),
    expected,
    shortRuns: 300,
  });
  fuzz(t, {
    name: 'dwarf-info',
    input: input.filter(({ seed }) => seed.key !== 'frame' && seed.key !== 'ehFrame'),
    run: ({ seed, bytes }) => readInfo(seed.binary, withSection(seed.binary, seed.key, bytes)),
    expected,
    shortRuns: 300,
  });
  const frameSeeds = all.filter((s) => s.key === 'frame' || s.key === 'ehFrame');
  fuzz(t, {
    name: 'dwarf-frames',
    input: mutatedSeed(frameSeeds),
    run: ({ seed, bytes }) => readFrames(seed.binary, withSection(seed.binary, seed.key, bytes)),
    expected,
    shortRuns: 300,
  });
});
