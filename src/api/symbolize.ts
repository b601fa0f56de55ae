import { ProbeError } from '../errors/index.js';
import { hex } from '../output/index.js';
import { readProcessMaps } from '../plan/index.js';
import {
  type ElfFile,
  functionDisplayName,
  type MapEntry,
  openElf,
  runtimeToFileOffset,
  SymbolIndex,
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
    const fn = vaddr === undefined ? undefined : new SymbolIndex(elf).containing(vaddr);
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
    elf.close();
  }
}
