import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** What /proc/PID/stat says of a process's family: its parent, group and state. */
interface ProcessStat {
  readonly pid: number;
  readonly state: string;
  readonly ppid: number;
  readonly pgrp: number;
}

/** Every process's stat line (threads aside), read now; those gone meanwhile are skipped. */
function processStats(): ProcessStat[] {
  const stats: ProcessStat[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // The name is in parentheses and may hold any byte: the fields after it are plain.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    stats.push({
      pid: Number(name),
      state: fields[0] ?? '',
      ppid: Number(fields[1]),
      pgrp: Number(fields[2]),
    });
  }
  return stats;
}

function live(stat: ProcessStat): boolean {
  return stat.state !== 'Z' && stat.state !== 'X' && stat.state !== 'x';
}

/**
 * The processes descended from `pid` now (children, their children...), nearest first, zombies
 * left out. Read from /proc in one pass: a process forked meanwhile may be missed.
 */
export function descendantsOf(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const stat of processStats()) {
    if (!live(stat)) continue;
    const own = children.get(stat.ppid);
    if (own === undefined) children.set(stat.ppid, [stat.pid]);
    else own.push(stat.pid);
  }
  const found: number[] = [];
  const seen = new Set([pid]);
  for (let at = -1; at < found.length; at++) {
    const parent = at < 0 ? pid : found[at]!;
    for (const child of children.get(parent) ?? []) {
      if (seen.has(child)) continue;
      seen.add(child);
      found.push(child);
    }
  }
  return found;
}

/** The processes of process group `pgid` that still run (zombies, which only wait to be reaped, aside). */
export function groupMembers(pgid: number): number[] {
  return processStats()
    .filter((stat) => stat.pgrp === pgid && live(stat))
    .map((stat) => stat.pid);
}

/**
 * Signal a process group; false when no process of it got the signal: none is left (ESRCH),
 * or none may be signalled by this process (EPERM: a set-user-ID program it started).
 */
function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ESRCH' || code === 'EPERM') return false;
    throw err;
  }
}

export interface EndGroupOptions {
  /** How long the processes have to end after SIGTERM before they get SIGKILL. */
  readonly graceMs: number;
  /** Called while waiting: reap the group's leader here when this process is its parent and Node is not. */
  readonly reap?: (() => void) | undefined;
}

/** How a process group was ended. */
export type GroupEnd = 'gone' | 'terminated' | 'killed';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * End process group `pgid` as a user would: SIGTERM (with SIGCONT, so that a stopped process
 * gets it), then, if any process of the group still runs after `graceMs`, SIGKILL. Resolves
 * once none runs: 'gone' when none did, 'terminated' when SIGTERM was enough, 'killed' when
 * SIGKILL was needed.
 */
export async function endProcessGroup(pgid: number, options: EndGroupOptions): Promise<GroupEnd> {
  options.reap?.();
  if (groupMembers(pgid).length === 0) return 'gone';
  signalGroup(pgid, 'SIGTERM');
  signalGroup(pgid, 'SIGCONT');
  const deadline = performance.now() + options.graceMs;
  for (;;) {
    options.reap?.();
    if (groupMembers(pgid).length === 0) return 'terminated';
    if (performance.now() >= deadline) break;
    await sleep(Math.min(20, Math.max(1, deadline - performance.now())));
  }
  signalGroup(pgid, 'SIGKILL');
  // SIGKILL ends a process at once; wait (a little) for the kernel to take them down.
  const until = performance.now() + 5000;
  while (performance.now() < until) {
    options.reap?.();
    if (groupMembers(pgid).length === 0) break;
    await sleep(10);
  }
  return 'killed';
}

/**
 * SIGKILL to every process of a group, now (for exit handlers, which cannot wait); nothing
 * when none of it runs (its id may since be another's).
 */
export function killProcessGroup(pgid: number): void {
  if (groupMembers(pgid).length > 0) signalGroup(pgid, 'SIGKILL');
}

