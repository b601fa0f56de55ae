/**
 * Which processes a run covers, decided once for every engine: a process given with -p (and
 * with `children`, the processes it has already forked), or a command started with -c, each
 * with the children forked while the run lasts; or every process but upscope's own.
 */
import { descendantsOf } from '../host/index.js';

/** What the caller asked for. */
export interface CoverageOptions {
  /** Only this process and the children it forks during the run. */
  readonly pid?: number | undefined;
  /** With `pid`: also the processes descended from it when the run starts (a server's workers). */
  readonly children?: boolean | undefined;
  /**
   * Without `pid` or a command: also count upscope's own processes (this process: the CLI or
   * the program using the library, all its threads), which are left out by default.
   */
  readonly includeSelf?: boolean | undefined;
}

/** The processes a run covers. */
export interface Coverage {
  /**
   * Processes followed from the start, each with the children it forks (undefined: every
   * process, or with `startAtExecOf` only that command).
   */
  readonly pids: readonly number[] | undefined;
  /** A command started stopped before its exec: followed from its exec on, with its children. */
  readonly startAtExecOf: number | undefined;
  /** Processes left out of a run over every process: upscope's own. */
  readonly exclude: readonly number[];
  /** What the user should know: children the run does not cover. */
  readonly notes: readonly string[];
}

/** The processes a run covers; `command` is the pid of the command started stopped (-c). */
export function coverage(options: CoverageOptions, command: number | undefined): Coverage {
  if (command !== undefined) {
    return { pids: undefined, startAtExecOf: command, exclude: [], notes: [] };
  }
  const pid = options.pid;
  if (pid === undefined) {
    return {
      pids: undefined,
      startAtExecOf: undefined,
      exclude: options.includeSelf === true ? [] : ownProcesses(),
      notes: [],
    };
  }
  const descendants = descendantsOf(pid);
  if (options.children === true) {
    return { pids: [pid, ...descendants], startAtExecOf: undefined, exclude: [], notes: [] };
  }
  return {
    pids: [pid],
    startAtExecOf: undefined,
    exclude: [],
    notes: descendants.length === 0 ? [] : [uncoveredNote(pid, descendants)],
  };
}

/**
 * upscope's own processes: this one (the CLI or the program using the library, with its
 * worker threads) and the processes it has started (a helper).
 */
function ownProcesses(): number[] {
  return [process.pid, ...descendantsOf(process.pid)];
}

/** The line saying which existing descendants of `pid` a run leaves out. */
export function uncoveredNote(pid: number, descendants: readonly number[]): string {
  const shown = descendants.slice(0, 8).join(', ');
  const more = descendants.length > 8 ? `, ... (${descendants.length} in all)` : '';
  const n = descendants.length;
  return `process ${pid} has ${n} child process${n === 1 ? '' : 'es'} started before this run (${shown}${more}), not covered: add --children to take ${n === 1 ? 'it' : 'them'} too`;
}
