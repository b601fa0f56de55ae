import assert from 'node:assert/strict';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import {
  compareVersionsDescending,
  libraryShortName,
  libraryVersion,
  matchLibraryName,
  resolveTarget,
} from './index.js';

/** What `ldconfig -p` says the x86-64 library with soname `<name>.so.N` is (highest N). */
function ldconfigLibrary(name: string): string {
  const out = tool('ldconfig', ['-p']);
  const found: { version: number; path: string }[] = [];
  for (const line of out.split('\n')) {
    const m = /^\t(\S+) \(libc6,x86-64\) => (.+)$/.exec(line);
    const version = m && new RegExp(`^${name.replace(/[+]/g, '\\+')}\\.so\\.(\\d+)$`).exec(m[1]!);
    if (m && version) found.push({ version: Number(version[1]), path: m[2]! });
  }
  found.sort((a, b) => b.version - a.version);
  assert.ok(found[0], `ldconfig -p lists no ${name}.so.N`);
  return found[0].path;
}

function assertProbeError(fn: () => unknown, code: string, message: RegExp): ProbeError {
  let caught: ProbeError | undefined;
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ProbeError, `expected a ProbeError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.match(err.message, message);
    caught = err;
    return true;
  });
  return caught!;
}

const scratch = mkdtempSync(join(tmpdir(), 'upscope-targets-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

describe('resolveTarget() without a process', () => {
  it('finds libc, libpthread and libm by short name where ldconfig -p says they are', (t) => {
    if (!requireHost(t, { commands: ['ldconfig'] })) return;
    for (const name of ['libc', 'libpthread', 'libm']) {
      const target = resolveTarget(name);
      assert.equal(target.how, 'ld-cache');
      assert.equal(realpathSync(target.path), realpathSync(ldconfigLibrary(name)), name);
      const stat = statSync(target.path, { bigint: true });
      assert.deepEqual([target.dev, target.inode], [stat.dev, stat.ino]);
      assert.equal(target.mappedObject, undefined);
    }
  });

  it('finds a library by its exact soname', (t) => {
    if (!requireHost(t, { commands: ['ldconfig'] })) return;
    const libc = ldconfigLibrary('libc');
    assert.equal(realpathSync(resolveTarget(basename(libc)).path), realpathSync(libc));
  });

  it('finds a program on PATH as command -v does', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const expected = tool('sh', ['-c', 'command -v gcc']).trim();
    const target = resolveTarget('gcc');
    assert.equal(target.how, 'path-search');
    assert.equal(realpathSync(target.path), realpathSync(expected));
  });

  it('searches the PATH it is given, in order, skipping files that are not executable', () => {
    const first = join(scratch, 'path-a');
    const second = join(scratch, 'path-b');
    mkdirSync(first);
    mkdirSync(second);
    writeFileSync(join(first, 'tgt-tool'), '\x7fELF', { mode: 0o644 });
    writeFileSync(join(second, 'tgt-tool'), '\x7fELF', { mode: 0o755 });
    const target = resolveTarget('tgt-tool', {
      path: `${first}:${second}`,
      ldCachePath: '/nonexistent',
    });
    // root may execute anything with an x bit, so the 0644 file is skipped by everyone.
    assert.equal(target.path, join(second, 'tgt-tool'));
  });

  it('finds a library in the library directories when the cache does not list it', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const lib = compileProgram('tgt-lib', {
      flags: ['-shared', '-fPIC', '-Wl,-soname,libtgtdemo.so.1'],
      suffix: '.so',
    });
    const dir = join(scratch, 'libdir');
    mkdirSync(dir);
    copyFileSync(lib, join(dir, 'libtgtdemo.so.1'));
    copyFileSync(lib, join(dir, 'libtgtdemo.so.2'));
    writeFileSync(join(dir, 'libtgtdemo.so'), 'INPUT(libtgtdemo.so.2)\n'); // a linker script
    const target = resolveTarget('libtgtdemo', { libraryDirs: [dir], ldCachePath: '/nonexistent' });
    assert.deepEqual([target.how, target.path], ['lib-dir', join(dir, 'libtgtdemo.so.2')]);
    const exact = resolveTarget('libtgtdemo.so.1', {
      libraryDirs: [dir],
      ldCachePath: '/nonexistent',
    });
    assert.equal(exact.path, join(dir, 'libtgtdemo.so.1'));
    // The exact name is a linker script, not ELF: the next best match is taken.
    const script = resolveTarget('libtgtdemo.so', {
      libraryDirs: [dir],
      ldCachePath: '/nonexistent',
    });
    assert.equal(script.path, join(dir, 'libtgtdemo.so.2'));
  });

  it('takes a relative path from cwd', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const program = compileProgram('tgt-sleeper');
    const target = resolveTarget(`./${basename(program)}`, { cwd: dirname(program) });
    assert.equal(target.how, 'path');
    assert.equal(target.path, program);
    assert.equal(target.displayPath, program);
    assert.equal(target.inode, statSync(program, { bigint: true }).ino);
  });

  it('reports a missing name with where it looked and a did-you-mean from ld.so.cache', (t) => {
    if (!requireHost(t, { commands: ['ldconfig'] })) return;
    const err = assertProbeError(
      () => resolveTarget('libpthred'),
      'ERR_TARGET_NOT_FOUND',
      /^Cannot find target "libpthred": not a file, not in \/etc\/ld\.so\.cache, not in the library directories and not on PATH$/,
    );
    assert.equal(err.category, 'resolution');
    assert.match(err.hints[0] ?? '', /^Did you mean "libpthread"/);
    assert.ok(
      err.hints.includes('With -p PID, libraries the process has loaded are searched first'),
    );
  });

  it('reports a missing path with similar names in its directory', () => {
    writeFileSync(join(scratch, 'tgt-present'), '');
    const err = assertProbeError(
      () => resolveTarget('./tgt-presnt', { cwd: scratch }),
      'ERR_TARGET_NOT_FOUND',
      /^Cannot find target "\.\/tgt-presnt": no such file$/,
    );
    assert.deepEqual(err.hints, ['Did you mean "./tgt-present"?']);
    assertProbeError(
      () => resolveTarget(join(scratch, 'no/such/dir/x')),
      'ERR_TARGET_NOT_FOUND',
      /no such file/,
    );
  });

  it('rejects a directory and an empty name', () => {
    assertProbeError(() => resolveTarget(scratch), 'ERR_TARGET_NOT_FOUND', /it is a directory$/);
    assertProbeError(() => resolveTarget(''), 'ERR_TARGET_NOT_FOUND', /the name is empty/);
  });

  it('suggests ./name when a bare name is only a file in the current directory', () => {
    writeFileSync(join(scratch, 'tgt-local-only'), '');
    const err = assertProbeError(
      () =>
        resolveTarget('tgt-local-only', {
          cwd: scratch,
          path: '',
          ldCachePath: '/nonexistent',
          libraryDirs: [],
        }),
      'ERR_TARGET_NOT_FOUND',
      /^Cannot find target "tgt-local-only"/,
    );
    assert.ok(
      err.hints.includes('To use the file in the current directory, write ./tgt-local-only'),
    );
  });
});

describe('library names', () => {
  it('match short names, sonames and old glibc names, and nothing else', () => {
    assert.equal(matchLibraryName('libc.so.6', 'libc'), 1);
    assert.equal(matchLibraryName('libc.so.6', 'libc.so.6'), 0);
    assert.equal(matchLibraryName('libc.so.6', 'libc.so'), 1);
    assert.equal(matchLibraryName('libc-2.31.so', 'libc'), 2);
    assert.equal(matchLibraryName('libssl.so.3', 'libssl'), 1);
    assert.equal(matchLibraryName('libssl.so.1.1', 'libssl.so.1'), 1);
    assert.equal(matchLibraryName('libcap.so.2', 'libc'), undefined);
    assert.equal(matchLibraryName('libc-client.so.2007e', 'libc'), undefined);
    assert.equal(matchLibraryName('libcrypt.so.1', 'libc'), undefined);
    assert.equal(matchLibraryName('libc.sox', 'libc'), undefined);
  });

  it('order versions highest first, the soname before its longer file name', () => {
    const files = ['libssl.so', 'libssl.so.1.1', 'libssl.so.3', 'libssl.so.3.0.2', 'libssl.so.10'];
    const sorted = [...files].sort((a, b) =>
      compareVersionsDescending(libraryVersion(a), libraryVersion(b)),
    );
    assert.deepEqual(sorted, [
      'libssl.so.10',
      'libssl.so.3',
      'libssl.so.3.0.2',
      'libssl.so.1.1',
      'libssl.so',
    ]);
    assert.deepEqual(libraryVersion('libc-2.31.so'), [2, 31]);
    assert.deepEqual(libraryShortName('libstdc++.so.6'), 'libstdc++');
    assert.deepEqual(libraryShortName('libc-2.31.so'), 'libc');
    assert.deepEqual(libraryShortName('ld-linux-x86-64.so.2'), 'ld-linux-x86-64');
    assert.equal(matchLibraryName('ld-linux-x86-64.so.2', 'ld-linux-x86'), undefined);
    assert.equal(matchLibraryName('ld-linux-x86-64.so.2', 'ld-linux-x86-64'), 1);
    assert.deepEqual(libraryVersion('ld-linux-x86-64.so.2'), [2]);
  });
});
