import { existsSync, readdirSync } from 'node:fs';
import { grouped } from '../../internal/index.js';
import { groupOwnerPid, instanceOwnerPid, parseUprobeEvents } from './names.js';
import { removalTime, SAY_REMOVAL_FROM } from './removal.js';
import { errnoOf, readControl, removeEvent, removeInstanceDir } from './tracefs-session.js';

export interface CleanOptions {
  /**
   * Whether the owner of a group is still running; by default, whether /proc/PID exists.
   * Tests and callers in another pid namespace can pass their own.
   */
  readonly isAlive?: (pid: number) => boolean;
  /**
   * Told, before an instance is removed, of the probes it has enabled when there are enough
   * for it to take seconds (tracefs disables them one at a time: see removalTime).
   */
  readonly notice?: ((text: string) => void) | undefined;
}

export interface CleanResult {
  /** Event groups all of whose events were removed (`upscope_1234`). */
  readonly removedGroups: string[];
  /** Instances removed (`upscope_1234`, `upscope_1234_2`). */
  readonly removedInstances: string[];
  /** What could not be removed and why (`upscope_1234/malloc: EBUSY`); usually empty. */
  readonly failures: string[];
}

/**
 * Whether a process with this pid exists (in this process's pid namespace).
 *
 * Only existence counts, not the process's name: upscope runs as `node`, under tsx, as a
 * renamed node or a bundled binary, so its comm proves nothing, and removing a live
 * session's events would break a trace that is running. When a dead owner's pid has been
 * reused, its group is kept until that process ends too; a stale group only costs probe hits.
 */
export function processExists(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

/**
 * Remove every upscope event group (`upscope_<pid>`) and instance (`upscope_<pid>` or
 * `upscope_<pid>_<n>`) whose owner process is gone: left by an upscope killed with SIGKILL.
 * Instances go first (they may have the events enabled), then the events. Any other group
 * or instance, another tool's or a test's (`upscope_test_1`), is never touched. Never throws
 * for something already gone; what cannot be removed is listed in `failures`.
 *
 * Owners are looked up in this process's pid namespace: a session of an upscope running in
 * another pid namespace on the same kernel looks dead from here.
 */
export function cleanStaleGroups(tracefs: string, options: CleanOptions = {}): CleanResult {
  const isAlive = options.isAlive ?? processExists;
  const result: CleanResult = { removedGroups: [], removedInstances: [], failures: [] };
  const reason = (err: unknown) => errnoOf(err) ?? (err as Error).message;

  let instances: string[] = [];
  try {
    instances = readdirSync(`${tracefs}/instances`);
  } catch (err) {
    if (errnoOf(err) !== 'ENOENT') result.failures.push(`${tracefs}/instances: ${reason(err)}`);
  }
  for (const name of instances.sort()) {
    const owner = instanceOwnerPid(name);
    if (owner === undefined || isAlive(owner)) continue;
    const enabled = enabledEvents(`${tracefs}/instances/${name}`);
    if (enabled >= SAY_REMOVAL_FROM) {
      options.notice?.(
        `removing ${grouped(enabled)} probes an upscope killed before its end (pid ${owner}) left enabled: tracefs removes them one at a time, about ${removalTime(enabled)}`,
      );
    }
    try {
      if (removeInstanceDir(`${tracefs}/instances/${name}`)) result.removedInstances.push(name);
    } catch (err) {
      result.failures.push(`instance ${name}: ${reason(err)}`);
    }
  }

  const listed = parseUprobeEvents(readControl(`${tracefs}/uprobe_events`) ?? '');
  const stale = new Map<string, string[]>();
  for (const { group, event } of listed) {
    const owner = groupOwnerPid(group);
    if (owner === undefined || isAlive(owner)) continue;
    const events = stale.get(group);
    if (events === undefined) stale.set(group, [event]);
    else events.push(event);
  }
  for (const [group, events] of stale) {
    let all = true;
    for (const event of events) {
      try {
        removeEvent(tracefs, group, event);
      } catch (err) {
        all = false;
        result.failures.push(`${group}/${event}: ${reason(err)}`);
      }
    }
    if (all) result.removedGroups.push(group);
  }
  return result;
}

/** How many events an instance has enabled (the lines of its set_event; 0 when unreadable). */
function enabledEvents(instanceDir: string): number {
  let text: string;
  try {
    text = readControl(`${instanceDir}/set_event`) ?? '';
  } catch {
    return 0; // removed as it would be, unannounced
  }
  let count = 0;
  for (const line of text.split('\n')) if (line !== '') count++;
  return count;
}
