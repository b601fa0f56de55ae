import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { TEST_CACHE } from './cache-dir.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

/**
 * Build test/programs/NAME.go with the machine's `go` (Debian's golang-go) as a module of its
 * own (`go 1.19`, no dependencies, no network), cached by source and flags in TEST_CACHE, as
 * compileProgram() does for C; Go's own caches live there too.
 */
export function compileGo(name: string, flags: readonly string[] = []): string {
  const source = join(PROGRAMS, `${name}.go`);
  const key = createHash('sha256')
    .update(readFileSync(source))
    .update(JSON.stringify(flags))
    .digest('hex')
    .slice(0, 16);
  mkdirSync(TEST_CACHE, { recursive: true });
  const out = join(TEST_CACHE, `${name}-go-${key}`);
  if (existsSync(out)) return out;
  const dir = mkdtempSync(join(TEST_CACHE, `${name}-go-build-`));
  try {
    copyFileSync(source, join(dir, 'main.go'));
    writeFileSync(join(dir, 'go.mod'), `module ${name.replace(/[^a-z0-9]/gi, '')}\n\ngo 1.19\n`);
    const tmp = `${out}.${process.pid}.tmp`;
    execFileSync('go', ['build', ...flags, '-o', tmp, '.'], {
      cwd: dir,
      stdio: 'pipe',
      env: {
        ...process.env,
        GOFLAGS: '-mod=mod',
        GOPROXY: 'off',
        GOTOOLCHAIN: 'local',
        GOCACHE: join(TEST_CACHE, 'go-cache'),
        GOPATH: join(TEST_CACHE, 'go-path'),
      },
    });
    renameSync(tmp, out);
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
