import { ProbeError, quote } from '../../errors/index.js';

/**
 * The argument string of a SystemTap (USDT) note, as <sys/sdt.h> writes it on x86-64: one
 * argument per space-separated word, each `[-]SIZE@OPERAND` (a negative size is a signed
 * value) or, from old versions of sdt.h, a bare OPERAND. The operand is what the compiler put
 * in the `asm` template for a "nor" constraint, in AT&T syntax:
 *
 *   %edi %r8b %ah           a register (64, 32, 16 or 8 bits, or the second byte)
 *   $5 $-7 $0x10            a constant
 *   -16(%rbp) (%rsi)        memory at a register plus a displacement
 *   g_total(%rip)           memory at a symbol (also `sym+8(%rip)` and bare `sym`)
 *   8(%rdx,%rcx,4)          memory at base + index * scale + displacement
 *
 * This parser lives beside the note reader: the string is part of the note's format, and
 * reading it needs nothing but the text (no process, no kernel).
 */

/** A register as the note names it (AT&T: `%ax` is 16 bits, `%ah` the second byte of rax). */
export interface UsdtRegister {
  /** As written, lowercase and without `%`. */
  readonly name: string;
  /** The 64-bit register it is part of (`rax`, `r8`, ... or `rip`). */
  readonly base: string;
  readonly bits: 8 | 16 | 32 | 64;
  /** 8 for %ah, %bh, %ch, %dh; else 0. */
  readonly shift: 0 | 8;
}

export type UsdtOperand =
  | { readonly kind: 'register'; readonly register: UsdtRegister }
  | { readonly kind: 'constant'; readonly value: bigint }
  | {
      /** Memory at symbol + displacement + base + index * scale (each part optional). */
      readonly kind: 'memory';
      readonly displacement: bigint;
      /** A symbol whose address the displacement is added to (`counter(%rip)`, `counter`). */
      readonly symbol: string | undefined;
      readonly base: UsdtRegister | undefined;
      readonly index: UsdtRegister | undefined;
      readonly scale: 1 | 2 | 4 | 8;
    };

export interface UsdtArgument {
  /** The argument's text in the note, e.g. `-4@%edi`. */
  readonly text: string;
  /** Bytes of the value: the note's size, or 8 when the note gives none. */
  readonly sizeBytes: 1 | 2 | 4 | 8;
  readonly signed: boolean;
  /** False for the old size-less form (`%edi`). */
  readonly sizeExplicit: boolean;
  readonly operand: UsdtOperand;
}

const REGISTERS = new Map<string, UsdtRegister>();

function addRegister(name: string, base: string, bits: UsdtRegister['bits'], shift: 0 | 8 = 0) {
  REGISTERS.set(name, { name, base, bits, shift });
}

for (const letter of ['a', 'b', 'c', 'd']) {
  const base = `r${letter}x`;
  addRegister(base, base, 64);
  addRegister(`e${letter}x`, base, 32);
  addRegister(`${letter}x`, base, 16);
  addRegister(`${letter}l`, base, 8);
  addRegister(`${letter}h`, base, 8, 8);
}
for (const short of ['si', 'di', 'bp', 'sp']) {
  const base = `r${short}`;
  addRegister(base, base, 64);
  addRegister(`e${short}`, base, 32);
  addRegister(short, base, 16);
  addRegister(`${short}l`, base, 8);
}
for (let n = 8; n <= 15; n++) {
  const base = `r${n}`;
  addRegister(base, base, 64);
  addRegister(`${base}d`, base, 32);
  addRegister(`${base}w`, base, 16);
  addRegister(`${base}b`, base, 8);
  // The Intel spelling of the byte register, which some assemblers print.
  addRegister(`${base}l`, base, 8);
}
addRegister('rip', 'rip', 64);

/** What a register name of a note's operand means, or undefined when it names none. */
export function usdtRegister(name: string): UsdtRegister | undefined {
  return REGISTERS.get(name.toLowerCase());
}

/** An integer as the assembler writes it: decimal, or 0x hex, with an optional sign. */
const INTEGER = /^[-+]?(0[xX][0-9a-fA-F]+|[0-9]+)$/;
const SYMBOL = /^[A-Za-z_.$][A-Za-z0-9_.$@]*$/;

function parseInteger(text: string): bigint {
  const negative = text.startsWith('-');
  const digits = text.replace(/^[-+]/, '');
  const value = BigInt(digits);
  return negative ? -value : value;
}

/** Why one argument cannot be read (the caller adds which probe and which argument). */
class BadArgument extends Error {}

function register(text: string): UsdtRegister {
  if (!text.startsWith('%')) throw new BadArgument(`expected a register, found ${quote(text)}`);
  const found = usdtRegister(text.slice(1));
  if (found === undefined) throw new BadArgument(`unknown register ${quote(text)}`);
  return found;
}

