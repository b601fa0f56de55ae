import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after } from 'node:test';
import { procState } from '../../src/host/index.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

/**
 * Every process this test file starts (upscope, its helpers, the targets, theirs) carries this
 * in its environment, inherited: a test that looks for what was left behind among all the
 * machine's processes finds its own file's alone (see ofThisFile()), whatever files run beside.
 */
const OWNER = 'UPSCOPE_TEST_FILE';
process.env[OWNER] = String(process.pid);

/** Whether process `pid` was started by this test file (or by what it started). */
export function ofThisFile(pid: number): boolean {
  let environ: string | undefined;
  try {
    environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
  } catch {
    // ESRCH: a zombie, whose environment is gone (or gone itself): see its parent.
  }
  if (environ !== undefined) return environ.split('\0').includes(`${OWNER}=${process.pid}`);
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return parent > 1 && parent !== pid && ofThisFile(parent);
  } catch {
    return false; // gone
  }
}

/** A spawned process with its output collected as it comes. */
export interface Spawned {
  readonly child: ChildProcess;
  readonly pid: number;
  stdout: string;
  stderr: string;
  /** Exit code and signal, once every one of its output pipes is closed. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Every process spawned here that has not ended yet. */
const unended = new Set<ChildProcess>();

// A test that fails or times out midway leaves what it started running (upscope paused at a
// hook, a target it was tracing): killed once the file's tests are done, with their pipes
// closed (a grandchild may hold them), else the file's process would wait for them forever.
after(() => {
  for (const child of unended) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    child.stdin?.destroy();
    child.stdout?.destroy();
    child.stderr?.destroy();
  }
  unended.clear();
});

/**
 * Start a program with its output collected (NO_COLOR set, `env` added), and stdin closed, or
 * with `stdin: 'pipe'` a pipe the test writes to (child.stdin).
 */
export function spawnCollected(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
  stdin: 'ignore' | 'pipe' = 'ignore',
): Spawned {
  const child = spawn(command, args, {
    stdio: [stdin, 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1', ...env },
  });
  unended.add(child);
  const spawned: Spawned = {
    child,
    pid: child.pid!,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) =>
      child.once('close', (code, signal) => {
        unended.delete(child);
        resolve({ code, signal });
      }),
    ),
  };
  child.stdout!.on('data', (chunk: Buffer) => {
    spawned.stdout += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    spawned.stderr += chunk.toString();
  });
  return spawned;
}

/** The built CLI (bin/upscope.js) with these arguments, its output collected. */
export function spawnUpscope(args: readonly string[], env: NodeJS.ProcessEnv = {}): Spawned {
  return spawnCollected(process.execPath, [BIN, ...args], env);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Wait until `pattern` shows in the process's stdout or stderr (fail if it ends first, or after `ms`). */
export async function waitFor(
  running: Spawned,
  pattern: RegExp,
  stream: 'stdout' | 'stderr' = 'stderr',
  ms = 30_000,
): Promise<RegExpExecArray> {
  const deadline = Date.now() + ms;
  for (;;) {
    const match = pattern.exec(running[stream]);
    if (match !== null) return match;
    const gone = running.child.exitCode !== null || running.child.signalCode !== null;
    if (gone || Date.now() > deadline) {
      // A process that has exited may still have output in its pipes (a program prints its
      // last line and exits at once): read them to their end ('close') before giving up.
      if (gone && (await closedBy(running, deadline))) {
        const last = pattern.exec(running[stream]);
        if (last !== null) return last;
      }
      throw new Error(
        `no ${pattern} in ${stream}:\n${running[stream]}\n(stderr: ${running.stderr})`,
      );
    }
    await sleep(10);
  }
}

/** Whether the process's pipes closed (all its output read) before `deadline`. */
async function closedBy(running: Spawned, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([running.exited.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Wait for upscope (or its helper) to stop at a fault test's pause point (`upscope: paused at
 * PHASE (pid N)`, then its SIGSTOP): its pid, once it is stopped. The line comes before the
 * stop, so a SIGCONT sent on the line alone may come first and be lost, leaving it stopped.
 */
export async function pausedAt(running: Spawned, phase: string, ms = 30_000): Promise<number> {
  const pid = Number(
    (
      await waitFor(
        running,
        new RegExp(`^upscope: paused at ${phase} \\(pid (\\d+)\\)$`, 'm'),
        'stderr',
        ms,
      )
    )[1],
  );
  const deadline = Date.now() + ms;
  while (procState(pid) !== 'T') {
    if (Date.now() > deadline) throw new Error(`process ${pid} did not stop at ${phase}`);
    await sleep(5);
  }
  return pid;
}

/** Wait for the process to end; SIGKILL it (and fail on its status) after `ms`. */
export async function ended(running: Spawned, ms = 30_000) {
  const timer = setTimeout(() => running.child.kill('SIGKILL'), ms);
  try {
    return await running.exited;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Wait for the process to end by itself; if it has not after `ms`, run `unblock` (end what it
 * waits on) and wait on. `waited`: it had to be unblocked.
 */
export async function endedUnaided(running: Spawned, unblock: () => void, ms = 30_000) {
  let waited = false;
  const timer = setTimeout(() => {
    waited = true;
    unblock();
  }, ms);
  try {
    const exit = await ended(running, 2 * ms);
    return { exit, waited };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `upscope COMMAND -p PID --engine ENGINE --return-probes trampoline --duration SECONDS ...rest`,
 * once its probes are live (its start line written).
 */
export async function trampolineRun(
  command: 'record' | 'latency',
  pid: number,
  engine: 'bpf' | 'tracefs',
  seconds: number,
  rest: readonly string[],
): Promise<Spawned> {
  const run = spawnUpscope([
    command,
    '-p',
    String(pid),
    '--engine',
    engine,
    '--return-probes',
    'trampoline',
    '--duration',
    String(seconds),
    ...rest,
  ]);
  await waitFor(run, command === 'record' ? /^Recording /m : /^Timing /m);
  return run;
}
