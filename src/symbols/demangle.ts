/**
 * C++ (Itanium) and Rust (legacy and v0) demangling, through the npm package
 * gecko-profiler-demangle: the Rust crates cpp_demangle and rustc-demangle compiled to
 * WebAssembly (the Firefox profiler's demangler). Its own JavaScript glue imports the .wasm as
 * an ES module, which Node 20 cannot do, so the module is compiled here by hand, once, on the
 * first call, and called through the wasm-bindgen ABI it exports:
 *
 * - `__wbindgen_malloc(len, align)` reserves bytes in its memory for the UTF-8 input;
 * - `demangle_any(ptr, len)` returns `[ptr, len]` of a UTF-8 string it allocated (and frees
 *   the input);
 * - `__wbindgen_free(ptr, len, align)` releases that string;
 * - `__wbindgen_start()` runs once after instantiation and calls back the one import,
 *   `__wbindgen_init_externref_table`, which fills the first slots of its externref table.
 *
 * `demangle_any` answers every string: the demangled name, or the input itself, or (for a
 * name starting with "_" that no demangler accepts, a macOS habit) the input less its first
 * character. Only names that start as mangled names do (`_Z`, `_R`) are passed to it, and an
 * answer that is the input less its first character means "not mangled".
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { InternalError } from '../errors/index.js';

/** The parts of the WebAssembly API used here (the project's type libraries do not declare it). */
interface WebAssemblyApi {
  readonly Module: new (bytes: Uint8Array) => WasmModule;
  readonly Instance: new (module: WasmModule, imports: object) => { readonly exports: unknown };
}
type WasmModule = { readonly __brand: 'WebAssembly.Module' };
const wasmApi = (globalThis as unknown as { readonly WebAssembly: WebAssemblyApi }).WebAssembly;

interface DemanglerExports {
  readonly memory: { readonly buffer: ArrayBuffer };
  readonly __wbindgen_export_0: {
    grow(delta: number): number;
    set(index: number, value: unknown): void;
  };
  demangle_any(ptr: number, len: number): [number, number];
  __wbindgen_malloc(size: number, align: number): number;
  __wbindgen_free(ptr: number, size: number, align: number): void;
  __wbindgen_start(): void;
}

let compiled: WasmModule | undefined;
let instance: DemanglerExports | undefined;
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** The compiled module, read from the package on first use (about 4 ms: compiled lazily). */
function demanglerModule(): WasmModule {
  if (compiled === undefined) {
    let bytes: Buffer;
    try {
      const path = createRequire(import.meta.url).resolve('gecko-profiler-demangle/index_bg.wasm');
      bytes = readFileSync(path);
      compiled = new wasmApi.Module(bytes);
    } catch (cause) {
      throw new InternalError(
        `Cannot load the demangler "gecko-profiler-demangle": ${cause instanceof Error ? cause.message : String(cause)}`,
        cause,
      );
    }
  }
  return compiled;
}

function instantiate(): DemanglerExports {
  let exports: DemanglerExports | undefined;
  const imports = {
    './index_bg.js': {
      __wbindgen_init_externref_table(): void {
        // Slot 0 and the four constants wasm-bindgen expects: undefined, null, true, false.
        const table = exports!.__wbindgen_export_0;
        const offset = table.grow(4);
        table.set(0, undefined);
        table.set(offset, undefined);
        table.set(offset + 1, null);
        table.set(offset + 2, true);
        table.set(offset + 3, false);
      },
    },
  };
  exports = new wasmApi.Instance(demanglerModule(), imports).exports as unknown as DemanglerExports;
  exports.__wbindgen_start();
  return exports;
}

/** Printable ASCII without spaces: what mangled names are made of (Rust v0 uses punycode). */
const MANGLED_CHARS = /^[\x21-\x7e]+$/;

/** The longest name passed to the demangler; symbol names beyond this are not real. */
const MAX_NAME_LENGTH = 1 << 16;

