import { DW_OP, dwarfRegisterName } from './constants.js';
import { Cursor } from './cursor.js';

/**
 * An address (or a value) computed from the machine state at the probe: `base + offset`.
 * `absolute` is an address in the file's own address space (a global: DW_OP_addr), which a
 * consumer turns into a run-time address.
 */
export interface AddressExpr {
  readonly base:
    | { readonly kind: 'register'; readonly register: number }
    | { readonly kind: 'absolute' }
    /** The 8 bytes stored at another address. */
    | { readonly kind: 'deref'; readonly of: AddressExpr };
  readonly offset: bigint;
}

/** Where a variable's value is at one pc. */
export type VariableLocation =
  | { readonly kind: 'register'; readonly register: number }
  | { readonly kind: 'memory'; readonly address: AddressExpr }
  /** The value itself is computed (DW_OP_stack_value) from registers and memory. */
  | { readonly kind: 'value'; readonly value: AddressExpr }
  /** The value is a constant the compiler knows (DW_OP_stack_value of literals, implicit_value). */
  | { readonly kind: 'constant'; readonly value: bigint }
  /**
   * The value is in parts (DW_OP_piece), each somewhere of its own, in order: a Go string's
   * pointer and length in two registers, a small struct passed in registers.
   */
  | { readonly kind: 'pieces'; readonly parts: readonly VariablePiece[] }
  | { readonly kind: 'unavailable'; readonly reason: string };

/** One part of a value in pieces: where it is and how many bytes of the value it holds. */
export interface VariablePiece {
  readonly location: Exclude<VariableLocation, { readonly kind: 'pieces' }>;
  readonly bytes: number;
}

export interface EvaluateOptions {
  readonly addressSize: number;
  /** The frame base (DW_AT_frame_base) at the pc, for DW_OP_fbreg. */
  frameBase(): AddressExpr | string;
  /** The canonical frame address at the pc, for DW_OP_call_frame_cfa. */
  cfa(): AddressExpr | string;
  /** Resolves DW_OP_addrx through .debug_addr. */
  indexedAddress(index: number): bigint;
  /** True when the pc is the entry of the function, where DW_OP_entry_value(reg) is reg. */
  readonly atEntry: boolean;
  /** Bytes the variable's type takes, to accept a single DW_OP_piece covering it. */
  readonly sizeBytes: number | undefined;
}

type Entry =
  | { readonly kind: 'address'; readonly expr: AddressExpr }
  | { readonly kind: 'const'; readonly value: bigint };

class Unavailable extends Error {}

/**
 * Evaluates a DWARF location expression symbolically: the result says which register or
 * which memory holds the value, in terms an engine can fetch, or why it cannot be fetched.
 * Throws DwarfFormatError when the expression itself is malformed.
 */
export function evaluateLocation(expr: Uint8Array, options: EvaluateOptions): VariableLocation {
  try {
    return evaluate(expr, options);
  } catch (err) {
    if (err instanceof Unavailable) return { kind: 'unavailable', reason: err.message };
    throw err;
  }
}

