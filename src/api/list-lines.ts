import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { ProbeError, quote } from '../errors/index.js';
import {
  closeDebugInfo,
  type DebugFileUsed,
  isDebugInfo,
  lookupDebugInfo,
  missingDebugInfoHints,
  resolveTarget,
  targetSymbols,
} from '../plan/index.js';
import {
  cloneName,
  DW_AT,
  DwarfFormatError,
  type DwarfReader,
  functionDisplayName,
  type LineAddress,
  type LineTable,
  openElf,
  type SymbolIndex,
} from '../symbols/index.js';

/** One source line as `list --lines` shows it. */
export interface SourceLine {
  readonly line: number;
  /** The text of the line, when the source file was found. */
  readonly text: string | undefined;
  /** True when a probe can go on the line: it has an is_stmt address (in the function). */
  readonly probe: boolean;
  /** Those addresses, lowest first. */
  readonly addresses: readonly bigint[];
}

export interface SourceLineListing {
  readonly target: { readonly path: string; readonly displayPath: string };
  /** The function listed (display name), or undefined for a FILE:START-END range. */
  readonly function: string | undefined;
  /** The source file as the line table names it. */
  readonly file: string;
  /** False when the source file is not at that path: lines come without text. */
  readonly sourceFound: boolean;
  readonly debugFile: DebugFileUsed;
  readonly lines: readonly SourceLine[];
}

