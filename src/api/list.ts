import { statSync } from 'node:fs';
import { ProbeError, quote } from '../errors/index.js';
import {
  closeDebugInfo,
  processComm,
  processObjects,
  resolveTarget,
  targetSymbols,
} from '../plan/index.js';
import { globToRegExp } from '../spec/index.js';
import {
  type FunctionSymbol,
  fileOffsetToRuntime,
  type MappedObject,
  openElf,
} from '../symbols/index.js';

/** A function as listed: its symbol, and with a pid, where it is in that process. */
export interface ListedFunction extends FunctionSymbol {
  readonly runtimeAddress?: bigint | undefined;
}

/**
 * The listed functions as rows, for renderers that write bytes: numbers instead of bigints
 * (exact for user-space addresses) and names as views of the file's string table.
 */
export interface FunctionRows {
  readonly count: number;
  vaddr(i: number): number;
  fileOffset(i: number): number | undefined;
  sizeBytes(i: number): number;
  binding(i: number): string;
  type(i: number): 'func' | 'ifunc';
  /**
   * The name's length in UTF-8 bytes: demangled (unless `demangle: false`) or as stored. The
   * display name is it plus `versionSuffix(i)`.
   */
  nameLength(i: number): number;
  /** Copy the name's bytes into `target` at `offset`; returns how many. */
  copyName(i: number, target: Uint8Array, offset: number): number;
  versionSuffix(i: number): string;
  runtimeAddress(i: number): number | undefined;
}

export interface FunctionListing {
  readonly target: {
    readonly path: string;
    readonly displayPath: string;
    readonly dev: bigint;
    readonly inode: bigint;
    readonly buildId: string | undefined;
    readonly type: string;
  };
  /** True when only .dynsym (exported functions) was found: no .symtab, no debug file. */
  readonly stripped: boolean;
  /** True when the functions are a stripped Go program's, named by its `.gopclntab`. */
  readonly goPclntab: boolean;
  /** The separate debug file whose .symtab the functions come from, when they do. */
  readonly debugFile: string | undefined;
  /** The functions as objects, sorted by address (built when first read). */
  readonly functions: readonly ListedFunction[];
  readonly rows: FunctionRows;
}

export interface ListOptions {
  /**
   * A glob over function names: the name as stored, and for C++ and Rust the demangled name
   * with and without its parameter list (`ns::Class::*`).
   */
  readonly pattern?: string | undefined;
  /** Find the target as this process sees it and add runtime addresses. */
  readonly pid?: number | undefined;
  /** Show C++ and Rust names demangled in `rows` (default true); `functions` has both. */
  readonly demangle?: boolean | undefined;
  /** Directories searched for a stripped file's debug file, before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
}

/** The functions of one ELF file (a path, program or library name), sorted by address. */
export async function listFunctions(
  target: string,
  options: ListOptions = {},
): Promise<FunctionListing> {
  const resolved = await resolveTarget(target, { pid: options.pid });
  const elf = openElf(resolved.path);
  try {
    const index = targetSymbols(elf, resolved.path, { debugDirs: options.debugDirs });
    const demangle = options.demangle !== false;
    const pattern = options.pattern;
    // Which index positions are listed: all, or those whose name matches (demangling only
    // the names it must: see SymbolIndex.matching()).
    const picked =
      pattern === undefined ? undefined : index.matching(pattern, globToRegExp(pattern));
    // The names shown demangled at once: every name, or those matched.
    if (demangle) {
      if (picked === undefined) index.demangleAll();
      else index.demangleSome(picked);
    }
    const at = picked === undefined ? (i: number) => i : (i: number) => picked[i]!;
    const mapped: MappedObject | undefined = resolved.mappedObject;
    const runtimeOf = (fileOffset: number | undefined) =>
      mapped === undefined || fileOffset === undefined
        ? undefined
        : fileOffsetToRuntime(mapped, BigInt(fileOffset));
    const rows: FunctionRows = {
      count: picked?.length ?? index.length,
      vaddr: (i) => index.vaddrAt(at(i)),
      fileOffset: (i) => index.fileOffsetAt(at(i)),
      sizeBytes: (i) => index.sizeAt(at(i)),
      binding: (i) => index.bindingAt(at(i)),
      type: (i) => index.typeAt(at(i)),
      nameLength: (i) => {
        const length = demangle ? index.demangledLengthAt(at(i)) : -1;
        return length < 0 ? index.nameLengthAt(at(i)) : length;
      },
      copyName: (i, target, offset) => {
        if (demangle && index.demangledLengthAt(at(i)) >= 0) {
          return index.copyDemangledAt(at(i), target, offset);
        }
        return index.copyNameAt(at(i), target, offset);
      },
      versionSuffix: (i) => index.versionSuffixAt(at(i)),
      runtimeAddress: (i) => {
        const runtime = runtimeOf(index.fileOffsetAt(at(i)));
        return runtime === undefined ? undefined : Number(runtime);
      },
    };
    let functions: readonly ListedFunction[] | undefined;
    const stat = statSync(resolved.path, { bigint: true });
    return {
      target: {
        path: resolved.path,
        displayPath: resolved.displayPath,
        dev: stat.dev,
        inode: stat.ino,
        buildId: elf.buildId(),
        type: elf.type,
      },
      stripped: index.stripped,
      goPclntab: index.goPclntab,
      debugFile: index.debugFile,
      get functions() {
        functions ??= Array.from({ length: rows.count }, (_, i) => {
          const fn = index.function(at(i));
          return mapped === undefined
            ? fn
            : {
                ...fn,
                runtimeAddress:
                  fn.fileOffset === undefined
                    ? undefined
                    : fileOffsetToRuntime(mapped, fn.fileOffset),
              };
        });
        return functions;
      },
      rows,
    };
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
}

export interface ObjectListing {
  readonly pid: number;
  readonly comm: string;
  readonly objects: readonly {
    readonly path: string;
    readonly start: bigint;
    readonly end: bigint;
    readonly devMajor: number;
    readonly devMinor: number;
    readonly inode: bigint;
    readonly deleted: boolean;
  }[];
}

/** Every file mapped in a process, lowest address first. */
export function listObjects(pid: number): ObjectListing {
  const objects = processObjects(pid).map((object) => {
    const first = object.mappings[0];
    const last = object.mappings[object.mappings.length - 1];
    if (first === undefined || last === undefined) {
      throw new ProbeError('ERR_INTERNAL', `Cannot list ${quote(object.path)}: no mappings`);
    }
    return {
      path: object.path,
      start: first.start,
      end: last.end,
      devMajor: object.devMajor,
      devMinor: object.devMinor,
      inode: object.inode,
      deleted: object.deleted,
    };
  });
  return { pid, comm: processComm(pid), objects };
}
