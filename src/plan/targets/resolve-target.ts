import { type BigIntStats, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { ProbeError, quote } from '../../errors/index.js';
import { commandProgram } from '../../host/index.js';
import { closest, didYouMean } from '../../internal/index.js';
import {
  compareVersionsDescending,
  libraryShortName,
  libraryVersion,
  matchLibraryName,
} from './library-name.js';
import {
  allOnPath,
  fileHead,
  findInLdCache,
  findInLibraryDirs,
  findOnPath,
  isElf,
  LD_CACHE_PATH,
  LIBRARY_DIRS,
  readLdCache,
  targetNameCandidates,
} from './library-search.js';
import {
  processComm,
  processError,
  processObjects,
  processRoot,
  sameMountNamespace,
} from './process.js';
import {
  type ElfFile,
  fileAccessError,
  type MappedObject,
  openElf,
  readDynamicInfo,
  readScriptHeader,
  scriptTargetError,
} from './symbols.js';

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
  readonly how:
    | 'path'
    | 'path-search'
    | 'ld-cache'
    | 'lib-dir'
    | 'process-map'
    | 'ld-library-path'
    | 'runpath';
  /** Device and inode of the file opened through `path` (as stat() reports them). */
  readonly dev: bigint;
  readonly inode: bigint;
  /**
   * With a pid: the file's areas in that process, when it is mapped there. Without them the
   * process has not loaded the file (yet): kernel probes on it fire once it does.
   */
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
  /**
   * LD_LIBRARY_PATH: directories searched for a library name before the cache, as the dynamic
   * linker does. Default: with `pid`, the process's own (from /proc/PID/environ); else none.
   */
  readonly libraryPath?: string | undefined;
  /**
   * The program whose DT_RPATH and DT_RUNPATH are searched for a library name (with
   * LD_LIBRARY_PATH between them, as ld.so does). Default: with `pid`, /proc/PID/exe.
   */
  readonly executable?: string | undefined;
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
 *   file mapped in that process (same device and inode, or the same path as the process sees
 *   it) comes first; a file it has not mapped (a library it will load later) is taken from
 *   disk as the process sees it, without `mappedObject`.
 * - Otherwise, with `pid`, the process's mapped files come first: a file whose basename is the
 *   name, or a library of that short name (`libc` -> `libc.so.6` or `libc-2.31.so`).
 * - Then, as the dynamic linker searches: the program's DT_RPATH (unless it has DT_RUNPATH),
 *   LD_LIBRARY_PATH, its DT_RUNPATH, a library short name or soname through ld.so.cache
 *   (x86-64 first, highest version), `name.so*` in the standard library directories; then a
 *   program on PATH.
 *
 * Files of a process in another mount namespace are opened through /proc/PID/root (also when
 * searched for on disk), and deleted or replaced ones through /proc/PID/map_files (root only).
 * Errors: ERR_TARGET_NOT_FOUND (with did-you-mean hints), ERR_PROCESS_NOT_FOUND,
 * ERR_PROCESS_ACCESS, ERR_FILE_ACCESS (not allowed to read it), ERR_FILE_READ.
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
  // In another mount namespace, the process's files are under /proc/PID/root.
  const root = proc?.root() ?? '';
  const ldCache = readLdCache(options.ldCachePath ?? `${root}${LD_CACHE_PATH}`);
  const cacheEntries =
    root === '' ? ldCache.entries : ldCache.entries.map((e) => ({ ...e, path: root + e.path }));
  const pathVar = options.path ?? process.env['PATH'] ?? '';
  const dirs = linkerSearchDirs(options, proc, cwd);
  const found =
    tagged(findInLibraryDirs(name, dirs.rpath), 'runpath') ??
    tagged(findInLibraryDirs(name, dirs.libraryPath), 'ld-library-path') ??
    tagged(findInLibraryDirs(name, dirs.runpath), 'runpath') ??
    tagged(findInLdCache(name, cacheEntries), 'ld-cache') ??
    tagged(
      findInLibraryDirs(
        name,
        (options.libraryDirs ?? LIBRARY_DIRS).map((dir) => root + dir),
      ),
      'lib-dir',
    ) ??
    tagged(findOnPath(name, pathVar, cwd), 'path-search');
  if (found?.how === 'path-search') refuseScript(name, found.path, pathVar, cwd);
  if (found !== undefined) {
    const stat = statBig(found.path);
    if (stat !== undefined) {
      const mappedObject = proc?.objects.find((o) => sameFile(o, stat));
      const inRoot = root !== '' && found.path.startsWith(`${root}/`);
      return {
        path: found.path,
        displayPath: inRoot ? found.path.slice(root.length) : found.path,
        how: found.how,
        dev: stat.dev,
        inode: stat.ino,
        ...(mappedObject === undefined ? {} : { mappedObject }),
      };
    }
  }

  const where = [
    'not a file',
    ...(dirs.rpath.length + dirs.libraryPath.length + dirs.runpath.length > 0
      ? ['not in the RPATH, LD_LIBRARY_PATH or RUNPATH directories']
      : []),
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

/**
 * A program found on PATH that is a script (a pyenv shim, a wrapper) is refused here, saying
 * what runs it and which other programs of the name on PATH are ELF files (the shell would
 * run the script; which program it starts, only it knows).
 */
function refuseScript(name: string, path: string, pathVar: string, cwd: string): void {
  const header = readScriptHeader(fileHead(path, 4096));
  if (header === undefined) return;
  // Each file once (/bin and /usr/bin are one directory on a merged-/usr system).
  const seen = new Set<string>([fileKey(path)]);
  const others = allOnPath(name, pathVar, cwd).filter((p) => {
    const key = fileKey(p);
    if (seen.has(key)) return false;
    seen.add(key);
    return isElf(p);
  });
  throw scriptTargetError(
    path,
    header,
    others.length === 0
      ? []
      : [
          `Other ${name} programs on PATH, after it: ${others.join(', ')} (e.g. upscope list ${others[0]})`,
        ],
  );
}

function fileKey(path: string): string {
  const stat = statBig(path);
  return stat === undefined ? path : `${stat.dev}:${stat.ino}`;
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
    const errno = errnoOf(err);
    if (errno === 'EACCES' || errno === 'EPERM') {
      throw fileAccessError(`read target ${quote(name)}`, absolute, err);
    }
    throw new ProbeError('ERR_FILE_READ', `Cannot read target ${quote(name)}: ${String(err)}`, {
      details: { path: absolute },
      cause: err,
    });
  }
  if (proc !== undefined) {
    // The same file (device and inode) here or at the path as the process sees it (a chroot,
    // another mount namespace), else the same path in its maps (another mount namespace, or
    // a file replaced on disk since it was mapped).
    const root = proc.root();
    let theirs: BigIntStats | undefined;
    try {
      theirs = root === '' ? undefined : statBig(root + absolute);
    } catch {
      // Its root cannot be read here (another user's process): its maps' paths still can.
    }
    const object =
      (stat === undefined ? undefined : proc.objects.find((o) => sameFile(o, stat))) ??
      (theirs === undefined ? undefined : proc.objects.find((o) => sameFile(o, theirs))) ??
      proc.objects.find((o) => o.path === absolute);
    if (object !== undefined) return proc.open(object, 'path');
    // Not mapped (yet): the file the process would load, as it sees the path.
    if (root !== '') {
      if (theirs?.isFile() === true) {
        return {
          path: root + absolute,
          displayPath: absolute,
          how: 'path',
          dev: theirs.dev,
          inode: theirs.ino,
        };
      }
    }
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
  return { path: absolute, displayPath: absolute, how: 'path', dev: stat.dev, inode: stat.ino };
}

/**
 * How a command line's process will search for libraries, for resolving its targets before it
 * starts (`-c`): LD_LIBRARY_PATH of this environment (which it inherits) and its program's
 * RPATH and RUNPATH (when the line is simple enough to tell the program).
 */
export function commandSearchOptions(
  command: string,
  env: NodeJS.ProcessEnv = process.env,
): Pick<ResolveTargetOptions, 'libraryPath' | 'executable'> {
  return { libraryPath: env['LD_LIBRARY_PATH'], executable: commandProgram(command) };
}

/** The directories ld.so searches before its cache, in its order, as paths here. */
interface LinkerSearchDirs {
  /** The program's DT_RPATH (only when it has no DT_RUNPATH). */
  readonly rpath: string[];
  readonly libraryPath: string[];
  readonly runpath: string[];
}

/**
 * The program's RPATH/RUNPATH and LD_LIBRARY_PATH: given in the options, or with a pid read
 * from /proc/PID/exe and /proc/PID/environ (left out when they cannot be read). `$ORIGIN` is
 * the program's directory; entries with other dynamic string tokens ($LIB, $PLATFORM) are
 * left out. Relative entries are relative to `cwd` (ld.so takes them from the process's).
 */
function linkerSearchDirs(
  options: ResolveTargetOptions,
  proc: ProcessView | undefined,
  cwd: string,
): LinkerSearchDirs {
  const root = proc?.root() ?? '';
  const libraryPath = options.libraryPath ?? proc?.environment('LD_LIBRARY_PATH');
  const executable = options.executable ?? (proc === undefined ? undefined : proc.executable());
  let paths: { rpath?: readonly string[]; runpath?: readonly string[] } = {};
  let origin: string | undefined;
  if (executable !== undefined) {
    paths = programSearchPaths(executable);
    // $ORIGIN is where the program is as the process sees it; /proc/PID/exe names no directory.
    origin =
      proc !== undefined && options.executable === undefined
        ? proc.exeDir()
        : dirname(resolve(cwd, executable));
  }
  const expand = (list: readonly string[] | undefined, prefix: string): string[] =>
    (list ?? []).flatMap((dir) => {
      const expanded = dir.replace(/\$(\{ORIGIN\}|ORIGIN)(?![A-Za-z0-9_])/g, origin ?? '$ORIGIN');
      if (expanded.includes('$')) return [];
      return [prefix + resolve(cwd, expanded)];
    });
  return {
    rpath: paths.runpath === undefined ? expand(paths.rpath, root) : [],
    libraryPath: expand(
      libraryPath?.split(/[:;]/).filter((dir) => dir !== ''),
      root,
    ),
    runpath: expand(paths.runpath, root),
  };
}

/** DT_RPATH and DT_RUNPATH of a program, or none when it cannot be read. */
function programSearchPaths(path: string): {
  rpath?: readonly string[];
  runpath?: readonly string[];
} {
  let elf: ElfFile | undefined;
  try {
    elf = openElf(path);
    const info = readDynamicInfo(elf);
    return {
      ...(info?.rpath === undefined ? {} : { rpath: info.rpath }),
      ...(info?.runpath === undefined ? {} : { runpath: info.runpath }),
    };
  } catch {
    return {};
  } finally {
    elf?.close();
  }
}

/**
 * A file process `pid` has mapped, opened as resolveTarget() opens one: through its path (the
 * process's view) when that still holds the mapped inode, else /proc/PID/map_files (root).
 */
export function openMappedObject(pid: number, object: MappedObject): ResolvedTarget {
  return new ProcessView(pid).open(object, 'process-map');
}

/** What resolution needs to know about a process, read once. */
class ProcessView {
  readonly objects: MappedObject[];
  private sameNamespace: boolean | undefined;
  private sameRoot: boolean | undefined;
  private comm: string | undefined;
  private environ: string[] | undefined;

  constructor(readonly pid: number) {
    this.objects = processObjects(pid);
  }

  /** A variable of the environment the process started with, if it can be read. */
  environment(name: string): string | undefined {
    if (this.environ === undefined) {
      try {
        this.environ = readFileSync(`/proc/${this.pid}/environ`, 'latin1').split('\0');
      } catch {
        this.environ = [];
      }
    }
    const prefix = `${name}=`;
    return this.environ.find((entry) => entry.startsWith(prefix))?.slice(prefix.length);
  }

  /** The program the process runs, to be opened here (/proc/PID/exe). */
  executable(): string | undefined {
    return `/proc/${this.pid}/exe`;
  }

  /** The program's directory as the process sees it ($ORIGIN), if it can be read. */
  exeDir(): string | undefined {
    try {
      return dirname(readlinkSync(`/proc/${this.pid}/exe`).replace(/ \(deleted\)$/, ''));
    } catch {
      return undefined;
    }
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

  /** Whether paths in its maps name the same files here (the same mount namespace). */
  private inSameNamespace(): boolean {
    this.sameNamespace ??= sameMountNamespace(this.pid);
    return this.sameNamespace;
  }

  /**
   * What paths as the process sees them are prefixed with here: '' when it has our root,
   * else /proc/PID/root (another mount namespace, or a chroot: its maps then show our paths,
   * but its own paths are under its root).
   */
  root(): string {
    this.sameRoot ??= this.inSameNamespace() && processRoot(this.pid) === '/';
    return this.sameRoot ? '' : `/proc/${this.pid}/root`;
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
