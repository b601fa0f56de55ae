import { constants } from 'node:os';
import { loadNative, PRCTL } from '../../native/index.js';

/**
 * Make these signals end a blocking poll(): their handlers (install them first, with
 * process.on) no longer restart an interrupted waitpid, so the wait returns and the event loop
 * can run them. A signal sent to the process goes to its main thread first, where a tracer
 * polling there is waiting. One that comes after the event loop's last turn but before poll()
 * blocks interrupts nothing: bound the wait too (`upscope trace` has a SIGALRM come every
 * second while it polls, alarmEvery(1), and SIGALRM is one of its signals: one that came
 * before a wait began is followed by the next).
 */
export function interruptWaitsOn(signals: readonly NodeJS.Signals[]): void {
  const native = loadNative();
  for (const name of signals) native.interruptOnSignal(constants.signals[name]);
}

/**
 * SIGALRM to this process every `seconds` from now on (0 stops them; replaces alarmIn()'s). A
 * one-shot alarm set before a wait is lost when it comes before the wait blocks (a loaded
 * machine can keep this process off the CPU for that long): the wait then lasts until the
 * tracee's next stop. A repeating one is not.
 */
export function alarmEvery(seconds: number): void {
  loadNative().alarmEvery(seconds);
}

/** SIGALRM to this process in `seconds` (whole seconds, rounded up; 0 cancels). */
export function alarmIn(seconds: number): void {
  loadNative().alarm(Math.ceil(seconds));
}

/**
 * Have the kernel send this process `signal` when its parent dies (PR_SET_PDEATHSIG), even
 * by SIGKILL. Returns false when the parent is not `parentPid` any more (it died before the
 * call: the signal will never come) or the call failed. The setting is the calling thread's
 * parent's: call it from the main thread of a process the parent spawned from its main thread.
 */
export function signalOnParentDeath(signal: NodeJS.Signals, parentPid: number): boolean {
  const status = loadNative().prctl(PRCTL.PR_SET_PDEATHSIG, constants.signals[signal]);
  return status >= 0 && process.ppid === parentPid;
}
