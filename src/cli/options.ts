import { InvalidArgumentError } from '@commander-js/extra-typings';
import { ProbeError, type SkippedSite, skipSummary, splitDev } from '../api/index.js';

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
 * The line a command starts with (`Tracing 3 probes (tracefs). Ctrl-C to end.`), ended by the
 * count of sites patterns skipped, if any, and a newline.
 */
export function startLine(
  line: string,
  skipped: readonly SkippedSite[],
  probedSites: number,
  engine: 'tracefs' | 'bpf' | 'ptrace',
): string {
  const summary = skipSummary(skipped, probedSites, engine);
  return `${line}${summary === undefined ? '' : ` ${summary}`}\n`;
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
