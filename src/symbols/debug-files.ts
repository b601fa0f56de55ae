import { dirname, join } from 'node:path';

/**
 * Where separate debug info for a file would be looked for, in the order gdb and perf use:
 * by build-id under /usr/lib/debug/.build-id, then by .gnu_debuglink name next to the file,
 * in its .debug folder, and under /usr/lib/debug. Pure: computes paths, checks nothing.
 */
export function debugFileCandidates(
  path: string,
  buildId: string | undefined,
  debugLink: string | undefined,
): string[] {
  const candidates: string[] = [];
  if (buildId !== undefined && buildId.length > 2) {
    candidates.push(`/usr/lib/debug/.build-id/${buildId.slice(0, 2)}/${buildId.slice(2)}.debug`);
  }
  if (debugLink !== undefined) {
    const dir = dirname(path);
    candidates.push(join(dir, debugLink), join(dir, '.debug', debugLink));
    candidates.push(join('/usr/lib/debug', dir, debugLink));
  }
  return candidates;
}
