import { accessSync, constants } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ProbeError, quote } from '../../errors/index.js';

/**
 * What keeps this user from reading `path`: the first directory above it it may not search,
 * else the file itself (it may not read it).
 */
function whatIsMissing(path: string): string {
  const absolute = resolve(path);
  const dirs: string[] = [];
  for (let dir = dirname(absolute); ; dir = dirname(dir)) {
    dirs.unshift(dir);
    if (dir === dirname(dir)) break;
  }
  for (const dir of dirs) {
    try {
      accessSync(dir, constants.X_OK);
    } catch {
      return `may not search directory ${quote(dir)}`;
    }
  }
  return 'may not read the file';
}

/**
 * The error for a file this user is not allowed to read (EACCES or EPERM): ERR_FILE_ACCESS,
 * saying what is missing (search permission on a directory above it, or read permission on
 * the file) and what would work (its owner or root, or a readable copy).
 * `action` is what failed: `read target "./app"`.
 */
export function fileAccessError(action: string, path: string, cause?: unknown): ProbeError {
  const uid = process.getuid?.();
  const who = uid === undefined ? 'this user' : `uid ${uid}`;
  return new ProbeError(
    'ERR_FILE_ACCESS',
    `Cannot ${action}: permission denied: ${who} ${whatIsMissing(path)}`,
    {
      hints: [
        `Run as a user who may read ${quote(path)}: its owner, or root (CAP_DAC_READ_SEARCH reads any file)`,
        'Or give a copy you may read: list and resolve read a copy the same, and a probe on a copy fires only where the copy runs (e.g. -c ./copy)',
      ],
      details: { path },
      cause,
    },
  );
}
