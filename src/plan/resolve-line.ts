import { ProbeError, quote, type Span } from '../errors/index.js';
import { closest, didYouMean } from '../internal/index.js';
import type { Location, ProbeSpec } from '../spec/index.js';
import {
  DwarfFormatError,
  type DwarfReader,
  type ElfFile,
  type FunctionSymbol,
  firstAddressPerContext,
  type InlineContext,
  type LineAddress,
  type LineTable,
  nearestLines,
  type SymbolIndex,
} from '../symbols/index.js';
import {
  type DebugFileUsed,
  type DebugInfo,
  dwarfInvalid,
  isDebugInfo,
  lookupDebugInfo,
  missingDebugInfoHints,
} from './debug-info.js';
import type { SourceSite } from './probe-site.js';

/** What resolving a line needs of an opened target. */
export interface LineTarget {
  readonly elf: ElfFile;
  readonly file: { readonly path: string; readonly displayPath: string };
  symbols(): SymbolIndex;
}

/** One address to probe for a source line, with the function holding it. */
export interface LineSiteAddress {
  readonly vaddr: bigint;
  readonly fn: FunctionSymbol | undefined;
  readonly source: SourceSite;
}

export interface ResolveLineOptions {
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * The addresses of `FILE:LINE` in a target: every copy of the line (each function it was
 * compiled or inlined into), at the lowest is_stmt address of the copy, as gdb places one
 * breakpoint per location. Throws a ProbeError naming the spec when the file has no debug info,
 * the file name matches no file or several, or no code was generated for the line.
 */
export function resolveLineAddresses(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'line' }>,
  target: LineTarget,
  options: ResolveLineOptions = {},
): LineSiteAddress[] {
  const what = `${location.file}:${location.line}`;
  const fail = (
    code: ConstructorParameters<typeof ProbeError>[0],
    message: string,
    hints: string[] = [],
    cause?: unknown,
  ) =>
    new ProbeError(code, message, {
      source: { text: spec.text, span: location.span },
      hints,
      cause,
    });
  const info = debugInfoOf(target, options, spec.text, location.span);
  const lines = info.lines;
  const displayPath = target.file.displayPath;
  const debugFile: DebugFileUsed = { path: info.source.path, how: info.source.how };
  try {
    const path = pickFile(lines, location.file, what, displayPath, spec, fail);
    const rows = lines.rowsOfLine(path, location.line);
    const symbols = target.symbols();
    const picked = firstAddressPerContext(rows, lineCopies(rows, symbols, info.dwarf()));
    if (picked.length === 0) {
      const near = nearestLines(lines.linesWithCode(path), location.line);
      const nearText =
        near.length === 0
          ? 'the file has no lines with code'
          : `nearby lines with code: ${near.join(', ')}`;
      throw fail(
        'ERR_NO_LINE_CODE',
        `Cannot probe ${what}: no code was generated for that line; ${nearText}`,
        [
          'A comment, a declaration or code the compiler merged or removed has no address',
          ...(near.length > 0
            ? [`Probe a line with code, e.g. ${spec.target.text}:${location.file}:${near[0]}`]
            : []),
        ],
      );
    }
    return picked.map((row: LineAddress) => ({
      vaddr: row.vaddr,
      fn: symbols.containing(row.vaddr),
      source: { file: row.file, line: row.line, column: row.column, debugFile },
    }));
  } catch (err) {
    if (err instanceof DwarfFormatError)
      throw withSpec(dwarfInvalid('the line table', err, debugFile.path), spec, location.span);
    throw err;
  }
}

/**
 * Which copy of a line each of its addresses belongs to. Per function symbol, a line has one
 * copy, unless it belongs to a function inlined there more than once: the function whose line
 * it is, is the deepest one (by abstract origin) that every address of the line in that symbol
 * is inside, and each inlined instance of it is a copy (gdb's locations). An instruction of
 * the line that the compiler scheduled into another inlined call does not make a copy.
 */
