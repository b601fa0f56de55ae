/**
 * Kernel uprobes are placed on an inode: a file replaced on disk (a new inode at the same
 * path, as a rebuild, `cp` to a temporary name then `mv`, or a package upgrade leave it) is a
 * file the probes are not on, although a process that loads the path again (dlopen() after
 * dlclose(), an exec) runs it. ReplacedFiles watches the directories of the files a run's
 * sites are in (inotify, through fs.watch); when a path holds another file, every spec with
 * sites there is resolved again in it, and the engine places copies of those probes in the
 * new file, counted as the originals. It says so, and says what may have been missed: calls
 * a process made in the new file before the copies were in it.
 */
import { type FSWatcher, readdirSync, readFileSync, statSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { MovedProbe } from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import {
  type ProbeSite,
  processObjects,
  resolveProbesSync,
  sameMountNamespace,
} from '../plan/index.js';
import { type FetchArg, printFetchExpr } from '../spec/index.js';
import { probeName } from './tracer.js';

export interface ReplacedFilesOptions {
  /**
   * Place copies of the probes in a new file: for a probe's file and offset as first
   * attached, `move` says where its copy goes (undefined: none). Returns how many were placed.
   */
  readonly attach: (move: (path: string, offset: bigint) => MovedProbe | undefined) => number;
  /** Tell the user (one line, no prefix). */
  readonly notice: (text: string) => void;
  /**
   * The processes traced (-p, -c: the process and its descendants), whose maps say whether
   * the new file was loaded before its probes were in it; undefined: every process.
   */
  readonly processes?: (() => readonly number[]) | undefined;
  readonly unsafe?: boolean | undefined;
  readonly debugDirs?: readonly string[] | undefined;
}

/** One path the sites are in, as this process opens it. */
interface Watched {
  readonly path: string;
  readonly displayPath: string;
  /** The sites first resolved there. */
  readonly sites: readonly ProbeSite[];
  /** Files (dev:inode) the probes are on, or that were given up on. */
  readonly known: Set<string>;
  /** Retries of a file that could not be read yet (being written), by dev:inode. */
  readonly tries: Map<string, number>;
}

/** How long a file that cannot be read (still being written) is tried again, at most. */
const RETRY_MS = 100;
const MAX_TRIES = 50;
/** New files given probes per path, at most (a file rewritten in a loop must not grow a run). */
const MAX_COPIES = 64;

export class ReplacedFiles {
  readonly #options: ReplacedFilesOptions;
  readonly #watched = new Map<string, Watched>();
  readonly #watchers: FSWatcher[] = [];
  readonly #timers = new Set<NodeJS.Timeout>();
  #closed = false;

  private constructor(options: ReplacedFilesOptions) {
    this.#options = options;
  }

  /**
   * Watch the files of `sites` from now on. A path that already holds another file than the
   * one its sites were resolved in (a process that still maps the file that was there) gets
   * its copies at once.
   */
  static watch(sites: readonly ProbeSite[], options: ReplacedFilesOptions): ReplacedFiles {
    const files = new ReplacedFiles(options);
    const byPath = new Map<string, ProbeSite[]>();
    for (const site of sites) {
      const path = pathOnDisk(site);
      if (path === undefined) continue;
      const own = byPath.get(path);
      if (own === undefined) byPath.set(path, [site]);
      else own.push(site);
    }
    const byDir = new Map<string, Watched[]>();
    for (const [path, own] of byPath) {
      const watched: Watched = {
        path,
        displayPath: own[0]!.target.displayPath,
        sites: own,
        known: new Set(own.map((site) => fileKey(site.target.dev, site.target.inode))),
        tries: new Map(),
      };
      files.#watched.set(path, watched);
      const inDir = byDir.get(dirname(path));
      if (inDir === undefined) byDir.set(dirname(path), [watched]);
      else inDir.push(watched);
    }
    for (const [dir, watched] of byDir) {
      try {
        const watcher = watch(dir, { persistent: false }, (_event, name) => {
          for (const one of watched) {
            if (name === null || name === basename(one.path)) files.#check(one);
          }
        });
        watcher.on('error', () => watcher.close());
        files.#watchers.push(watcher);
      } catch {
        options.notice(
          `cannot watch ${dir} for files replaced on disk: a probed file replaced there is not probed again`,
        );
      }
    }
    for (const watched of files.#watched.values()) files.#check(watched);
    return files;
  }

  /** Stop watching. Idempotent. */
  close(): void {
    this.#closed = true;
    for (const watcher of this.#watchers.splice(0)) watcher.close();
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
  }

  /**
   * The file at a watched path changed: probe it if it is a new one. Runs from fs.watch's
   * events: nothing may be thrown from here, what fails is said.
   */
  #check(watched: Watched): void {
    if (this.#closed) return;
    try {
      this.#checkNow(watched);
    } catch (err) {
      if (this.#closed) return;
      // The traced process ended before the new file could be probed: the run is ending.
      if (err instanceof ProbeError && err.code === 'ERR_PROCESS_NOT_FOUND') {
        this.#options.notice(
          `${watched.displayPath} was replaced on disk, and the process ended before the new file could be probed: calls made there, if any, were not counted`,
        );
        return;
      }
      const reason = err instanceof Error ? err.message : String(err);
      this.#options.notice(
        `${watched.displayPath} was replaced on disk, and its probes cannot be placed in the new file: ${reason}`,
      );
    }
  }

  #checkNow(watched: Watched): void {
    let key: string;
    try {
      const stat = statSync(watched.path, { bigint: true });
      if (!stat.isFile()) return;
      key = fileKey(stat.dev, stat.ino);
    } catch {
      // Gone (removed before its replacement is renamed in): the next event tells.
      return;
    }
    if (watched.known.has(key)) return;
    if (watched.known.size >= watched.sites.length + MAX_COPIES) {
      watched.known.add(key);
      this.#options.notice(
        `${watched.displayPath} was replaced on disk again: after ${MAX_COPIES} new files there, its probes are not placed in more`,
      );
      return;
    }
    const resolved = this.#resolve(watched, key);
    if (resolved === 'again') {
      const tries = (watched.tries.get(key) ?? 0) + 1;
      watched.tries.set(key, tries);
      if (tries >= MAX_TRIES) {
        watched.known.add(key);
        this.#options.notice(
          `${watched.displayPath} was replaced on disk by a file that cannot be read as ELF: its probes are not placed in it`,
        );
        return;
      }
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        this.#check(watched);
      }, RETRY_MS);
      timer.unref();
      this.#timers.add(timer);
      return;
    }
    watched.known.add(key);
    watched.tries.delete(key);
    if (resolved.moves.size === 0) return;
    const placed = this.#options.attach((path, offset) => resolved.moves.get(`${path}\0${offset}`));
    const notices = [
      `${watched.displayPath} was replaced on disk: ${placed} probe${placed === 1 ? '' : 's'} placed in the new file too`,
      ...resolved.missing,
    ];
    for (const pid of this.#mappedAlready(resolved.dev, resolved.inode)) {
      notices.push(
        `process ${pid} had loaded the new ${watched.displayPath} before its probes were placed: its calls there until now are not counted`,
      );
    }
    for (const notice of notices) this.#options.notice(notice);
  }

  /**
   * Resolve again, in the file now at the path, each spec with sites there, and pair each
   * old site with its new one (same spec, kind, name and fetches). `again`: the file cannot be
   * read yet (written meanwhile, or not ELF yet).
   */
  #resolve(
    watched: Watched,
    key: string,
  ):
    | 'again'
    | {
        moves: Map<string, MovedProbe>;
        missing: string[];
        dev: bigint;
        inode: bigint;
      } {
    const moves = new Map<string, MovedProbe>();
    const missing: string[] = [];
    let dev: bigint | undefined;
    let inode: bigint | undefined;
    const specs = [...new Set(watched.sites.map((site) => site.spec))];
    for (const spec of specs) {
      const plan = resolveProbesSync([spec], {
        targetFile: { path: watched.path, displayPath: watched.displayPath },
        unsafe: this.#options.unsafe,
        debugDirs: this.#options.debugDirs,
      });
      const error = plan.errors[0];
      if (error !== undefined) {
        if (unreadable(error)) return 'again';
        missing.push(
          `${watched.displayPath} was replaced on disk: ${spec} is not probed in the new file: ${error.message}`,
        );
        continue;
      }
      const fresh = plan.sites;
      // The file read must be the one stat() saw: else it changed again meanwhile.
      if (fresh.some((site) => fileKey(site.target.dev, site.target.inode) !== key)) return 'again';
      dev = fresh[0]?.target.dev ?? dev;
      inode = fresh[0]?.target.inode ?? inode;
      for (const old of watched.sites.filter((site) => site.spec === spec)) {
        const twin = fresh.find((site) => sameProbe(site, old));
        if (twin === undefined) {
          missing.push(
            `${watched.displayPath} was replaced on disk: ${probeName(old)} (${spec}) is not in the new file as it was: it is not probed there`,
          );
          continue;
        }
        moves.set(`${old.target.path}\0${old.fileOffset}`, {
          path: watched.path,
          offset: twin.fileOffset,
          refCtrOffset: twin.usdt?.semaphoreFileOffset,
        });
      }
    }
    if (dev === undefined || inode === undefined) {
      const [devText, inodeText] = key.split(':');
      dev = BigInt(devText!);
      inode = BigInt(inodeText!);
    }
    return { moves, missing, dev, inode };
  }

  /** The traced processes that have the file (dev, inode) mapped now. */
  #mappedAlready(dev: bigint, inode: bigint): number[] {
    const pids = this.#options.processes?.() ?? allProcesses();
    return pids.filter((pid) => {
      try {
        return processObjects(pid).some((o) => o.dev === dev && o.inode === inode);
      } catch {
        return false;
      }
    });
  }
}

