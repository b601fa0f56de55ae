/**
 * Which processes get a followed run's breakpoints. The kernel places a uprobe link's
 * breakpoints in every process that maps its file, unless the link names one process. A run
 * that follows processes (-p, -c) filters hits by the map of followed processes, but a link
 * for every process makes each process that maps the file trap at every call: probing
 * libc:malloc of one server would slow every process on the machine (and make attaching take
 * seconds: a breakpoint per process per function), and probing node's own functions would
 * trap upscope itself at each of them.
 *
 * So a file gets one link per followed process, and one more for each child as the fork
 * tracepoint reports it (a record in this scope's ring buffer), released as the process ends:
 * - with -p and -c, for a file upscope maps itself (node, libc, libstdc++): upscope never
 *   traps, and nor does any other process;
 * - with -p, for a file other processes map too (a program running more than once): the
 *   followed processes alone pay for the probes.
 * The calls a child makes before its links exist (the first milliseconds after its fork: its
 * fork is read every SYNC_MS, and a link made while the child execs waits for the exec) are
 * not seen there, and that is said. Otherwise (a -c command's own files, a file only the followed
 * processes map) one link covers every process, filtered in the kernel: a child is followed
 * from its first instruction, as a command's short-lived children need.
 */
import { readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import type { FollowSpec } from './follow.js';
import { RingBuffer } from './ring-buffer.js';

/** What the fork and exit handlers write for user space (u32 kind, u32 pid, u64 time). */
export const SCOPE_RECORD = { kind: 0, pid: 4, timeNs: 8, bytes: 16 } as const;
export const SCOPE_FORK = 1;
export const SCOPE_EXIT = 2;

/** How often the records of forks and exits are read. */
const SYNC_MS = 2;

/** What a scope does to the links of the session it belongs to. */
export interface ScopedLinks {
  /** Place the process's links; false when it ended before they were placed. */
  addProcess(pid: number): boolean;
  removeProcess(pid: number): void;
}

let unseenNotice: ((text: string) => void) | undefined;

/** Why a child's calls in a file placed per process may not be seen, and what sees them. */
const PER_PROCESS =
  'a file upscope itself maps is probed in each followed process alone, once its fork is seen; --engine ptrace sees every child from its start';

/**
 * Say `notice` once a run when a child process ends before its probes in the files placed
 * per process were, and once when one gets them after it began (undefined: say nothing, the
 * default).
 */
export function setUnseenChildNotice(notice: ((text: string) => void) | undefined): void {
  unseenNotice = notice;
}

/** The thread group of thread `tid`, or undefined when it has ended. */
function threadGroup(tid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${tid}/status`, 'latin1');
    const tgid = /^Tgid:\s*(\d+)/m.exec(status);
    return tgid === null ? undefined : Number(tgid[1]);
  } catch {
    return undefined;
  }
}

/** `inode path` of every file process `pid` maps (empty once it has ended). */
function mappedFiles(pid: number | 'self'): Set<string> {
  const files = new Set<string>();
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/maps`, 'latin1');
  } catch {
    return files;
  }
  for (const line of text.split('\n')) {
    // address perms offset dev inode path
    const match = /^\S+ \S+ \S+ \S+ (\d+)\s+(\/.*)$/.exec(line);
    if (match !== null && match[1] !== '0') files.add(`${match[1]} ${match[2]}`);
  }
  return files;
}

export class FollowedScope {
  /** Where the fork and exit handlers say which processes came and went. */
  readonly ring: RingBuffer;
  readonly #pids = new Set<number>();
  /** `inode path` of the files upscope maps, and of those other processes map (read once). */
  #own: Set<string> | undefined;
  #elsewhere: Set<string> | undefined;
  readonly #decided = new Map<string, boolean>();
  /** A -c command: its files are scoped only when upscope maps them too. */
  readonly #command: boolean;
  #timer: NodeJS.Timeout | undefined;
  /** A child that ended before its links was said, and one that got them late (once a run). */
  #saidUnseen = false;
  #saidLate = false;

  constructor(spec: FollowSpec) {
    for (const pid of spec.pids) this.#pids.add(pid);
    if (spec.startAtExecOf !== undefined) this.#pids.add(spec.startAtExecOf);
    this.#command = spec.startAtExecOf !== undefined;
    this.ring = RingBuffer.create('upscope_procs', 64 * 1024);
  }