/** True when `name` looks like an Itanium C++ (`_Z`) or Rust v0 (`_R`) mangled name. */
export function looksMangled(name: string): boolean {
  return (
    name.length > 2 &&
    name.charCodeAt(0) === 0x5f &&
    (name.charCodeAt(1) === 0x5a || name.charCodeAt(1) === 0x52)
  );
}

/**
 * A demangler of C++ names as libiberty writes them (what c++filt, gdb and perf show): the
 * NUL-terminated name at the start of `mangled` demangled, or undefined when it cannot be.
 */
export type CxxDemangler = (mangled: Uint8Array) => string | undefined;

let cxxProvider: (() => CxxDemangler | undefined) | undefined;
let cxxKnown: CxxDemangler | null | undefined;

/**
 * Demangle C++ names with what `provider` gives (the host's libstdc++: see src/host), asked
 * for on the first C++ name: libiberty's demangler, about three times as fast as the
 * WebAssembly one and right where it is wrong (it loses or changes parameters of some
 * variadic templates: `node::SPrintF<unsigned long>(char const*, unsigned long)` for
 * `(char const*, unsigned long&&)`). Without one, or where it fails, and for Rust names, the
 * WebAssembly demangler names them.
 */
export function useCxxDemangler(provider: () => CxxDemangler | undefined): void {
  cxxProvider = provider;
  cxxKnown = undefined;
}

/**
 * Which demangler names C++ names here: `libiberty` (the host's, see useCxxDemangler()) or
 * `cpp_demangle` (the WebAssembly one). What names a kept plan holds depends on it.
 */
export function cxxDemanglerName(): 'libiberty' | 'cpp_demangle' {
  return cxxDemangler() === undefined ? 'cpp_demangle' : 'libiberty';
}

function cxxDemangler(): CxxDemangler | undefined {
  if (cxxKnown === undefined) {
    let found: CxxDemangler | undefined;
    try {
      found = cxxProvider?.();
    } catch {
      found = undefined;
    }
    cxxKnown = found ?? null;
  }
  return cxxKnown ?? undefined;
}

/**
 * A Rust legacy name ends as `17h` and a 16-digit hash, then `E` (and maybe a clone's
 * suffix): it is left to rustc-demangle, which leaves the hash out.
 */
const RUST_LEGACY_HASH = /17h[0-9a-f]{16}E(?:\.[A-Za-z_]+(?:\.\d+)?)*$/;

/** An Itanium C++ name (`_Z`), not a Rust legacy one. */
function isCxxName(name: string): boolean {
  return name.charCodeAt(1) === 0x5a && !RUST_LEGACY_HASH.test(name);
}

function isCxxNameBytes(strings: Uint8Array, from: number, to: number): boolean {
  if (strings[from + 1] !== 0x5a) return false;
  // A hash ends the name, or comes before a clone's suffix (with a dot): look at the bytes
  // first, and make a string of the end only where there may be one.
  let dot = false;
  for (let i = Math.max(from, to - 24); i < to; i++) {
    if (strings[i] === 0x2e) dot = true;
  }
  if (!dot) {
    const at = to - 20;
    if (strings[to - 1] !== 0x45 || at < from) return true;
    if (strings[at] !== 0x31 || strings[at + 1] !== 0x37 || strings[at + 2] !== 0x68) return true;
  }
  const tail = Buffer.from(strings.buffer, strings.byteOffset + from, to - from);
  return !RUST_LEGACY_HASH.test(tail.toString('latin1'));
}

/**
 * A libiberty name in the form upscope shows, as the WebAssembly demangler writes it: without
 * the return type libiberty writes first for a function template's specialization (`void
 * ns::apply<int>(int)` is shown `ns::apply<int>(int)`). It is there only when template
 * arguments end the name, right before the parameter list; it ends at the last space outside
 * brackets before the name (a space after `operator` belongs to the name). A name this cannot
 * read with certainty is left whole.
 */
