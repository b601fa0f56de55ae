import assert from 'node:assert/strict';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import {
  describeLdCacheFlags,
  FLAG_ELF_LIBC6,
  FLAG_X8664_LIB64,
  FLAG_X8664_LIBX32,
  type LdCacheEntry,
  ldCacheArch,
  parseLdCache,
  parseLdCacheFile,
} from './index.js';

interface PrintedEntry {
  soname: string;
  tag: string;
  path: string;
}

/** `ldconfig -p` (or `ldconfig -C FILE -p`): the entries as glibc's own printer shows them. */
function ldconfigPrint(file?: string): { count: number; entries: PrintedEntry[] } {
  const out = tool('ldconfig', file === undefined ? ['-p'] : ['-C', file, '-p']);
  const count = Number(/^(\d+) libs found/m.exec(out)?.[1]);
  const entries: PrintedEntry[] = [];
  for (const line of out.split('\n')) {
    const m = /^\t(.+) \((.+)\) => (.+)$/.exec(line);
    if (m) entries.push({ soname: m[1]!, tag: m[2]!, path: m[3]! });
  }
  return { count, entries };
}

/** What `ldconfig -p` prints inside the parentheses, from our fields. */
function tagOf(entry: LdCacheEntry): string {
  let tag = describeLdCacheFlags(entry.flags);
  if (entry.hwcaps !== undefined) tag += `, hwcap: "${entry.hwcaps}"`;
  else if (entry.hwcap !== 0n) tag += `, hwcap: 0x${entry.hwcap.toString(16).padStart(16, '0')}`;
  return tag;
}

function assertInvalid(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ProbeError, `expected a ProbeError, got ${String(err)}`);
    assert.equal(err.code, 'ERR_LDCACHE_INVALID');
    assert.match(err.message, /^Cannot read the dynamic linker cache "[^"]+": /);
    assert.match(err.message, pattern);
    return true;
  });
}

/**
 * Lay out a cache the way glibc's dl-cache.h describes it, for malformed-input tests: the new
 * format alone, or the old format with the new one after it ('compat').
 */
function buildCache(
  entries: { soname: string; path: string; flags: number }[],
  format: 'new' | 'old' | 'compat' = 'new',
): Uint8Array {
  const strings: number[] = [];
  const offsets = new Map<string, number>();
  const intern = (s: string): number => {
    const known = offsets.get(s);
    if (known !== undefined) return known;
    const at = strings.length;
    strings.push(...Buffer.from(s), 0);
    offsets.set(s, at);
    return at;
  };
  const interned = entries.map((e) => ({ ...e, key: intern(e.soname), value: intern(e.path) }));
  const oldSize = format === 'new' ? 0 : 16 + entries.length * 12;
  const newBase = format === 'old' ? oldSize : Math.ceil(oldSize / 8) * 8;
  const newSize = format === 'old' ? 0 : 48 + entries.length * 24;
  const total = newBase + newSize + strings.length;
  const bytes = new Uint8Array(total);
  const view = new DataView(bytes.buffer);
  // Strings count from the new header (or, in the old format alone, from its entries' end).
  const stringBase = newBase + newSize;
  const stringShift = stringBase - (format === 'old' ? oldSize : newBase);
  bytes.set(strings, stringBase);
  if (format !== 'new') {
    bytes.set(Buffer.from('ld.so-1.7.0'), 0);
    view.setUint32(12, entries.length, true);
    interned.forEach((e, i) => {
      view.setInt32(16 + i * 12, e.flags, true);
      view.setUint32(16 + i * 12 + 4, stringShift + e.key, true);
      view.setUint32(16 + i * 12 + 8, stringShift + e.value, true);
    });
  }
  if (format !== 'old') {
    bytes.set(Buffer.from('glibc-ld.so.cache1.1'), newBase);
    view.setUint32(newBase + 20, entries.length, true);
    view.setUint32(newBase + 24, strings.length, true);
    bytes[newBase + 28] = 2; // little-endian
    interned.forEach((e, i) => {
      const at = newBase + 48 + i * 24;
      view.setInt32(at, e.flags, true);
      view.setUint32(at + 4, stringShift + e.key, true);
      view.setUint32(at + 8, stringShift + e.value, true);
    });
  }
  return bytes;
}

