import {
  accessSync,
  closeSync,
  constants,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  type Stats,
  statSync,
} from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { isProbeError } from '../../errors/index.js';
import {
  compareVersionsDescending,
  libraryShortName,
  libraryVersion,
  matchLibraryName,
} from './library-name.js';
import { type LdCacheEntry, parseLdCache } from './symbols.js';

export const LD_CACHE_PATH = '/etc/ld.so.cache';

/** Where libraries are when ld.so.cache does not list them, in search order. */
export const LIBRARY_DIRS: readonly string[] = [
  '/lib/x86_64-linux-gnu',
  '/usr/lib/x86_64-linux-gnu',
  '/lib64',
  '/usr/lib64',
  '/lib',
  '/usr/lib',
  '/usr/local/lib',
];

export interface LdCacheRead {
  readonly entries: readonly LdCacheEntry[];
  /** Why the cache could not be used (missing files are not an error: musl has none). */
  readonly problem?: string;
}

const ldCacheMemo = new Map<string, { key: string; read: LdCacheRead }>();

/** The entries of an ld.so.cache file, parsed once per (path, size, mtime). */
export function readLdCache(path: string): LdCacheRead {
  let stat: Stats | undefined;
  try {
    stat = statSync(path, { throwIfNoEntry: false });
  } catch (err) {
    return { entries: [], problem: `cannot stat ${path}: ${String(err)}` };
  }
  if (stat === undefined) return { entries: [] };
  const key = `${stat.size}:${stat.mtimeMs}:${stat.ino}`;
  const memo = ldCacheMemo.get(path);
  if (memo?.key === key) return memo.read;
  let read: LdCacheRead;
  try {
    read = { entries: parseLdCache(readFileSync(path), { source: path }) };
  } catch (err) {
    if (!isProbeError(err) && !(err instanceof Error)) throw err;
    read = { entries: [], problem: err.message };
  }
  ldCacheMemo.set(path, { key, read });
  return read;
}

function regularFile(path: string): Stats | undefined {
  try {
    const stat = statSync(path, { throwIfNoEntry: false });
    return stat?.isFile() === true ? stat : undefined;
  } catch {
    return undefined;
  }
}

function isElf(path: string): boolean {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const magic = Buffer.alloc(4);
    return readSync(fd, magic, 0, 4, 0) === 4 && magic.toString('latin1') === '\x7fELF';
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

const ARCH_RANK: Readonly<Record<LdCacheEntry['arch'], number>> = {
  'x86-64': 0,
  other: 1,
  i386: 2,
  x32: 3,
};

/**
 * The library ld.so.cache lists for a name: x86-64 entries first, then the best name match
 * (exact soname, then `name.so.N`, then `name-N.so`), then the highest version, then entries
 * outside glibc-hwcaps subdirectories; entries whose file is gone are skipped.
 */
export function findInLdCache(name: string, entries: readonly LdCacheEntry[]): string | undefined {
  const candidates: { entry: LdCacheEntry; match: number; version: number[]; order: number }[] = [];
  entries.forEach((entry, order) => {
    const bySoname = matchLibraryName(entry.soname, name);
    const byFile = matchLibraryName(basename(entry.path), name);
    const match = Math.min(bySoname ?? 9, byFile ?? 9);
    if (match === 9) return;
    const version = libraryVersion(bySoname === undefined ? basename(entry.path) : entry.soname);
    candidates.push({ entry, match, version, order });
  });
  candidates.sort(
    (a, b) =>
      ARCH_RANK[a.entry.arch] - ARCH_RANK[b.entry.arch] ||
      a.match - b.match ||
      compareVersionsDescending(a.version, b.version) ||
      Number(a.entry.hwcaps !== undefined) - Number(b.entry.hwcaps !== undefined) ||
      a.order - b.order,
  );
  return candidates.find((c) => regularFile(c.entry.path) !== undefined)?.entry.path;
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/**
 * A library in the standard directories: `name` itself, `name.so*` or `name-N*.so*`, best
 * match then highest version; it must be an ELF file (so linker scripts such as
 * /usr/lib/x86_64-linux-gnu/libc.so are skipped).
 */
export function findInLibraryDirs(name: string, dirs: readonly string[]): string | undefined {
  const candidates: { path: string; match: number; version: number[]; order: number }[] = [];
  let order = 0;
  for (const dir of dirs) {
    for (const file of listDir(dir)) {
      const match = matchLibraryName(file, name);
      if (match === undefined) continue;
      candidates.push({
        path: join(dir, file),
        match,
        version: libraryVersion(file),
        order: order++,
      });
    }
  }
  candidates.sort(
    (a, b) =>
      a.match - b.match || compareVersionsDescending(a.version, b.version) || a.order - b.order,
  );
  return candidates.find((c) => regularFile(c.path) !== undefined && isElf(c.path))?.path;
}

function pathDirs(pathVar: string, cwd: string): string[] {
  // An empty element means the current directory, as in execvp().
  return pathVar.split(':').map((dir) => (dir === '' ? cwd : resolve(cwd, dir)));
}

/** A program on PATH, as `command -v` finds it: the first executable regular file. */
export function findOnPath(name: string, pathVar: string, cwd: string): string | undefined {
  for (const dir of pathDirs(pathVar, cwd)) {
    const candidate = join(dir, name);
    if (regularFile(candidate) === undefined) continue;
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not executable by us: keep looking, as the shell does.
    }
  }
  return undefined;
}

/** Every executable regular file of this name on PATH, in PATH order. */
export function allOnPath(name: string, pathVar: string, cwd: string): string[] {
  const found: string[] = [];
  for (const dir of pathDirs(pathVar, cwd)) {
    const candidate = join(dir, name);
    if (regularFile(candidate) === undefined || found.includes(candidate)) continue;
    try {
      accessSync(candidate, constants.X_OK);
      found.push(candidate);
    } catch {
      // not executable by us
    }
  }
  return found;
}

/** The first bytes of a file (at most `length`), or an empty array when it cannot be read. */
export function fileHead(path: string, length: number): Uint8Array {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const bytes = Buffer.alloc(length);
    return bytes.subarray(0, readSync(fd, bytes, 0, length, 0));
  } catch {
    return new Uint8Array(0);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

export { isElf };

/** Names worth suggesting for a misspelt target: library short names and sonames, programs. */
export function targetNameCandidates(
  entries: readonly LdCacheEntry[],
  pathVar: string,
  cwd: string,
): string[] {
  const names = new Set<string>();
  for (const entry of entries) {
    names.add(libraryShortName(entry.soname));
    names.add(entry.soname);
  }
  for (const dir of pathDirs(pathVar, cwd)) for (const file of listDir(dir)) names.add(file);
  return [...names];
}
