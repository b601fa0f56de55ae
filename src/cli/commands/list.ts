import type { Command } from '@commander-js/extra-typings';
import { type FunctionListing, type ObjectListing, listFunctions, listObjects } from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import { hex, renderJson, renderTable } from '../../output/index.js';
import type { CommandResult } from '../main.js';
import type { Io } from '../io.js';
import { parsePid } from '../options.js';

export function registerList(program: Command, io: Io, result: CommandResult): void {
  program
    .command('list')
    .summary('list the functions of an ELF file, or the objects mapped in a process')
    .description(
      'List the functions of TARGET (a path, a program on PATH, or a library name such as libc)\n' +
        'with their virtual address, file offset, size, binding and type; PATTERN is a glob over\n' +
        'the names. With -p PID and no TARGET, list every object the process has mapped.',
    )
    .argument('[target]', 'file, program or library (libc, libssl, ./app, /usr/bin/node)')
    .argument('[pattern]', "glob over function names, e.g. 'mall*'")
    .option('-p, --pid <pid>', 'resolve TARGET as process PID sees it; add runtime addresses', parsePid)
    .option('--json', 'print JSON instead of a table')
    .action(async (target, pattern, options) => {
      if (target === undefined) {
        if (options.pid === undefined) {
          throw usage('Cannot list: name a TARGET, or give -p PID to list the objects of a process');
        }
        const objects = listObjects(options.pid);
        io.out(options.json === true ? `${renderJson(objects)}\n` : renderObjects(objects));
        return;
      }
      const listing = await listFunctions(target, { pid: options.pid, pattern });
      io.out(options.json === true ? `${renderJson(listing)}\n` : renderFunctions(listing));
      if (listing.functions.length === 0) result.status = 1;
    });
}

function usage(message: string): ProbeError {
  return new ProbeError('ERR_USAGE', message, { hints: ['Run "upscope list --help" for usage'] });
}

function renderFunctions(listing: FunctionListing): string {
  const runtime = listing.functions.some((fn) => fn.runtimeAddress !== undefined);
  const head = `VADDR             FILE OFFSET   SIZE  BIND    TYPE   ${runtime ? 'RUNTIME             ' : ''}NAME`;
  const lines: string[] = [head];
  for (const fn of listing.functions) {
    const vaddr = fn.vaddr.toString(16).padStart(16, '0');
    const offset = fn.fileOffset === undefined ? '-'.padStart(12) : fn.fileOffset.toString(16).padStart(12, '0');
    const size = String(fn.sizeBytes).padStart(6);
    const bind = fn.binding.padEnd(7);
    const type = fn.type.padEnd(6);
    const at = runtime ? `${fn.runtimeAddress === undefined ? '-'.padEnd(18) : fn.runtimeAddress.toString(16).padStart(18, '0')}  ` : '';
    lines.push(`${vaddr}  ${offset}  ${size}  ${bind} ${type} ${at}${fn.name}`);
  }
  const note = listing.stripped ? ' (stripped: .dynsym only)' : '';
  lines.push(`${listing.functions.length} functions in ${listing.target.displayPath}${note}`);
  return `${lines.join('\n')}\n`;
}

function renderObjects(objects: ObjectListing): string {
  const rows = objects.objects.map((object) => [
    `${hex(object.start)}-${hex(object.end)}`,
    `${object.devMajor}:${object.devMinor}`,
    String(object.inode),
    object.deleted ? `${object.path} (deleted)` : object.path,
  ]);
  return `${renderTable(['ADDRESSES', 'DEV', 'INODE', 'OBJECT'], rows)}\n${objects.objects.length} objects mapped in process ${objects.pid} (${objects.comm})\n`;
}