export interface ListLinesOptions {
  /** Resolve the target as this process sees it. */
  readonly pid?: number | undefined;
  /** Directories searched for separate debug files, before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * The source lines of a function (`FUNC`) or of a range of a file (`FILE:START-END`, or
 * `FILE:LINE`), each marked when a probe can go on it, as `perf probe -L` shows them. The text
 * comes from the source file the line table names, when it is on this machine.
 */
export function listSourceLines(
  target: string,
  what: string,
  options: ListLinesOptions = {},
): SourceLineListing {
  const resolved = resolveTarget(target, { pid: options.pid });
  const elf = openElf(resolved.path);
  try {
    const info = lookupDebugInfo(elf, resolved.path, { debugDirs: options.debugDirs });
    if (!isDebugInfo(info) || !info.lines.present) {
      throw new ProbeError(
        'ERR_NO_DEBUG_INFO',
        `Cannot list the source lines of ${quote(what)} in ${quote(resolved.displayPath)}: it has no line tables (.debug_line), in itself or a separate debug file`,
        {
          hints: isDebugInfo(info)
            ? ['Rebuild it with -g']
            : missingDebugInfoHints(info, resolved.displayPath),
        },
      );
    }
    const debugFile = { path: info.source.path, how: info.source.how };
    const base = { target: { path: resolved.path, displayPath: resolved.displayPath }, debugFile };
    try {
      const range = /^(.+\.[^:/]+):(\d+)(?:-(\d+))?$/.exec(what);
      if (range !== null) {
        const first = Number(range[2]);
        const last = range[3] === undefined ? first : Number(range[3]);
        return { ...base, ...fileRange(info.lines, range[1]!, first, last, resolved.displayPath) };
      }
      const symbols = targetSymbols(elf, resolved.path, { debugDirs: options.debugDirs });
      return {
        ...base,
        ...functionLines(info.lines, symbols, what, resolved.displayPath, info.dwarf()),
      };
    } catch (err) {
      if (err instanceof DwarfFormatError) {
        throw new ProbeError(
          'ERR_DWARF_INVALID',
          `Cannot read the line table of ${quote(debugFile.path)}: ${err.message}`,
          { cause: err },
        );
      }
      throw err;
    }
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
}

type Listed = Pick<SourceLineListing, 'function' | 'file' | 'sourceFound' | 'lines'>;

function functionLines(
  lines: LineTable,
  symbols: SymbolIndex,
  name: string,
  displayPath: string,
  dwarf: DwarfReader | undefined,
): Listed {
  // The name as probes take it (`app::check`, a Rust path, `helper` for `helper.isra.0`);
  // a .cold part only when named itself.
  const found = symbols.functionsCalled(name);
  const fn =
    found.find((f) => cloneName(f.name)?.cold !== true) ??
    found.find((f) => f.name === name || f.demangled === name);
  if (fn === undefined) {
    throw new ProbeError(
      'ERR_SYMBOL_NOT_FOUND',
      `Cannot list the source lines of ${quote(name)} in ${quote(displayPath)}: no function of that name`,
      {
        hints: [
          `List the functions with: upscope list ${displayPath} '${name.slice(0, 3)}*'`,
          'Or list a range of a file: --lines FILE.c:START-END',
        ],
      },
    );
  }
  const end = fn.vaddr + (fn.sizeBytes === 0n ? 1n : fn.sizeBytes);
  const rows = lines.rowsInRange(fn.vaddr, end);
  // The first row of the function's own code, not of a function inlined at its top (Rust's
  // black_box, from core/src/hint.rs).
  const entry =
    (dwarf === undefined
      ? undefined
      : rows.find((r) => !dwarf.scopesAt(r.vaddr).some((scope) => scope.kind === 'inlined'))) ??
    rows[0];
  if (entry === undefined) {
    throw new ProbeError(
      'ERR_NO_LINE_CODE',
      `Cannot list the source lines of ${quote(name)} in ${quote(displayPath)}: the line tables have no rows for its code`,
      { hints: ['Its compilation unit was built without -g'] },
    );
  }
  // The function's own lines: from the line of its entry to the last line of that file its code
  // has (lines of functions inlined from above it in the file are left out).
  const own = rows.filter((r) => r.file === entry.file && r.line >= entry.line);
  const last = Math.max(...own.map((r) => r.line));
  // From the line it is declared on, when DWARF says and it comes first (perf probe -L does).
  const subprogram = dwarf?.scopesAt(fn.vaddr)[0]?.die;
  const declared =
    subprogram === undefined
      ? undefined
      : dwarf!.info.constant(dwarf!.info.origin(subprogram), DW_AT.decl_line);
  const first =
    typeof declared === 'bigint' && declared > 0n && declared < BigInt(entry.line)
      ? Number(declared)
      : entry.line;
  return {
    function: functionDisplayName(fn),
    ...numbered(entry.file, first, last, own),
  };
}

function fileRange(
  lines: LineTable,
  query: string,
  first: number,
  last: number,
  displayPath: string,
): Listed {
  if (first < 1 || last < first) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot list lines ${first}-${last} of ${quote(query)}: give START-END with 1 <= START <= END`,
    );
  }
  const matches = lines.matchFiles(query);
  if (matches.length !== 1) {
    throw new ProbeError(
      matches.length === 0 ? 'ERR_SOURCE_NOT_FOUND' : 'ERR_SOURCE_AMBIGUOUS',
      matches.length === 0
        ? `Cannot list lines of ${quote(query)} in ${quote(displayPath)}: no such file in its line tables`
        : `Cannot list lines of ${quote(query)} in ${quote(displayPath)}: it matches ${matches.length} files: ${matches.slice(0, 6).join(', ')}`,
      { hints: matches.length === 0 ? [] : ['Name more of the path'] },
    );
  }
  const file = matches[0]!;
  return {
    function: undefined,
    ...numbered(file, first, last, lines.rowsOfLines(file, first, last)),
  };
}

/** Lines first..last of `file`, each with its is_stmt addresses among `rows`. */
function numbered(
  file: string,
  first: number,
  last: number,
  rows: readonly LineAddress[],
): Pick<SourceLineListing, 'file' | 'sourceFound' | 'lines'> {
  const text = readSource(file);
  const addresses = new Map<number, bigint[]>();
  for (const row of rows) {
    if (!row.isStmt) continue;
    const list = addresses.get(row.line) ?? [];
    if (!list.includes(row.vaddr)) list.push(row.vaddr);
    addresses.set(row.line, list);
  }
  const end = text === undefined ? last : Math.min(last, Math.max(first, text.length));
  const listed: SourceLine[] = [];
  for (let line = first; line <= end; line++) {
    const at = (addresses.get(line) ?? []).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    listed.push({ line, text: text?.[line - 1], probe: at.length > 0, addresses: at });
  }
  return { file, sourceFound: text !== undefined, lines: listed };
}

function readSource(file: string): string[] | undefined {
  if (!isAbsolute(file) || !existsSync(file)) return undefined;
  try {
    return readFileSync(file, 'utf8').split('\n');
  } catch {
    return undefined;
  }
}
