import type { ElfFile } from './types.js';

/** What makes a file a Go program, and what its toolchain says about how it calls. */
export interface GoInfo {
  /** The Go toolchain that built it (`go1.19.8`), when its build info says. */
  readonly version: string | undefined;
  /** `major.minor` of that version (1, 19), when known. */
  readonly release: { readonly major: number; readonly minor: number } | undefined;
  /** How the file was recognised as Go: its build info, its pclntab, or the runtime's symbols. */
  readonly recognisedBy: 'build info' | 'pclntab' | 'runtime symbols';
  /**
   * Whether Go functions take arguments in registers (Go's internal ABI, amd64 since Go
   * 1.17), else on the stack; undefined when the version is not known.
   */
  readonly registerAbi: boolean | undefined;
}

const BUILDINFO_MAGIC = '\xff Go buildinf:';
/** The flag of build info whose strings follow its header inline (Go 1.18 and later). */
const FLAG_INLINE_STRINGS = 0x2;
/** Where the inline strings of build info start. */
const INLINE_STRINGS_AT = 32;

/**
 * Whether `elf` was built by the Go toolchain, and with which version: from `.go.buildinfo`
 * (Go 1.13+; its strings inline since Go 1.18, else behind pointers), else from the presence
 * of `.gopclntab` or of the runtime's own functions. Undefined for anything else.
 */
export function goInfo(elf: ElfFile): GoInfo | undefined {
  const buildInfo = elf.section('.go.buildinfo');
  if (buildInfo !== undefined) {
    const version = buildInfoVersion(elf, elf.sectionBytes(buildInfo));
    if (version !== undefined) return describe(version, 'build info');
  }
  if (elf.section('.gopclntab') !== undefined) return describe(undefined, 'pclntab');
  for (const [table, strings] of [
    ['symtab', '.strtab'],
    ['dynsym', '.dynstr'],
  ] as const) {
    // The names' bytes first: reading every symbol of a large C++ file (node has 200,000)
    // only to find none of Go's took seconds.
    const stringTable = elf.section(strings);
    if (stringTable === undefined || !hasBytes(elf.sectionBytes(stringTable), GOEXIT)) continue;
    const names = elf.symbols(table);
    if (names.some((s) => s.name === 'runtime.goexit' || s.name === 'runtime.goexit.abi0')) {
      return describe(undefined, 'runtime symbols');
    }
  }
  return undefined;
}

const GOEXIT = Buffer.from('runtime.goexit');

function hasBytes(haystack: Uint8Array, needle: Buffer): boolean {
  return Buffer.from(haystack.buffer, haystack.byteOffset, haystack.byteLength).includes(needle);
}

function describe(version: string | undefined, recognisedBy: GoInfo['recognisedBy']): GoInfo {
  const match = version === undefined ? null : /^go(\d+)\.(\d+)/.exec(version);
  const release = match === null ? undefined : { major: Number(match[1]), minor: Number(match[2]) };
  return {
    version,
    release,
    recognisedBy,
    registerAbi: release === undefined ? undefined : release.major > 1 || release.minor >= 17,
  };
}

function readUvarint(bytes: Uint8Array, at: number): { value: number; next: number } | undefined {
  let value = 0;
  let shift = 0;
  for (let i = at; i < bytes.length && shift < 35; i++) {
    const byte = bytes[i]!;
    value += (byte & 0x7f) * 2 ** shift;
    if ((byte & 0x80) === 0) return { value, next: i + 1 };
    shift += 7;
  }
  return undefined;
}

/** The toolchain's version string from `.go.buildinfo`'s bytes, or undefined if unreadable. */
function buildInfoVersion(elf: ElfFile, bytes: Uint8Array): string | undefined {
  if (bytes.length < INLINE_STRINGS_AT) return undefined;
  const magic = Buffer.from(bytes.subarray(0, BUILDINFO_MAGIC.length)).toString('latin1');
  if (magic !== BUILDINFO_MAGIC) return undefined;
  const ptrSize = bytes[14]!;
  const flags = bytes[15]!;
  if ((flags & FLAG_INLINE_STRINGS) !== 0) {
    const length = readUvarint(bytes, INLINE_STRINGS_AT);
    if (length === undefined || length.next + length.value > bytes.length) return undefined;
    return text(bytes.subarray(length.next, length.next + length.value));
  }
  // Before Go 1.18: a pointer to the version's string header (data pointer, length).
  if (ptrSize !== 8) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const header = readAt(elf, view.getBigUint64(16, true), 16);
  if (header === undefined) return undefined;
  const headerView = new DataView(header.buffer, header.byteOffset, header.byteLength);
  const length = headerView.getBigUint64(8, true);
  if (length === 0n || length > 256n) return undefined;
  const string = readAt(elf, headerView.getBigUint64(0, true), Number(length));
  return string === undefined ? undefined : text(string);
}

function text(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('utf8');
}

function readAt(elf: ElfFile, vaddr: bigint, length: number): Uint8Array | undefined {
  const offset = elf.vaddrToFileOffset(vaddr);
  if (offset === undefined) return undefined;
  try {
    return elf.read(offset, length);
  } catch {
    return undefined;
  }
}

/** Whether `vaddr` is the entry of a function in `entries` (from goFunctionEntries()). */
export function isGoFunctionEntry(entries: Float64Array, vaddr: bigint): boolean {
  const target = Number(vaddr);
  let low = 0;
  let high = entries.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (entries[mid]! < target) low = mid + 1;
    else high = mid;
  }
  return low < entries.length && entries[low] === target;
}
