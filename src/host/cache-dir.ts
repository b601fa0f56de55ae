import { mkdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/**
 * Where upscope keeps what it can make again but would rather not (plans of whole programs,
 * what it found in the kernel's types): $UPSCOPE_CACHE_DIR (empty: nowhere, undefined), else
 * $XDG_CACHE_HOME/upscope, else ~/.cache/upscope.
 */
export function upscopeCacheDir(): string | undefined {
  const own = process.env.UPSCOPE_CACHE_DIR;
  if (own !== undefined) return own === '' ? undefined : own;
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'upscope');
}

/**
 * Makes the directory `path` and those above it that are missing, as `mkdir -p` does;
 * returns whether it made `path`. Not mkdirSync()'s `recursive`, which in Node.js 20 loops
 * for ever where a directory takes no new entries though its parent exists (/proc/x: ENOENT
 * each time): here a second ENOENT is thrown. Throws the system's error (EEXIST for a file).
 */
export function makeDirectory(path: string): boolean {
  const first = makeOne(path);
  if (typeof first === 'boolean') return first;
  const parent = dirname(path);
  if (parent === path) throw first;
  makeDirectory(parent);
  const again = makeOne(path);
  if (typeof again === 'boolean') return again;
  throw again;
}

/** mkdir(path): true if made, false if a directory is there, the error if a parent is missing. */
function makeOne(path: string): boolean | Error {
  try {
    mkdirSync(path);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' && statSync(path).isDirectory()) return false;
    if (code === 'ENOENT') return err as Error;
    throw err;
  }
}
