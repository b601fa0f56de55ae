import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { commandProgram } from '../host/index.js';
import { resolveTarget, type TargetFile } from '../plan/index.js';
import { interpreterOf, openElf, readDynamicInfo, readScriptHeader } from '../symbols/index.js';
import type { Io } from './io.js';

/** A shared object's name (`libc.so.6`, `libssl.so`): a program may map it without naming it. */
const SHARED_OBJECT = /\.so(\.|$)/;

/**
 * After a run with `hits` hits, in all: where there were none, says on stderr why, when the
 * -c command's program is not the file probed (see unprobedProgramNote()).
 */
export function sayUnprobedProgram(
  io: Io,
  hits: number | bigint,
  command: string | undefined,
  sites: readonly { readonly target: TargetFile }[],
): void {
  if (Number(hits) !== 0) return;
  const note = unprobedProgramNote(
    command,
    sites.map((site) => site.target),
  );
  if (note !== undefined) io.err(`upscope: ${note}\n`);
}

/**
 * What to say when a -c command ran and no probe fired because its program is not the file
 * probed: `python3` found first on PATH as pyenv's shim while the probes are in
 * /usr/bin/python3, or another copy of the program of that name. Undefined when that is not
 * so, or cannot be told: the line is not simple enough to name its program, the program is a
 * probed file, a probed file is a shared object (which any program may map), or the program
 * is neither a version manager's shim nor named as a probed file (`sh -c './app'` runs the
 * probed ./app: no hit there says nothing of the program).
 */
function unprobedProgramNote(
  command: string | undefined,
  targets: readonly TargetFile[],
): string | undefined {
  if (command === undefined || targets.length === 0) return undefined;
  const program = commandProgram(command);
  if (program === undefined) return undefined;
  let stat: { dev: bigint; ino: bigint };
  try {
    stat = statSync(program, { bigint: true });
  } catch {
    return undefined;
  }
  const files = new Map<string, TargetFile>();
  for (const target of targets) files.set(`${target.dev}:${target.inode}`, target);
  if (files.has(`${stat.dev}:${stat.ino}`)) return undefined;
  const probed = [...files.values()];
  if (probed.some((t) => SHARED_OBJECT.test(basename(t.displayPath)))) {
    return runsOthers(command) ? undefined : unlinkedLibraryNote(program, probed);
  }
  const named = probed.length === 1 ? probed[0]!.displayPath : `${probed.length} files`;
  const header = readScriptHeader(head(program));
  const names = new Set(probed.flatMap((t) => [basename(t.displayPath), basename(t.path)]));
  if (header?.manager === undefined && !names.has(basename(program))) return undefined;
  const what =
    header === undefined
      ? ''
      : header.manager !== undefined
        ? ` (a ${header.manager} shim, which starts the ${basename(program)} ${header.manager} picks: "${header.manager} which ${basename(program)}" names it)`
        : ` (a script run by ${basename(header.interpreter) || 'its interpreter'})`;
  return `no probe fired: the command runs ${program}${what}, not ${named}, where the probes are; probe the program that runs, or name the probed one in -c`;
}

/**
 * Whether a word of `command` past its program names another program (a path or a name on
 * PATH): `sh -c './app'`, `timeout 5 app`, `sh -c 'ls | wc'` may run programs other than the
 * first, which may link what the first does not. Quoted text is a shell's commands, but
 * another program's data (`perl -e 'print scalar(...)'` runs no `scalar`), unless a word
 * outside the quotes names a program that runs it (`timeout 5 sh -c '...'`).
 */
function runsOthers(command: string): boolean {
  const program = commandProgram(command);
  const shell = program !== undefined && SHELL.test(basename(program));
  const text = shell ? command : command.replace(/'[^']*'|"(?:\\.|[^"\\])*"/g, ' ');
  const words = text.split(/[\s;|&()<>`'"$=]+/).slice(1);
  return words.some((word) => word !== '' && commandProgram(word) !== undefined);
}

/** Programs whose quoted arguments are commands they run. */
const SHELL = /^(?:sh|bash|dash|zsh|ksh|mksh|ash|fish|busybox)$/;

/** Files a program's loading may take in, past which its libraries are not looked through. */
const MAX_LINKED_FILES = 256;

/**
 * What to say when every probed file is a shared object that the -c command's program does
 * not link (none is among the libraries ld.so loads at its start, its DT_NEEDED and theirs):
 * `perl` and Debian's `python3` have the interpreter built in, not in libperl.so or
 * libpython3.so. Undefined when one of them is linked, or the program's libraries cannot be
 * told (not an ELF file: a script).
 */
function unlinkedLibraryNote(program: string, probed: readonly TargetFile[]): string | undefined {
  if (!probed.every((t) => SHARED_OBJECT.test(basename(t.displayPath)))) return undefined;
  const named = probed.length === 1 ? probed[0]!.displayPath : `any of ${probed.length} files`;
  if (isStatic(program)) {
    return `no probe fired: ${program} is statically linked: it loads no library, ${named} included; the library functions it uses are in it: probe them there (upscope list ${program})`;
  }
  const linked = linkedFiles(program);
  if (linked === undefined) return undefined;
  if (probed.some((t) => linked.has(`${t.dev}:${t.inode}`))) return undefined;
  return `no probe fired: ${program} does not link ${named} (it is not among the libraries the program loads at its start), so its probes fire only if the program loads it later (dlopen()); probe the program's own functions (upscope list ${program}) or a library it links (ldd ${program})`;
}

/**
 * The files (as dev:inode) ld.so loads to start `program`: itself and its DT_NEEDED
 * libraries, theirs in turn, found as upscope finds a library for that program; undefined
 * when the program is not an ELF file or one of them is not found so.
 */
function linkedFiles(program: string): Set<string> | undefined {
  const keys = new Set<string>();
  const seen = new Set<string>();
  const queue = [program];
  while (queue.length > 0 && seen.size < MAX_LINKED_FILES) {
    const path = queue.shift()!;
    if (seen.has(path)) continue;
    seen.add(path);
    let needed: readonly string[];
    try {
      const stat = statSync(path, { bigint: true });
      keys.add(`${stat.dev}:${stat.ino}`);
      const elf = openElf(path);
      try {
        needed = readDynamicInfo(elf)?.needed ?? [];
      } finally {
        elf.close();
      }
    } catch {
      if (path === program) return undefined;
      continue;
    }
    for (const name of needed) {
      try {
        queue.push(resolveTarget(name, { executable: program }).path);
      } catch {
        // Not found as upscope looks (a library's own RUNPATH is not looked through): what
        // the program links cannot be told.
        return undefined;
      }
    }
  }
  return keys;
}

/** The first 4 KiB of a file (a script's header), or none when it cannot be read. */
function head(path: string): Uint8Array {
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    const bytes = Buffer.alloc(4096);
    return bytes.subarray(0, readSync(fd, bytes, 0, bytes.length, 0));
  } catch {
    return new Uint8Array(0);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Whether `program` is an ELF program that names no dynamic loader (statically linked). */
function isStatic(program: string): boolean {
  try {
    const elf = openElf(program);
    try {
      return elf.entry !== 0n && interpreterOf(elf) === undefined;
    } finally {
      elf.close();
    }
  } catch {
    return false;
  }
}