/** A process as a process picker shows it. */
export interface ProcessInfo {
  readonly pid: number;
  readonly ppid: number;
  /** The thread name of its main thread (/proc/PID/comm). */
  readonly comm: string;
  /** Its command line, arguments joined by spaces (empty for kernel threads). */
  readonly commandLine: string;
  /** The real user id, and its name from /etc/passwd when it has one there. */
  readonly uid: number;
  readonly user: string;
  /** The file it runs (/proc/PID/exe), when it can be read. */
  readonly exe: string | undefined;
}

function userNames(): Map<number, string> {
  const names = new Map<number, string>();
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const [name, , uid] = line.split(':');
      if (name !== undefined && uid !== undefined && /^\d+$/.test(uid)) {
        names.set(Number(uid), name);
      }
    }
  } catch {
    // no passwd file: users show as numbers
  }
  return names;
}

/**
 * The processes running now, as `ps` lists them (zombies and kernel threads left out), pid
 * order; those that end while they are read are skipped.
 */
export function listProcesses(): ProcessInfo[] {
  const names = userNames();
  const out: ProcessInfo[] = [];
  for (const stat of processStats()) {
    if (!live(stat)) continue;
    try {
      const dir = `/proc/${stat.pid}`;
      const commandLine = readFileSync(`${dir}/cmdline`, 'utf8').replace(/\0+$/, '');
      if (commandLine === '') continue; // a kernel thread
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`${dir}/status`, 'utf8'))?.[1]);
      let exe: string | undefined;
      try {
        exe = readlinkSync(`${dir}/exe`);
      } catch {
        exe = undefined; // another user's process, without the right to look
      }
      out.push({
        pid: stat.pid,
        ppid: stat.ppid,
        comm: readFileSync(`${dir}/comm`, 'utf8').trimEnd(),
        commandLine: commandLine.replace(/\0/g, ' '),
        uid,
        user: names.get(uid) ?? String(uid),
        exe,
      });
    } catch {
      // gone meanwhile
    }
  }
  return out.sort((a, b) => a.pid - b.pid);
}

/**
 * What tells one program image of process `pid` from another: where its code starts and
 * where its arguments are (`start_code` xor `arg_start` of its memory map, fields 26 and 48
 * of /proc/PID/stat), new at each exec and for each process (both move with address space
 * randomisation). The kernel's stack walker reads the same two fields of the current
 * memory map, to know whether mappings read from /proc/PID/maps are still the process's.
 * Undefined when the process has ended, has no memory map, or is not ours to read.
 */
export function memoryImageId(pid: number): bigint | undefined {
  const [startCode, argStart] = statFields(pid, 26, 48) ?? [];
  if (startCode === undefined || argStart === undefined) return undefined;
  const id = BigInt(startCode) ^ BigInt(argStart);
  return id === 0n ? undefined : id;
}

/**
 * Fields `ns` (from 1, as proc(5) numbers them) of /proc/PID/stat, read once; undefined when
 * the process has ended or is not ours to read. The name (field 2, in parentheses) may hold
 * any byte: the fields after it are plain.
 */
function statFields(pid: number, ...ns: number[]): (string | undefined)[] | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return ns.map((n) => fields[n - 3]);
}

/** What tells a process from any other, now or later, on this machine or another. */
export interface ProcessIdentity {
  readonly pid: number;
  /** When it started, in clock ticks since boot (field 22 of /proc/PID/stat). */
  readonly startTime: string;
  /** The boot it started in (/proc/sys/kernel/random/boot_id). */
  readonly bootId: string;
}

function bootId(): string | undefined {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** This process's identity (or `pid`'s), undefined when /proc does not say it. */
export function processIdentity(pid: number = process.pid): ProcessIdentity | undefined {
  const startTime = statFields(pid, 22)?.[0];
  const boot = bootId();
  return startTime === undefined || boot === undefined
    ? undefined
    : { pid, startTime, bootId: boot };
}

/** Whether the process `identity` names is running (here, in this boot, not a later one). */
export function isRunning(identity: ProcessIdentity): boolean {
  const now = processIdentity(identity.pid);
  return now?.startTime === identity.startTime && now.bootId === identity.bootId;
}
