/**
 * The memory an inline hook copies at a function's entry for a probe's fetches: the reads
 * evaluateFetch() would make of a stopped thread, planned ahead as arch's EntryReads (an
 * address made of registers at the entry, a constant and an earlier read's pointer), so that
 * the trampoline makes them with a fault-proof copy and the reader evaluates the same fetches
 * over what was copied (readCopied(), readCopiedString()).
 */
import { type EntryRead, READ_LIMITS, RECORD, readLayout, STACK_WORDS } from '../../arch/index.js';
import { ProbeError } from '../../errors/index.js';
import {
  ARGUMENT_REGISTERS,
  type FetchArg,
  type FetchExpr,
  fetchTypeBytes,
  registerInfo,
} from '../../spec/index.js';
import type { InlineMemory } from './inline-hooks.js';

/**
 * The bytes of a string an inline hook copies: a longer one is cut there (the ptrace engine
 * and the kernel read up to 4,096).
 */
export const INLINE_STRING_BYTES = 256;

/** How an address is made: a constant, register terms, and the pointer an earlier read got. */
type Address = Pick<EntryRead, 'constant' | 'terms' | 'after'>;

/** The reads an inline hook makes for `fetches` at an entry, or why it cannot make them. */
export type InlineReadPlan =
  | { readonly reads: readonly EntryRead[] }
  | { readonly why: string; readonly fetch: string };

/**
 * Plan the reads of memory that `fetches` make where an inline hook records a hit of the
 * function at `entry`: at its entry, or just after a return of it (none for fetches that read
 * only registers and the recorded stack words).
 */
export function planInlineReads(
  fetches: readonly FetchArg[],
  entry: bigint,
  at: 'entry' | 'return' = 'entry',
): InlineReadPlan {
  // %rip at the entry is the entry; at a return, where it returned to, which no register holds.
  const ip = (): Address => {
    if (at === 'return') throw new Unplannable('an address made from %rip at a return');
    return constant(entry);
  };
  const reads: EntryRead[] = [];
  const readAt = (address: Address, bytes: number): number => {
    const same = reads.findIndex(
      (r) =>
        r.constant === address.constant &&
        r.after === address.after &&
        r.bytes === bytes &&
        JSON.stringify(r.terms) === JSON.stringify(address.terms),
    );
    if (same >= 0) return same;
    reads.push({ ...address, bytes });
    return reads.length - 1;
  };
  const value = (expr: FetchExpr): Address => {
    switch (expr.kind) {
      case 'arg': {
        const register = ARGUMENT_REGISTERS[expr.index];
        if (register !== undefined) return registerAddress(register);
        // On the stack, after the return address: read there, as evaluateFetch() does.
        const offset = BigInt(8 * (expr.index - ARGUMENT_REGISTERS.length + 1));
        return pointer(readAt({ ...registerAddress('rsp'), constant: offset }, 8));
      }
      case 'retval':
        return registerAddress('rax');
      case 'register':
        if (registerInfo(expr.name)?.base === 'rip') return ip();
        return registerAddress(expr.name);
      case 'ip':
        return ip();
      case 'sp':
        return registerAddress('rsp');
      case 'constant':
        return constant(BigInt.asUintN(64, expr.value));
      case 'indexed': {
        const index = registerAddress(expr.index, expr.scale);
        const base = expr.base === undefined ? undefined : registerAddress(expr.base);
        return { ...index, terms: [...(base?.terms ?? []), ...index.terms] };
      }
      case 'deref':
        return pointer(readAt(offsetBy(value(expr.inner), expr.offset), 8));
      case 'comm':
        return constant(0n);
      case 'variable':
        throw new Unplannable('a DWARF variable not resolved to registers and memory');
    }
  };
  for (const fetch of fetches) {
    const type = fetch.type ?? (fetch.expr.kind === 'comm' ? 'string' : 'u64');
    try {
      if (fetch.expr.kind === 'comm') continue;
      // An argument in the stack words the record keeps needs no read of its own.
      if (
        fetch.expr.kind === 'arg' &&
        fetch.expr.index < ARGUMENT_REGISTERS.length + STACK_WORDS - 1 &&
        type !== 'string' &&
        type !== 'ustring'
      ) {
        continue;
      }
      if (type === 'string' || type === 'ustring') {
        const address =
          fetch.expr.kind === 'deref'
            ? offsetBy(value(fetch.expr.inner), fetch.expr.offset)
            : value(fetch.expr);
        readAt(address, INLINE_STRING_BYTES);
      } else if (fetch.expr.kind === 'deref') {
        readAt(offsetBy(value(fetch.expr.inner), fetch.expr.offset), fetchTypeBytes(type));
      } else if (fetch.expr.kind === 'arg' || fetch.expr.kind === 'variable') {
        // Registers, %ip and the like need no read; an argument past the stack words does.
        value(fetch.expr);
      }
    } catch (err) {
      if (!(err instanceof Unplannable)) throw err;
      return { why: err.message, fetch: fetch.name };
    }
  }
  try {
    readLayout(reads);
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    return {
      why: `its fetches make more reads of memory (${reads.length}, ${reads.reduce((n, r) => n + r.bytes, 0)} bytes) than an inline hook's record holds (${READ_LIMITS.reads} reads, ${READ_LIMITS.slots} slots of ${RECORD.bytes} bytes)`,
      fetch: fetches.at(-1)?.name ?? '',
    };
  }
  return { reads };
}

