import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import { DT, openElf, parseDynamicEntries, parseElf, readDynamicInfo } from './index.js';

/** Elf64_Dyn entries as little-endian bytes. */
function dynamic(entries: readonly [bigint, bigint][]): Uint8Array {
  const bytes = new Uint8Array(entries.length * 16);
  const view = new DataView(bytes.buffer);
  entries.forEach(([tag, value], i) => {
    view.setBigInt64(i * 16, tag, true);
    view.setBigUint64(i * 16 + 8, value, true);
  });
  return bytes;
}

describe('parseDynamicEntries()', () => {
  test('reads tags and values up to DT_NULL, with where each entry is', () => {
    const bytes = dynamic([
      [DT.NEEDED, 1n],
      [DT.DEBUG, 0x7fff_0000_1000n],
      [DT.NULL, 0n],
      [DT.SONAME, 9n],
    ]);
    assert.deepEqual(parseDynamicEntries(bytes), [
      { tag: DT.NEEDED, value: 1n, at: 0 },
      { tag: DT.DEBUG, value: 0x7fff_0000_1000n, at: 16 },
    ]);
  });

  test('stops at the end of the bytes without DT_NULL, and ignores a partial entry', () => {
    const bytes = dynamic([[DT.RUNPATH, 3n]]);
    const longer = new Uint8Array(bytes.length + 7);
    longer.set(bytes);
    assert.deepEqual(parseDynamicEntries(longer), [{ tag: DT.RUNPATH, value: 3n, at: 0 }]);
    assert.deepEqual(parseDynamicEntries(new Uint8Array(0)), []);
  });

  test('reads negative (processor-specific) tags as signed', () => {
    assert.equal(parseDynamicEntries(dynamic([[-2n, 5n]]))[0]!.tag, -2n);
  });
});

describe('readDynamicInfo()', () => {
  test('finds the soname, needed libraries, RUNPATH and RPATH readelf -d shows', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const cases = [
      compileProgram('tgt-lib', {
        flags: ['-shared', '-fPIC', '-Wl,-soname,libtgt.so.1', '-Wl,-rpath,/opt/a:$ORIGIN/b'],
        suffix: '.so',
      }),
      compileProgram('elf-basic', { flags: ['-Wl,--disable-new-dtags', '-Wl,-rpath,/opt/old'] }),
      compileProgram('elf-basic', { flags: ['-O1'] }),
    ];
    const seen = { runpath: 0, rpath: 0, soname: 0 };
    for (const path of cases) {
      const readelf = tool('readelf', ['-dW', path]);
      const field = (name: string) =>
        new RegExp(`\\(${name}\\)\\s+.*\\[(.*)\\]`).exec(readelf)?.[1];
      const elf = openElf(path);
      try {
        const info = readDynamicInfo(elf)!;
        assert.equal(info.soname, field('SONAME'), path);
        assert.deepEqual(info.runpath, field('RUNPATH')?.split(':'), path);
        assert.deepEqual(info.rpath, field('RPATH')?.split(':'), path);
        const needed = [...readelf.matchAll(/\(NEEDED\)\s+Shared library: \[(.*)\]/g)].map(
          (m) => m[1],
        );
        assert.deepEqual(info.needed, needed, path);
        if (info.runpath !== undefined) seen.runpath++;
        if (info.rpath !== undefined) seen.rpath++;
        if (info.soname !== undefined) seen.soname++;
        const segment = /^\s+DYNAMIC\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)/m.exec(
          tool('readelf', ['-lW', path]),
        )?.[1];
        assert.equal(info.vaddr, BigInt(segment!), path);
      } finally {
        elf.close();
      }
    }
    assert.deepEqual(seen, { runpath: 1, rpath: 1, soname: 1 }, 'each kind was there once');
  });

  test('gives undefined for a static program', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const path = compileProgram('elf-basic', { flags: ['-static'] });
    const elf = openElf(path);
    try {
      assert.equal(readDynamicInfo(elf), undefined);
    } finally {
      elf.close();
    }
  });
});

/**
 * readelf's view of a file's program headers: where their table starts, each header's type in
 * order, and the sections each one holds.
 */
function programHeaders(path: string): { phoff: number; types: string[]; sections: string[][] } {
  const phoff = Number(
    /Start of program headers:\s+(\d+)/.exec(tool('readelf', ['-hW', path]))![1],
  );
  const program = tool('readelf', ['-lW', path]);
  const types = [...program.matchAll(/^\s+([A-Z_]+)\s+0x[0-9a-f]+ 0x/gm)].map((m) => m[1]!);
  const mapping = program.slice(program.indexOf('Section to Segment mapping'));
  const sections: string[][] = [];
  for (const m of mapping.matchAll(/^[ \t]+(\d+)[ \t]*(.*)$/gm)) {
    sections[Number(m[1])] = m[2]!.trim().split(/[ \t]+/);
  }
  return { phoff, types, sections };
}

test('readDynamicInfo(): a PT_DYNAMIC size past 2^53 is ERR_ELF_INVALID, not an internal error (found by the fuzzer)', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
  const path = compileProgram('elf-basic');
  const bytes = new Uint8Array(readFileSync(path));
  const { phoff, types } = programHeaders(path);
  const index = types.indexOf('DYNAMIC');
  assert.ok(index >= 0, 'the executable has a PT_DYNAMIC');
  // p_filesz, as the fuzzer's input had it: 2^53 + 0x1e0.
  new DataView(bytes.buffer).setBigUint64(phoff + index * 56 + 32, (1n << 53n) + 0x1e0n, true);
  assert.throws(
    () => readDynamicInfo(parseElf(bytes)),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_ELF_INVALID' &&
      /runs past the end of the file/.test(err.message),
  );
});

test('readDynamicInfo(): a string table mapped past the end of the file gives no strings, not an internal error (found by the fuzzer)', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
  const path = compileProgram('elf-basic');
  const bytes = new Uint8Array(readFileSync(path));
  // The LOAD segment that holds .dynstr, moved past the end of the file.
  const { phoff, types, sections } = programHeaders(path);
  const index = sections.findIndex((held) => held.includes('.dynstr'));
  assert.equal(types[index], 'LOAD');
  new DataView(bytes.buffer).setBigUint64(
    phoff + index * 56 + 8,
    BigInt(bytes.length + 4096),
    true,
  );
  const info = readDynamicInfo(parseElf(bytes));
  assert.ok(info !== undefined);
  assert.deepEqual([info.soname, info.needed, info.runpath], [undefined, [], undefined]);
});
