import { spawn } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { ProbeError, quote } from '../errors/index.js';
import { endProcessGroup, type GroupEnd, killProcessGroup } from './processes.js';

export interface Exit {
  /** The exit status, or undefined when a signal ended the process. */
  readonly code: number | undefined;
  readonly signal: NodeJS.Signals | undefined;
}

/**
 * A command started stopped: its pid exists, none of its code has run yet. It leads a session
 * and process group of its own (its pid), which holds the processes it starts, so that it
 * can be ended as a whole; a terminal's Ctrl-C reaches upscope alone, which ends it (while
 * it is held, as upscope ends).
 */
export interface LaunchedCommand {
  readonly pid: number;
  /** Let it run (it execs the command, keeping its pid). */
  resume(): void;
  readonly exited: Promise<Exit>;
  /**
   * End it as a user would: its process group gets SIGTERM, and SIGKILL what is left of it
   * after `graceMs`. Resolves once no process of the group runs (also when none did).
   */
  terminate(graceMs: number): Promise<GroupEnd>;
  /** SIGKILL to its process group, now (for exit handlers, which cannot wait). */
  kill(): void;
}

/** How long a command has to end after SIGTERM before SIGKILL, by default (`--kill-after`). */
export const DEFAULT_KILL_AFTER_MS = 5000;

const STOP_TIMEOUT_MS = 5000;

/**
 * Start `command` (a shell command line, as with `sh -c`) so that it stops itself before it
 * execs: the caller can set up tracing for its pid, which the exec keeps, then resume() it.
 * The program is looked up first, so a missing one is an error before anything else is done.
 */
export async function launchStopped(
  command: string,
  options: { readonly stdout?: number | undefined } = {},
): Promise<LaunchedCommand> {
  checkCommand(command);
  const [shell, ...args] = stopThenExec(command);
  // A session of its own (setsid): its process group is its pid. Its stdout is this
  // process's unless given (a file descriptor of this process).
  const child = spawn(shell!, args, {
    stdio: ['inherit', options.stdout ?? 'inherit', 'inherit'],
    detached: true,
  });
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) =>
      resolve({ code: code ?? undefined, signal: signal ?? undefined }),
    );
  });
  const pid = child.pid;
  if (pid === undefined) {
    throw new ProbeError(
      'ERR_TARGET_NOT_FOUND',
      `Cannot run ${quote(command)}: /bin/sh could not be started`,
    );
  }
  await waitStopped(pid, exited);
  const guard = endWithThisProcess(pid);
  void exited.then(guard.release);
  return {
    pid,
    resume: () => {
      guard.resumed();
      process.kill(pid, 'SIGCONT');
    },
    exited,
    terminate: (graceMs) => {
      guard.release();
      return endProcessGroup(pid, { graceMs });
    },
    kill: () => {
      guard.release();
      killProcessGroup(pid);
    },
  };
}

/** The signals that end upscope (a terminal's Ctrl-C, a service manager, a closed terminal). */
const ENDING_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * While the command is held stopped (its probes being placed), a signal that ends this
 * process ends the command's process group first: else it would stay stopped for ever, a
 * child of nobody. The signal then ends this process as it would have, unless something else
 * here listens for it (a server that ends in its own way). Once the command runs, what this
 * process does at the signal (a command-line tool ends the command) is left to its own
 * handlers, and where there are none, the signal ends this process as before; a signal that
 * came while it was held but is handled only now (Node runs handlers between tasks, and
 * placing probes is one long task) is handled so too, not lost. The handlers go when the
 * command ends or is ended.
 */
function endWithThisProcess(pgid: number): { resumed(): void; release(): void } {
  // What listened before (a server's own ending): it still runs, so the signal is its.
  const heard = new Set(ENDING_SIGNALS.filter((signal) => process.listenerCount(signal) > 0));
  let held = true;
  const onSignal = (signal: NodeJS.Signals) => {
    if (held) killProcessGroup(pgid);
    else if (process.listenerCount(signal) > 1) return;
    release();
    if (!heard.has(signal) && process.listenerCount(signal) === 0) {
      process.kill(process.pid, signal);
    }
  };
  let listening = true;
  const release = () => {
    if (!listening) return;
    listening = false;
    for (const signal of ENDING_SIGNALS) process.off(signal, onSignal);
    moreListeners(-1);
  };
  // A listener of each more is allowed (a server may hold many commands: no leak warning).
  moreListeners(1);
  for (const signal of ENDING_SIGNALS) process.on(signal, onSignal);
  return {
    resumed: () => {
      held = false;
    },
    release,
  };
}

