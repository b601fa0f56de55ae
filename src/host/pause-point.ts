import { writeSync } from 'node:fs';

/**
 * The phases of a run, in order, at which a fault test can stop upscope to kill it there:
 * resolving (specs are being read, nothing defined yet), attaching (some probes are placed,
 * not all), tracing (probes live, events flowing), detaching (some probes removed, not all).
 */
export const PHASES = ['resolving', 'attaching', 'tracing', 'detaching'] as const;
export type Phase = (typeof PHASES)[number];

/** The environment variable that names the phase to stop at. */
export const PAUSE_VARIABLE = 'UPSCOPE_PAUSE_AT';

const paused = new Set<Phase>();
/** The variable's value, read once: the ptrace engine passes here on every hit. */
let wanted: string | undefined;

/**
 * A fault-injection point. When UPSCOPE_PAUSE_AT names this phase, the process says so on
 * stderr (`upscope: paused at attaching (pid N)`) and stops itself with SIGSTOP, the first
 * time only; a SIGCONT lets it go on. Tests use it to SIGKILL upscope (or the process that
 * started it) at a known point of a run and then check that the target was not harmed and
 * that the next run is clean. Without the variable it costs one comparison.
 */
export function pausePoint(phase: Phase): void {
  wanted ??= process.env[PAUSE_VARIABLE] ?? '';
  if (wanted !== phase || paused.has(phase)) return;
  paused.add(phase);
  try {
    writeSync(2, `upscope: paused at ${phase} (pid ${process.pid})\n`);
  } catch {
    // stderr closed: the test looks at the process's state too
  }
  process.kill(process.pid, 'SIGSTOP');
}
