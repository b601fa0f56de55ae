import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
} from 'node:fs';
import { basename, join } from 'node:path';
import { TEST_CACHE } from './cache-dir.js';

export const PROGRAMS = new URL('../programs/', import.meta.url).pathname;
const CACHE = TEST_CACHE;

export interface CompileOptions {
  /** Extra gcc flags: -O2, -no-pie, -static, -shared -fPIC, ... */
  readonly flags?: readonly string[];
  /** Strip the result with `strip` (or `strip --strip-debug` when 'debug'). */
  readonly strip?: boolean | 'debug';
  /**
   * Libraries and linker flags, placed after the source as the linker needs them; also other
   * .c files to build into the same program (their text is part of the cache key).
   */
  readonly link?: readonly string[];
  /** Output name suffix, e.g. '.so'. */
  readonly suffix?: string;
}

/**
 * Compile test/programs/NAME.c or NAME.cpp (or a path ending in .c or .cpp) with the machine's gcc or g++ at test time, so that each test checks
 * our reading of what this compiler emits against readelf/nm/objdump on the same file.
 * Results are cached by source and flags in TEST_CACHE.
 */
export function compileProgram(name: string, options: CompileOptions = {}): string {
  const source = /\.(c|cpp)$/.test(name)
    ? name
    : existsSync(join(PROGRAMS, `${name}.cpp`))
      ? join(PROGRAMS, `${name}.cpp`)
      : join(PROGRAMS, `${name}.c`);
  const flags = options.flags ?? [];
  const hash = createHash('sha256')
    .update(readFileSync(source))
    // The source's path too: -g records it, and tests check the path a binary's DWARF names.
    .update(JSON.stringify([source, flags, options.link ?? [], options.strip ?? false]));
  // Other sources compiled in (a .c file named in `link`) are part of the result too.
  for (const other of options.link ?? []) {
    if (/\.(c|cpp)$/.test(other) && existsSync(other)) hash.update(readFileSync(other));
  }
  const key = hash.digest('hex').slice(0, 16);
  mkdirSync(CACHE, { recursive: true });
  const base = name.replace(/^.*\//, '').replace(/\.(c|cpp)$/, '');
  const out = join(CACHE, `${base}-${key}${options.suffix ?? ''}`);
  if (existsSync(out)) return out;
  const tmp = `${out}.${process.pid}.tmp`;
  const compiler = source.endsWith('.cpp') ? 'g++' : 'gcc';
  execFileSync(compiler, ['-g', ...flags, '-o', tmp, source, ...(options.link ?? [])], {
    stdio: 'pipe',
  });
  if (options.strip === true) execFileSync('strip', [tmp]);
  if (options.strip === 'debug') execFileSync('strip', ['--strip-debug', tmp]);
  renameSync(tmp, out);
  return out;
}

/**
 * test/programs/trace-target.c linked with its library trace-lib.c (found through an rpath),
 * position-independent unless `pie` is false.
 */
export function compileTraceTarget(pie = true): { app: string; lib: string } {
  const lib = compileProgram('trace-lib', { flags: ['-shared', '-fPIC', '-O2'], suffix: '.so' });
  const app = compileProgram('trace-target', {
    flags: pie ? ['-O2'] : ['-O2', '-no-pie'],
    link: [lib, `-Wl,-rpath,${lib.slice(0, lib.lastIndexOf('/'))}`, '-lpthread'],
  });
  return { app, lib };
}

/**
 * A copy of a compiled program in `dir`, a file of its own. Kernel uprobes (and their USDT
 * semaphores) belong to a file: a test that places them on its own copy touches no run of the
 * cached program by another test file running at the same time, and no other file's probes
 * are on its copy.
 */
export function ownCopy(program: string, dir: string): string {
  // A directory of its own: the same name as the program, never a file another copy runs.
  const copy = join(mkdtempSync(join(dir, 'copy-')), basename(program));
  copyFileSync(program, copy);
  chmodSync(copy, 0o755);
  return copy;
}

const PROCESS_COPIES = 'own-';
const processCopies = new Map<string, string>();
let processCopyDir: string | undefined;

/** Whether a process runs (one of another user is there too). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * This test process's own copy of a cached program (ownCopy()), made once, in a directory
 * removed when the process exits (and, with the next one's, when it was killed first): the
 * kernel uprobes other test files place on the cached program at the same time (those of
 * the tracefs engine are in every process that maps the file) are not in the processes this
 * one runs, where the ptrace engine would find them as another tracer's breakpoints.
 */
export function processCopy(program: string): string {
  const known = processCopies.get(program);
  if (known !== undefined) return known;
  if (processCopyDir === undefined) {
    for (const name of readdirSync(CACHE)) {
      const pid = Number(name.slice(PROCESS_COPIES.length));
      if (name.startsWith(PROCESS_COPIES) && Number.isInteger(pid) && !alive(pid)) {
        rmSync(join(CACHE, name), { recursive: true, force: true });
      }
    }
    const dir = join(CACHE, `${PROCESS_COPIES}${process.pid}`);
    mkdirSync(dir, { recursive: true });
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    processCopyDir = dir;
  }
  const copy = ownCopy(program, processCopyDir);
  processCopies.set(program, copy);
  return copy;
}