class Unplannable extends Error {}

/** The value of a register (its bits as the spec's name reads them), times `scale`. */
function registerAddress(name: string, scale: 1 | 2 | 4 | 8 = 1): Address {
  const info = registerInfo(name);
  if (info === undefined) throw new Unplannable(`%${name} is not a register`);
  if (info.base === 'rip') throw new Unplannable('%rip is only known at the entry itself');
  return {
    constant: 0n,
    terms: [{ register: info.base, shift: info.shift, bits: info.bits, scale }],
    after: undefined,
  };
}

function constant(value: bigint): Address {
  return { constant: value, terms: [], after: undefined };
}

/** The 8 bytes read `index` got. */
function pointer(index: number): Address {
  return { constant: 0n, terms: [], after: index };
}

function offsetBy(address: Address, offset: bigint): Address {
  return { ...address, constant: BigInt.asUintN(64, address.constant + offset) };
}

/**
 * The bytes an inline hook copied from `vaddr` on (of the copies that hold it, the one with
 * the most from there), and whether that copy got all it asked for.
 */
function copiedAt(
  memory: readonly InlineMemory[],
  vaddr: bigint,
): { bytes: Uint8Array; whole: boolean } | undefined {
  let best: { bytes: Uint8Array; whole: boolean } | undefined;
  for (const piece of memory) {
    const offset = vaddr - piece.vaddr;
    if (offset < 0n || offset >= BigInt(piece.bytes.length)) continue;
    const bytes = piece.bytes.subarray(Number(offset));
    if (best === undefined || bytes.length > best.bytes.length) {
      best = { bytes, whole: piece.bytes.length === piece.asked };
    }
  }
  return best;
}

/**
 * `length` bytes at `vaddr` from what an inline hook copied; ERR_TARGET_MEMORY (a fetch's
 * fault) where it copied less, as a read of the thread's memory fails where a page cannot be
 * read.
 */
export function readCopied(
  memory: readonly InlineMemory[],
  vaddr: bigint,
  length: number,
): Uint8Array {
  const copied = copiedAt(memory, vaddr);
  if (copied !== undefined && copied.bytes.length >= length) return copied.bytes.slice(0, length);
  throw new ProbeError(
    'ERR_TARGET_MEMORY',
    copied === undefined
      ? `Cannot read ${length} bytes at 0x${vaddr.toString(16)}: the inline hook copied nothing there`
      : `Cannot read ${length} bytes at 0x${vaddr.toString(16)}: the inline hook could copy only ${copied.bytes.length} of them`,
  );
}

/**
 * The string at `vaddr` from what an inline hook copied: up to its NUL, or cut at the copy's
 * bound (INLINE_STRING_BYTES) or `maxBytes`; ERR_TARGET_MEMORY where a page could not be read
 * before its end, as the ptrace engine's read of the string fails there.
 */
export function readCopiedString(
  memory: readonly InlineMemory[],
  vaddr: bigint,
  maxBytes: number,
): string {
  const copied = copiedAt(memory, vaddr);
  if (copied !== undefined) {
    const bytes = copied.bytes.subarray(0, maxBytes);
    const nul = bytes.indexOf(0);
    if (nul >= 0) return Buffer.from(bytes.subarray(0, nul)).toString('utf8');
    if (copied.whole || bytes.length === maxBytes) return Buffer.from(bytes).toString('utf8');
  }
  throw new ProbeError(
    'ERR_TARGET_MEMORY',
    `Cannot read a string at 0x${vaddr.toString(16)}: ${copied === undefined ? 'the inline hook copied nothing there' : 'a page could not be read before its end'}`,
  );
}
