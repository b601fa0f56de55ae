import { readFileSync, statSync } from 'node:fs';
import { ProbeError } from '../errors/index.js';
import { processObjects } from '../plan/index.js';
import {
  AT_BASE,
  type ElfFile,
  findDebugEntry,
  loadBias,
  type MappedObject,
  openElf,
  parseAuxv,
  parseRDebug,
  R_DEBUG_BYTES,
  readDynamicInfo,
} from '../symbols/index.js';

/** Where a process's dynamic linker tells debuggers about the objects it loads and unloads. */
export interface LoaderRendezvous {
  /** The function ld.so calls before and after each change (r_brk, `_dl_debug_state`). */
  readonly brk: bigint;
  /** `struct r_debug`, to read r_state at each call; undefined when it cannot be found. */
  readonly rDebug: bigint | undefined;
  /** How it was found: the executable's DT_DEBUG, or ld.so's own symbols. */
  readonly how: 'dt-debug' | 'symbols';
}

/** Reads the traced process's memory. */
type ReadMemory = (vaddr: bigint, length: number) => Uint8Array;

/**
 * Find the dynamic linker's rendezvous in a live process: through the executable's DT_DEBUG
 * entry (which ld.so fills once it has started), else through ld.so's `_r_debug` and
 * `_dl_debug_state` symbols (the only way at an exec stop, before ld.so has run). Throws
 * ProbeError ERR_NOT_MAPPED for a process without a dynamic linker (a static program) and
 * ERR_SYMBOL_NOT_FOUND when ld.so has neither symbol.
 */
export function findLoaderRendezvous(pid: number, read: ReadMemory): LoaderRendezvous {
  const objects = processObjects(pid);
  const viaDebug = throughDtDebug(pid, objects, read);
  if (viaDebug !== undefined) return viaDebug;
  const loader = interpreterOf(pid, objects);
  if (loader === undefined) {
    throw new ProbeError(
      'ERR_NOT_MAPPED',
      `Cannot wait for libraries to load in process ${pid}: no dynamic loader is mapped (a static program?)`,
    );
  }
  return withElf(`/proc/${pid}/root${loader.path}`, (elf) => {
    const bias = biasOf(loader, elf);
    const symbol = (name: string) =>
      [...elf.symbols('dynsym'), ...(elf.hasSymtab ? elf.symbols('symtab') : [])].find(
        (s) => s.name === name && s.defined,
      )?.value;
    const rDebugValue = symbol('_r_debug');
    const rDebug = rDebugValue === undefined || bias === undefined ? undefined : rDebugValue + bias;
    // Once ld.so has started, r_brk says where it calls; before, its symbol does.
    const brk =
      rDebug === undefined ? 0n : tryRead(() => parseRDebug(read(rDebug, R_DEBUG_BYTES)).brk);
    const state = symbol('_dl_debug_state');
    const address =
      brk !== undefined && brk !== 0n
        ? brk
        : state === undefined || bias === undefined
          ? undefined
          : state + bias;
    if (address === undefined) {
      throw new ProbeError(
        'ERR_SYMBOL_NOT_FOUND',
        `Cannot wait for libraries to load in process ${pid}: ${loader.path} has neither _r_debug nor _dl_debug_state`,
      );
    }
    return { brk: address, rDebug, how: 'symbols' };
  });
}

/** r_debug through the executable's DT_DEBUG, when ld.so has set it and r_brk. */
function throughDtDebug(
  pid: number,
  objects: readonly MappedObject[],
  read: ReadMemory,
): LoaderRendezvous | undefined {
  let exe: { dev: bigint; ino: bigint };
  try {
    exe = statSync(`/proc/${pid}/exe`, { bigint: true });
  } catch {
    return undefined;
  }
  const object = objects.find((o) => o.inode === exe.ino && o.dev === exe.dev);
  if (object === undefined) return undefined;
  return withElf(`/proc/${pid}/exe`, (elf) => {
    const dynamic = readDynamicInfo(elf);
    const bias = biasOf(object, elf);
    if (dynamic === undefined || bias === undefined) return undefined;
    const entry = tryRead(() => findDebugEntry(read(dynamic.vaddr + bias, dynamic.sizeBytes)));
    if (entry === undefined || entry.value === 0n) return undefined;
    const rDebug = tryRead(() => parseRDebug(read(entry.value, R_DEBUG_BYTES)));
    if (rDebug === undefined || rDebug.brk === 0n) return undefined;
    return { brk: rDebug.brk, rDebug: entry.value, how: 'dt-debug' as const };
  });
}

/** The object the kernel mapped as the program's interpreter (AT_BASE), if any. */
function interpreterOf(pid: number, objects: readonly MappedObject[]): MappedObject | undefined {
  let base: bigint | undefined;
  try {
    base = parseAuxv(readFileSync(`/proc/${pid}/auxv`)).get(AT_BASE);
  } catch {
    base = undefined;
  }
  if (base !== undefined && base !== 0n) {
    const found = objects.find((o) => o.start === base);
    if (found !== undefined) return found;
  }
  return objects.find((o) => /\/ld-linux[^/]*\.so[^/]*$|\/ld-musl/.test(o.path));
}

function biasOf(object: MappedObject, elf: ElfFile): bigint | undefined {
  return loadBias(
    object,
    elf.segments
      .filter((s) => s.typeName === 'LOAD')
      .map((s) => ({ vaddr: s.vaddr, fileOffset: s.offset })),
  );
}

function withElf<T>(path: string, use: (elf: ElfFile) => T): T {
  const elf = openElf(path);
  try {
    return use(elf);
  } finally {
    elf.close();
  }
}

/** The value, or undefined when the process's memory there cannot be read. */
function tryRead<T>(get: () => T): T | undefined {
  try {
    return get();
  } catch (err) {
    if (err instanceof ProbeError || err instanceof RangeError) return undefined;
    throw err;
  }
}
