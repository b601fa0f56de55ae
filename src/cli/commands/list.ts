import type { Command } from '@commander-js/extra-typings';
import {
  type FunctionListing,
  functionDisplayName,
  listFunctions,
  listObjects,
  listSourceLines,
  type ObjectListing,
} from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import { hex, renderJson, renderTable } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import { debugDirOption, formatDev, parsePid } from '../options.js';
import { renderSourceLines, sourceLinesJson } from './list-lines.js';
import { runListUsdt } from './list-usdt.js';
import { listVarsOutput } from './list-vars.js';

export function registerList(program: Command, io: Io, result: CommandResult): void {
  program
    .command('list')
    .summary('list the functions of an ELF file, or the objects mapped in a process')
    .description(
      'List the functions of TARGET (a path, a program on PATH, or a library name such as libc) ' +
        'with their virtual address, file offset, size, binding and type; PATTERN is a glob over ' +
        'the names. C++ and Rust names are shown demangled (--no-demangle: as stored). With -p PID ' +
        'and no TARGET, list every object the process has mapped. Instead of functions: ' +
        '--lines shows source lines that can be probed (perf probe -L), --vars the variables a ' +
        'probe can fetch by name (perf probe -V), --usdt the USDT probes.',
    )
    .argument('[target]', 'file, program or library (libc, libssl, ./app, /usr/bin/node)')
    .argument(
      '[pattern]',
      "glob over function names, e.g. 'mall*'; C++ and Rust names also match demangled, e.g. 'ns::Class::*'",
    )
    .option(
      '-p, --pid <pid>',
      'resolve TARGET as process PID sees it; add runtime addresses',
      parsePid,
    )
    .option(
      '--vars <function>',
      'list the parameters and local variables visible where a probe on FUNCTION goes, with their types and locations (needs debug info)',
    )
    .option('--json', 'print JSON instead of a table')
    .option(
      '--no-demangle',
      'show C++ and Rust names as stored (mangled), as nm does; PATTERN still matches both',
    )
    .option(
      '--lines <what>',
      'show the source lines of function WHAT (or of FILE.c:START-END), marking with * those a probe can go on (FILE:LINE specs), like perf probe -L',
    )
    .option(
      '--usdt',
      'list the USDT (SystemTap SDT) probes instead: provider, name, address, semaphore, ' +
        'arguments; PATTERN is a glob over PROVIDER:NAME; with -p and no TARGET, those of every object the process has mapped',
    )
    .option(...debugDirOption)
    .action(async (target, pattern, options) => {
      const modes = [options.vars, options.lines, options.usdt].filter((m) => m !== undefined);
      if (modes.length > 1) {
        throw usage('Cannot list several kinds at once: give one of --lines, --vars and --usdt');
      }
      if (options.usdt === true) {
        await runListUsdt(io, result, target, pattern, options);
        return;
      }
      if (options.vars !== undefined) {
        if (target === undefined || pattern !== undefined) {
          throw usage('Cannot list variables: give one TARGET and --vars FUNCTION, no PATTERN');
        }
        io.out(await listVarsOutput(target, options.vars, options));
        return;
      }
      if (options.lines !== undefined) {
        if (target === undefined) throw usage('Cannot list source lines: name a TARGET');
        const listing = listSourceLines(target, options.lines, {
          pid: options.pid,
          debugDirs: options.debugDir,
        });
        io.out(
          options.json === true
            ? `${renderJson(sourceLinesJson(listing))}\n`
            : renderSourceLines(listing),
        );
        return;
      }
      if (target === undefined) {
        if (options.pid === undefined) {
          throw usage(
            'Cannot list: name a TARGET, or give -p PID to list the objects of a process',
          );
        }
        const objects = listObjects(options.pid);
        io.out(options.json === true ? `${renderJson(objects)}\n` : renderObjects(objects));
        return;
      }
      const listing = await listFunctions(target, {
        pid: options.pid,
        pattern,
        demangle: options.demangle,
        debugDirs: options.debugDir,
      });
      io.out(
        options.json === true
          ? `${renderJson(listingJson(listing, options.demangle))}\n`
          : renderFunctions(listing),
      );
      if (listing.rows.count === 0) result.status = 1;
    });
}

function usage(message: string): ProbeError {
  return new ProbeError('ERR_USAGE', message, { hints: ['Run "upscope list --help" for usage'] });
}

/**
 * The JSON of a listing: addresses as hex strings (as readelf prints them), sizes as numbers;
 * `name` is the display name (demangled unless told not to, with version), `symbol` the name
 * as stored, `demangled` the demangled name of a C++ or Rust function.
 */