function evaluate(expr: Uint8Array, options: EvaluateOptions): VariableLocation {
  if (expr.length === 0) return { kind: 'unavailable', reason: 'optimized out (empty location)' };
  const c: Cursor = new Cursor(expr, 'location expression');
  let stack: Entry[] = [];
  let result: Exclude<VariableLocation, { readonly kind: 'pieces' }> | undefined;
  const parts: VariablePiece[] = [];
  const pop = (): Entry => {
    const top = stack.pop();
    if (top === undefined) c.fail(c.offset, 'expression stack underflow');
    return top;
  };
  const pushAddress = (got: AddressExpr | string, what: string) => {
    if (typeof got === 'string') throw new Unavailable(`${what} is not known here: ${got}`);
    stack.push({ kind: 'address', expr: got });
  };
  const final = (): Exclude<VariableLocation, { readonly kind: 'pieces' }> => {
    if (result !== undefined) return result;
    const top = stack[stack.length - 1];
    if (top === undefined) return { kind: 'unavailable', reason: 'optimized out (empty location)' };
    if (top.kind === 'const') {
      return { kind: 'memory', address: { base: { kind: 'absolute' }, offset: top.value } };
    }
    return { kind: 'memory', address: top.expr };
  };
  while (!c.atEnd) {
    const at = c.offset;
    const op = c.u8();
    if (result !== undefined && op !== DW_OP.piece) {
      throw new Unavailable('its location is made of several parts');
    }
    if (op >= DW_OP.reg0 && op <= DW_OP.reg31) {
      result = { kind: 'register', register: op - DW_OP.reg0 };
      continue;
    }
    if (op >= DW_OP.breg0 && op <= DW_OP.breg31) {
      stack.push({
        kind: 'address',
        expr: { base: { kind: 'register', register: op - DW_OP.breg0 }, offset: c.sleb() },
      });
      continue;
    }
    if (op >= DW_OP.lit0 && op <= DW_OP.lit31) {
      stack.push({ kind: 'const', value: BigInt(op - DW_OP.lit0) });
      continue;
    }
    switch (op) {
      case DW_OP.regx:
        result = { kind: 'register', register: c.ulebNumber() };
        break;
      case DW_OP.bregx: {
        const register = c.ulebNumber();
        stack.push({
          kind: 'address',
          expr: { base: { kind: 'register', register }, offset: c.sleb() },
        });
        break;
      }
      case DW_OP.fbreg: {
        const offset = c.sleb();
        const base = options.frameBase();
        if (typeof base === 'string')
          throw new Unavailable(`the frame base is not known here: ${base}`);
        stack.push({ kind: 'address', expr: { base: base.base, offset: base.offset + offset } });
        break;
      }
      case DW_OP.call_frame_cfa:
        pushAddress(options.cfa(), 'the canonical frame address');
        break;
      case DW_OP.addr:
        stack.push({ kind: 'const', value: c.unsigned(options.addressSize) });
        break;
      case DW_OP.addrx:
      case DW_OP.GNU_addr_index:
        stack.push({ kind: 'const', value: options.indexedAddress(c.ulebNumber()) });
        break;
      case DW_OP.const1u:
        stack.push({ kind: 'const', value: BigInt(c.u8()) });
        break;
      case DW_OP.const1s:
        stack.push({ kind: 'const', value: BigInt(c.s8()) });
        break;
      case DW_OP.const2u:
        stack.push({ kind: 'const', value: BigInt(c.u16()) });
        break;
      case DW_OP.const2s:
        stack.push({ kind: 'const', value: BigInt(c.s16()) });
        break;
      case DW_OP.const4u:
        stack.push({ kind: 'const', value: BigInt(c.u32()) });
        break;
      case DW_OP.const4s:
        stack.push({ kind: 'const', value: BigInt(c.s32()) });
        break;
      case DW_OP.const8u:
        stack.push({ kind: 'const', value: c.u64() });
        break;
      case DW_OP.const8s:
        stack.push({ kind: 'const', value: c.s64() });
        break;
      case DW_OP.constu:
        stack.push({ kind: 'const', value: c.uleb() });
        break;
      case DW_OP.consts:
        stack.push({ kind: 'const', value: c.sleb() });
        break;
      case DW_OP.plus_uconst: {
        const add = c.uleb();
        stack.push(plus(pop(), add));
        break;
      }
      case DW_OP.plus: {
        const b = pop();
        const a = pop();
        if (b.kind === 'const') stack.push(plus(a, b.value));
        else if (a.kind === 'const') stack.push(plus(b, a.value));
        else throw new Unavailable('its address adds two run-time values');
        break;
      }
      case DW_OP.minus: {
        const b = pop();
        const a = pop();
        if (b.kind !== 'const') throw new Unavailable('its address subtracts a run-time value');
        stack.push(plus(a, -b.value));
        break;
      }
      case DW_OP.deref: {
        const a = pop();
        const of: AddressExpr =
          a.kind === 'const' ? { base: { kind: 'absolute' }, offset: a.value } : a.expr;
        stack.push({ kind: 'address', expr: { base: { kind: 'deref', of }, offset: 0n } });
        break;
      }
      case DW_OP.nop:
        break;
      case DW_OP.stack_value: {
        const top = pop();
        result =
          top.kind === 'const'
            ? { kind: 'constant', value: top.value }
            : { kind: 'value', value: top.expr };
        break;
      }
      case DW_OP.implicit_value: {
        const length = c.ulebNumber();
        const start = c.take(length);
        let value = 0n;
        for (let i = Math.min(length, 8) - 1; i >= 0; i--) {
          value = (value << 8n) | BigInt(expr[start + i]!);
        }
        result = { kind: 'constant', value };
        break;
      }
      case DW_OP.entry_value:
      case DW_OP.GNU_entry_value: {
        const length = c.ulebNumber();
        const inner = expr.subarray(c.take(length), c.offset);
        const reg = inner.length === 1 && inner[0]! >= DW_OP.reg0 && inner[0]! <= DW_OP.reg31;
        if (!reg || !options.atEntry) {
          throw new Unavailable(
            'optimized out: only its value on entry to the function is known (DW_OP_entry_value)',
          );
        }
        stack.push({
          kind: 'address',
          expr: { base: { kind: 'register', register: inner[0]! - DW_OP.reg0 }, offset: 0n },
        });
        break;
      }
      case DW_OP.piece: {
        // The part so far (an empty one is a part optimized out), then a new one begins.
        parts.push({ location: final(), bytes: c.ulebNumber() });
        result = undefined;
        stack = [];
        break;
      }
      case DW_OP.implicit_pointer:
      case DW_OP.GNU_implicit_pointer:
        throw new Unavailable('optimized out: it points at a value that is not in memory');
      case DW_OP.form_tls_address:
      case DW_OP.GNU_push_tls_address:
        throw new Unavailable(
          "it is thread-local (__thread, thread_local): each thread's copy is where its thread pointer says, which probes do not read",
        );
      default:
        throw new Unavailable(
          `its location uses DWARF operation 0x${op.toString(16)} at byte ${at}, which upscope does not evaluate`,
        );
    }
  }
  if (parts.length === 0) return final();
  if (result !== undefined || stack.length > 0) {
    throw new Unavailable('its location has an unfinished part after its pieces');
  }
  // One piece that covers the whole value is the value's location.
  const size = options.sizeBytes;
  if (parts.length === 1 && (size === undefined || parts[0]!.bytes >= size)) {
    return parts[0]!.location;
  }
  return { kind: 'pieces', parts };
}

