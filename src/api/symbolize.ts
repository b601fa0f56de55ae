import { ProbeError } from '../errors/index.js';
import { hex } from '../output/index.js';
import { closeDebugInfo, readProcessMaps, targetSymbols } from '../plan/index.js';
import {
  type ElfFile,
  functionDisplayName,
  type MapEntry,
  openElf,
  runtimeToFileOffset,
  type SymbolIndex,
} from '../symbols/index.js';

export interface Symbolized {
  readonly address: bigint;
  /** The mapped file, as the process sees it. */
  readonly object: string;
  readonly fileOffset: bigint;
  /** The address as the ELF file numbers it (what readelf and nm show). */
  readonly vaddr: bigint | undefined;
  /** The function's symbol as stored (mangled), with version. */
  readonly symbol: string | undefined;
  /** Its demangled name, for C++ and Rust functions. */
  readonly demangled: string | undefined;
  readonly symbolOffset: bigint;
}

/** Which object, file offset and symbol+offset a runtime address of a process is. */
export function symbolizeAddress(pid: number, address: bigint): Symbolized {
  const maps = readProcessMaps(pid);
  const hit = runtimeToFileOffset(maps, address);
  if (hit === undefined || hit.entry.path === '' || hit.entry.pseudo) {
    throw new ProbeError(
      'ERR_NOT_MAPPED',
      `Cannot symbolize ${hex(address)} in process ${pid}: no file is mapped at that address`,
      { hints: [`List what is mapped with: upscope list -p ${pid}`] },
    );
  }
  const { entry, fileOffset } = hit;
  const start = entry.start.toString(16);
  const end = entry.end.toString(16);
  const path = entry.deleted
    ? `/proc/${pid}/map_files/${start}-${end}`
    : `/proc/${pid}/root${entry.path}`;
  const elf = openElf(path);
  try {
    const vaddr = elf.fileOffsetToVaddr(fileOffset);
    const fn = vaddr === undefined ? undefined : targetSymbols(elf, path).containing(vaddr);
    return {
      address,
      object: entry.deleted ? `${entry.path} (deleted)` : entry.path,
      fileOffset,
      vaddr,
      symbol: fn === undefined ? undefined : functionDisplayName(fn, { demangle: false }),
      demangled: fn?.demangled,
      symbolOffset: fn === undefined || vaddr === undefined ? 0n : vaddr - fn.vaddr,
    };
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
}

/**
 * Names the addresses of user stacks taken in the kernel: each process's memory map is kept
 * from its last snapshot (so that a process that has ended can still be named), each file's
 * symbols are read once.
 */
export class StackSymbolizer {
  readonly #maps = new Map<number, MapEntry[]>();
  /** Per process, files whose load bias is known from a probe's address (no map needed). */
  readonly #known = new Map<number, Map<string, bigint>>();
  readonly #files = new Map<string, { elf: ElfFile; index: SymbolIndex } | undefined>();

  /** Keep the process's memory map as it is now (nothing when it cannot be read). */
  snapshot(pid: number): void {
    try {
      const maps = readProcessMaps(pid);
      if (maps.length > 0) this.#maps.set(pid, maps);
    } catch {
      // ended, or not ours to read: the last snapshot stays
    }
  }

  /**
   * Note that `runtime` in process `pid` is `vaddr` of the file at `path` (a probe's address):
   * frames in that file are named even when the process ended before its map was read.
   */
  know(pid: number, path: string, runtime: bigint, vaddr: bigint): void {
    let files = this.#known.get(pid);
    if (files === undefined) {
      files = new Map();
      this.#known.set(pid, files);
    }
    files.set(path, runtime - vaddr);
  }

  /** `symbol+0xoff (file)` (demangled), or the address in hex when nothing names it. */
  frame(pid: number, address: bigint): string {
    if (!this.#maps.has(pid)) this.snapshot(pid);
    if (!this.#maps.has(pid)) return this.#fromKnown(pid, address);
    const hit = runtimeToFileOffset(this.#maps.get(pid) ?? [], address);
    if (hit === undefined || hit.entry.path === '' || hit.entry.pseudo) return hex(address);
    const path = hit.entry.path;
    const object = path.slice(path.lastIndexOf('/') + 1);
    const file = this.#file(path);
    const vaddr = file?.elf.fileOffsetToVaddr(hit.fileOffset);
    const fn = vaddr === undefined ? undefined : file?.index.containing(vaddr);
    if (fn === undefined || vaddr === undefined) return `${hex(hit.fileOffset)} (${object})`;
    const offset = vaddr - fn.vaddr;
    return `${functionDisplayName(fn)}${offset === 0n ? '' : `+${hex(offset)}`} (${object})`;
  }

  /** A frame named through a file whose bias is known, else the address in hex. */
  #fromKnown(pid: number, address: bigint): string {
    for (const [path, bias] of this.#known.get(pid) ?? []) {
      const file = this.#file(path);
      const vaddr = address - bias;
      if (file === undefined || file.elf.vaddrToFileOffset(vaddr) === undefined) continue;
      const fn = file.index.containing(vaddr);
      if (fn === undefined) continue;
      const offset = vaddr - fn.vaddr;
      const object = path.slice(path.lastIndexOf('/') + 1);
      return `${functionDisplayName(fn)}${offset === 0n ? '' : `+${hex(offset)}`} (${object})`;
    }
    return hex(address);
  }

  #file(path: string) {
    if (!this.#files.has(path)) {
      try {
        const elf = openElf(path);
        this.#files.set(path, { elf, index: targetSymbols(elf, path) });
      } catch {
        this.#files.set(path, undefined);
      }
    }
    return this.#files.get(path);
  }

  close(): void {
    for (const file of this.#files.values()) {
      if (file === undefined) continue;
      closeDebugInfo(file.elf);
      file.elf.close();
    }
    this.#files.clear();
  }
}