function listingJson(listing: FunctionListing, demangle: boolean) {
  const { target } = listing;
  return {
    target: {
      path: target.path,
      displayPath: target.displayPath,
      dev: formatDev(target.dev),
      inode: Number(target.inode),
      buildId: target.buildId,
      type: target.type,
    },
    stripped: listing.stripped,
    goPclntab: listing.goPclntab,
    debugFile: listing.debugFile,
    functions: listing.functions.map((fn) => ({
      name: functionDisplayName(fn, { demangle }),
      symbol: fn.name,
      demangled: fn.demangled,
      version: fn.version,
      vaddr: fn.vaddr,
      fileOffset: fn.fileOffset,
      sizeBytes: Number(fn.sizeBytes),
      binding: fn.binding,
      type: fn.type,
      runtimeAddress: fn.runtimeAddress,
    })),
  };
}

const HEX_DIGITS = Buffer.from('0123456789abcdef');

/**
 * The function table, written byte by byte into one Buffer: a listing of /usr/bin/node has
 * 85,000 rows, and building a string per cell costs more than reading the symbols.
 */
function renderFunctions(listing: FunctionListing): Buffer {
  const rows = listing.rows;
  let runtime = false;
  for (let i = 0; i < rows.count && !runtime; i++) runtime = rows.runtimeAddress(i) !== undefined;
  const head = `VADDR             FILE OFFSET     SIZE  BIND    TYPE   ${runtime ? 'RUNTIME           ' : ''}NAME\n`;
  const note = listing.stripped
    ? ' (stripped: .dynsym only)'
    : listing.goPclntab
      ? ' (stripped Go program: named by its .gopclntab)'
      : listing.debugFile !== undefined
        ? ` (.symtab of its debug file ${listing.debugFile})`
        : '';
  const tail = `${rows.count} functions in ${listing.target.displayPath}${note}\n`;
  // Sizes are padded to 7 digits but may take up to 20 (a u64): room for that on every row.
  const rowWidth = 16 + 2 + 12 + 2 + 20 + 2 + 15 + (runtime ? 18 : 0) + 1;
  let size = Buffer.byteLength(head) + Buffer.byteLength(tail);
  for (let i = 0; i < rows.count; i++) {
    size += rowWidth + rows.nameLength(i) + rows.versionSuffix(i).length;
  }
  const out = Buffer.allocUnsafe(size);
  let at = out.write(head, 0, 'latin1');
  // Zero-padded hex of a number below 2^53, as two 32-bit halves of integer arithmetic.
  const hexField = (value: number | undefined, width: number) => {
    if (value === undefined) {
      out.fill(0x20, at, at + width - 1);
      out[at + width - 1] = 0x2d; // '-'
    } else {
      let low = value >>> 0;
      let high = (value - low) / 4294967296;
      for (let i = width - 1, digits = 0; i >= 0; i--, digits++) {
        if (digits < 8) {
          out[at + i] = HEX_DIGITS[low & 15]!;
          low >>>= 4;
        } else {
          out[at + i] = HEX_DIGITS[high & 15]!;
          high >>>= 4;
        }
      }
    }
    at += width;
  };
  // Right-aligned decimal in at least `width` columns.
  const decimalField = (value: number, width: number) => {
    const digits = value < 1e7 ? 0 : String(value).length - width;
    let end = at + width + Math.max(0, digits);
    const start = at;
    at = end;
    let v = value;
    do {
      out[--end] = 0x30 + (v % 10);
      v = Math.floor(v / 10);
    } while (v > 0);
    out.fill(0x20, start, end);
  };
  const columns = new Map<string, string>();
  for (let i = 0; i < rows.count; i++) {
    hexField(rows.vaddr(i), 16);
    out[at++] = 0x20;
    out[at++] = 0x20;
    hexField(rows.fileOffset(i), 12);
    out[at++] = 0x20;
    out[at++] = 0x20;
    decimalField(rows.sizeBytes(i), 7);
    out[at++] = 0x20;
    out[at++] = 0x20;
    const binding = rows.binding(i);
    const type = rows.type(i);
    const key = `${binding}/${type}`;
    let bindType = columns.get(key);
    if (bindType === undefined) {
      bindType = `${binding.padEnd(7)} ${type.padEnd(6)} `;
      columns.set(key, bindType);
    }
    at += out.write(bindType, at, 'latin1');
    if (runtime) {
      hexField(rows.runtimeAddress(i), 16);
      out[at++] = 0x20;
      out[at++] = 0x20;
    }
    at += rows.copyName(i, out, at);
    const suffix = rows.versionSuffix(i);
    if (suffix !== '') at += out.write(suffix, at, 'latin1');
    out[at++] = 0x0a;
  }
  at += out.write(tail, at, 'latin1');
  return out.subarray(0, at);
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
