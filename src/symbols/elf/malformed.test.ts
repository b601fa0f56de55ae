import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfSection } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import { type ElfFile, openElf, parseElf } from './index.js';

// Broken files made from a real compiled binary by patching bytes where readelf says the
// headers and sections are. Each must fail with a ProbeError (never a TypeError, RangeError,
// hang or huge allocation) whose code and single-line message say what is wrong.

const scratch = mkdtempSync(join(tmpdir(), 'upscope-elf-bad-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** Everything a caller can ask of a file, so that lazily found damage surfaces too. */
function readEverything(elf: ElfFile): void {
  for (const section of elf.sections) elf.sectionBytes(section);
  elf.symbols('symtab');
  elf.symbols('dynsym');
  elf.notes();
  elf.buildId();
  elf.debugLink();
  elf.usdtNotes();
  elf.vaddrToFileOffset(elf.entry);
  elf.fileOffsetToVaddr(0n);
  elf.loadSegmentOf(elf.entry);
  if (elf.fileSize > 0n) elf.read(0n, 1);
}

interface Case {
  readonly title: string;
  readonly code: 'ERR_ELF_INVALID' | 'ERR_ELF_UNSUPPORTED' | 'ERR_SCRIPT_TARGET';
  readonly reason: RegExp;
  readonly make: (original: Buffer, path: string) => Buffer;
}

function patched(original: Buffer, patch: (bytes: Buffer) => void): Buffer {
  const bytes = Buffer.from(original);
  patch(bytes);
  return bytes;
}

const CASES: readonly Case[] = [
  {
    title: 'an empty file',
    code: 'ERR_ELF_INVALID',
    reason: /: the file is empty$/,
    make: () => Buffer.alloc(0),
  },
  {
    title: 'a text file',
    code: 'ERR_ELF_INVALID',
    reason: /: not an ELF file \(it starts with bytes 68 65 6c 6c, not 7f 45 4c 46\)$/,
    make: () => Buffer.from('hello world\n'),
  },
  {
    title: 'a script',
    code: 'ERR_SCRIPT_TARGET',
    reason: /: it is a script run by sh \("#!\/bin\/sh"\), not an ELF file$/,
    make: () => Buffer.from('#!/bin/sh\necho hello\n'),
  },
  {
    title: 'a file cut after 3 bytes',
    code: 'ERR_ELF_INVALID',
    reason: /: not an ELF file/,
    make: (b) => b.subarray(0, 3),
  },
  {
    title: 'a file cut inside e_ident',
    code: 'ERR_ELF_INVALID',
    reason: /: the file is truncated to 10 bytes inside the ELF header$/,
    make: (b) => b.subarray(0, 10),
  },
  {
    title: 'a file cut inside the ELF header',
    code: 'ERR_ELF_INVALID',
    reason: /: the file is truncated to 40 bytes inside the ELF header \(64 bytes\)$/,
    make: (b) => b.subarray(0, 40),
  },
  {
    title: 'a file cut inside the program headers',
    code: 'ERR_ELF_INVALID',
    reason:
      /: the section header table at 0x[0-9a-f]+ \(64 bytes\) runs past the end of the file \(200 bytes\)$/,
    make: (b) => b.subarray(0, 200),
  },
  {
    title: 'a file cut in half',
    code: 'ERR_ELF_INVALID',
    reason: /: the section header table at 0x[0-9a-f]+ .* runs past the end of the file/,
    make: (b) => b.subarray(0, b.length >> 1),
  },
  {
    title: 'a file one byte short',
    code: 'ERR_ELF_INVALID',
    reason:
      /: the section header table at 0x[0-9a-f]+ with \d+ entries runs past the end of the file/,
    make: (b) => b.subarray(0, b.length - 1),
  },
  {
    title: 'a 32-bit file (ELFCLASS32)',
    code: 'ERR_ELF_UNSUPPORTED',
    reason: /^Cannot use ELF file ".*": 32-bit ELF \(ELFCLASS32\) is not supported$/,
    make: (b) => patched(b, (x) => x.writeUInt8(1, 4)),
  },
  {
    title: 'an unknown ELF class',
    code: 'ERR_ELF_INVALID',
    reason: /: unknown ELF class 0 in e_ident$/,
    make: (b) => patched(b, (x) => x.writeUInt8(0, 4)),
  },
  {
    title: 'a big-endian file',
    code: 'ERR_ELF_UNSUPPORTED',
    reason: /: big-endian ELF \(ELFDATA2MSB\) is not supported$/,
    make: (b) => patched(b, (x) => x.writeUInt8(2, 5)),
  },
  {
    title: 'an AArch64 file',
    code: 'ERR_ELF_UNSUPPORTED',
    reason: /: machine EM_AARCH64 \(183\) is not supported$/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(183, 18)),
  },
  {
    title: 'a file for an unknown machine',
    code: 'ERR_ELF_UNSUPPORTED',
    reason: /: machine unknown \(4321\) is not supported$/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(4321, 18)),
  },
  {
    title: 'a huge e_shnum',
    code: 'ERR_ELF_INVALID',
    reason:
      /: the section header table at 0x[0-9a-f]+ with 65280 entries runs past the end of the file/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(0xff00, 60)),
  },
  {
    title: 'an extended section count (e_shnum 0) that is huge',
    code: 'ERR_ELF_INVALID',
    reason: /: the section header table at 0x[0-9a-f]+ with 1099511627776 entries runs past/,
    make: (b) =>
      patched(b, (x) => {
        x.writeUInt16LE(0, 60);
        x.writeBigUInt64LE(1n << 40n, Number(x.readBigUInt64LE(40)) + 32);
      }),
  },
  {
    title: 'e_shoff past the end',
    code: 'ERR_ELF_INVALID',
    reason: /: the section header table at 0x[0-9a-f]+ \(64 bytes\) runs past the end of the file/,
    make: (b) => patched(b, (x) => x.writeBigUInt64LE(BigInt(b.length + 4096), 40)),
  },
  {
    title: 'a huge e_phnum',
    code: 'ERR_ELF_INVALID',
    reason: /: the program header table at 0x40 with 65534 entries runs past the end of the file/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(0xfffe, 56)),
  },
  {
    title: 'a wrong e_phentsize',
    code: 'ERR_ELF_INVALID',
    reason: /: e_phentsize is 32, not 56$/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(32, 54)),
  },
  {
    title: 'a wrong e_shentsize',
    code: 'ERR_ELF_INVALID',
    reason: /: e_shentsize is 40, not 64$/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(40, 58)),
  },
  {
    title: 'an e_shstrndx past the section table',
    code: 'ERR_ELF_INVALID',
    reason: /: e_shstrndx 999 is not a section \(the file has \d+\)$/,
    make: (b) => patched(b, (x) => x.writeUInt16LE(999, 62)),
  },
  {
    title: 'a section whose offset is past the end',
    code: 'ERR_ELF_INVALID',
    reason: /: section \[\d+\] \.text at 0x[0-9a-f]+ \(\d+ bytes\) runs past the end of the file/,
    make: (b, path) =>
      patched(b, (x) => {
        const text = readelfSection(path, b, '.text');
        x.writeBigUInt64LE(BigInt(b.length + 16), text.headerOffset + 24);
      }),
  },
  {
    title: 'a section whose size runs past the end',
    code: 'ERR_ELF_INVALID',
    reason:
      /: section \[\d+\] \.comment at 0x[0-9a-f]+ \(\d+ bytes\) runs past the end of the file/,
    make: (b, path) =>
      patched(b, (x) => {
        const comment = readelfSection(path, b, '.comment');
        x.writeBigUInt64LE(0xffff_ffff_ffffn, comment.headerOffset + 32);
      }),
  },
  {
    title: 'a .strtab whose last name has no terminator',
    code: 'ERR_ELF_INVALID',
    reason: /: string table \[\d+\] \.strtab does not end with a NUL byte$/,
    make: (b, path) =>
      patched(b, (x) => {
        const strtab = readelfSection(path, b, '.strtab');
        x.writeUInt8(0x78, strtab.offset + strtab.size - 1);
      }),
  },
  {
    title: 'a .shstrtab whose last name has no terminator',
    code: 'ERR_ELF_INVALID',
    reason: /: the section name table \[\d+\] does not end with a NUL byte$/,
    make: (b, path) =>
      patched(b, (x) => {
        const shstrtab = readelfSection(path, b, '.shstrtab');
        x.writeUInt8(0x78, shstrtab.offset + shstrtab.size - 1);
      }),
  },
  {
    title: 'a .symtab with 16-byte entries',
    code: 'ERR_ELF_INVALID',
    reason: /: symbol table \[\d+\] \.symtab has entries of 16 bytes, not 24$/,
    make: (b, path) =>
      patched(b, (x) =>
        x.writeBigUInt64LE(16n, readelfSection(path, b, '.symtab').headerOffset + 56),
      ),
  },
  {
    title: 'a .symtab whose size is not a whole number of entries',
    code: 'ERR_ELF_INVALID',
    reason: /: symbol table \[\d+\] \.symtab is \d+ bytes, not a multiple of 24$/,
    make: (b, path) =>
      patched(b, (x) => {
        const symtab = readelfSection(path, b, '.symtab');
        x.writeBigUInt64LE(BigInt(symtab.size - 5), symtab.headerOffset + 32);
      }),
  },
  {
    title: 'a .symtab linked to a section that is not a string table',
    code: 'ERR_ELF_INVALID',
    reason: /: section \[\d+\] \.symtab links to section \[1\], which is not a string table$/,
    make: (b, path) =>
      patched(b, (x) => x.writeUInt32LE(1, readelfSection(path, b, '.symtab').headerOffset + 40)),
  },
  {
    title: 'a symbol whose name is past the end of .strtab',
    code: 'ERR_ELF_INVALID',
    reason: /: symbol 3 of symbol table \[\d+\] \.symtab has its name at 0x[0-9a-f]+, past the end/,
    make: (b, path) =>
      patched(b, (x) =>
        x.writeUInt32LE(0x7fff_ffff, readelfSection(path, b, '.symtab').offset + 3 * 24),
      ),
  },
  {
    title: 'a .gnu.version shorter than .dynsym',
    code: 'ERR_ELF_INVALID',
    reason: /: section \[\d+\] \.gnu\.version has 1 entries for \d+ dynamic symbols$/,
    make: (b, path) =>
      patched(b, (x) =>
        x.writeBigUInt64LE(2n, readelfSection(path, b, '.gnu.version').headerOffset + 32),
      ),
  },
  {
    title: 'a build-id note whose size runs past its section',
    code: 'ERR_ELF_INVALID',
    reason:
      /: the note at 0x0 in section \[\d+\] \.note\.gnu\.build-id runs past its end \(36 bytes\)$/,
    make: (b, path) =>
      patched(b, (x) =>
        x.writeUInt32LE(0xffff_fff0, readelfSection(path, b, '.note.gnu.build-id').offset + 4),
      ),
  },
  {
    title: 'a version dependency chained past the end of .gnu.version_r',
    code: 'ERR_ELF_INVALID',
    reason: /: an entry at 0x[0-9a-f]+ in section \[\d+\] \.gnu\.version_r runs past its end$/,
    make: (b, path) =>
      patched(b, (x) =>
        x.writeUInt32LE(0x1000, readelfSection(path, b, '.gnu.version_r').offset + 8),
      ),
  },
];

