/**
 * What removing tracefs probes costs. tracefs enables and disables uprobe events one by one,
 * and the kernel waits out a grace period for each one it disables (the unregistering of its
 * uprobe, under tracefs's event lock: one at a time): about 50 ms on a 2-CPU machine
 * (1,264 probes took 61 s to remove), so 100 probes take 5 s and 50,000 about 40 minutes.
 */
const REMOVAL_MS_PER_PROBE = 50;

/** From how many probes their removal (2 s and more) is said as it starts. */
export const SAY_REMOVAL_FROM = 40;

/** What removing `probes` enabled tracefs probes takes, about: `5 s`, `40 minutes`. */
export function removalTime(probes: number): string {
  const seconds = Math.round((probes * REMOVAL_MS_PER_PROBE) / 1000);
  return seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} minutes`;
}