export function withoutReturnType(demangled: string): string {
  // Most names have no template arguments right before a parameter list.
  if (!demangled.includes('>(')) return demangled;
  const clone = demangled.indexOf(' [clone ');
  const named = clone < 0 ? demangled : demangled.slice(0, clone);
  const parameters = parameterListStart(named);
  if (parameters === undefined || named[parameters - 1] !== '>') return demangled;
  let depth = 0;
  for (let i = parameters - 1; i >= 0; i--) {
    const c = named[i]!;
    if (c === '>' || c === ')' || c === ']' || c === '}') depth++;
    else if (c === '<' || c === '(' || c === '[' || c === '{') {
      depth--;
      if (depth < 0) return demangled;
    } else if (c === ' ' && depth === 0) {
      // `ns::operator< <int>`, `ns::X::operator new`: the operator's name, go on before it.
      const operator = /\boperator\S*$/.exec(named.slice(0, i));
      if (operator !== null) {
        i = operator.index;
        continue;
      }
      return demangled.slice(i + 1);
    }
  }
  return demangled;
}

/**
 * The demangled form of a C++ (Itanium ABI) or Rust (legacy or v0) symbol name, as
 * `ns::Class::method(int) const`, `mycrate::module::function` (Rust hashes and crate
 * disambiguators left out), or undefined when `name` is not a mangled name. A suffix GCC adds
 * to a clone (`.cold`, `.isra.0`) is shown as `[clone .cold]`, as c++filt does. Never throws
 * on any input; synchronous (the WebAssembly module is compiled on the first call).
 */
export function demangle(name: string): string | undefined {
  if (typeof name !== 'string' || !looksMangled(name)) return undefined;
  if (name.length > MAX_NAME_LENGTH || !MANGLED_CHARS.test(name)) return undefined;
  const cxx = cxxDemangler();
  if (cxx !== undefined && isCxxName(name)) {
    const named = cxx(encoder.encode(`${name}\0`));
    if (named !== undefined) return withoutReturnType(named);
  }
  instance ??= instantiate();
  const wasm = instance;
  const input = encoder.encode(name);
  let result: [number, number] | undefined;
  try {
    const ptr = wasm.__wbindgen_malloc(input.length, 1) >>> 0;
    new Uint8Array(wasm.memory.buffer, ptr, input.length).set(input);
    result = wasm.demangle_any(ptr, input.length);
    const out = decoder.decode(
      new Uint8Array(wasm.memory.buffer, result[0] >>> 0, result[1] >>> 0),
    );
    if (out === name || out === name.slice(1) || out === '') return undefined;
    return out;
  } catch {
    // A trap (a panic in the demangler) leaves its memory in an unknown state: start afresh.
    instance = undefined;
    result = undefined;
    return undefined;
  } finally {
    if (result !== undefined) wasm.__wbindgen_free(result[0], result[1], 1);
  }
}

/** Demangled names of many symbols, as UTF-8 bytes in one buffer. */
export interface DemangledNames {
  readonly bytes: Buffer;
  /** Where name k starts in `bytes`, or -1 when name k is not a mangled name. */
  readonly start: Int32Array;
  readonly end: Int32Array;
}