const X86_64 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;
const SAMPLE = [
  { soname: 'libdemo.so.2', path: '/usr/lib/x86_64-linux-gnu/libdemo.so.2', flags: X86_64 },
  { soname: 'libdemo.so.2', path: '/usr/lib/i386-linux-gnu/libdemo.so.2', flags: FLAG_ELF_LIBC6 },
  {
    soname: 'libdemo.so.2',
    path: '/usr/libx32/libdemo.so.2',
    flags: FLAG_ELF_LIBC6 | FLAG_X8664_LIBX32,
  },
  { soname: 'libother.so.1', path: '/opt/lib/libother.so.1', flags: 0x0a03 },
];

describe('parseLdCache()', () => {
  it("reads every entry of this machine's /etc/ld.so.cache as ldconfig -p prints it", (t) => {
    if (!requireHost(t, { commands: ['ldconfig'] })) return;
    const entries = parseLdCache(readFileSync('/etc/ld.so.cache'));
    const printed = ldconfigPrint();
    assert.equal(entries.length, printed.count);
    assert.deepEqual(
      entries.map((e) => ({ soname: e.soname, tag: tagOf(e), path: e.path })),
      printed.entries,
    );
    assert.ok(entries.some((e) => e.arch === 'x86-64' && /^libc\.so\.\d+$/.test(e.soname)));
  });

  it('reads the new, old and compat formats that ldconfig writes, with glibc-hwcaps entries', (t) => {
    if (!requireHost(t, { root: true, commands: ['ldconfig', 'gcc'] })) return;
    const lib = compileProgram('tgt-lib', {
      flags: ['-shared', '-fPIC', '-Wl,-soname,libtgtdemo.so.1'],
      suffix: '.so',
    });
    const root = mkdtempSync(join(tmpdir(), 'upscope-ldcache-'));
    try {
      const libDir = join(root, 'usr/lib/x86_64-linux-gnu');
      mkdirSync(join(libDir, 'glibc-hwcaps/x86-64-v3'), { recursive: true });
      mkdirSync(join(root, 'etc'));
      writeFileSync(join(root, 'etc/ld.so.conf'), '');
      copyFileSync(lib, join(libDir, 'libtgtdemo.so.1'));
      copyFileSync(lib, join(libDir, 'glibc-hwcaps/x86-64-v3/libtgtdemo.so.1'));
      for (const format of ['new', 'old', 'compat'] as const) {
        // -r chroots into the tree, so nothing outside it is read or written.
        tool('ldconfig', ['-r', root, '-c', format, '-X']);
        const file = join(root, `${format}.cache`);
        copyFileSync(join(root, 'etc/ld.so.cache'), file);
        const cache = parseLdCacheFile(readFileSync(file), { source: file });
        assert.equal(cache.format, format);
        const printed = ldconfigPrint(file);
        assert.equal(cache.entries.length, printed.count);
        assert.deepEqual(
          cache.entries.map((e) => ({ soname: e.soname, path: e.path })),
          printed.entries.map((e) => ({ soname: e.soname, path: e.path })),
        );
        for (const [i, entry] of cache.entries.entries()) {
          assert.ok(printed.entries[i]!.tag.startsWith(describeLdCacheFlags(entry.flags)));
          assert.equal(entry.arch, 'x86-64');
        }
        const hwcapsEntry = cache.entries.find((e) => e.path.includes('/glibc-hwcaps/'));
        assert.ok(hwcapsEntry);
        if (format === 'old') {
          assert.equal(cache.generator, undefined);
          assert.equal(hwcapsEntry.hwcaps, undefined);
        } else {
          assert.match(cache.generator ?? '', /^ldconfig /);
          // The directory we made; ldconfig -p itself misprints it for the compat format.
          assert.equal(hwcapsEntry.hwcaps, 'x86-64-v3');
          if (format === 'new')
            assert.deepEqual(
              cache.entries.map(tagOf),
              printed.entries.map((e) => e.tag),
            );
        }
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('decodes the x86 flag bits into arch tags', () => {
    const built = parseLdCacheFile(buildCache(SAMPLE));
    assert.equal(built.format, 'new');
    assert.deepEqual(
      built.entries.map((e) => [e.soname, e.path, e.arch, describeLdCacheFlags(e.flags)]),
      [
        ['libdemo.so.2', '/usr/lib/x86_64-linux-gnu/libdemo.so.2', 'x86-64', 'libc6,x86-64'],
        ['libdemo.so.2', '/usr/lib/i386-linux-gnu/libdemo.so.2', 'i386', 'libc6'],
        ['libdemo.so.2', '/usr/libx32/libdemo.so.2', 'x32', 'libc6,x32'],
        ['libother.so.1', '/opt/lib/libother.so.1', 'other', 'libc6,AArch64'],
      ],
    );
    assert.equal(ldCacheArch(0x0301), 'other'); // plain ELF, not libc6
  });

  it('reads the old format alone and with the new format embedded', () => {
    for (const format of ['old', 'compat'] as const) {
      const cache = parseLdCacheFile(buildCache(SAMPLE, format));
      assert.equal(cache.format, format);
      assert.deepEqual(
        cache.entries.map((e) => [e.soname, e.path, e.flags]),
        SAMPLE.map((e) => [e.soname, e.path, e.flags]),
      );
    }
  });

  it('rejects a file that is not a cache', () => {
    assertInvalid(() => parseLdCache(new Uint8Array(0)), /too short/);
    assertInvalid(
      () => parseLdCache(Buffer.from('\x7fELF\x02\x01\x01 not a cache at all')),
      /bad magic/,
    );
    assertInvalid(
      () => parseLdCache(Buffer.from('glibc-ld.so.cache1.0 and more bytes....')),
      /bad magic/,
    );
  });

  it('rejects truncated files at every length', () => {
    for (const format of ['new', 'old', 'compat'] as const) {
      const bytes = buildCache(SAMPLE, format);
      for (let length = 0; length < bytes.length; length++) {
        const prefix = bytes.subarray(0, length);
        assert.throws(
          () => parseLdCache(prefix),
          (err: unknown) => err instanceof ProbeError && err.code === 'ERR_LDCACHE_INVALID',
          `${format} cut at ${length} of ${bytes.length} bytes`,
        );
      }
    }
  });

  it('rejects an entry count too large for the file', () => {
    const bytes = buildCache(SAMPLE);
    new DataView(bytes.buffer).setUint32(20, 0xffffffff, true);
    assertInvalid(() => parseLdCache(bytes), /entry count 4294967295 is too large for the file/);
    const old = buildCache(SAMPLE, 'old');
    new DataView(old.buffer).setUint32(12, 1_000_000, true);
    assertInvalid(() => parseLdCache(old), /entry count 1000000 is too large/);
  });

  it('rejects string offsets outside the string table', () => {
    const bytes = buildCache(SAMPLE);
    new DataView(bytes.buffer).setUint32(48 + 24 + 8, 0x7fffffff, true);
    assertInvalid(() => parseLdCache(bytes), /entry 1 path offset 2147483647 is out of range/);
    const unterminated = buildCache(SAMPLE);
    unterminated[unterminated.length - 1] = 0x41;
    assertInvalid(() => parseLdCache(unterminated), /is not NUL-terminated/);
  });

  it('rejects a big-endian cache and a bad extension directory', () => {
    const big = buildCache(SAMPLE);
    big[28] = 3;
    assertInvalid(() => parseLdCache(big), /big-endian/);
    const ext = buildCache(SAMPLE);
    new DataView(ext.buffer).setUint32(32, Math.ceil(ext.length / 4) * 4 + 4, true);
    assertInvalid(() => parseLdCache(ext), /extension directory at \d+ runs past the end/);
  });

  it('throws only ProbeError for corrupted bytes of a cache', () => {
    // This machine's cache when there is one (musl systems have none).
    const original = existsSync('/etc/ld.so.cache')
      ? new Uint8Array(readFileSync('/etc/ld.so.cache'))
      : buildCache(SAMPLE, 'compat');
    // A fixed-seed generator, so a failure can be reproduced.
    let seed = 0x2545f491;
    const random = (n: number): number => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const headerAndEntries = Math.min(original.length, 48 + 64 * 24);
    for (let round = 0; round < 300; round++) {
      const bytes = original.slice();
      for (let flips = 0; flips < 4; flips++) {
        const at = round % 2 === 0 ? random(headerAndEntries) : random(bytes.length);
        bytes[at] = random(256);
      }
      try {
        parseLdCache(bytes);
      } catch (err) {
        assert.ok(err instanceof ProbeError, `round ${round}: ${String(err)}`);
        assert.equal(err.code, 'ERR_LDCACHE_INVALID');
      }
    }
  });
});
