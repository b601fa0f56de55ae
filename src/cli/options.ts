import { closeSync, openSync } from 'node:fs';
import { isatty } from 'node:tty';
import { InvalidArgumentError } from '@commander-js/extra-typings';
import { ProbeError, type SkippedSite, skipSummary, splitDev } from '../api/index.js';
import { renderWarning } from '../errors/index.js';

/** A device number as `major:minor`, the way /proc/PID/maps and ls show it. */
export function formatDev(dev: bigint): string {
  const { major, minor } = splitDev(dev);
  return `${major}:${minor}`;
}

/** Parse an --engine value of the commands that take every engine. */
export function parseEngine(value: string): 'tracefs' | 'bpf' | 'ptrace' {
  if (value === 'tracefs' || value === 'bpf' || value === 'ptrace') return value;
  throw new ProbeError('ERR_USAGE', `Cannot use engine "${value}": give tracefs, bpf or ptrace`);
}

/** Parse an --engine value of trace: every engine, and inject (inline hooks, -p or -c). */
export function parseTraceEngine(value: string): 'tracefs' | 'bpf' | 'ptrace' | 'inject' {
  if (value === 'inject') return value;
  if (value === 'tracefs' || value === 'bpf' || value === 'ptrace') return value;
  throw new ProbeError(
    'ERR_USAGE',
    `Cannot use engine "${value}": give tracefs, bpf, ptrace or inject`,
  );
}

/** Parse a -p value: a positive decimal PID. */
export function parsePid(value: string): number {
  if (!/^[1-9][0-9]{0,9}$/.test(value) || Number(value) > 4194304) {
    throw new InvalidArgumentError(
      `"${value}" is not a process ID (a positive number up to 4194304)`,
    );
  }
  return Number(value);
}

/** A parser for an option that takes a positive number. */
export function positive(what: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isFinite(n) || n <= 0) {
      throw new ProbeError('ERR_USAGE', `Cannot use ${what} "${value}": give a positive number`);
    }
    return n;
  };
}

/** A parser for an option that takes a number of seconds, 0 or more. */
export function seconds(what: string) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0) {
      throw new ProbeError('ERR_USAGE', `Cannot use ${what} "${value}": give a number of seconds`);
    }
    return n;
  };
}

/** `--children`, for the commands that take -p. Spread into .option(). */
export const childrenOption = [
  '--children',
  "with -p: also the processes it has started already (a server's workers, their children), not only the children it forks from now on",
] as const;

/** `--include-self`, for the commands that probe every process. Spread into .option(). */
export const includeSelfOption = [
  '--include-self',
  "without -p or -c: also upscope's own process (all its threads), which is left out by default",
] as const;

/** `--kill-after SECONDS`, for the commands that take -c. Spread into .option(). */
export const killAfterOption = [
  '--kill-after <seconds>',
  "with -c: when upscope ends before the command (--duration, Ctrl-C, a signal), the command's process group gets SIGTERM, then SIGKILL after this many seconds (default 5)",
  seconds('--kill-after'),
] as const;

/** Collects a repeatable option's values. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * `--debug-dir DIR` (repeatable), for commands that resolve specs: where separate debug files
 * are looked for, before /usr/lib/debug, as gdb's debug-file-directory. Spread into .option().
 */
export const debugDirOption = [
  '--debug-dir <dir>',
  'look for separate debug files (for FILE:LINE specs and variables by name) in DIR, as in /usr/lib/debug: DIR/.build-id/xx/rest.debug or DIR/<path of the file>/<debuglink name>; repeatable',
  collect,
] as const;

/**
 * `--strict`, for commands that take specs: a function a pattern matches that cannot be probed
 * is an error instead of being skipped. Spread into .option().
 */
export const strictOption = [
  '--strict',
  'fail when a pattern matches a function that cannot be probed (by default such functions are skipped, counted on the start line, and listed by resolve)',
] as const;

/**
 * The line every command that runs probes starts with, the same on every engine:
 * `Tracing 3 probes (tracefs). Ctrl-C to end.`, `Counting 1 probe (ptrace, process 42, ...)`:
 * the verb, the number of sites probed, what the engine says of itself, and the count of
 * sites patterns skipped, if any; ended by a newline. What the plan warns of (IFUNC resolvers
 * a pattern left out, the overloads a name placed probes on) comes before it, as resolve
 * says it.
 */
export function startLine(
  verb: string,
  sites: number,
  noun: string,
  engineText: string,
  skipped: readonly SkippedSite[],
  engine: 'tracefs' | 'bpf' | 'ptrace',
  warnings: readonly ProbeError[],
): string {
  const summary = skipSummary(skipped, sites, engine);
  const line = `${verb} ${sites} ${noun}${sites === 1 ? '' : 's'} (${engineText}). Ctrl-C to end.`;
  const warned = warnings.map((warning) => `${renderWarning(warning)}\n`).join('');
  return `${warned}${line}${summary === undefined ? '' : ` ${summary}`}\n`;
}

/** How a -c command ended, as upscope says it on stderr: `command 42 exited with status 3`. */
export function commandEnd(exit: {
  readonly code: number | undefined;
  readonly signal: NodeJS.Signals | undefined;
}): string {
  return exit.code !== undefined
    ? `the command exited with status ${exit.code}`
    : `the command was killed by ${exit.signal ?? 'a signal'}`;
}

