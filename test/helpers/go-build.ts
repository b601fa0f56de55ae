import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { TEST_CACHE } from './cache-dir.js';
import { processCopy } from './compile.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

/**
 * Build the Go program in test/programs/NAME/ (a main package with a go.mod of `go 1.19`)
 * with the machine's go, offline (GOFLAGS=-mod=mod, GOCACHE and GOPATH in the test cache),
 * cached by the sources' contents as compileProgram() does for C; this test process's own
 * copy (processCopy()).
 */
export function compileGo(name: string): string {
  const dir = join(PROGRAMS, name);
  const hash = createHash('sha256');
  for (const file of readdirSync(dir).sort())
    hash.update(file).update(readFileSync(join(dir, file)));
  const key = hash.digest('hex').slice(0, 16);
  mkdirSync(TEST_CACHE, { recursive: true });
  const out = join(TEST_CACHE, `${name}-${key}`);
  if (existsSync(out)) return processCopy(out);
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync('go', ['build', '-o', tmp, '.'], {
    cwd: dir,
    stdio: 'pipe',
    env: {
      ...process.env,
      GOFLAGS: '-mod=mod',
      GOCACHE: join(TEST_CACHE, 'go-build-cache'),
      GOPATH: join(TEST_CACHE, 'go-path'),
      GOPROXY: 'off',
      GOTOOLCHAIN: 'local',
    },
  });
  renameSync(tmp, out);
  return processCopy(out);
}
