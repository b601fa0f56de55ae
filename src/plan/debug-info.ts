import { ProbeError, quote } from '../errors/index.js';
import { debugPackageName, owningPackage } from '../host/index.js';
import {
  type DebugFileCandidate,
  type DebugFileRejection,
  type DebugInfoSource,
  DwarfFormatError,
  DwarfReader,
  type ElfFile,
  findDebugInfo,
  LineTable,
  miniDebugInfo,
  SymbolIndex,
} from '../symbols/index.js';

/** The debug info a target's source-line queries read, and where it was found. */
export interface DebugInfo {
  readonly source: DebugInfoSource;
  readonly lines: LineTable;
  /** The .debug_info reader (variables, types, inlined instances), or undefined without it. */
  dwarf(): DwarfReader | undefined;
}

/** Where debug info was found, as reports show it. */
export interface DebugFileUsed {
  readonly path: string;
  readonly how: DebugInfoSource['how'];
}

/** Why a file has no debug info: where it was looked for, and what would provide it. */
export interface MissingDebugInfo {
  readonly candidates: readonly DebugFileCandidate[];
  readonly rejected: readonly DebugFileRejection[];
  /** The Debian package that installed the file, when dpkg knows it. */
  readonly package: string | undefined;
  /** The package that would provide its debug info (`<package>-dbgsym`). */
  readonly debugPackage: string | undefined;
}

export interface DebugInfoOptions {
  /** Directories searched like /usr/lib/debug, before it (gdb's debug-file-directory). */
  readonly debugDirs?: readonly string[] | undefined;
}

const open = new WeakMap<ElfFile, DebugInfo | MissingDebugInfo>();

/**
 * The debug info of an opened target: its own DWARF, or its separate debug file (by build-id,
 * then .gnu_debuglink). Cached per ElfFile; closeDebugInfo() closes a separate file opened here.
 */
export function lookupDebugInfo(
  elf: ElfFile,
  path: string,
  options: DebugInfoOptions = {},
): DebugInfo | MissingDebugInfo {
  const known = open.get(elf);
  if (known !== undefined) return known;
  const found = findDebugInfo(elf, path, { debugDirs: options.debugDirs });
  let result: DebugInfo | MissingDebugInfo;
  if (found.found) {
    const source: DebugInfoSource = { elf: found.elf, path: found.path, how: found.how };
    let dwarf: DwarfReader | undefined | null = null;
    const reader = (): DwarfReader | undefined => {
      if (dwarf === null) {
        const made = DwarfReader.fromDebugFile(found.elf, elf);
        dwarf = made.hasInfo ? made : undefined;
      }
      return dwarf;
    };
    result = {
      source,
      // DWARF 4 line tables name files relative to the unit's compilation directory, which
      // only .debug_info holds.
      lines: LineTable.of(found.elf, {
        compDirOf: (offset) => reader()?.compDirOfLineProgram(offset),
      }),
      dwarf: reader,
    };
  } else {
    // dpkg is asked only when a message needs the package (a process per question).
    let owner: string | undefined | null = null;
    const ownerOf = () => {
      if (owner === null) owner = owningPackage(path);
      return owner;
    };
    result = {
      candidates: found.candidates,
      rejected: found.rejected,
      get package() {
        return ownerOf();
      },
      get debugPackage() {
        const known = ownerOf();
        return known === undefined ? undefined : debugPackageName(known);
      },
    };
  }
  open.set(elf, result);
  return result;
}

const indexes = new WeakMap<ElfFile, SymbolIndex>();

/**
 * The function symbols of an opened target, the one index every command names functions
 * with (probes, `list`, stack frames, IFUNC implementations): its own .symtab; else, when it
 * is stripped, the .symtab of its separate debug file (the one its DWARF is read from, found
 * by build-id or .gnu_debuglink, as gdb, perf and bpftrace find it); else its .dynsym, with
 * its MiniDebugInfo's .symtab where it carries one (.gnu_debugdata, as gdb and perf). Cached
 * per ElfFile; closeDebugInfo() closes a debug file opened here.
 */
export function targetSymbols(
  elf: ElfFile,
  path: string,
  options: DebugInfoOptions = {},
): SymbolIndex {
  let index = indexes.get(elf);
  if (index === undefined) {
    let debugFile: { elf: ElfFile; path: string } | undefined;
    let mini: ElfFile | undefined;
    if (!elf.hasSymtab) {
      const info = lookupDebugInfo(elf, path, options);
      if (isDebugInfo(info) && info.source.elf !== elf) {
        debugFile = { elf: info.source.elf, path: info.source.path };
      }
      if (debugFile?.elf.hasSymtab !== true) mini = miniDebugInfo(elf);
    }
    index = new SymbolIndex(elf, { debugFile, miniDebugInfo: mini });
    indexes.set(elf, index);
  }
  return index;
}

/** Where debug symbols were looked for, for a message about a stripped file. */
export function missingDebugSymbolsHints(
  elf: ElfFile,
  path: string,
  displayPath: string,
  options: DebugInfoOptions = {},
): string[] {
  const info = lookupDebugInfo(elf, path, options);
  if (isDebugInfo(info)) return [];
  return missingDebugInfoHints(info, displayPath);
}

export function isDebugInfo(info: DebugInfo | MissingDebugInfo): info is DebugInfo {
  return 'source' in info;
}

/** Closes the separate debug file lookupDebugInfo() opened for `elf`, if any. */
export function closeDebugInfo(elf: ElfFile): void {
  const known = open.get(elf);
  if (known !== undefined && isDebugInfo(known) && known.source.elf !== elf) {
    known.source.elf.close();
  }
  open.delete(elf);
  indexes.delete(elf);
}

/** The hints that tell a user where debug info was looked for and how to get it. */
export function missingDebugInfoHints(missing: MissingDebugInfo, displayPath: string): string[] {
  const hints: string[] = [];
  for (const r of missing.rejected) hints.push(`Not used: ${r.path} (${r.reason})`);
  const buildId = missing.candidates.find((c) => c.how === 'build-id');
  const places = missing.candidates.map((c) => c.path);
  if (places.length > 0) {
    hints.push(
      `Separate debug info was looked for in: ${places.slice(0, 4).join(', ')}${places.length > 4 ? ', ...' : ''}`,
    );
  } else {
    hints.push(`${displayPath} has no build-id and no .gnu_debuglink to find a debug file by`);
  }
  if (missing.debugPackage !== undefined) {
    hints.push(
      `On Debian, install ${missing.debugPackage} (debug symbols of ${missing.package}, from the debian-debug archive)${buildId === undefined ? '' : `; it provides ${buildId.path}`}`,
    );
  } else {
    hints.push('Rebuild it with -g, or point to its debug file directory with --debug-dir DIR');
  }
  return hints;
}

/** The ProbeError for a DWARF table that cannot be read. */
export function dwarfInvalid(what: string, err: DwarfFormatError, file: string): ProbeError {
  return new ProbeError(
    'ERR_DWARF_INVALID',
    `Cannot read ${what} of ${quote(file)}: ${err.message}`,
    {
      hints: [
        'The debug info is corrupt or of a kind upscope does not read; check it with: readelf --debug-dump=decodedline ' +
          file,
      ],
      cause: err,
    },
  );
}

export { DwarfFormatError };