/** True when bytes [start, end) look like a mangled name demangle() would take. */
function looksMangledBytes(strings: Uint8Array, start: number, end: number): boolean {
  if (end - start <= 2 || end - start > MAX_NAME_LENGTH || strings[start] !== 0x5f) return false;
  const second = strings[start + 1];
  if (second !== 0x5a && second !== 0x52) return false;
  for (let i = start + 2; i < end; i++) {
    const c = strings[i]!;
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

/**
 * demangle() for many names at once, given as byte ranges of a string table (name k is
 * `strings[starts[k], ends[k])`, as an ELF symbol table holds them): each name goes to the
 * demangler straight from the table and its answer is copied into one buffer, so no string is
 * made for either. The same answers as demangle(); about twice as fast for /usr/bin/node's
 * 66,000 C++ names, where strings cost as much as demangling.
 */
export function demangleNames(
  strings: Uint8Array,
  starts: ArrayLike<number>,
  ends: ArrayLike<number>,
): DemangledNames {
  const count = starts.length;
  const start = new Int32Array(count).fill(-1);
  const end = new Int32Array(count).fill(-1);
  // Room for the answers at once: a demangled C++ name is about 1.4 times as long.
  let input = 0;
  for (let k = 0; k < count; k++) {
    if (ends[k]! - starts[k]! > 2 && strings[starts[k]!] === 0x5f) input += ends[k]! - starts[k]!;
  }
  let bytes = Buffer.allocUnsafe(Math.max(1 << 12, Math.ceil(input * 1.6)));
  let used = 0;
  const room = (length: number) => {
    if (used + length <= bytes.length) return;
    const grown = Buffer.allocUnsafe(Math.max(bytes.length * 2, used + length));
    bytes.copy(grown, 0, 0, used);
    bytes = grown;
  };
  demangleEach(
    strings,
    starts,
    ends,
    (k, text) => {
      const length = Buffer.byteLength(text);
      room(length);
      bytes.write(text, used, 'utf8');
      start[k] = used;
      used += length;
      end[k] = used;
    },
    (k, memory, at, length) => {
      room(length);
      for (let i = 0; i < length; i++) bytes[used + i] = memory[at + i]!;
      start[k] = used;
      used += length;
      end[k] = used;
    },
  );
  return { bytes: bytes.subarray(0, used), start, end };
}

/**
 * demangleNames() as strings: name k demangled, or null when it is not a mangled name. For a
 * caller that makes a string of each (a pattern's matches): no buffer in between.
 */
export function demangleNameStrings(
  strings: Uint8Array,
  starts: ArrayLike<number>,
  ends: ArrayLike<number>,
): (string | null)[] {
  const names: (string | null)[] = new Array(starts.length).fill(null);
  demangleEach(
    strings,
    starts,
    ends,
    (k, text) => {
      names[k] = text;
    },
    (k, memory, at, length) => {
      names[k] = Buffer.from(memory.buffer, memory.byteOffset + at, length).toString('utf8');
    },
  );
  return names;
}

/**
 * The demangling of demangleNames(): each mangled name k, demangled, given to `text` (by the
 * C++ demangler) or `utf8` (the WebAssembly one's answer, in its memory, valid until the next
 * name); a name that is not mangled is given to neither.
 */
function demangleEach(
  strings: Uint8Array,
  starts: ArrayLike<number>,
  ends: ArrayLike<number>,
  text: (k: number, name: string) => void,
  utf8: (k: number, memory: Uint8Array, at: number, length: number) => void,
): void {
  const count = starts.length;
  // One view of the demangler's memory, made again only when the memory grows.
  let memory: Uint8Array | undefined;
  const cxx = cxxDemangler();
  /** A name with the NUL after it, where the table has a version there instead. */
  let terminated = new Uint8Array(256);
  for (let k = 0; k < count; k++) {
    const from = starts[k]!;
    const to = ends[k]!;
    if (!looksMangledBytes(strings, from, to)) continue;
    if (cxx !== undefined && isCxxNameBytes(strings, from, to)) {
      let name: Uint8Array;
      if (strings[to] === 0) {
        name = strings.subarray(from, to + 1);
      } else {
        if (terminated.length <= to - from) terminated = new Uint8Array(2 * (to - from + 1));
        terminated.set(strings.subarray(from, to));
        terminated[to - from] = 0;
        name = terminated;
      }
      const named = cxx(name);
      if (named !== undefined) {
        text(k, withoutReturnType(named));
        continue;
      }
    }
    instance ??= instantiate();
    const wasm = instance;
    const length = to - from;
    let result: [number, number] | undefined;
    try {
      const ptr = wasm.__wbindgen_malloc(length, 1) >>> 0;
      if (memory?.buffer !== wasm.memory.buffer) memory = new Uint8Array(wasm.memory.buffer);
      for (let i = 0; i < length; i++) memory[ptr + i] = strings[from + i]!;
      result = wasm.demangle_any(ptr, length);
      if (memory.buffer !== wasm.memory.buffer) memory = new Uint8Array(wasm.memory.buffer);
      const outStart = result[0] >>> 0;
      const outLength = result[1] >>> 0;
      // The input back, or less its first character, or nothing: not a mangled name.
      if (outLength === 0 || unchanged(memory, outStart, outLength, strings, from, to)) continue;
      utf8(k, memory, outStart, outLength);
    } catch {
      // A trap leaves the demangler's memory in an unknown state: start afresh.
      instance = undefined;
      memory = undefined;
      result = undefined;
    } finally {
      if (result !== undefined) wasm.__wbindgen_free(result[0], result[1], 1);
    }
  }
}

/** True when `memory[at, at + length)` is the name at [from, to) of `strings`, or it less its first character. */
function unchanged(
  memory: Uint8Array,
  at: number,
  length: number,
  strings: Uint8Array,
  from: number,
  to: number,
): boolean {
  for (const skip of [0, 1]) {
    if (length !== to - from - skip) continue;
    let same = true;
    for (let i = 0; i < length && same; i++) same = memory[at + i] === strings[from + skip + i];
    if (same) return true;
  }
  return false;
}

/**
 * The suffixes GCC gives the copies it makes of a function: `.isra.N` (arguments passed
 * differently), `.constprop.N` (a constant argument folded in), `.part.N` (the rest of a
 * function partly inlined into its callers) and `.cold` (its rarely run blocks, split off and
 * jumped to from the function), possibly several (`.constprop.0.isra.0`, `.part.0.cold`).
 */
const CLONE_SUFFIXES = /^(.+?)((?:\.(?:isra|constprop|part|cold)(?:\.\d+)?)+)$/;
/** The same suffixes as a demangler shows them: ` [clone .isra.0]`, ` [clone .cold]`. */
const DEMANGLED_CLONE_SUFFIXES =
  /^(.+?)((?: \[clone \.(?:isra|constprop|part|cold)(?:\.\d+)?\])+)$/;

/** A symbol name split into the function it was cloned from and its clone suffixes. */
export interface CloneName {
  /** The name without the suffixes: `helper`, `_ZN3app4Calc3addEi`, `app::Calc::add(int)`. */
  readonly base: string;
  /** The suffixes as stored (`.constprop.0.isra.0`) or shown (` [clone .cold]`). */
  readonly suffix: string;
  /** True for a `.cold` part: code of the function jumped to from it, not a function entry. */
  readonly cold: boolean;
}

/**
 * The clone suffixes of a stored symbol name (`helper.isra.0`, `_ZN3app4Calc3addEi.cold`) or
 * of a demangled one (`app::Calc::add(int) [clone .isra.0]`), or undefined when it has none.
 */
export function cloneName(name: string): CloneName | undefined {
  const m = (name.endsWith(']') ? DEMANGLED_CLONE_SUFFIXES : CLONE_SUFFIXES).exec(name);
  if (m === null) return undefined;
  const suffix = m[2]!;
  return { base: m[1]!, suffix, cold: /\.cold\]?$/.test(suffix) };
}

/**
 * A demangled C++ function name without its parameter list and the qualifiers after it:
 * `ns::Class::method` for `ns::Class::method(int) const`, `ns::Class::operator()` for
 * `ns::Class::operator()(int)`. Undefined when the name has no parameter list (Rust paths,
 * special names) or is a clone (`foo() [clone .isra.0]`): cloneName() gives its base.
 */
export function withoutParameters(demangled: string): string | undefined {
  if (demangled.includes(' [clone ')) return undefined;
  const start = parameterListStart(demangled);
  return start === undefined || start === 0 ? undefined : demangled.slice(0, start);
}

/** Where the parameter list of a demangled function name opens, if it has one. */
function parameterListStart(demangled: string): number | undefined {
  let end = demangled.length;
  // Qualifiers after the parameters: const, volatile, &, && (in any order).
  for (;;) {
    const rest = demangled.slice(0, end);
    const qualifier = / (?:const|volatile|&&|&|noexcept)$/.exec(rest);
    if (qualifier === null) break;
    end -= qualifier[0].length;
  }
  if (demangled[end - 1] !== ')') return undefined;
  let depth = 0;
  for (let i = end - 1; i >= 0; i--) {
    const c = demangled[i];
    if (c === ')') depth++;
    else if (c === '(') {
      depth--;
      if (depth === 0) return i;
    }
  }
  return undefined;
}
