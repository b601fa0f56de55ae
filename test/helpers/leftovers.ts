import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';

export const TRACEFS = '/sys/kernel/tracing';

/**
 * upscope's event groups and instances in tracefs; by default only those whose owner process
 * is gone (a leak), since another upscope may be tracing on this machine at the same time.
 */
export function leftovers(includeLive = false): string[] {
  if (!existsSync(`${TRACEFS}/uprobe_events`)) return [];
  const owner = (name: string) => Number(/upscope_(\d+)/.exec(name)?.[1]);
  const counts = (name: string) => includeLive || !existsSync(`/proc/${owner(name)}`);
  const events = readFileSync(`${TRACEFS}/uprobe_events`, 'utf8')
    .split('\n')
    .filter((line) => /^[pr]:upscope_\d+\//.test(line) && counts(line));
  const instances = readdirSync(`${TRACEFS}/instances`).filter(
    (name) => /^upscope_\d+/.test(name) && counts(name),
  );
  return [...events, ...instances];
}

/** This process's own upscope group and instances (a library user's leak shows here). */
export function ownLeftovers(): string[] {
  return leftovers(true).filter((name) => name.includes(`upscope_${process.pid}`));
}

/** The BPF and perf objects this process holds (a library user's leak shows here). */
export function ownBpfFds(): string[] {
  const found: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const link = readlinkSync(`/proc/self/fd/${fd}`);
      if (/bpf|perf_event/.test(link)) found.push(`${fd} ${link}`);
    } catch {
      // closed meanwhile (the readdir's own fd)
    }
  }
  return found;
}
