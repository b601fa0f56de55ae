import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { TEST_CACHE } from './cache-dir.js';
import { processCopy } from './compile.js';
import { runCli } from './run-cli.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

/** The go command: on PATH, or where Debian's golang-go puts it. */
export function findGo(): string | undefined {
  for (const dir of [...(process.env['PATH'] ?? '').split(':'), '/usr/lib/go/bin']) {
    if (dir !== '' && existsSync(join(dir, 'go'))) return join(dir, 'go');
  }
  return undefined;
}

export interface GoBuildOptions {
  /** Build with cgo (the program's C preamble compiled by gcc); off by default. */
  readonly cgo?: boolean;
  /** Flags for the linker (`-s -w`: no symbol table, no DWARF, as release builds are). */
  readonly ldflags?: string;
}

/**
 * Build test/programs/NAME.go as a module of its own (`go 1.19`, no dependencies, nothing
 * fetched: GOPROXY=off), with its build cache and module path inside TEST_CACHE; the result
 * is cached by source and options as compileProgram() does for C. What it returns is this
 * test process's own copy (processCopy()).
 */
export function compileGo(go: string, name: string, options: GoBuildOptions = {}): string {
  const source = join(PROGRAMS, `${name}.go`);
  const key = createHash('sha256')
    .update(readFileSync(source))
    .update(JSON.stringify(options))
    .digest('hex')
    .slice(0, 16);
  mkdirSync(TEST_CACHE, { recursive: true });
  const out = join(TEST_CACHE, `${name}-${key}`);
  if (existsSync(out)) return processCopy(out);
  const dir = join(TEST_CACHE, `go-src-${name}-${key}`);
  mkdirSync(dir, { recursive: true });
  copyFileSync(source, join(dir, 'main.go'));
  writeFileSync(join(dir, 'go.mod'), `module upscope.test/${name}\n\ngo 1.19\n`);
  const tmp = `${out}.${process.pid}.tmp`;
  const ldflags = options.ldflags === undefined ? [] : [`-ldflags=${options.ldflags}`];
  execFileSync(go, ['build', ...ldflags, '-o', tmp, '.'], {
    cwd: dir,
    stdio: 'pipe',
    env: {
      ...process.env,
      GOCACHE: join(TEST_CACHE, 'go-build-cache'),
      GOPATH: join(TEST_CACHE, 'go-path'),
      GOFLAGS: '-mod=mod',
      GOPROXY: 'off',
      GO111MODULE: 'on',
      GOTOOLCHAIN: 'local',
      CGO_ENABLED: options.cgo === true ? '1' : '0',
    },
  });
  renameSync(tmp, out);
  return processCopy(out);
}

/** The values of `name=N` in the test programs' own lines (`deep calls=588 returns=588`). */
export function programCounts(text: string): Record<string, number> {
  return Object.fromEntries([...text.matchAll(/(\w+)=(-?\d+)/g)].map((m) => [m[1]!, Number(m[2])]));
}

/** A row of `count --json`: `frames` with `--by ustack`, `exit: 'unwind'` for unwound calls. */
export interface CountRow {
  readonly probe: string;
  readonly count: number;
  readonly exit?: string;
  readonly frames?: readonly string[];
}

/**
 * `count --json --command-output inherit -c COMMAND SPECS` on one engine (`extra` options
 * before -c): the run, its rows, and the counts by probe (the calls an unwind ended as
 * `PROBE (unwound)`).
 */
export function countOn(
  engine: 'bpf' | 'ptrace',
  command: string,
  specs: readonly string[],
  extra: readonly string[] = [],
) {
  const result = runCli(
    [
      'count',
      '--engine',
      engine,
      '--json',
      '--command-output',
      'inherit',
      ...extra,
      '-c',
      command,
      ...specs,
    ],
    { timeoutMs: 600_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  const rows: CountRow[] = JSON.parse(result.stdout.trim().split('\n').at(-1)!);
  const byProbe: Record<string, number> = {};
  for (const row of rows) {
    byProbe[row.exit === 'unwind' ? `${row.probe} (unwound)` : row.probe] = row.count;
  }
  return { result, rows, byProbe };
}
