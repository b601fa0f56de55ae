import { dirname, join } from 'node:path';

/** The debug-file directory every distribution installs into (gdb's debug-file-directory). */
export const DEFAULT_DEBUG_DIR = '/usr/lib/debug';

/** A place separate debug info may be, and what finds it there. */
export interface DebugFileCandidate {
  readonly path: string;
  readonly how: 'build-id' | 'debuglink';
}

/**
 * Where separate debug info for a file would be looked for, in the order gdb and perf use:
 * by build-id under DIR/.build-id for each debug directory, then by .gnu_debuglink name next to
 * the file, in its .debug folder, and under each DIR. `debugDirs` come before /usr/lib/debug.
 * Pure: computes paths, checks nothing.
 */
export function debugFileLocations(
  path: string,
  buildId: string | undefined,
  debugLink: string | undefined,
  debugDirs: readonly string[] = [],
): DebugFileCandidate[] {
  const dirs = [...new Set([...debugDirs, DEFAULT_DEBUG_DIR])];
  const candidates: DebugFileCandidate[] = [];
  if (buildId !== undefined && buildId.length > 2) {
    for (const dir of dirs) {
      candidates.push({
        path: join(dir, '.build-id', buildId.slice(0, 2), `${buildId.slice(2)}.debug`),
        how: 'build-id',
      });
    }
  }
  if (debugLink !== undefined) {
    const dir = dirname(path);
    candidates.push({ path: join(dir, debugLink), how: 'debuglink' });
    candidates.push({ path: join(dir, '.debug', debugLink), how: 'debuglink' });
    for (const debugDir of dirs) {
      candidates.push({ path: join(debugDir, dir, debugLink), how: 'debuglink' });
    }
  }
  return candidates;
}

/** debugFileLocations() as paths only. */
export function debugFileCandidates(
  path: string,
  buildId: string | undefined,
  debugLink: string | undefined,
  debugDirs: readonly string[] = [],
): string[] {
  return debugFileLocations(path, buildId, debugLink, debugDirs).map((c) => c.path);
}
