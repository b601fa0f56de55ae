import { type BigIntStats, readdirSync, statSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { ProbeError, quote } from '../../errors/index.js';
import { closest, didYouMean } from '../../internal/index.js';
import {
  compareVersionsDescending,
  libraryShortName,
  libraryVersion,
  matchLibraryName,
} from './library-name.js';
import {
  findInLdCache,
  findInLibraryDirs,
  findOnPath,
  LD_CACHE_PATH,
  LIBRARY_DIRS,
  readLdCache,
  targetNameCandidates,
} from './library-search.js';
import { processComm, processError, processObjects, sameMountNamespace } from './process.js';
import type { MappedObject } from './symbols.js';

/** A target file found on disk or in a process. */
export interface ResolvedTarget {
  /**
   * What to open: a path in this process's view of the file system; for a process in another
   * mount namespace /proc/PID/root/<path>; for a deleted or replaced file
   * /proc/PID/map_files/<start>-<end>.
   */
  readonly path: string;
  /** What to show: the path as the user or the process sees it. */
  readonly displayPath: string;
  /** How it was found. */
  readonly how: 'path' | 'path-search' | 'ld-cache' | 'lib-dir' | 'process-map';
  /** Device and inode of the file opened through `path` (as stat() reports them). */
  readonly dev: bigint;
  readonly inode: bigint;
  /** With a pid: the file's areas in that process, when it is mapped there. */
  readonly mappedObject?: MappedObject;
}

export interface ResolveTargetOptions {
  /** Look in this process first: the files it has mapped, as it sees them. */
  readonly pid?: number;
  /** Directory relative paths and empty PATH elements are taken from. Default: process.cwd(). */
  readonly cwd?: string;
  /** The PATH to search for programs. Default: process.env.PATH. */
  readonly path?: string;
  /** The dynamic linker cache to read. Default: /etc/ld.so.cache. */
  readonly ldCachePath?: string;
  /** Library directories searched after the cache. Default: LIBRARY_DIRS. */
  readonly libraryDirs?: readonly string[];
}

const hex = (n: bigint): string => n.toString(16);

function errnoOf(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

function statBig(path: string): BigIntStats | undefined {
  try {
    return statSync(path, { bigint: true, throwIfNoEntry: false });
  } catch (err) {
    const errno = errnoOf(err);
    if (errno === 'ENOTDIR' || errno === 'ENAMETOOLONG' || errno === 'ELOOP') return undefined;
    throw err;
  }
}

function sameFile(object: MappedObject, stat: BigIntStats): boolean {
  return object.inode === stat.ino && object.dev === stat.dev;
}

/**
 * Find the file a probe spec's target names. Synchronous: it reads /proc, /etc/ld.so.cache and
 * a few directories.
 *
 * - A name containing '/' is a path (relative to `cwd`) to a regular file. With `pid`, the
 *   file must be mapped in that process (same device and inode, or the same path as the
 *   process sees it), else ERR_NOT_MAPPED.
 * - Otherwise, with `pid`, the process's mapped files come first: a file whose basename is the
 *   name, or a library of that short name (`libc` -> `libc.so.6` or `libc-2.31.so`).
 * - Then a library short name or soname through ld.so.cache (x86-64 first, highest version),
 *   then `name.so*` in the standard library directories, then a program on PATH.
 *
 * Files of a process in another mount namespace are opened through /proc/PID/root, and
 * deleted or replaced ones through /proc/PID/map_files (root only). Errors: ERR_TARGET_NOT_FOUND
 * (with did-you-mean hints), ERR_PROCESS_NOT_FOUND, ERR_PROCESS_ACCESS, ERR_NOT_MAPPED,
 * ERR_FILE_READ.
 */
export function resolveTarget(name: string, options: ResolveTargetOptions = {}): ResolvedTarget {
  const cwd = options.cwd ?? process.cwd();
  const proc = options.pid === undefined ? undefined : new ProcessView(options.pid);
  if (name === '') {
    throw new ProbeError('ERR_TARGET_NOT_FOUND', 'Cannot find target "": the name is empty');
  }
  if (name.includes('/')) return resolvePath(name, cwd, proc);

  if (proc !== undefined) {
    const object = matchObject(proc.objects, name);
    if (object !== undefined) return proc.open(object, 'process-map');
  }
  const ldCache = readLdCache(options.ldCachePath ?? LD_CACHE_PATH);
  const pathVar = options.path ?? process.env['PATH'] ?? '';
  const found =
    tagged(findInLdCache(name, ldCache.entries), 'ld-cache') ??
    tagged(findInLibraryDirs(name, options.libraryDirs ?? LIBRARY_DIRS), 'lib-dir') ??
    tagged(findOnPath(name, pathVar, cwd), 'path-search');
  if (found !== undefined) {
    const stat = statBig(found.path);
    if (stat !== undefined) {
      const mappedObject = proc?.objects.find((o) => sameFile(o, stat));
      return {
        path: found.path,
        displayPath: found.path,
        how: found.how,
        dev: stat.dev,
        inode: stat.ino,
        ...(mappedObject === undefined ? {} : { mappedObject }),
      };
    }
  }

  const where = [
    'not a file',
    'not in /etc/ld.so.cache',
    'not in the library directories',
    'not on PATH',
  ];
  if (proc !== undefined) where.unshift(`not mapped in ${proc.describe()}`);
  const candidates = targetNameCandidates(ldCache.entries, pathVar, cwd);
  if (proc !== undefined) {
    for (const o of proc.objects)
      candidates.push(basename(o.path), libraryShortName(basename(o.path)));
  }
  const hints: string[] = [];
  const suggestion = didYouMean(closest(name, candidates, 3));
  if (suggestion !== undefined) hints.push(suggestion);
  if (statBig(resolve(cwd, name))?.isFile() === true) {
    hints.push(`To use the file in the current directory, write ./${name}`);
  }
  if (proc === undefined)
    hints.push('With -p PID, libraries the process has loaded are searched first');
  else
    hints.push(`List the objects ${proc.describe()} has loaded with: upscope list -p ${proc.pid}`);
  if (ldCache.problem !== undefined)
    hints.push(`The dynamic linker cache was not used: ${ldCache.problem}`);
  throw new ProbeError(
    'ERR_TARGET_NOT_FOUND',
    `Cannot find target ${quote(name)}: ${joinAnd(where)}`,
    { hints, details: { name, pid: options.pid } },
  );
}

function tagged<H extends ResolvedTarget['how']>(
  path: string | undefined,
  how: H,
): { path: string; how: H } | undefined {
  return path === undefined ? undefined : { path, how };
}

function joinAnd(parts: readonly string[]): string {
  return parts.length <= 1
    ? parts.join('')
    : `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)}`;
}

/** The mapped file a bare name means: exact basename first, then the library's best version. */
function matchObject(objects: readonly MappedObject[], name: string): MappedObject | undefined {
  const scored = objects
    .map((object, order) => {
      const file = basename(object.path);
      return { object, order, file, match: matchLibraryName(file, name) };
    })
    .filter((s) => s.match !== undefined);
  scored.sort(
    (a, b) =>
      a.match! - b.match! ||
      compareVersionsDescending(libraryVersion(a.file), libraryVersion(b.file)) ||
      a.order - b.order,
  );
  return scored[0]?.object;
}

function resolvePath(name: string, cwd: string, proc: ProcessView | undefined): ResolvedTarget {
  const absolute = resolve(cwd, name);
  let stat: BigIntStats | undefined;
  try {
    stat = statBig(absolute);
  } catch (err) {
    throw new ProbeError(
      'ERR_FILE_READ',
      `Cannot read target ${quote(name)}: ${errnoOf(err) === 'EACCES' ? 'permission denied' : String(err)}`,
      { details: { path: absolute }, cause: err },
    );
  }
  if (proc !== undefined) {
    // The same file (device and inode), else the same path as the process sees it (another
    // mount namespace, or a file replaced on disk since it was mapped).
    const object =
      (stat === undefined ? undefined : proc.objects.find((o) => sameFile(o, stat))) ??
      proc.objects.find((o) => o.path === absolute);
    if (object !== undefined) return proc.open(object, 'path');
  }
  if (stat === undefined) {
    const prefix = name.slice(0, name.lastIndexOf('/') + 1);
    let siblings: string[] = [];
    try {
      siblings = readdirSync(dirname(absolute));
    } catch {
      // No directory either: nothing to suggest.
    }
    const suggestion = didYouMean(closest(basename(absolute), siblings, 3).map((s) => prefix + s));
    throw new ProbeError(
      'ERR_TARGET_NOT_FOUND',
      `Cannot find target ${quote(name)}: no such file`,
      {
        hints: suggestion === undefined ? [] : [suggestion],
        details: { path: absolute },
      },
    );
  }
  if (!stat.isFile()) {
    const kind = stat.isDirectory() ? 'a directory' : 'not a regular file';
    throw new ProbeError(
      'ERR_TARGET_NOT_FOUND',
      `Cannot use target ${quote(name)}: it is ${kind}`,
      {
        hints: ['Name an executable or a shared library'],
        details: { path: absolute },
      },
    );
  }
  if (proc !== undefined) {
    throw new ProbeError(
      'ERR_NOT_MAPPED',
      `Cannot use target ${quote(name)} in ${proc.describe()}: the file is not mapped in that process`,
      {
        hints: [
          `List the objects ${proc.describe()} has loaded with: upscope list -p ${proc.pid}`,
          'Without -p, a probe on the file fires in every process that runs it',
        ],
        details: { path: absolute, pid: proc.pid },
      },
    );
  }
  return { path: absolute, displayPath: absolute, how: 'path', dev: stat.dev, inode: stat.ino };
}

/** What resolution needs to know about a process, read once. */
class ProcessView {
  readonly objects: MappedObject[];
  private sameNamespace: boolean | undefined;
  private comm: string | undefined;

  constructor(readonly pid: number) {
    this.objects = processObjects(pid);
  }

  describe(): string {
    if (this.comm === undefined) {
      try {
        this.comm = processComm(this.pid);
      } catch {
        this.comm = '';
      }
    }
    return this.comm === '' ? `process ${this.pid}` : `process ${this.pid} (${quote(this.comm)})`;
  }

  private inSameNamespace(): boolean {
    this.sameNamespace ??= sameMountNamespace(this.pid);
    return this.sameNamespace;
  }

  /**
   * Open a mapped file: through its path (under /proc/PID/root when the process has its own
   * mounts) when that path still holds the mapped inode, else through /proc/PID/map_files.
   */
  open(object: MappedObject, how: ResolvedTarget['how']): ResolvedTarget {
    const found = (path: string, stat: BigIntStats): ResolvedTarget => ({
      path,
      displayPath: object.path,
      how,
      dev: stat.dev,
      inode: stat.ino,
      mappedObject: object,
    });
    if (!object.deleted) {
      const path = this.inSameNamespace() ? object.path : `/proc/${this.pid}/root${object.path}`;
      let stat: BigIntStats | undefined;
      try {
        stat = statBig(path);
      } catch {
        stat = undefined;
      }
      // Compare inodes only: overlay file systems may show another device in maps.
      if (stat?.isFile() === true && stat.ino === object.inode) return found(path, stat);
    }
    const first = object.mappings[0]!;
    const mapFile = `/proc/${this.pid}/map_files/${hex(first.start)}-${hex(first.end)}`;
    try {
      const stat = statSync(mapFile, { bigint: true });
      return found(mapFile, stat);
    } catch (err) {
      const errno = errnoOf(err);
      if (errno === 'EPERM' || errno === 'EACCES') {
        const reason = object.deleted
          ? 'the file was deleted, and only root can open it through /proc/PID/map_files'
          : 'its path now holds another file, and only root can open the mapped one through /proc/PID/map_files';
        throw new ProbeError(
          'ERR_PROCESS_ACCESS',
          `Cannot open ${quote(object.path)} as mapped in ${this.describe()}: ${reason}`,
          { hints: ['Run as root'], details: { pid: this.pid, path: object.path }, cause: err },
        );
      }
      throw processError(this.pid, `open ${quote(object.path)} in the memory map`, err);
    }
  }
}