describe('parseElf() and openElf() on malformed files', () => {
  for (const c of CASES) {
    test(`reject ${c.title} with ${c.code} and a clear message`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
      const original = compileProgram('elf-basic', { flags: ['-O0'] });
      const bytes = c.make(readFileSync(original), original);
      const path = join(scratch, c.title.replace(/\W+/g, '-'));
      writeFileSync(path, bytes);
      const check = (err: unknown): true => {
        assert.ok(err instanceof ProbeError, `a ProbeError, not ${String(err)}`);
        assert.equal(err.code, c.code, err.message);
        assert.match(err.message, c.reason);
        assert.match(err.message, /^Cannot (read|use) ELF file "/);
        assert.ok(err.message.includes(`"${path}"`), 'the message names the file');
        assert.ok(!err.message.includes('\n'), 'the message is one line');
        assert.ok(!err.message.endsWith('.'), 'the message has no final period');
        return true;
      };
      assert.throws(() => readEverything(parseElf(bytes, { path })), check);
      assert.throws(() => {
        const elf = openElf(path);
        try {
          readEverything(elf);
        } finally {
          elf.close();
        }
      }, check);
    });
  }

  test('parseElf() names no file when it is given no path', () => {
    assert.throws(() => parseElf(Buffer.from('hello')), {
      code: 'ERR_ELF_INVALID',
      message:
        'Cannot read ELF data: not an ELF file (it starts with bytes 68 65 6c 6c, not 7f 45 4c 46)',
    });
  });
});

