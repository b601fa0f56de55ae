import { ProbeError } from '../errors/index.js';
import { hex } from '../output/index.js';
import { closeDebugInfo, readProcessMaps, targetSymbols } from '../plan/index.js';
import { functionDisplayName, openElf, runtimeToFileOffset } from '../symbols/index.js';
import { StackFiles } from './stack-files.js';
import { StackNamer } from './stack-namer.js';

export interface Symbolized {
  readonly address: bigint;
  /** The mapped file, as the process sees it (for JIT code: `[jit]`). */
  readonly object: string;
  /** Where the address is in the file (undefined for JIT code). */
  readonly fileOffset: bigint | undefined;
  /** The address as the ELF file numbers it (what readelf and nm show). */
  readonly vaddr: bigint | undefined;
  /** The function's symbol as stored (mangled), with version. */
  readonly symbol: string | undefined;
  /** Its demangled name, for C++ and Rust functions. */
  readonly demangled: string | undefined;
  readonly symbolOffset: bigint;
  /** For JIT code: the file that named it (the runtime's perf map or jitdump file). */
  readonly jit?: string | undefined;
}

/** JIT code at `address`, named from the process's perf map or jitdump file, if it is. */
function symbolizeJit(pid: number, address: bigint): Symbolized | undefined {
  const files = new StackFiles();
  const namer = new StackNamer(files);
  try {
    const found = namer.jitName(pid, address);
    if (found === undefined) return undefined;
    return {
      address,
      object: '[jit]',
      fileOffset: undefined,
      vaddr: undefined,
      symbol: found.name,
      demangled: undefined,
      symbolOffset: found.offset,
      jit: namer.jitSources(pid)[0],
    };
  } finally {
    namer.close();
    files.close();
  }
}

/** Which object, file offset and symbol+offset a runtime address of a process is. */
export function symbolizeAddress(pid: number, address: bigint): Symbolized {
  const maps = readProcessMaps(pid);
  const hit = runtimeToFileOffset(maps, address);
  if (hit === undefined || hit.entry.path === '' || hit.entry.pseudo) {
    const jit = symbolizeJit(pid, address);
    if (jit !== undefined) return jit;
    throw new ProbeError(
      'ERR_NOT_MAPPED',
      `Cannot symbolize ${hex(address)} in process ${pid}: no file is mapped at that address`,
      {
        hints: [
          `List what is mapped with: upscope list -p ${pid}`,
          "JIT code is named from the runtime's perf map (/tmp/perf-PID.map) or jitdump file: start it with one (e.g. node --perf-basic-prof)",
        ],
      },
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