/**
 * The end of the -c command as a JSON line, for --json output: the command's own status
 * (`exitCode`, or the `signal` that killed it), which is not upscope's, e.g.
 * `{"command":{"pid":1234,"exitCode":3,"signal":null}}`.
 */
export function commandEndJson(
  pid: number | undefined,
  exit: { readonly code: number | undefined; readonly signal: NodeJS.Signals | undefined },
): string {
  return `${JSON.stringify({
    command: { pid: pid ?? null, exitCode: exit.code ?? null, signal: exit.signal ?? null },
  })}\n`;
}

/** Whether the output is JSON (--json or --format json), which says how the command ended. */
export function jsonOutput(options: { json?: true; format?: string }): boolean {
  return options.json === true || options.format === 'json';
}

/** `-o, --output FILE` for the commands that stream or print results. Spread into .option(). */
export const outputOption = [
  '-o, --output <file>',
  'write the output to FILE instead of stdout (messages stay on stderr): created with mode 0666 less the umask, or truncated if it is a regular file; a symbolic link, FIFO or device there is refused. A write error (e.g. a full disk) ends the command: the probes are removed and a -p process runs on',
] as const;

/** Parse --return-probes: sites, trampoline or auto. */
function parseReturnProbes(value: string): 'auto' | 'sites' | 'trampoline' {
  if (value === 'auto' || value === 'sites' || value === 'trampoline') return value;
  throw new ProbeError(
    'ERR_USAGE',
    `Cannot use --return-probes "${value}": give sites, trampoline or auto`,
  );
}

/**
 * `--return-probes MODE` for the commands that place return probes (and latency, which times
 * calls to their returns). Spread into .option().
 */
export const returnProbesOption = [
  '--return-probes <mode>',
  "how returns are caught: sites (a probe on each instruction the function leaves by: ret, or a jump to another function; its return address is left alone), trampoline (the return address is replaced by a trampoline's: cheaper on the kernel engines, where a ret is single-stepped, but a C++ exception, Rust panic or pthread_cancel through the function then ends the program, and Go code is refused), or auto (the default: sites in Go programs and where an unwinder can pass, else trampoline); resolve says which a probe uses and why",
  parseReturnProbes,
] as const;

/**
 * `--command-output FILE|inherit|stderr` for the commands that start a command (-c). Spread
 * into .option().
 */
export const commandOutputOption = [
  '--command-output <where>',
  "where the -c command's stdout goes: inherit (upscope's stdout), stderr, or a FILE (created or truncated); by default upscope's stdout, except when upscope writes a machine-readable format (--json) to a stdout that is not a terminal (a pipe, a file): then upscope's stderr, so that every line a reader gets is upscope's",
] as const;

/** Whether upscope writes a format other than text (--json, --format FMT). */
export function machineReadable(options: { json?: true; format?: string }): boolean {
  return options.json === true || (options.format !== undefined && options.format !== 'text');
}

/** Where a -c command's stdout goes: a file descriptor to give it, and how to let go of it. */
export interface CommandStdout {
  /** undefined: upscope's own stdout. */
  readonly fd: number | undefined;
  close(): void;
}

/**
 * The -c command's stdout for `--command-output` (see commandOutputOption), given whether
 * upscope writes a machine-readable format and whether that goes to its stdout (no -o).
 */
export function commandStdout(
  where: string | undefined,
  machineReadable: boolean,
  toStdout: boolean,
): CommandStdout {
  const none = { fd: undefined, close: () => {} };
  if (where === 'inherit') return none;
  if (where === 'stderr') return { fd: 2, close: () => {} };
  if (where === undefined) {
    return machineReadable && toStdout && !isatty(1) ? { fd: 2, close: () => {} } : none;
  }
  let fd: number;
  try {
    fd = openSync(where, 'w', 0o666);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
    throw new ProbeError(
      'ERR_OUTPUT_FILE',
      `Cannot open the command's output file "${where}": ${(err as Error).message.replace(/^[A-Z]+: /, '')}`,
      {
        hints: ['Give --command-output a file you can write, inherit or stderr'],
        details: { code },
      },
    );
  }
  let open = true;
  return {
    fd,
    close: () => {
      if (open) closeSync(fd);
      open = false;
    },
  };
}

/**
 * Say events lost as they happen, once a second at most, not only in the summary: `say()` is
 * called by the timer and once more at the end (`stop()` ends the timer). `advice` says what
 * loses fewer.
 */
export function lossReporter(
  stats: () => { readonly lost: number },
  io: { err(text: string): void },
  advice: string,
): { say(): void; stop(): void } {
  let said = 0;
  const say = () => {
    let lost: number;
    try {
      lost = stats().lost;
    } catch {
      return; // closed meanwhile
    }
    if (lost <= said) return;
    io.err(
      `upscope: ${lost - said} events lost: the ring buffer filled faster than it was read (${advice})\n`,
    );
    said = lost;
  };
  const timer = setInterval(say, 1000);
  return { say, stop: () => clearInterval(timer) };
}