/** `disp`, `sym`, `sym+disp`, `sym-disp` (the part of a memory operand before the parenthesis). */
function displacement(text: string): { symbol: string | undefined; displacement: bigint } {
  if (text === '') return { symbol: undefined, displacement: 0n };
  if (INTEGER.test(text)) return { symbol: undefined, displacement: parseInteger(text) };
  const m = /^([^+-]+)([-+].+)?$/.exec(text);
  if (m !== null && SYMBOL.test(m[1]!) && (m[2] === undefined || INTEGER.test(m[2]))) {
    return { symbol: m[1]!, displacement: m[2] === undefined ? 0n : parseInteger(m[2]) };
  }
  throw new BadArgument(`cannot read the displacement ${quote(text)}`);
}

function operand(text: string): UsdtOperand {
  if (text === '') throw new BadArgument('the operand is empty');
  if (text.startsWith('%')) {
    if (text.includes(':')) {
      throw new BadArgument(
        `${quote(text)} is a segment-relative address (thread-local storage), which upscope cannot read`,
      );
    }
    return { kind: 'register', register: register(text) };
  }
  if (text.startsWith('$')) {
    const value = text.slice(1);
    if (!INTEGER.test(value)) {
      throw new BadArgument(`the constant ${quote(text)} is not a number (a symbol's address?)`);
    }
    return { kind: 'constant', value: parseInteger(value) };
  }
  const open = text.indexOf('(');
  if (open < 0) {
    // A bare symbol or number: memory at that absolute address.
    return { kind: 'memory', ...displacement(text), base: undefined, index: undefined, scale: 1 };
  }
  if (!text.endsWith(')')) throw new BadArgument(`expected ")" at the end of ${quote(text)}`);
  const parts = text.slice(open + 1, -1).split(',');
  if (parts.length > 3) throw new BadArgument(`too many parts in ${quote(text)}`);
  const base = parts[0] === '' ? undefined : register(parts[0]!);
  let index: UsdtRegister | undefined;
  let scale: 1 | 2 | 4 | 8 = 1;
  if (parts.length >= 2) {
    index = register(parts[1]!);
    if (index.bits !== 64 && index.bits !== 32) {
      throw new BadArgument(`the index register ${quote(`%${index.name}`)} is not 32 or 64 bits`);
    }
    if (index.base === 'rip' || index.base === 'rsp') {
      throw new BadArgument(`${quote(`%${index.name}`)} cannot be an index register`);
    }
  }
  if (parts.length === 3) {
    const s = parts[2]!;
    if (s !== '1' && s !== '2' && s !== '4' && s !== '8') {
      throw new BadArgument(`the scale ${quote(s)} is not 1, 2, 4 or 8`);
    }
    scale = Number(s) as 1 | 2 | 4 | 8;
  }
  if (base === undefined && index === undefined) {
    throw new BadArgument(`${quote(text)} names no register`);
  }
  if (base !== undefined && base.bits !== 64 && base.bits !== 32) {
    throw new BadArgument(`the base register ${quote(`%${base.name}`)} is not 32 or 64 bits`);
  }
  if (base?.base === 'rip' && index !== undefined) {
    throw new BadArgument(`${quote(text)} cannot index a %rip-relative address`);
  }
  return { kind: 'memory', ...displacement(text.slice(0, open)), base, index, scale };
}

function argument(text: string): UsdtArgument {
  const m = /^(-?)([0-9]+)@(.*)$/.exec(text);
  if (m === null) {
    if (/^-?[0-9]+@/.test(text) || text.includes('@')) {
      throw new BadArgument(`expected SIZE@OPERAND, found ${quote(text)}`);
    }
    return { text, sizeBytes: 8, signed: false, sizeExplicit: false, operand: operand(text) };
  }
  const size = Number(m[2]);
  if (size !== 1 && size !== 2 && size !== 4 && size !== 8) {
    throw new BadArgument(`the size ${m[2]} is not 1, 2, 4 or 8 bytes`);
  }
  return {
    text,
    sizeBytes: size,
    signed: m[1] === '-',
    sizeExplicit: true,
    operand: operand(m[3]!),
  };
}

/**
 * The arguments of a USDT note, in order. `probe` (`provider:name`) and `path` only make the
 * error clear: a malformed argument throws ProbeError ERR_USDT_ARGUMENT naming the probe, the
 * argument's position and text, and why.
 */
export function parseUsdtArguments(
  args: string,
  where: { readonly probe: string; readonly path?: string | undefined },
): UsdtArgument[] {
  const words = args.split(/\s+/).filter((word) => word !== '');
  return words.map((word, i) => {
    try {
      return argument(word);
    } catch (err) {
      if (!(err instanceof BadArgument)) throw err;
      const file = where.path === undefined ? '' : ` in ${quote(where.path)}`;
      throw new ProbeError(
        'ERR_USDT_ARGUMENT',
        `Cannot read argument ${i} (${quote(word)}) of USDT probe ${quote(where.probe)}${file}: ${err.message}`,
        {
          hints: [`See the probe's note with: readelf -n ${where.path ?? 'FILE'}`],
          details: { probe: where.probe, argument: i, text: word, args },
        },
      );
    }
  });
}
