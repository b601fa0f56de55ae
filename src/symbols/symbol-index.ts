import type { ElfFile, ElfSymbol, SymbolBinding } from './elf/index.js';

/** A function as `list` shows it and specs resolve to: one per (name, address). */
export interface FunctionSymbol {
  readonly name: string;
  /** Symbol version from .dynsym (`GLIBC_2.2.5`), when the function is exported. */
  readonly version: string | undefined;
  readonly versionHidden: boolean;
  readonly vaddr: bigint;
  readonly sizeBytes: bigint;
  readonly type: 'func' | 'ifunc';
  readonly binding: SymbolBinding;
}

export function functionDisplayName(fn: FunctionSymbol): string {
  if (fn.version === undefined) return fn.name;
  return `${fn.name}${fn.versionHidden ? '@' : '@@'}${fn.version}`;
}

function isFunction(sym: ElfSymbol): boolean {
  return sym.defined && (sym.type === 'func' || sym.type === 'ifunc');
}

function toFunction(sym: ElfSymbol, versioned: ElfSymbol | undefined): FunctionSymbol {
  const source = versioned ?? sym;
  return {
    name: sym.name,
    version: source.version,
    versionHidden: source.versionHidden,
    vaddr: sym.value,
    sizeBytes: sym.size,
    type: sym.type === 'ifunc' ? 'ifunc' : 'func',
    binding: source.binding,
  };
}

/**
 * The functions of one ELF file, from .symtab when present (with versions taken from the
 * matching .dynsym entries) or from .dynsym alone when the file is stripped. Sorted by address
 * then name; lookups by name and by containing address are built lazily.
 */
export class SymbolIndex {
  readonly stripped: boolean;
  readonly functions: readonly FunctionSymbol[];
  #byName: Map<string, FunctionSymbol[]> | undefined;
  #elf: ElfFile;

  constructor(elf: ElfFile) {
    this.#elf = elf;
    this.stripped = !elf.hasSymtab;
    const dynamic = elf.symbols('dynsym');
    const functions: FunctionSymbol[] = [];
    if (this.stripped) {
      for (const sym of dynamic) if (isFunction(sym)) functions.push(toFunction(sym, undefined));
    } else {
      const exported = new Map<string, ElfSymbol>();
      for (const sym of dynamic) {
        if (isFunction(sym) && sym.version !== undefined) exported.set(`${sym.value}:${sym.name}`, sym);
      }
      const seen = new Set<string>();
      for (const sym of elf.symbols('symtab')) {
        if (!isFunction(sym)) continue;
        const key = `${sym.value}:${sym.name}`;
        if (seen.has(key)) continue;
        seen.add(key);
        functions.push(toFunction(sym, exported.get(key)));
      }
      // Exported functions missing from .symtab (rare: partial strips) still count.
      for (const [key, sym] of exported) if (!seen.has(key)) functions.push(toFunction(sym, undefined));
    }
    functions.sort(compareFunctions);
    this.functions = functions;
  }

  /** Functions with this exact name (several when static functions in different files share it). */
  named(name: string): readonly FunctionSymbol[] {
    if (this.#byName === undefined) {
      this.#byName = new Map();
      for (const fn of this.functions) {
        const list = this.#byName.get(fn.name);
        if (list === undefined) this.#byName.set(fn.name, [fn]);
        else list.push(fn);
      }
    }
    return this.#byName.get(name) ?? [];
  }

  /** All functions at one address (aliases such as malloc and __libc_malloc). */
  at(vaddr: bigint): readonly FunctionSymbol[] {
    let i = this.#lowerBound(vaddr);
    const found: FunctionSymbol[] = [];
    while (i < this.functions.length && this.functions[i]!.vaddr === vaddr) found.push(this.functions[i++]!);
    return found;
  }

  /** The function whose [start, start + size) holds the address, preferring exported names. */
  containing(vaddr: bigint): FunctionSymbol | undefined {
    let i = this.#lowerBound(vaddr + 1n) - 1;
    let best: FunctionSymbol | undefined;
    // Walk back over functions that start at or before the address; nested or overlapping
    // symbols are rare, so this loop runs a handful of times at most.
    for (let steps = 0; i >= 0 && steps < 64; i--, steps++) {
      const fn = this.functions[i]!;
      if (best !== undefined && fn.vaddr < best.vaddr) break;
      const end = fn.vaddr + (fn.sizeBytes === 0n ? 1n : fn.sizeBytes);
      if (vaddr < end && (best === undefined || preferName(fn, best))) best = fn;
    }
    return best;
  }

  /** Every defined symbol of any type with this name, to explain why a name is not a function. */
  anySymbolNamed(name: string): ElfSymbol | undefined {
    const table = this.stripped ? 'dynsym' : 'symtab';
    return this.#elf.symbols(table).find((sym) => sym.name === name) ??
      this.#elf.symbols('dynsym').find((sym) => sym.name === name);
  }

  #lowerBound(vaddr: bigint): number {
    let lo = 0;
    let hi = this.functions.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.functions[mid]!.vaddr < vaddr) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** The name to show for an address with several: global over weak over local, then shortest. */
export function preferName(a: FunctionSymbol, b: FunctionSymbol): boolean {
  const rank = (fn: FunctionSymbol) =>
    fn.binding === 'global' ? 0 : fn.binding === 'weak' ? 1 : fn.binding === 'unique' ? 2 : 3;
  if (rank(a) !== rank(b)) return rank(a) < rank(b);
  const underscores = (fn: FunctionSymbol) => /^_*/.exec(fn.name)![0].length;
  if (underscores(a) !== underscores(b)) return underscores(a) < underscores(b);
  return a.name.length < b.name.length;
}

function compareFunctions(a: FunctionSymbol, b: FunctionSymbol): number {
  if (a.vaddr !== b.vaddr) return a.vaddr < b.vaddr ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}
