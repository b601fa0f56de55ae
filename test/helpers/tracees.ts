import { readdirSync, readFileSync } from 'node:fs';

/**
 * Processes this test process left behind: any it still traces (TracerPid), and children of
 * it that ended and were never reaped (zombies). Each as "pid state comm".
 */
export function tracedChildren(): string[] {
  const found: string[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let status: string;
    try {
      status = readFileSync(`/proc/${name}/status`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const field = (key: string) => new RegExp(`^${key}:\\s+(.*)$`, 'm').exec(status)?.[1] ?? '';
    const traced = Number(field('TracerPid')) === process.pid;
    const zombie = field('State').startsWith('Z') && Number(field('PPid')) === process.pid;
    if (traced || zombie) found.push(`${name} ${field('State')} ${field('Name')}`);
  }
  return found;
}
