import { readdirSync, readFileSync } from 'node:fs';

/**
 * What a test that traced `pids` left behind: any process this one still traces (TracerPid),
 * and any of `pids` that ended without being reaped (a zombie). Each as "pid state comm".
 * Other zombies of this process are not counted: tsx's esbuild service comes and goes.
 */
export function tracedChildren(pids: readonly number[] = []): string[] {
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
    const zombie = field('State').startsWith('Z') && pids.includes(Number(name));
    if (traced || zombie) found.push(`${name} ${field('State')} ${field('Name')}`);
  }
  return found;
}
