import assert from 'node:assert/strict';
import { readdirSync, readFileSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { describe, it } from 'node:test';
import { readelfLoads, tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import {
  fileOffsetToRuntime,
  findMapping,
  isFileMapping,
  loadBias,
  type MapEntry,
  makeDev,
  mappedObjects,
  parseProcMaps,
  runtimeAddressesOf,
  runtimeToFileOffset,
  splitDev,
} from './index.js';

const hex = (n: bigint): string => n.toString(16);

/**
 * This process's maps and /proc/self/map_files (one link per file-backed area, named
 * "start-end" in plain hex, pointing at the file): two views of the same kernel state, read
 * until the maps text is the same before and after the directory listing.
 */
function selfMapsAndMapFiles(): { text: string; mapFiles: Map<string, string> } {
  for (let attempt = 0; ; attempt++) {
    const text = readFileSync('/proc/self/maps', 'utf8');
    const mapFiles = new Map<string, string>();
    for (const name of readdirSync('/proc/self/map_files')) {
      try {
        mapFiles.set(name, readlinkSync(`/proc/self/map_files/${name}`));
      } catch {
        // The area went away between the listing and the readlink: read everything again.
      }
    }
    if (readFileSync('/proc/self/maps', 'utf8') === text || attempt === 5)
      return { text, mapFiles };
  }
}

/** /proc/self/auxv as tag -> value (AT_PHDR = 3, AT_BASE = 7). */
function auxv(): Map<number, bigint> {
  const bytes = readFileSync('/proc/self/auxv');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const values = new Map<number, bigint>();
  for (let at = 0; at + 16 <= bytes.length; at += 16) {
    values.set(Number(view.getBigUint64(at, true)), view.getBigUint64(at + 8, true));
  }
  return values;
}

function assertInvalid(text: string, pattern: RegExp): void {
  assert.throws(
    () => parseProcMaps(text, { source: '/proc/42/maps' }),
    (err: unknown) => {
      assert.ok(err instanceof ProbeError);
      assert.equal(err.code, 'ERR_MAPS_INVALID');
      assert.equal(err.category, 'target');
      assert.match(err.message, /^Cannot parse "\/proc\/42\/maps": line \d+ /);
      assert.match(err.message, pattern);
      return true;
    },
  );
}

// Lines in the kernel's layout (show_map_vma: addresses, perms, offset, major:minor, inode,
// then the name padded to column 73).
const ODD = [
  '55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 1234                       /tmp/dir with spaces/my prog',
  '55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:00 1234                       /tmp/dir with spaces/my prog',
  '7f0000000000-7f0000001000 r-xp 00002000 103:02 99                        /usr/lib/libgone.so.1 (deleted)',
  '7f0000001000-7f0000002000 rw-s 00000000 00:01 2050                       /memfd:jit-code (deleted)',
  '7f0000002000-7f0000003000 rw-p 00000000 00:00 0                          [anon:glibc: malloc arena]',
  '7f0000003000-7f0000004000 rw-p 00000000 00:00 0 ',
  '7f0000004000-7f0000005000 r--p 00000000 fe:00 77                         /tmp/line\\012break',
  '7ffd6a1f0000-7ffd6a211000 rw-p 00000000 00:00 0                          [stack]',
  'ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]',
].join('\n');

describe('parseProcMaps()', () => {
  it('reads /proc/self/maps: every line, and the same file areas the kernel lists in map_files', () => {
    const { text, mapFiles } = selfMapsAndMapFiles();
    const entries = parseProcMaps(text);
    const lines = text.split('\n').filter((l) => l !== '');
    assert.equal(entries.length, lines.length);
    for (const [i, entry] of entries.entries()) {
      const fields = lines[i]!.split(/ +/);
      assert.equal(
        `${hex(entry.start)}-${hex(entry.end)}`,
        fields[0]!.replace(/\b0+(?=[0-9a-f])/g, ''),
      );
      assert.equal(
        [entry.readable ? 'r' : '-', entry.writable ? 'w' : '-', entry.executable ? 'x' : '-'].join(
          '',
        ) + (entry.shared ? 's' : 'p'),
        fields[1],
      );
      assert.equal(entry.inode, BigInt(fields[4]!));
      assert.ok(entry.start < entry.end);
    }
    const fileAreas = new Map<string, MapEntry>(
      entries.filter(isFileMapping).map((e) => [`${hex(e.start)}-${hex(e.end)}`, e]),
    );
    assert.deepEqual([...fileAreas.keys()].sort(), [...mapFiles.keys()].sort());
    for (const [name, target] of mapFiles) {
      const entry = fileAreas.get(name)!;
      assert.equal(entry.path + (entry.deleted ? ' (deleted)' : ''), target);
    }
    const named = (path: string): MapEntry | undefined => entries.find((e) => e.path === path);
    assert.equal(named('[stack]')?.pseudo, true);
    assert.equal(named('[vdso]')?.pseudo, true);
    assert.equal(named('[stack]')?.writable, true);
  });

  it("gives the device and inode stat() reports for node's own executable", () => {
    const entries = parseProcMaps(readFileSync('/proc/self/maps', 'utf8'));
    const exe = realpathSync(process.execPath);
    const stat = statSync(exe, { bigint: true });
    const mine = entries.filter((e) => e.path === exe);
    assert.ok(mine.length >= 2, `expected ${exe} mapped in several areas`);
    for (const e of mine) {
      assert.equal(e.inode, stat.ino);
      assert.equal(makeDev(e.devMajor, e.devMinor), stat.dev);
    }
  });

  it('reads odd lines: spaces in paths, (deleted), memfd, [anon:...], no path, escaped newlines', () => {
    const entries = parseProcMaps(ODD);
    assert.equal(entries.length, 9);
    const [prog, , gone, memfd, anon, bare, newline, stack, vsyscall] = entries as [
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
      MapEntry,
    ];
    assert.equal(prog.path, '/tmp/dir with spaces/my prog');
    assert.equal(prog.deleted, false);
    assert.deepEqual(
      [gone.path, gone.deleted, gone.devMajor, gone.devMinor, gone.offset],
      ['/usr/lib/libgone.so.1', true, 0x103, 2, 0x2000n],
    );
    assert.deepEqual(
      [memfd.path, memfd.deleted, memfd.shared, memfd.pseudo],
      ['/memfd:jit-code', true, true, false],
    );
    assert.deepEqual(
      [anon.path, anon.pseudo, anon.inode],
      ['[anon:glibc: malloc arena]', true, 0n],
    );
    assert.deepEqual([bare.path, bare.pseudo, bare.deleted], ['', false, false]);
    assert.equal(newline.path, '/tmp/line\nbreak');
    assert.equal(stack.pseudo, true);
    assert.deepEqual(
      [vsyscall.start, vsyscall.end, vsyscall.executable, vsyscall.readable],
      [0xffffffffff600000n, 0xffffffffff601000n, true, false],
    );
  });

  it('rejects malformed lines with the line number', () => {
    assertInvalid('00400000-00401000 r-xp 00000000 fe:00 1 /a\ngarbage', /line 2 is not in the/);
    assertInvalid('00400000 r-xp 00000000 fe:00 1 /a', /line 1 is not in the/);
    assertInvalid('00400000-00401000 rxp 00000000 fe:00 1 /a', /line 1 is not in the/);
    assertInvalid('00400000-00401000 r-xp 00000000 fe00 1 /a', /line 1 is not in the/);
    assertInvalid('00400000-00401000 r-xp 00000000 fe:00 x /a', /line 1 is not in the/);
    assertInvalid('00401000-00400000 r-xp 00000000 fe:00 1 /a', /line 1 ends before it starts/);
    assertInvalid('11111111111111111-00400000 r-xp 00000000 fe:00 1 /a', /line 1 is not in the/);
    assert.deepEqual(parseProcMaps(''), []);
    assert.deepEqual(parseProcMaps('\n\n'), []);
  });
});

describe('mappedObjects()', () => {
  it('groups the file areas of this process the way map_files names them', () => {
    const { text, mapFiles } = selfMapsAndMapFiles();
    const objects = mappedObjects(parseProcMaps(text));
    const byTarget = new Map<string, number>();
    for (const target of mapFiles.values()) byTarget.set(target, (byTarget.get(target) ?? 0) + 1);
    // One object per file here (no file is mapped under two devices or inodes in node).
    assert.deepEqual(
      objects.map((o) => [o.path + (o.deleted ? ' (deleted)' : ''), o.mappings.length]).sort(),
      [...byTarget.entries()].sort(),
    );
    for (const o of objects) {
      assert.ok(o.mappings.every((m) => m.inode === o.inode && m.path === o.path));
      assert.equal(o.start, o.mappings[0]!.start);
      const stat = statSync(o.path, { bigint: true, throwIfNoEntry: false });
      if (stat !== undefined && !o.deleted) assert.equal(stat.ino, o.inode);
    }
  });

  it('keeps the same path with two inodes apart and leaves anonymous areas out', () => {
    const objects = mappedObjects(
      parseProcMaps(
        [
          '00400000-00401000 r-xp 00000000 fe:00 10 /opt/app',
          '00401000-00402000 rw-p 00000000 00:00 0',
          '7f0000000000-7f0000001000 r-xp 00000000 fe:00 11 /opt/app (deleted)',
          '7f0000001000-7f0000002000 r--p 00001000 fe:00 10 /opt/app',
        ].join('\n'),
      ),
    );
    assert.deepEqual(
      objects.map((o) => [o.path, o.inode, o.deleted, o.mappings.length, o.end]),
      [
        ['/opt/app', 10n, false, 2, 0x7f0000002000n],
        ['/opt/app', 11n, true, 1, 0x7f0000001000n],
      ],
    );
  });
});

describe('address conversion', () => {
  const entries = parseProcMaps(
    [
      '555555554000-555555555000 r--p 00000000 fe:00 5 /opt/demo',
      '555555555000-555555556000 r-xp 00001000 fe:00 5 /opt/demo',
      '555555556000-555555557000 r--p 00002000 fe:00 5 /opt/demo',
      '555555557000-555555559000 rw-p 00002000 fe:00 5 /opt/demo',
      '555555559000-55555557a000 rw-p 00000000 00:00 0 [heap]',
      '7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0 [vvar]',
    ].join('\n'),
  );
  const [demo] = mappedObjects(entries);

  it('runtimeToFileOffset() subtracts the area start and adds its offset', () => {
    const hit = runtimeToFileOffset(entries, 0x555555555139n);
    assert.equal(hit?.fileOffset, 0x1139n);
    assert.equal(hit?.entry.executable, true);
    assert.equal(runtimeToFileOffset(entries, 0x555555557010n)?.fileOffset, 0x2010n);
    assert.equal(runtimeToFileOffset(entries, 0x555555559000n), undefined); // [heap]
    assert.equal(runtimeToFileOffset(entries, 0x1000n), undefined);
    assert.equal(findMapping(entries, 0x555555559000n)?.path, '[heap]');
  });

  it('fileOffsetToRuntime() inverts it and prefers an executable area for a shared page', () => {
    assert.ok(demo);
    assert.equal(fileOffsetToRuntime(demo, 0x1139n), 0x555555555139n);
    assert.equal(fileOffsetToRuntime(demo, 0n), 0x555555554000n);
    assert.equal(fileOffsetToRuntime(demo, 0x4000n), undefined);
    const shared = mappedObjects(
      parseProcMaps(
        [
          '00400000-00401000 r--p 00000000 fe:00 6 /opt/tiny',
          '00600000-00601000 r-xp 00000000 fe:00 6 /opt/tiny',
        ].join('\n'),
      ),
    )[0]!;
    assert.equal(fileOffsetToRuntime(shared, 0x10n), 0x600010n);
    for (let address = 0x555555554000n; address < 0x555555557000n; address += 0x321n) {
      const hit = runtimeToFileOffset(entries, address)!;
      assert.equal(fileOffsetToRuntime(demo, hit.fileOffset), address);
    }
  });

  it('runtimeAddressesOf() takes offsets as numbers, its areas worked out once per object', () => {
    assert.ok(demo);
    const runtime = runtimeAddressesOf(demo);
    assert.equal(runtimeAddressesOf(demo), runtime, 'one answer per object');
    assert.equal(runtime(0x1139), 0x555555555139n);
    assert.equal(runtime(0x4000), undefined);
  });

  it("loadBias() matches the kernel's AT_PHDR for node and AT_BASE for the dynamic linker", () => {
    const objects = mappedObjects(parseProcMaps(readFileSync('/proc/self/maps', 'utf8')));
    const aux = auxv();
    const segments = (path: string) =>
      readelfLoads(path).map((l) => ({ vaddr: l.vaddr, fileOffset: l.offset }));
    const exe = realpathSync(process.execPath);
    const phdr = /^\s*PHDR\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)/m.exec(tool('readelf', ['-lW', exe]));
    assert.ok(phdr);
    const node = objects.find((o) => o.path === exe)!;
    assert.equal(loadBias(node, segments(exe)), aux.get(3)! - BigInt(phdr[1]!));
    const interp = objects.find((o) => /\/ld-linux-x86-64\.so\.2$/.test(o.path))!;
    assert.equal(loadBias(interp, segments(interp.path)), aux.get(7));
    assert.equal(loadBias(node, [{ vaddr: 0n, fileOffset: 0x7fffffffn }]), undefined);
  });
});

describe('makeDev() and splitDev()', () => {
  it('encode device numbers as stat() reports them (checked against /proc/self/mountinfo)', () => {
    // The last mount on a mount point is the one a path lookup sees.
    const top = new Map<string, [number, number]>();
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const fields = line.split(' ');
      const [major, minor] = (fields[2] ?? '').split(':').map(Number);
      const mountPoint = fields[4]?.replace(/\\040/g, ' ');
      if (major === undefined || minor === undefined || mountPoint === undefined) continue;
      top.set(mountPoint, [major, minor]);
    }
    let checked = 0;
    for (const [mountPoint, [major, minor]] of top) {
      const stat = statSync(mountPoint, { bigint: true, throwIfNoEntry: false });
      if (stat === undefined) continue;
      assert.equal(makeDev(major, minor), stat.dev, mountPoint);
      assert.deepEqual(splitDev(stat.dev), { major, minor });
      checked++;
    }
    assert.ok(checked >= 3);
    assert.deepEqual(splitDev(makeDev(0x103, 0x12345)), { major: 0x103, minor: 0x12345 });
    assert.deepEqual(splitDev(makeDev(4095, 255)), { major: 4095, minor: 255 });
  });
});
