import { ripRelativeTargets } from '../arch/index.js';
import type { ElfFile, FunctionSymbol, SymbolIndex } from '../symbols/index.js';

export interface IfuncImplementation {
  readonly vaddr: bigint;
  /** The implementation's symbol name when .symtab (or a debug file) has one. */
  readonly name: string | undefined;
  /** Its function, when a symbol names it. */
  readonly fn: FunctionSymbol | undefined;
}

/** Resolvers are small; never decode more than this much of one. */
const MAX_RESOLVER_BYTES = 4096n;

/**
 * The functions an IFUNC resolver can pick. A resolver returns the address of one of its
 * implementations, which compiled code loads with RIP-relative `lea`s; the targets of those
 * that land in executable code outside the resolver itself are the candidates.
 */
export function findIfuncImplementations(
  elf: ElfFile,
  symbols: SymbolIndex,
  resolver: FunctionSymbol,
): IfuncImplementation[] {
  const size =
    resolver.sizeBytes === 0n || resolver.sizeBytes > MAX_RESOLVER_BYTES
      ? MAX_RESOLVER_BYTES
      : resolver.sizeBytes;
  const fileOffset = elf.vaddrToFileOffset(resolver.vaddr);
  const segment = elf.loadSegmentOf(resolver.vaddr);
  if (fileOffset === undefined || segment === undefined) return [];
  const available = segment.vaddr + segment.fileSize - resolver.vaddr;
  const bytes = elf.read(fileOffset, Number(size < available ? size : available));
  const found = new Map<bigint, IfuncImplementation>();
  for (const target of ripRelativeTargets(bytes, resolver.vaddr)) {
    if (target >= resolver.vaddr && target < resolver.vaddr + size) continue;
    if (found.has(target) || elf.loadSegmentOf(target)?.executable !== true) continue;
    const named = symbols.at(target).find((fn) => fn.type === 'func');
    found.set(target, { vaddr: target, name: named?.name, fn: named });
  }
  return [...found.values()].sort((a, b) => (a.vaddr < b.vaddr ? -1 : 1));
}

/** Every address some IFUNC resolver of the file can pick: known function starts. */
export function allIfuncImplementations(elf: ElfFile, symbols: SymbolIndex): Set<bigint> {
  const starts = new Set<bigint>();
  for (const fn of symbols.functions) {
    if (fn.type !== 'ifunc') continue;
    for (const impl of findIfuncImplementations(elf, symbols, fn)) starts.add(impl.vaddr);
  }
  return starts;
}