function lineCopies(
  rows: readonly LineAddress[],
  symbols: SymbolIndex,
  dwarf: DwarfReader | undefined,
): (vaddr: bigint) => string | undefined {
  const chains = new Map<bigint, InlineContext[]>();
  const bySymbol = new Map<bigint | undefined, bigint[]>();
  for (const row of rows) {
    if (!row.isStmt || chains.has(row.vaddr)) continue;
    const fn = symbols.containing(row.vaddr)?.vaddr;
    let innermost: InlineContext | undefined;
    try {
      innermost = dwarf?.inlineContextAt(row.vaddr);
    } catch (err) {
      // A damaged .debug_info costs the split of inlined copies, not the line probe.
      if (!(err instanceof DwarfFormatError)) throw err;
    }
    const chain: InlineContext[] = [];
    for (let c = innermost; c !== undefined; c = c.caller) chain.unshift(c);
    chains.set(row.vaddr, chain);
    const group = bySymbol.get(fn) ?? [];
    group.push(row.vaddr);
    bySymbol.set(fn, group);
  }
  const keys = new Map<bigint, string>();
  for (const [fn, addresses] of bySymbol) {
    const origin = deepestCommonOrigin(addresses.map((a) => chains.get(a)!));
    for (const address of addresses) {
      const copy = chains.get(address)!.find((c) => c.originOffset === origin);
      keys.set(address, `${fn ?? ''}/${copy?.dieOffset ?? ''}`);
    }
  }
  return (vaddr) => keys.get(vaddr);
}

/** The abstract origin deepest in the first chain that every chain passes through. */
function deepestCommonOrigin(chains: readonly InlineContext[][]): number | undefined {
  const first = chains[0] ?? [];
  for (let i = first.length - 1; i >= 0; i--) {
    const origin = first[i]!.originOffset;
    if (chains.every((chain) => chain.some((c) => c.originOffset === origin))) return origin;
  }
  return undefined;
}

/** The one file of the line tables that `query` names. */
function pickFile(
  lines: LineTable,
  query: string,
  what: string,
  displayPath: string,
  spec: ProbeSpec,
  fail: (
    code: 'ERR_SOURCE_NOT_FOUND' | 'ERR_SOURCE_AMBIGUOUS',
    message: string,
    hints?: string[],
  ) => ProbeError,
): string {
  const matches = lines.matchFiles(query);
  if (matches.length === 1) return matches[0]!;
  if (matches.length > 1) {
    const shown = matches.slice(0, 6).join(', ');
    throw fail(
      'ERR_SOURCE_AMBIGUOUS',
      `Cannot resolve source line ${quote(what)} in ${quote(displayPath)}: ${quote(query)} matches ${matches.length} files: ${shown}${matches.length > 6 ? ', ...' : ''}`,
      [
        `Name more of the path, e.g. ${spec.target.text}:${matches[0]}:${what.slice(what.lastIndexOf(':') + 1)}`,
      ],
    );
  }
  const files = lines.sourceFiles();
  const base = query.slice(query.lastIndexOf('/') + 1);
  const names = [...new Set(files.map((f) => f.slice(f.lastIndexOf('/') + 1)))];
  const hints: string[] = [];
  const suggestion = didYouMean(closest(base, names, 3));
  if (suggestion !== undefined) hints.push(suggestion);
  const sources = files.filter((f) => !f.endsWith('.h') && !f.startsWith('/usr/'));
  if (sources.length > 0) {
    hints.push(
      `Its source files include: ${sources.slice(0, 5).join(', ')}${sources.length > 5 ? ', ...' : ''}`,
    );
  }
  throw fail(
    'ERR_SOURCE_NOT_FOUND',
    `Cannot resolve source line ${quote(what)} in ${quote(displayPath)}: no file ${quote(query)} in its line tables`,
    hints,
  );
}

/** The target's debug info, or the ProbeError saying where it was looked for. */
function debugInfoOf(
  target: LineTarget,
  options: ResolveLineOptions,
  text: string,
  span: Span,
): DebugInfo {
  const info = lookupDebugInfo(target.elf, target.file.path, { debugDirs: options.debugDirs });
  if (isDebugInfo(info)) {
    if (!info.lines.present) {
      throw new ProbeError(
        'ERR_NO_DEBUG_INFO',
        `Cannot resolve source lines in ${quote(target.file.displayPath)}: its debug info (${info.source.path}) has no .debug_line section`,
        {
          source: { text, span },
          hints: ['Rebuild it with -g (line tables are part of any -g level but -g0)'],
        },
      );
    }
    return info;
  }
  throw new ProbeError(
    'ERR_NO_DEBUG_INFO',
    `Cannot resolve source lines in ${quote(target.file.displayPath)}: it has no debug info (no .debug_line) and no separate debug file was found`,
    { source: { text, span }, hints: missingDebugInfoHints(info, target.file.displayPath) },
  );
}

function withSpec(err: ProbeError, spec: ProbeSpec, span: Span): ProbeError {
  return new ProbeError(err.code, err.message, {
    hints: [...err.hints],
    cause: err.cause,
    source: { text: spec.text, span },
  });
}
