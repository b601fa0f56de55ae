import { readFileSync, readlinkSync } from 'node:fs';
import { ProbeError, quote } from '../../errors/index.js';
import { isKernelThread, kernelThreadError } from '../../host/index.js';
import { type MapEntry, type MappedObject, mappedObjects, parseProcMaps } from './symbols.js';

function errnoOf(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err && typeof err.code === 'string'
    ? err.code
    : undefined;
}

function checkPid(pid: number): void {
  if (!Number.isSafeInteger(pid) || pid <= 0) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use process ${quote(pid)}: a PID is a positive integer`,
    );
  }
}

/** The process's name from /proc/PID/comm, or undefined when it cannot be read. */
function tryComm(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').replace(/\n$/, '');
  } catch {
    return undefined;
  }
}

function describeProcess(pid: number): string {
  const comm = tryComm(pid);
  return comm === undefined ? `process ${pid}` : `process ${pid} (${quote(comm)})`;
}

/**
 * Turn an error from reading /proc/PID/<file> into the ProbeError a user should see:
 * ERR_PROCESS_NOT_FOUND when the process does not exist (or exited), ERR_PROCESS_ACCESS when
 * the kernel refuses (another user's process, or one that is not dumpable).
 */
export function processError(pid: number, action: string, err: unknown): ProbeError {
  const errno = errnoOf(err);
  if (errno === 'ENOENT' || errno === 'ESRCH') {
    return new ProbeError('ERR_PROCESS_NOT_FOUND', `Cannot find process ${pid}: no such process`, {
      hints: ['List running processes with: ps -e'],
      details: { pid },
      cause: err,
    });
  }
  if (errno === 'EACCES' || errno === 'EPERM') {
    const uid = process.getuid?.();
    return new ProbeError(
      'ERR_PROCESS_ACCESS',
      `Cannot ${action} of ${describeProcess(pid)}: permission denied${uid === undefined ? '' : ` (running as uid ${uid})`}`,
      {
        // The kernel's "may read" check (PTRACE_MODE_READ): same user and a dumpable process,
        // or CAP_SYS_PTRACE; Yama's ptrace_scope limits attaching only, not this.
        // As root, privileges are not the cause: say what else refuses.
        hints: [
          uid === 0
            ? 'Root was refused: a security module (AppArmor, SELinux) or the process being in another user namespace may forbid it'
            : "Run as the process's owner, or as root (CAP_SYS_PTRACE reads any process's files in /proc); a setuid or non-dumpable process needs root even for its owner",
          "Or give the program's file instead of -p: list and resolve read files without it",
        ],
        details: { pid, errno },
        cause: err,
      },
    );
  }
  return new ProbeError(
    'ERR_FILE_READ',
    `Cannot ${action} of ${describeProcess(pid)}: ${err instanceof Error ? err.message : String(err)}`,
    { details: { pid, errno }, cause: err },
  );
}

/** The areas of /proc/PID/maps. Throws ERR_PROCESS_NOT_FOUND or ERR_PROCESS_ACCESS. */
export function readProcessMaps(pid: number): MapEntry[] {
  checkPid(pid);
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/maps`, 'utf8');
  } catch (err) {
    throw processError(pid, 'read the memory map', err);
  }
  // A kernel thread maps nothing, and never will: refused for what it is.
  if (text === '' && isKernelThread(pid)) throw kernelThreadError(`Cannot probe process ${pid}`);
  return parseProcMaps(text, { source: `/proc/${pid}/maps` });
}

/** The files mapped into a process, grouped by (device, inode, path). */
export function processObjects(pid: number): MappedObject[] {
  return mappedObjects(readProcessMaps(pid));
}

/** The process's command name (/proc/PID/comm, at most 15 characters). */
export function processComm(pid: number): string {
  checkPid(pid);
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').replace(/\n$/, '');
  } catch (err) {
    throw processError(pid, 'read the name', err);
  }
}

/**
 * True when the process sees the same mounts as this one (same mount namespace), so paths in
 * its maps name the same files here. Otherwise its files are reached through /proc/PID/root.
 */
export function sameMountNamespace(pid: number): boolean {
  checkPid(pid);
  let mine: string;
  let theirs: string;
  try {
    mine = readlinkSync('/proc/self/ns/mnt');
  } catch (err) {
    throw processError(process.pid, 'read the mount namespace', err);
  }
  try {
    theirs = readlinkSync(`/proc/${pid}/ns/mnt`);
  } catch (err) {
    throw processError(pid, 'read the mount namespace', err);
  }
  return mine === theirs;
}

/**
 * The process's root directory as this process sees it (/proc/PID/root): '/' unless it runs
 * in a chroot; '/' too when it cannot be read (then its paths are taken as ours).
 */
export function processRoot(pid: number): string {
  checkPid(pid);
  try {
    return readlinkSync(`/proc/${pid}/root`);
  } catch {
    return '/';
  }
}