/** Allow `n` more listeners of each event on `process` (0 stays: no limit). */
function moreListeners(n: number): void {
  const limit = process.getMaxListeners();
  if (limit !== 0) process.setMaxListeners(Math.max(1, limit + n));
}

/**
 * The launcher of a command to be traced from its first instruction: `sh -c` stops itself
 * (so that a tracer can take its pid), and once continued, execs the command in its place.
 */
export function stopThenExec(command: string): string[] {
  return ['/bin/sh', '-c', `kill -STOP $$ && exec ${command}`];
}

/**
 * Check a shell command line before starting it: not empty, and its program (when the line is
 * simple enough to tell) an executable file, given by path or found on PATH. Throws
 * ProbeError ERR_USAGE or ERR_TARGET_NOT_FOUND.
 */
export function checkCommand(command: string): void {
  const program = firstWord(command);
  if (program === undefined) {
    throw new ProbeError('ERR_USAGE', 'Cannot run the command: it is empty', {
      hints: ["Give the program and its arguments, e.g. -c './app 5'"],
    });
  }
  if (program !== null) checkProgram(program);
}

/** The program of a simple command line; null when the shell must decide (quotes, $, ...). */
function firstWord(command: string): string | null | undefined {
  const word = command.trim().split(/\s+/)[0];
  if (word === undefined || word === '') return undefined;
  return /^[A-Za-z0-9_./+,:@%-]+$/.test(word) && !word.includes('=') ? word : null;
}

/**
 * The program file a shell command line runs, when the line is simple enough to tell (its
 * first word a path or a name on PATH, no quotes, variables or assignments); else undefined.
 */
export function commandProgram(command: string): string | undefined {
  const program = firstWord(command);
  return program === undefined || program === null ? undefined : findProgram(program);
}

/** An executable regular file: `program` itself (with a '/'), or the first one on PATH. */
function findProgram(program: string): string | undefined {
  const candidates = program.includes('/')
    ? [program]
    : (process.env['PATH'] ?? '/usr/bin:/bin')
        .split(delimiter)
        .map((dir) => join(dir || '.', program));
  for (const path of candidates) {
    try {
      if (statSync(path).isFile()) {
        accessSync(path, constants.X_OK);
        return path;
      }
    } catch {
      // Not here, or not executable: try the next directory.
    }
  }
  return undefined;
}

/** Throws ProbeError ERR_TARGET_NOT_FOUND unless `program` (a path, or a name on PATH) is executable. */
export function checkProgram(program: string): void {
  if (findProgram(program) !== undefined) return;
  throw new ProbeError(
    'ERR_TARGET_NOT_FOUND',
    `Cannot run ${quote(program)}: ${program.includes('/') ? 'no such executable file' : 'not found on PATH'}`,
    { hints: ['Check the command given with -c; write ./prog for a program in this directory'] },
  );
}

/** Wait until the shell has stopped itself (state T in /proc/PID/stat). */
async function waitStopped(pid: number, exited: Promise<Exit>): Promise<void> {
  let done = false;
  void exited.then(() => {
    done = true;
  });
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (done) {
      throw new ProbeError(
        'ERR_TARGET_NOT_FOUND',
        `Cannot start the command: it exited before it could be traced`,
      );
    }
    let state: string | undefined;
    try {
      state = /\) (\S)/.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1];
    } catch {
      state = undefined;
    }
    if (state === 'T') return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  killProcessGroup(pid);
  throw new ProbeError(
    'ERR_INTERNAL',
    `Cannot start the command: it did not stop within ${STOP_TIMEOUT_MS} ms`,
  );
}

/** Every thread of a process (its /proc/PID/task entries). */
export function threadsOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    throw new ProbeError('ERR_PROCESS_NOT_FOUND', `Cannot find process ${pid}: no such process`, {
      hints: ['List running processes with: ps -e'],
    });
  }
}

/**
 * The state of a process or thread, as /proc/PID/stat gives it (R, S, D, T, t, Z, X...), or
 * undefined when it is gone (ENOENT; ESRCH while it is being reaped). Any other failure to
 * read (EMFILE, ENOMEM...) says nothing of the process and is thrown.
 */
export function procState(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') return undefined;
    throw err;
  }
  // The state follows the command name, which is in parentheses and may hold any byte.
  return stat.charAt(stat.lastIndexOf(')') + 2);
}

/**
 * Whether a process has ended: gone from /proc, or a zombie (dead, waiting for its parent to
 * reap it) or dying (state Z or X). A /proc that cannot be read for want of resources is not
 * an end.
 */
export function processEnded(pid: number): boolean {
  let state: string | undefined;
  try {
    state = procState(pid);
  } catch {
    return false;
  }
  return state === undefined || state === 'Z' || state === 'X' || state === 'x';
}
