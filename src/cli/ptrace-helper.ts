/**
 * The ptrace engine's runs happen in a helper process, so that the death of the upscope
 * process, even by SIGKILL, never leaves breakpoints in a live process: the helper is the
 * tracer, and the kernel sends it SIGTERM when upscope dies (PR_SET_PDEATHSIG), on which it
 * restores and detaches the process (-p) or kills the command (-c), as on Ctrl-C.
 *
 * The helper is upscope itself, started again with the same command line and the same stdin,
 * stdout and stderr (so output, -o FILE, messages and the exit status are the helper's, as
 * they would have been upscope's), marked by an environment variable that holds the pid of
 * the upscope process that started it. That process only waits for it, passes on SIGINT,
 * SIGTERM and SIGHUP, and exits with its status.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { signalOnParentDeath } from '../api/index.js';
import { ProbeError } from '../errors/index.js';

/** Marks the helper process: the pid of the upscope process that started it. */
const HELPER_VARIABLE = 'UPSCOPE_PTRACE_HELPER';

/** The signals that end a run (and that upscope passes on to its helper). */
const ENDING: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/** In the helper: the first ending signal it got, whenever it came. */
let received: NodeJS.Signals | undefined;
let isHelper = false;
/** In upscope: how to start the helper (undefined: runs stay in this process). */
let launch: { readonly file: string; readonly args: readonly string[] } | undefined;

/**
 * Called by main() first. In the helper: ask for SIGTERM at upscope's death and check that
 * upscope is still alive (if not, behave as if that SIGTERM had come), and keep every ending
 * signal from killing the process: a run ends on it and detaches (a terminal's Ctrl-C reaches
 * the helper twice, from the terminal and from upscope: once is enough, and one that comes
 * while it detaches must not cut that short). In upscope: ptrace runs go to a helper when
 * `argv` is this process's own command line (not main() called by a program with its own).
 */
export function setUpPtraceHelper(argv: readonly string[], ownIo: boolean): void {
  const parent = process.env[HELPER_VARIABLE];
  if (parent !== undefined) {
    // The command a -c run starts must not take itself for a helper.
    delete process.env[HELPER_VARIABLE];
    isHelper = true;
    for (const name of ENDING) {
      process.on(name, () => {
        received ??= name;
      });
    }
    try {
      if (!signalOnParentDeath('SIGTERM', Number(parent))) received ??= 'SIGTERM';
    } catch {
      // No native binding: the run fails on that, and says so, before it attaches anything.
    }
    return;
  }
  const script = process.argv[1];
  const own = process.argv.slice(2);
  if (
    ownIo &&
    script !== undefined &&
    own.length === argv.length &&
    own.every((arg, i) => arg === argv[i])
  ) {
    launch = { file: process.execPath, args: [...process.execArgv, script, ...own] };
  }
}

/** In the helper: the ending signal that came before the run began watching for one. */
export function helperSignal(): NodeJS.Signals | undefined {
  return received;
}

/** Whether this process should hand its ptrace run to a helper (and is not one). */
export function ptraceInHelper(): boolean {
  return !isHelper && launch !== undefined;
}

/** Whether this process is the helper (the engine is chosen: ptrace). */
export function inPtraceHelper(): boolean {
  return isHelper;
}

/**
 * Run this command line again in a helper process and return its exit status. An ending
 * signal that reaches upscope goes on to the helper (which ends its run as upscope would
 * have); a helper killed by any other signal is reported.
 */
export async function runInHelper(): Promise<number> {
  const { file, args } = launch!;
  const child = spawn(file, args, {
    stdio: 'inherit',
    env: { ...process.env, [HELPER_VARIABLE]: String(process.pid) },
  });
  const pass = (name: NodeJS.Signals) => {
    child.kill(name);
  };
  for (const name of ENDING) process.on(name, pass);
  try {
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
    if (signal === null) return code ?? 0;
    throw new ProbeError(
      'ERR_HELPER_FAILED',
      `Cannot finish the ptrace run: its helper process ${child.pid} was killed by ${signal}`,
      {
        hints: ['The traced process may be left with breakpoints in it: restart it'],
      },
    );
  } catch (err) {
    // spawn() failed (no such node binary any more): say so.
    if (err instanceof ProbeError) throw err;
    throw new ProbeError(
      'ERR_HELPER_FAILED',
      `Cannot start the ptrace helper process: ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    for (const name of ENDING) process.off(name, pass);
  }
}
