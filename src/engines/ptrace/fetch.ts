import { InternalError, ProbeError } from '../../errors/index.js';
import type { FieldValue } from '../../events/index.js';
import {
  ARGUMENT_REGISTERS,
  type FetchArg,
  type FetchExpr,
  type FetchType,
  fetchTypeBytes,
  registerInfo,
} from '../../spec/index.js';
import type { RegisterName, Registers } from './registers.js';

/** What a fetch reads: the stopped thread's registers and memory. */
export interface FetchSource {
  readonly regs: Registers;
  /** The return value, at a return. */
  readonly retval: bigint | undefined;
  read(vaddr: bigint, length: number): Uint8Array;
  readCString(vaddr: bigint, maxBytes: number): string;
  comm(): string;
}

/** The kernel's limit on a fetched string, which upscope keeps for the same output. */
const MAX_STRING_BYTES = 4096;

/**
 * A fetch evaluated as uprobe_events would, in user space: `argN` from the ABI registers then
 * the stack, registers (narrow names read their low bits), `retval`, `+off(...)`
 * dereferences, strings; a value typed like the kernel's (below 64 bits a number, 64 bits a
 * bigint; s* signed), and `null` where memory could not be read, as the kernel records a
 * faulted fetch.
 */
export function evaluateFetch(fetch: FetchArg, source: FetchSource): FieldValue {
  const type: FetchType = fetch.type ?? (fetch.expr.kind === 'comm' ? 'string' : 'u64');
  try {
    if (fetch.expr.kind === 'comm') return source.comm();
    if (type === 'string' || type === 'ustring') {
      return source.readCString(address(fetch.expr, source), MAX_STRING_BYTES);
    }
    const width = fetchTypeBytes(type);
    const raw =
      fetch.expr.kind === 'deref'
        ? readInteger(source, address(fetch.expr, source), width)
        : value(fetch.expr, source);
    return typed(raw, type);
  } catch (err) {
    if (err instanceof ProbeError && err.code === 'ERR_TARGET_MEMORY') return null;
    throw err;
  }
}

/** The 64-bit value of an expression (a dereference reads 8 bytes). */
function value(expr: FetchExpr, source: FetchSource): bigint {
  const regs = source.regs;
  switch (expr.kind) {
    case 'arg': {
      const register = ARGUMENT_REGISTERS[expr.index];
      if (register !== undefined) return regs.get(register as RegisterName);
      // At a function's entry the return address is at the stack pointer; arguments follow.
      return readInteger(
        source,
        regs.rsp + 8n * BigInt(expr.index - ARGUMENT_REGISTERS.length + 1),
        8,
      );
    }
    case 'retval':
      if ((expr.index ?? 0) !== 0) {
        throw new InternalError(
          `The fetch retval${expr.index} reached the ptrace engine without its calling convention`,
        );
      }
      return source.retval ?? regs.get('rax');
    case 'register':
      return registerValue(expr.name, regs);
    case 'ip':
      return regs.rip;
    case 'sp':
      return regs.rsp;
    case 'deref':
      return readInteger(source, value(expr.inner, source) + expr.offset, 8);
    case 'comm':
      return 0n;
    case 'constant':
      return BigInt.asUintN(64, expr.value);
    case 'indexed': {
      const base = expr.base === undefined ? 0n : registerValue(expr.base, regs);
      return BigInt.asUintN(64, base + registerValue(expr.index, regs) * BigInt(expr.scale));
    }
    case 'variable':
      throw new InternalError(
        `The fetch of variable "${expr.name}" reached the ptrace engine unresolved`,
      );
  }
}

/** What `%name` reads: its bits of the register. */
function registerValue(name: string, regs: Registers): bigint {
  const info = registerInfo(name);
  if (info === undefined) {
    throw new ProbeError('ERR_SPEC_INVALID', `Cannot fetch %${name}: no such register`);
  }
  const base = info.base === 'rflags' ? regs.get('eflags') : regs.get(info.base);
  return (base >> BigInt(info.shift)) & ((1n << BigInt(info.bits)) - 1n);
}

/**
 * The address a string is read at: `+off(X)` means X + off (as the kernel reads
 * `+0(%di):string`), any other expression its value.
 */
function address(expr: FetchExpr, source: FetchSource): bigint {
  return expr.kind === 'deref' ? value(expr.inner, source) + expr.offset : value(expr, source);
}

function readInteger(source: FetchSource, vaddr: bigint, width: number): bigint {
  const bytes = source.read(vaddr, width);
  let n = 0n;
  for (let i = width - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]!);
  return n;
}

function typed(raw: bigint, type: FetchType): FieldValue {
  const bits = fetchTypeBytes(type) * 8;
  const masked = BigInt.asUintN(bits, raw);
  const signed = type.startsWith('s');
  const n = signed ? BigInt.asIntN(bits, masked) : masked;
  return bits === 64 ? n : Number(n);
}
