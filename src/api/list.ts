import { statSync } from 'node:fs';
import { ProbeError, quote } from '../errors/index.js';
import { processComm, processObjects, resolveTarget } from '../plan/index.js';
import { globToRegExp } from '../spec/index.js';
import {
  type MappedObject,
  SymbolIndex,
  fileOffsetToRuntime,
  functionDisplayName,
  openElf,
} from '../symbols/index.js';

export interface ListedFunction {
  readonly name: string;
  readonly version: string | undefined;
  readonly vaddr: bigint;
  readonly fileOffset: bigint | undefined;
  readonly sizeBytes: number;
  readonly binding: string;
  readonly type: 'func' | 'ifunc';
  /** With a pid: where the function is in that process. */
  readonly runtimeAddress: bigint | undefined;
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
  readonly stripped: boolean;
  readonly functions: readonly ListedFunction[];
}

export interface ListOptions {
  /** A glob over function names. */
  readonly pattern?: string | undefined;
  /** Find the target as this process sees it and add runtime addresses. */
  readonly pid?: number | undefined;
}

/** The functions of one ELF file (a path, program or library name), sorted by address. */
export async function listFunctions(target: string, options: ListOptions = {}): Promise<FunctionListing> {
  const resolved = await resolveTarget(target, { pid: options.pid });
  const elf = openElf(resolved.path);
  try {
    const index = new SymbolIndex(elf);
    const pattern = options.pattern === undefined ? undefined : globToRegExp(options.pattern);
    const mapped: MappedObject | undefined = resolved.mappedObject;
    const functions: ListedFunction[] = [];
    for (const fn of index.functions) {
      if (pattern !== undefined && !pattern.test(fn.name) && !pattern.test(functionDisplayName(fn))) continue;
      const fileOffset = elf.vaddrToFileOffset(fn.vaddr);
      functions.push({
        name: functionDisplayName(fn),
        version: fn.version,
        vaddr: fn.vaddr,
        fileOffset,
        sizeBytes: Number(fn.sizeBytes),
        binding: fn.binding,
        type: fn.type,
        runtimeAddress:
          mapped === undefined || fileOffset === undefined ? undefined : fileOffsetToRuntime(mapped, fileOffset),
      });
    }
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
      functions,
    };
  } finally {
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
