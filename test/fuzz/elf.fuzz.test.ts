import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { type ElfFile, parseElf, readDynamicInfo } from '../../src/symbols/index.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { type ByteSeed, fuzz, isProbeError, mutatedBytes } from './harness.js';

// The ELF reader over damaged copies of binaries gcc built here: a -g executable, a shared
// library, hand-written USDT notes with compressed debug sections, a stripped executable.

/** Everything a caller can ask of a file, so that lazily found damage surfaces too. */
export function readEverything(elf: ElfFile): void {
  for (const section of elf.sections) elf.sectionBytes(section);
  elf.section('.text');
  elf.symbols('symtab');
  elf.symbols('dynsym');
  elf.functionColumns('symtab');
  elf.functionColumns('dynsym');
  elf.notes();
  elf.buildId();
  elf.debugLink();
  elf.usdtNotes();
  readDynamicInfo(elf);
  elf.vaddrToFileOffset(elf.entry);
  elf.fileOffsetToVaddr(0n);
  elf.loadSegmentOf(elf.entry);
  if (elf.fileSize > 0n) elf.read(0n, 1);
}

const METADATA = /^\.(note|dyn|gnu|interp|shstrtab|strtab|symtab|stapsdt|rela|hash|debug_line$)/;

/** The ELF header, program and section header tables, and the small metadata sections. */
export function elfSeed(label: string, path: string): ByteSeed {
  const bytes = readFileSync(path);
  const elf = parseElf(bytes);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const phoff = Number(view.getBigUint64(32, true));
  const shoff = Number(view.getBigUint64(40, true));
  const hotspots: [number, number][] = [
    [0, 64],
    [phoff, phoff + 56 * view.getUint16(56, true)],
    [shoff, shoff + 64 * view.getUint16(60, true)],
  ];
  for (const s of elf.sections) {
    if (METADATA.test(s.name) && s.size > 0n && s.typeName !== 'NOBITS') {
      hotspots.push([Number(s.offset), Number(s.offset + s.size)]);
    }
  }
  return { label, bytes, hotspots };
}

test('fuzz: the ELF reader throws only ProbeError on damaged binaries', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const seeds = [
    elfSeed('elf-basic -g', compileProgram('elf-basic')),
    elfSeed(
      'elf-lib.so',
      compileProgram('elf-lib', { flags: ['-shared', '-fPIC'], suffix: '.so' }),
    ),
    elfSeed('elf-usdt -O2 -gz', compileProgram('elf-usdt', { flags: ['-O2', '-gz'] })),
    elfSeed('elf-basic stripped', compileProgram('elf-basic', { strip: true })),
  ];
  fuzz(t, {
    name: 'elf',
    input: mutatedBytes(seeds),
    run: (bytes) => readEverything(parseElf(bytes)),
    expected: isProbeError('ERR_ELF_INVALID', 'ERR_ELF_UNSUPPORTED', 'ERR_USDT_ARGUMENT'),
    shortRuns: 400,
  });
});