/** mulberry32: a small seeded PRNG, so that a failure can be replayed. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
}

describe('parseElf() on randomly damaged files', () => {
  test('2000 random byte flips and truncations never raise anything but an ELF ProbeError', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    // A small program with USDT notes, versioned dynamic symbols and zlib-compressed debug
    // sections, so that damage reaches every reader.
    const original = readFileSync(compileProgram('elf-usdt', { flags: ['-O2', '-gz'] }));
    const shoff = Number(original.readBigUInt64LE(40));
    const shEnd = shoff + original.readUInt16LE(60) * 64;
    const phEnd = 64 + original.readUInt16LE(56) * 56;
    const random = prng(20240601);
    const pick = (n: number): number => Math.floor(random() * n);
    const outcomes = { ok: 0, invalid: 0, unsupported: 0 };
    for (let round = 0; round < 2000; round++) {
      let bytes: Buffer;
      if (random() < 0.15) {
        bytes = original.subarray(0, pick(original.length));
      } else {
        bytes = Buffer.from(original);
        const flips = 1 + pick(6);
        for (let i = 0; i < flips; i++) {
          const where = random();
          const at =
            where < 0.3
              ? pick(64)
              : where < 0.45
                ? 64 + pick(phEnd - 64)
                : where < 0.7
                  ? shoff + pick(shEnd - shoff)
                  : pick(original.length);
          bytes[at] = random() < 0.5 ? pick(256) : bytes[at]! ^ (1 << pick(8));
        }
      }
      try {
        readEverything(parseElf(bytes, { path: `round-${round}` }));
        outcomes.ok++;
      } catch (err) {
        if (!(err instanceof ProbeError)) {
          assert.fail(`round ${round}: ${(err as Error)?.stack ?? String(err)}`);
        }
        assert.ok(
          err.code === 'ERR_ELF_INVALID' || err.code === 'ERR_ELF_UNSUPPORTED',
          `round ${round}: ${err.code} ${err.message}`,
        );
        assert.ok(!err.message.includes('\n'), `round ${round}: one line: ${err.message}`);
        if (err.code === 'ERR_ELF_INVALID') outcomes.invalid++;
        else outcomes.unsupported++;
      }
    }
    t.diagnostic(`outcomes: ${JSON.stringify(outcomes)}`);
    assert.ok(outcomes.ok > 0 && outcomes.invalid > 0 && outcomes.unsupported > 0);
  });
});
