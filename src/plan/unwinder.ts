import { basename } from 'node:path';
import { ProbeError } from '../errors/index.js';
import { type ElfFile, openElf, readDynamicInfo } from '../symbols/index.js';
import { processObjects } from './targets/index.js';

/** Libraries that bring an unwinder (C++ exceptions, Rust panics, forced unwinds). */
const UNWINDER_LIBRARY = /^(libgcc_s|libstdc\+\+|libc\+\+|libc\+\+abi|libunwind)\.so/;

/** Functions of the unwinder that code able to throw, or to be unwound, calls or contains. */
const UNWINDER_SYMBOLS: ReadonlySet<string> = new Set([
  '_Unwind_RaiseException',
  '_Unwind_Resume',
  '_Unwind_ForcedUnwind',
  '__cxa_throw',
]);

/**
 * Why the code of `elf` can be unwound through, as what it does (`links libstdc++.so.6`,
 * `calls _Unwind_Resume`), or undefined when it links no unwinder and calls none: a C
 * program or library of its own.
 */
export function unwinderOf(elf: ElfFile): string | undefined {
  const needed = readDynamicInfo(elf)?.needed ?? [];
  const library = needed.find((name) => UNWINDER_LIBRARY.test(name));
  if (library !== undefined) return `links ${library}`;
  for (const table of ['dynsym', 'symtab'] as const) {
    const symbol = elf.symbols(table).find((s) => UNWINDER_SYMBOLS.has(s.name));
    if (symbol !== undefined) {
      return symbol.sectionIndex === 0 ? `calls ${symbol.name}` : `contains ${symbol.name}`;
    }
  }
  return undefined;
}

/** Where the probed code runs: the process (-p) or the program of a command (-c). */
export interface ProgramContext {
  readonly pid?: number | undefined;
  readonly executable?: string | undefined;
}

/**
 * Why the program the probes are for can unwind its stack (a C++ exception, a Rust panic, a
 * `pthread_cancel`), or undefined when nothing says it can: the process's own mappings (an
 * unwinder library mapped, its program linking one) with -p, the command's program with -c.
 * Without either, only the probed file itself is known (see unwinderOf()).
 */
export function programUnwinder(context: ProgramContext): string | undefined {
  if (context.pid !== undefined) {
    let objects: ReturnType<typeof processObjects> = [];
    try {
      objects = processObjects(context.pid);
    } catch (err) {
      if (!(err instanceof ProbeError)) throw err;
    }
    const library = objects.find((o) => UNWINDER_LIBRARY.test(basename(o.path)));
    if (library !== undefined) {
      return `process ${context.pid} has ${basename(library.path)} mapped`;
    }
    return fileUnwinder(`/proc/${context.pid}/exe`, `the program of process ${context.pid}`);
  }
  if (context.executable !== undefined) {
    return fileUnwinder(context.executable, basename(context.executable));
  }
  return undefined;
}

function fileUnwinder(path: string, name: string): string | undefined {
  let elf: ElfFile;
  try {
    elf = openElf(path);
  } catch (err) {
    if (err instanceof ProbeError) return undefined;
    throw err;
  }
  try {
    const why = unwinderOf(elf);
    return why === undefined ? undefined : `${name} ${why}`;
  } finally {
    elf.close();
  }
}
