import { homedir } from 'node:os';
import { join } from 'node:path';

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
