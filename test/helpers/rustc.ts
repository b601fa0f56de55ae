import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { TEST_CACHE } from './cache-dir.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;
const CACHE = TEST_CACHE;

/** rustc on PATH or in ~/.cargo/bin (where rustup puts it), else undefined. */
export function findRustc(): string | undefined {
  for (const dir of [...(process.env['PATH'] ?? '').split(':'), join(homedir(), '.cargo/bin')]) {
    if (dir !== '' && existsSync(join(dir, 'rustc'))) return join(dir, 'rustc');
  }
  return undefined;
}

/**
 * Compile test/programs/NAME.rs with rustc (with -g and these flags), cached by source and
 * flags in the temp dir as compileProgram() does for C.
 */
export function compileRust(rustc: string, name: string, flags: readonly string[] = []): string {
  const source = join(PROGRAMS, `${name}.rs`);
  const key = createHash('sha256')
    .update(readFileSync(source))
    .update(JSON.stringify(flags))
    .digest('hex')
    .slice(0, 16);
  mkdirSync(CACHE, { recursive: true });
  const out = join(CACHE, `${name}-${key}`);
  if (existsSync(out)) return out;
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync(rustc, ['-g', ...flags, '-o', tmp, source], { stdio: 'pipe' });
  renameSync(tmp, out);
  return out;
}