  /** The processes followed now. */
  pids(): readonly number[] {
    return [...this.#pids];
  }

  /** Whether the probes of the file at `path` go in each followed process alone. */
  scoped(path: string): boolean {
    let scoped = this.#decided.get(path);
    if (scoped === undefined) {
      scoped = this.#mappedElsewhere(path);
      this.#decided.set(path, scoped);
    }
    return scoped;
  }

  #mappedElsewhere(path: string): boolean {
    let key: string;
    try {
      key = `${statSync(path).ino} ${realpathSync(path)}`;
    } catch {
      return true;
    }
    this.#own ??= mappedFiles('self');
    if (this.#own.has(key)) return true;
    if (this.#command) return false;
    if (this.#elsewhere === undefined) {
      const elsewhere = new Set<string>();
      for (const entry of readdirSync('/proc')) {
        const pid = Number(entry);
        if (!Number.isInteger(pid) || this.#pids.has(pid) || pid === process.pid) continue;
        for (const file of mappedFiles(pid)) elsewhere.add(file);
      }
      this.#elsewhere = elsewhere;
    }
    return this.#elsewhere.has(key);
  }

  /** Read the records of forks and exits on a timer, until stop(). */
  start(links: ScopedLinks): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.sync(links), SYNC_MS);
    this.#timer.unref();
  }

  /** Add the links of the processes forked, and release those of the ones ended, since last. */
  sync(links: ScopedLinks): void {
    this.ring.read((view, start) => {
      const kind = view.getUint32(start + SCOPE_RECORD.kind, true);
      const pid = view.getUint32(start + SCOPE_RECORD.pid, true);
      if (kind === SCOPE_FORK) {
        // Only new processes are told (see followForksProgram()): one gone already, or gone
        // while its links were made, is not seen in the files placed per process.
        if (this.#pids.has(pid)) return;
        if (threadGroup(pid) !== pid) {
          this.#unseen(pid);
          return;
        }
        this.#pids.add(pid);
        if (!links.addProcess(pid)) this.#unseen(pid);
        else this.#late(pid, view.getBigUint64(start + SCOPE_RECORD.timeNs, true));
      } else if (kind === SCOPE_EXIT && this.#pids.delete(pid)) {
        links.removeProcess(pid);
      }
    });
  }

  /** Say, once, that child process `pid` ended before its links in the files placed per process. */
  #unseen(pid: number): void {
    if (this.#saidUnseen) return;
    const files = this.#scopedFiles();
    if (files === undefined) return;
    this.#saidUnseen = true;
    unseenNotice!(
      `upscope: child process ${pid} ended before its probes in ${files} were placed: its calls there are not seen (${PER_PROCESS})`,
    );
  }

  /**
   * Say, once, that children get their links in the files placed per process only once their
   * fork is read (child process `pid` now, `forkNs` its fork, CLOCK_MONOTONIC): what they call
   * there before is not seen. A shell's child (`ls` in `ls | wc`) may run its whole program in
   * that time: a count said nothing of the calls it left out.
   */
  #late(pid: number, forkNs: bigint): void {
    if (this.#saidLate) return;
    const files = this.#scopedFiles();
    if (files === undefined) return;
    this.#saidLate = true;
    const ms = Number(process.hrtime.bigint() - forkNs) / 1e6;
    unseenNotice!(
      `upscope: child processes get their probes in ${files} once their fork is seen (child process ${pid}: ${ms.toFixed(1)} ms after its fork): their calls there before that are not seen (${PER_PROCESS})`,
    );
  }

  /** The files placed per process, named, or undefined when none is (or nothing is said). */
  #scopedFiles(): string | undefined {
    if (unseenNotice === undefined) return undefined;
    const files = [...this.#decided].filter(([, scoped]) => scoped).map(([path]) => basename(path));
    return files.length === 0 ? undefined : files.join(', ');
  }

  /**
   * Stop reading on a timer. The forks not read yet are read now: a child that ended before
   * they were (the last of a shell's pipeline, as the command exits) is said as unseen too.
   */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    this.ring.read((view, start) => {
      const pid = view.getUint32(start + SCOPE_RECORD.pid, true);
      if (view.getUint32(start + SCOPE_RECORD.kind, true) !== SCOPE_FORK) return;
      if (!this.#pids.has(pid) && threadGroup(pid) !== pid) this.#unseen(pid);
    });
  }

  close(): void {
    this.stop();
    this.ring.close();
  }
}