function fileKey(dev: bigint, inode: bigint): string {
  return `${dev}:${inode}`;
}

/** A file that is not (yet) a complete ELF file: being written. */
function unreadable(error: ProbeError): boolean {
  return ['ERR_ELF_INVALID', 'ERR_FILE_READ', 'ERR_TARGET_NOT_FOUND', 'ERR_DECODE'].includes(
    error.code,
  );
}

/** The same probe in another build of the file: same spec, kind, function and fetches. */
function sameProbe(a: ProbeSite, b: ProbeSite): boolean {
  return (
    a.spec === b.spec &&
    a.kind === b.kind &&
    probeName(a) === probeName(b) &&
    fetchesText(a.fetches) === fetchesText(b.fetches) &&
    a.usdt?.args === b.usdt?.args
  );
}

function fetchesText(fetches: readonly FetchArg[]): string {
  return fetches.map((f) => `${f.name}=${printFetchExpr(f.expr)}:${f.type ?? ''}`).join(' ');
}

/**
 * The path a site's file is at, as this process opens it: its path, or for a file resolved
 * through /proc/PID/map_files (a process that maps a file deleted or replaced since), the
 * path the process sees it at. Undefined when that cannot be told.
 */
function pathOnDisk(site: ProbeSite): string | undefined {
  const mapFile = /^\/proc\/(\d+)\/map_files\//.exec(site.target.path);
  if (mapFile === null) return site.target.path;
  const pid = Number(mapFile[1]);
  try {
    return sameMountNamespace(pid)
      ? site.target.displayPath
      : `/proc/${pid}/root${site.target.displayPath}`;
  } catch {
    return undefined;
  }
}

function allProcesses(): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number);
}

/** A process and its descendants now (through /proc/PID/task/TID/children). */
export function processFamily(pid: number): number[] {
  const family: number[] = [];
  const pending = [pid];
  while (pending.length > 0) {
    const one = pending.pop()!;
    if (family.includes(one)) continue;
    family.push(one);
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${one}/task`);
    } catch {
      continue;
    }
    for (const tid of tasks) {
      try {
        const children = readFileSync(`/proc/${one}/task/${tid}/children`, 'utf8');
        for (const child of children.split(' '))
          if (child.trim() !== '') pending.push(Number(child));
      } catch {
        // The thread ended meanwhile.
      }
    }
  }
  return family;
}
