import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { tool } from './tools.js';

/** A program split as distributions ship it: a stripped file, and its debug file apart. */
export interface SplitProgram {
  /** The stripped program: .dynsym only, no .symtab, no DWARF. */
  readonly app: string;
  /** Its `objcopy --only-keep-debug` file: .symtab and DWARF, no code. */
  readonly debug: string;
  /**
   * For 'build-id': the directory to pass as --debug-dir (the debug file is at
   * DIR/.build-id/xx/rest.debug); for 'debuglink', undefined (the file is next to the program).
   */
  readonly debugDir: string | undefined;
}

/** The build-id of an ELF file, as readelf -n prints it. */
export function buildIdOf(path: string): string {
  const m = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', path]));
  if (m === null) throw new Error(`${path} has no build-id`);
  return m[1]!;
}

/**
 * Split the program `full` (built with -g) into a stripped copy and a debug file, found by
 * .gnu_debuglink (`app.debug` next to it, with its CRC-32) or by build-id (under a debug
 * directory of its own). Made once per program beside it in the test cache.
 */
export function splitDebug(full: string, how: 'debuglink' | 'build-id'): SplitProgram {
  const dir = `${full}.split-${how}`;
  const app = join(dir, basename(full));
  const id = buildIdOf(full);
  const debugDir = how === 'build-id' ? join(dir, 'debug') : undefined;
  const debug =
    debugDir === undefined
      ? join(dir, `${basename(full)}.debug`)
      : join(debugDir, '.build-id', id.slice(0, 2), `${id.slice(2)}.debug`);
  if (existsSync(app)) return { app, debug, debugDir };
  const tmp = `${dir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const tmpDebug = join(tmp, debug.slice(dir.length + 1));
  mkdirSync(join(tmpDebug, '..'), { recursive: true });
  execFileSync('objcopy', ['--only-keep-debug', full, tmpDebug]);
  execFileSync('strip', ['-o', join(tmp, basename(full)), full]);
  if (how === 'debuglink') {
    execFileSync('objcopy', [`--add-gnu-debuglink=${basename(tmpDebug)}`, basename(full)], {
      cwd: tmp,
    });
  }
  try {
    renameSync(tmp, dir);
  } catch (err) {
    // Another test process made it first.
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(app)) throw err;
  }
  return { app, debug, debugDir };
}

/**
 * The defined functions (FUNC and IFUNC) of a file's .symtab as readelf lists them: the name as
 * stored (with any @VERSION written into it) and the address.
 */
export function symtabFunctions(path: string): { name: string; vaddr: bigint }[] {
  const found: { name: string; vaddr: bigint }[] = [];
  let table = '';
  for (const line of tool('readelf', ['-sW', path]).split('\n')) {
    const header = /^Symbol table '([^']+)'/.exec(line);
    if (header !== null) table = header[1]!;
    const f = line.trim().split(/\s+/);
    if (table !== '.symtab' || f.length < 8 || !/^\d+:$/.test(f[0]!)) continue;
    if ((f[3] === 'FUNC' || f[3] === 'IFUNC') && f[6] !== 'UND') {
      found.push({ name: f[7]!, vaddr: BigInt(`0x${f[1]}`) });
    }
  }
  return found;
}

/**
 * `full` (built with -g) stripped as Fedora and RHEL ship programs, with MiniDebugInfo: an
 * xz-compressed .symtab of the functions .dynsym leaves out, in a .gnu_debugdata section
 * (made as gdb's manual says: nm's functions less the dynamic ones kept by objcopy
 * --keep-symbols in an --only-keep-debug copy with no DWARF, then xz). Made once beside it.
 */
export function withMiniDebugInfo(full: string): string {
  const app = `${full}.mini`;
  if (existsSync(app)) return app;
  const tmp = `${app}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  try {
    const names = (args: string[], types: RegExp) =>
      tool('nm', [...args, '--format=posix', '--defined-only', full])
        .split('\n')
        .map((line) => line.split(' '))
        .filter((f) => f.length >= 2 && types.test(f[1]!))
        .map((f) => f[0]!);
    const dynamic = new Set(names(['-D'], /./));
    const keep = names([], /^[TtD]$/).filter((name) => !dynamic.has(name));
    writeFileSync(join(tmp, 'keep'), `${keep.join('\n')}\n`);
    const mini = join(tmp, 'mini');
    execFileSync('objcopy', ['--only-keep-debug', full, mini]);
    execFileSync('objcopy', [
      '-S',
      '--remove-section',
      '.gdb_index',
      '--remove-section',
      '.comment',
      `--keep-symbols=${join(tmp, 'keep')}`,
      mini,
    ]);
    execFileSync('xz', [mini]);
    const out = join(tmp, 'app');
    execFileSync('strip', ['--strip-all', '-R', '.comment', '-o', out, full]);
    execFileSync('objcopy', ['--add-section', `.gnu_debugdata=${mini}.xz`, out]);
    renameSync(out, app);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return app;
}