function plus(entry: Entry, add: bigint): Entry {
  if (entry.kind === 'const')
    return { kind: 'const', value: BigInt.asUintN(64, entry.value + add) };
  return { kind: 'address', expr: { base: entry.expr.base, offset: entry.expr.offset + add } };
}

/** A location written for people: `%rdi`, `-20(%rbp)`, `0x4010`, `*(-8(%rbp))+8`. */
export function describeLocation(location: VariableLocation): string {
  switch (location.kind) {
    case 'register':
      return `%${dwarfRegisterName(location.register)}`;
    case 'memory':
      return describeAddress(location.address);
    case 'value':
      return `value ${describeAddress(location.value)}`;
    case 'constant':
      return `constant ${location.value}`;
    case 'pieces':
      return location.parts
        .map((part) => `${describeLocation(part.location)} (${part.bytes} bytes)`)
        .join(', ');
    case 'unavailable':
      return location.reason;
  }
}

function describeAddress(a: AddressExpr): string {
  const off =
    a.offset === 0n
      ? ''
      : a.offset < 0n
        ? `-0x${(-a.offset).toString(16)}`
        : `0x${a.offset.toString(16)}`;
  switch (a.base.kind) {
    case 'register':
      return `${off}(%${dwarfRegisterName(a.base.register)})`;
    case 'absolute':
      return `0x${a.offset.toString(16)}`;
    case 'deref':
      return `${off}(${describeAddress(a.base.of)})`;
  }
}
