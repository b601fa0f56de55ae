/**
 * Names of code generated at run time (JIT compilers: V8, the JVM, LuaJIT, ...) from the two
 * files such runtimes write for profilers: the perf map (`/tmp/perf-PID.map`, one text line
 * per function: `START SIZE name`, both hex) and the jitdump file (`jit-PID.dump`, binary:
 * a header, then records, of which code loads and code moves name code). Both grow while the
 * process runs: `JitSymbols` takes them a piece at a time, and a later entry covering an
 * address wins over an earlier one (code is freed and the memory reused).
 */

export interface JitEntry {
  readonly start: bigint;
  readonly size: bigint;
  readonly name: string;
}

/**
 * The complete lines of a piece of a perf map, and how many characters they took (a last
 * line without its newline is left for the next read). Lines not in the format are skipped.
 */
export function parsePerfMap(text: string): { entries: JitEntry[]; consumed: number } {
  const entries: JitEntry[] = [];
  const end = text.lastIndexOf('\n');
  if (end < 0) return { entries, consumed: 0 };
  for (const line of text.slice(0, end).split('\n')) {
    const m = /^(?:0x)?([0-9a-fA-F]+) (?:0x)?([0-9a-fA-F]+) (.*)$/.exec(line);
    if (m === null) continue;
    entries.push({ start: BigInt(`0x${m[1]}`), size: BigInt(`0x${m[2]}`), name: m[3]! });
  }
  return { entries, consumed: end + 1 };
}

const JITDUMP_MAGIC = 0x4a695444;
const JITDUMP_MAGIC_SWAPPED = 0x4454694a;
const JIT_CODE_LOAD = 0;
const JIT_CODE_MOVE = 1;
const RECORD_HEADER_BYTES = 16;

/**
 * The code loads and moves of a piece of a jitdump file (`fromStart`: the file's start, its
 * header checked and skipped), and how many bytes of it were taken (a record not yet complete
 * is left for the next read). Undefined when the header is not a jitdump's. Moves follow
 * loads named in the same piece or in `named` (kept across pieces by the caller).
 */
export function parseJitDump(
  bytes: Uint8Array,
  fromStart: boolean,
  named: Map<bigint, string> = new Map(),
): { entries: JitEntry[]; consumed: number } | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const little = true;
  if (fromStart) {
    if (bytes.length < 12) return { entries: [], consumed: 0 };
    const magic = view.getUint32(0, true);
    // A file written on a machine of the other byte order is not this machine's process's.
    if (magic === JITDUMP_MAGIC_SWAPPED || magic !== JITDUMP_MAGIC) return undefined;
    at = view.getUint32(8, little);
  }
  const entries: JitEntry[] = [];
  while (at + RECORD_HEADER_BYTES <= bytes.length) {
    const id = view.getUint32(at, little);
    const size = view.getUint32(at + 4, little);
    if (size < RECORD_HEADER_BYTES) break;
    if (at + size > bytes.length) break;
    const body = at + RECORD_HEADER_BYTES;
    if (id === JIT_CODE_LOAD && size >= RECORD_HEADER_BYTES + 40) {
      // pid, tid (u32), vma, code_addr, code_size, code_index (u64), name, code.
      const codeAddr = view.getBigUint64(body + 16, little);
      const codeSize = view.getBigUint64(body + 24, little);
      const nameAt = body + 40;
      const nameEnd = bytes.indexOf(0, nameAt);
      const name = Buffer.from(
        bytes.subarray(nameAt, nameEnd < 0 || nameEnd > at + size ? at + size : nameEnd),
      ).toString('utf8');
      entries.push({ start: codeAddr, size: codeSize, name });
      named.set(codeAddr, name);
    } else if (id === JIT_CODE_MOVE && size >= RECORD_HEADER_BYTES + 48) {
      // pid, tid (u32), vma, old_code_addr, new_code_addr, code_size, code_index (u64).
      const oldAddr = view.getBigUint64(body + 16, little);
      const newAddr = view.getBigUint64(body + 24, little);
      const codeSize = view.getBigUint64(body + 32, little);
      const name = named.get(oldAddr);
      if (name !== undefined) {
        entries.push({ start: newAddr, size: codeSize, name });
        named.set(newAddr, name);
      }
    }
    at += size;
  }
  return { entries, consumed: at };
}

/** JIT code by address: entries added in the order the runtime wrote them. */
export class JitSymbols {
  readonly #entries: (JitEntry & { readonly order: number })[] = [];
  #sorted = true;

  add(entries: readonly JitEntry[]): void {
    for (const entry of entries) {
      if (entry.size === 0n) continue;
      const last = this.#entries.at(-1);
      if (last !== undefined && entry.start < last.start) this.#sorted = false;
      this.#entries.push({ ...entry, order: this.#entries.length });
    }
  }

  get size(): number {
    return this.#entries.length;
  }

  /** The newest entry covering `address`, and the offset into it. */
  lookup(address: bigint): { name: string; offset: bigint } | undefined {
    if (!this.#sorted) {
      this.#entries.sort((a, b) =>
        a.start < b.start ? -1 : a.start > b.start ? 1 : a.order - b.order,
      );
      this.#sorted = true;
    }
    const entries = this.#entries;
    let lo = 0;
    let hi = entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (entries[mid]!.start <= address) lo = mid + 1;
      else hi = mid;
    }
    let best: (JitEntry & { order: number }) | undefined;
    // Entries that start at or before the address; code areas are small, so few are passed.
    for (let k = lo - 1, steps = 0; k >= 0 && steps < 256; k--, steps++) {
      const entry = entries[k]!;
      if (address < entry.start + entry.size && (best === undefined || entry.order > best.order)) {
        best = entry;
      }
    }
    return best === undefined ? undefined : { name: best.name, offset: address - best.start };
  }
}
