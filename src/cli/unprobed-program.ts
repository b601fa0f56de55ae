import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { basename } from 'node:path';
import { commandProgram } from '../host/index.js';
import type { TargetFile } from '../plan/index.js';
import { readScriptHeader } from '../symbols/index.js';
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
  if (probed.some((t) => SHARED_OBJECT.test(basename(t.displayPath)))) return undefined;
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
