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
  SymbolIndex,
} from '../symbols/index.js';

/** The debug info a target's source-line queries read, and where it was found. */
export interface DebugInfo {
  readonly source: DebugInfoSource;
  readonly lines: LineTable;
  /** The .debug_info reader (variables, types, inlined instances), or undefined without it. */
  dwarf(): DwarfReader | undefined;
  /**
   * The function symbols of the debug file when it is separate and the target is stripped (an
   * --only-keep-debug file keeps .symtab), else undefined: use the target's.
   */
  debugSymbols(): SymbolIndex | undefined;
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
    let symbols: SymbolIndex | undefined;
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
      debugSymbols: () => {
        if (found.elf === elf || elf.hasSymtab || !found.elf.hasSymtab) return undefined;
        symbols ??= new SymbolIndex(found.elf);
        return symbols;
      },
    };
  } else {
    const owner = owningPackage(path);
    result = {
      candidates: found.candidates,
      rejected: found.rejected,
      package: owner,
      debugPackage: owner === undefined ? undefined : debugPackageName(owner),
    };
  }
  open.set(elf, result);
  return result;
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
