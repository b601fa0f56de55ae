import { ProbeError } from '../../errors/index.js';
import { type Iced, type IcedFormatter, loadIced } from './iced.js';
import { QUICK_FLOW, quick, quickLength } from './quick-length.js';

/** One x86-64 instruction as decoded from bytes at a virtual address. */
export interface DecodedInstruction {
  readonly vaddr: bigint;
  /** Length in bytes (1..15); for an invalid instruction, the bytes the decoder looked at. */
  readonly length: number;
  /** A copy of the instruction's bytes. */
  readonly bytes: Uint8Array;
  /**
   * AT&T syntax close to `objdump -d`, lowercase, without symbols: `push %rbp`,
   * `mov %rsp,%rbp`, `call 0x1139`, `mov 0x2ed6(%rip),%rax`. `(bad)` when invalid.
   */
  readonly text: string;
  /** The mnemonic without prefixes: `push`, `mov`, `call`, `nopw`; `(bad)` when invalid. */
  readonly mnemonic: string;
  /** The bytes are not a valid instruction, or the instruction runs past the end of the bytes. */
  readonly invalid: boolean;
  /** A memory operand is addressed relative to %rip (its meaning depends on where it runs). */
  readonly ripRelative: boolean;
  /** The address a %rip-relative memory operand refers to; undefined without one. */
  readonly ripTarget: bigint | undefined;
  /** The target of a direct (relative) jmp, jcc, call or loop; undefined for anything else. */
  readonly branchTarget: bigint | undefined;
}

export interface DecodeOptions {
  /** Stop after this many instructions (default: decode to the end of the bytes). */
  readonly maxCount?: number;
}

/** The longest x86 instruction. */
export const MAX_INSTRUCTION_LENGTH = 15;
const ADDRESS_LIMIT = 1n << 64n;

function hex(value: bigint): string {
  return `0x${value.toString(16)}`;
}

/** A formatter configured to print what `objdump -d` prints (AT&T, 0x hex, no padding). */
function createFormatter(iced: Iced): IcedFormatter {
  const formatter = new iced.Formatter(iced.FormatterSyntax.Gas);
  formatter.uppercaseAll = false;
  formatter.uppercaseHex = false;
  formatter.hexPrefix = '0x';
  formatter.hexSuffix = '';
  formatter.leadingZeros = false;
  formatter.branchLeadingZeros = false;
  formatter.displacementLeadingZeros = false;
  formatter.smallHexNumbersInDecimal = false;
  formatter.spaceAfterOperandSeparator = false;
  formatter.ripRelativeAddresses = true;
  formatter.showBranchSize = false;
  formatter.gasShowMnemonicSizeSuffix = false;
  formatter.alwaysShowScale = false;
  formatter.showZeroDisplacements = true;
  formatter.showUselessPrefixes = true;
  formatter.firstOperandCharIndex = 0;
  return formatter;
}

const SEGMENT_PREFIXES: Readonly<Record<number, string>> = {
  38: 'es',
  46: 'cs',
  54: 'ss',
  62: 'ds',
  100: 'fs',
  101: 'gs',
};

/** Offset of the first opcode byte: after legacy prefixes and a REX prefix. */
function opcodeOffset(bytes: Uint8Array): number {
  let offset = 0;
  while (offset < bytes.length) {
    const byte = bytes[offset]!;
    const legacy =
      byte === 0x66 ||
      byte === 0x67 ||
      byte === 0xf0 ||
      byte === 0xf2 ||
      byte === 0xf3 ||
      SEGMENT_PREFIXES[byte] !== undefined;
    if (!legacy && (byte & 0xf0) !== 0x40) break;
    offset++;
  }
  return offset;
}

/**
 * Bring iced's AT&T text to objdump's spelling: an explicit scale of 1 (`(%rax,%rax,1)`), no
 * size suffix on `call`/`push`/`pop` of memory, and padding prefixes of long nops printed as
 * words (`data16 cs nopw 0x0(%rax,%rax,1)`), as objdump prints them.
 */
function objdumpSpelling(text: string, mnemonic: string, bytes: Uint8Array): string {
  let result = text.replace(/\(([^(),]*),(%[a-z0-9]+)\)/g, '($1,$2,1)');
  result = result.replace(
    /^((?:notrack |bnd )?(?:call|jmp|push|pop))q (?=[*]?[-0-9a-z%(]*\()/,
    '$1 ',
  );
  result = result.replace(/^imul (\$[^,]+),(%[a-z0-9]+)$/, 'imul $1,$2,$2');
  result = result.replace(/^rep ret$/, 'repz ret');
  result = result.replace(/^repe (?=cmps|scas)/, 'repz ').replace(/^repne (?=cmps|scas)/, 'repnz ');
  // x87 forms whose operands iced leaves implicit.
  result = result.replace(/^fxch$/, 'fxch %st(1)');
  result = result.replace(/^(f(?:add|sub|subr|mul|div|divr)p)$/, '$1 %st,%st(1)');
  const opcode = bytes[opcodeOffset(bytes)];
  if ((opcode === 0xd0 || opcode === 0xd1) && result.includes(' $0x1,')) {
    // The shift-by-one encodings (d0/d1) have no immediate; objdump shows none.
    result = result.replace(' $0x1,', ' ');
  }
  // Padding prefixes: objdump prints a 0x66 the instruction does not use as "data16", and
  // the segment prefix of a nop ("cs nopw") as a word.
  const prefixes: number[] = [];
  for (const byte of bytes) {
    if (byte !== 0x66 && SEGMENT_PREFIXES[byte] === undefined) break;
    prefixes.push(byte);
  }
  const nop = mnemonic.startsWith('nop');
  const extra66 = prefixes.filter((byte) => byte === 0x66).length - 1;
  if ((nop && result.includes(':')) || extra66 > 0) {
    const words: string[] = [];
    let used66 = 1;
    for (let i = prefixes.length - 1; i >= 0; i--) {
      const byte = prefixes[i]!;
      if (byte === 0x66 && used66 > 0) {
        used66--;
        if (!nop || mnemonic === 'nopw') continue;
      }
      if (byte === 0x66) words.unshift('data16');
      else if (nop) words.unshift(SEGMENT_PREFIXES[byte]!);
    }
    result = [...words, nop ? result.replace(/%[c-gs]s:/, '') : result].join(' ');
  }
  return result;
}

function checkAddress(vaddr: bigint, sizeBytes: number): void {
  if (vaddr < 0n || vaddr + BigInt(sizeBytes) > ADDRESS_LIMIT) {
    throw new ProbeError(
      'ERR_DECODE',
      `Cannot decode machine code at ${hex(vaddr)}: ${sizeBytes} bytes from there leave the 64-bit address space`,
    );
  }
}

/**
 * Visit instructions from the start of `bytes` (at `vaddr`) in order: a linear sweep, as
 * objdump does. The visitor returns false to stop. An invalid or truncated instruction is
 * visited (with `invalid: true`) and ends the sweep.
 */
export function sweepInstructions(
  bytes: Uint8Array,
  vaddr: bigint,
  visit: (instruction: DecodedInstruction) => boolean,
): void {
  checkAddress(vaddr, bytes.length);
  if (bytes.length === 0) return;
  const iced = loadIced();
  // Every iced object lives in WebAssembly memory until freed, even when a later one fails.
  const owned: { free(): void }[] = [];
  const keep = <T extends { free(): void }>(object: T): T => {
    owned.push(object);
    return object;
  };
  // The formatters and the instruction are made once and reused by every sweep (a plan of
  // thousands of functions sweeps each): a sweep started inside a visitor makes its own.
  let shared: SweepTools | undefined;
  try {
    const tools =
      sharedTools !== undefined && !sharedTools.busy ? sharedTools : sweepTools(iced, keep);
    if (tools === sharedTools) {
      shared = tools;
      shared.busy = true;
    }
    const { formatter, stringFormatter, instruction } = tools;
    const decoder = keep(new iced.Decoder(64, bytes, iced.DecoderOptions.None));
    decoder.ip = vaddr;
    // The instructions' bytes are cut from one copy, when read: the caller may change its own.
    const copy = bytes.slice();
    while (decoder.canDecode) {
      const offset = decoder.position;
      const ip = vaddr + BigInt(offset);
      decoder.decodeOut(instruction);
      if (instruction.isInvalid) {
        const length = Math.max(1, Math.min(instruction.length, bytes.length - offset));
        visit({
          vaddr: ip,
          length,
          bytes: bytes.slice(offset, offset + length),
          text: '(bad)',
          mnemonic: '(bad)',
          invalid: true,
          ripRelative: false,
          ripTarget: undefined,
          branchTarget: undefined,
        });
        return;
      }
      const length = instruction.length;
      const flow = instruction.flowControl;
      const direct =
        (flow === iced.FlowControl.UnconditionalBranch ||
          flow === iced.FlowControl.ConditionalBranch ||
          flow === iced.FlowControl.Call) &&
        instruction.op0Kind === iced.OpKind.NearBranch64;
      // The mnemonic follows from the instruction's code alone (its operand size included).
      const code = instruction.code;
      let mnemonic = MNEMONICS.get(code);
      if (mnemonic === undefined) {
        mnemonic = formatter.formatMnemonicOptions(
          instruction,
          iced.FormatMnemonicOptions.NoPrefixes,
        );
        MNEMONICS.set(code, mnemonic);
      }
      // The text and bytes are made when first read (most sweeps read those of few
      // instructions), except where the mnemonic depends on the text: `callq` etc. lose their
      // suffix in it.
      let spelled: string | undefined;
      const fullMnemonic = mnemonic;
      if (mnemonic.endsWith('q')) {
        // Whether the text keeps the suffix follows from the code and the operands' kinds.
        const form = code * 4096 + instruction.op0Kind * 64 + instruction.op1Kind;
        let kept = SUFFIX_KEPT.get(form);
        if (kept === undefined) {
          const own = bytes.subarray(offset, offset + length);
          spelled = spell(instruction, formatter, stringFormatter, mnemonic, own);
          kept = spelled.split(' ').includes(mnemonic);
          SUFFIX_KEPT.set(form, kept);
        }
        if (!kept) mnemonic = mnemonic.slice(0, -1);
      }
      const ripRelative = instruction.isIpRelMemoryOperand;
      const decoded = new SweptInstruction(
        ip,
        length,
        copy,
        offset,
        mnemonic,
        fullMnemonic,
        spelled,
        ripRelative,
        ripRelative ? instruction.ipRelMemoryAddress : undefined,
        direct ? instruction.nearBranchTarget : undefined,
      );
      if (!visit(decoded)) return;
    }
  } finally {
    if (shared !== undefined) shared.busy = false;
    for (const object of owned.reverse()) object.free();
  }
}

/**
 * The key of an instruction that means the same wherever it is, by its bytes (the first
 * instruction of most functions is one of a few: push %rbp, push %r15, endbr64, sub
 * $0x18,%rsp, and ret), for a caller that decodes it once (atAddress()); undefined for one the
 * quick decoder does not know, a branch, and a 5-byte instruction (the kernel takes a 5-byte
 * nop by where it is) but `mov $imm32,%reg` (b8+r), which no kernel takes for a nop. One with
 * a %rip-relative operand has a key too: the caller sees ripRelative once decoded.
 */
export function recurringKey(bytes: Uint8Array): number | string | undefined {
  const length = quickLength(bytes, 0, bytes.length);
  if (length === 0) return undefined;
  if (quick.flow !== QUICK_FLOW.none && quick.flow !== QUICK_FLOW.ret) return undefined;
  if (length === 5 && (bytes[0]! & 0xf8) !== 0xb8) return undefined;
  if (length <= 6) {
    let key = length;
    for (let i = 0; i < length; i++) key = key * 256 + bytes[i]!;
    return key;
  }
  return Buffer.from(bytes.buffer, bytes.byteOffset, length).toString('latin1');
}

/**
 * `template` (an instruction recurringKey() gave a key, with no %rip-relative operand) at
 * another address: the same bytes and text.
 */
export function atAddress(template: DecodedInstruction, vaddr: bigint): DecodedInstruction {
  return new MovedInstruction(template, vaddr);
}

class MovedInstruction implements DecodedInstruction {
  readonly length: number;
  readonly mnemonic: string;
  readonly invalid = false;
  readonly ripRelative = false;
  readonly ripTarget = undefined;
  readonly branchTarget = undefined;
  readonly #template: DecodedInstruction;
  #bytes: Uint8Array | undefined;

  constructor(
    template: DecodedInstruction,
    readonly vaddr: bigint,
  ) {
    this.#template = template;
    this.length = template.length;
    this.mnemonic = template.mnemonic;
  }

  get bytes(): Uint8Array {
    this.#bytes ??= this.#template.bytes.slice();
    return this.#bytes;
  }

  get text(): string {
    return this.#template.text;
  }
}

/** An instruction of a sweep: its bytes and text are made when first read. */
class SweptInstruction implements DecodedInstruction {
  readonly invalid = false;
  readonly #source: Uint8Array;
  readonly #offset: number;
  readonly #fullMnemonic: string;
  #bytes: Uint8Array | undefined;
  #text: string | undefined;

  constructor(
    readonly vaddr: bigint,
    readonly length: number,
    source: Uint8Array,
    offset: number,
    readonly mnemonic: string,
    fullMnemonic: string,
    text: string | undefined,
    readonly ripRelative: boolean,
    readonly ripTarget: bigint | undefined,
    readonly branchTarget: bigint | undefined,
  ) {
    this.#source = source;
    this.#offset = offset;
    this.#fullMnemonic = fullMnemonic;
    this.#text = text;
  }

  get bytes(): Uint8Array {
    this.#bytes ??= this.#source.slice(this.#offset, this.#offset + this.length);
    return this.#bytes;
  }

  get text(): string {
    this.#text ??= spellAgain(this.bytes, this.vaddr, this.#fullMnemonic);
    return this.#text;
  }
}

/** The mnemonic (no prefixes) of each iced instruction code met so far. */
const MNEMONICS = new Map<number, string>();
/** For mnemonics ending in q: whether objdump's text keeps the q, by code and operand kinds. */
const SUFFIX_KEPT = new Map<number, boolean>();

function spell(
  instruction: InstanceType<Iced['Instruction']>,
  formatter: IcedFormatter,
  stringFormatter: IcedFormatter,
  mnemonic: string,
  bytes: Uint8Array,
): string {
  const text = (instruction.isStringInstruction ? stringFormatter : formatter).format(instruction);
  return objdumpSpelling(text, mnemonic, bytes);
}

/** The text of the one instruction `bytes` at `vaddr`, decoded again. */
function spellAgain(bytes: Uint8Array, vaddr: bigint, mnemonic: string): string {
  const iced = loadIced();
  const owned: { free(): void }[] = [];
  const keep = <T extends { free(): void }>(object: T): T => {
    owned.push(object);
    return object;
  };
  try {
    // The shared formatters keep no state between two calls: a sweep that is using them
    // (its visitor asked for this text) does not mind. Its instruction is its own.
    const { formatter, stringFormatter } = sharedTools ?? sweepTools(iced, keep);
    const instruction = keep(new iced.Instruction());
    const decoder = keep(new iced.Decoder(64, bytes, iced.DecoderOptions.None));
    decoder.ip = vaddr;
    decoder.decodeOut(instruction);
    return spell(instruction, formatter, stringFormatter, mnemonic, bytes);
  } finally {
    for (const object of owned.reverse()) object.free();
  }
}

interface SweepTools {
  readonly formatter: IcedFormatter;
  /** objdump names the segments of string instructions (`rep stos %eax,%es:(%rdi)`). */
  readonly stringFormatter: IcedFormatter;
  readonly instruction: InstanceType<Iced['Instruction']>;
  busy: boolean;
}

/** The tools every sweep shares (made by the first, never freed), when not in use. */
let sharedTools: SweepTools | undefined;

/** New tools, each handed to `keep` (freed after the sweep), or the shared ones made now. */
function sweepTools(iced: Iced, keep: <T extends { free(): void }>(object: T) => T): SweepTools {
  const share = sharedTools === undefined;
  const own = <T extends { free(): void }>(object: T): T => (share ? object : keep(object));
  const stringFormatter = own(createFormatter(iced));
  stringFormatter.alwaysShowSegmentRegister = true;
  const tools: SweepTools = {
    formatter: own(createFormatter(iced)),
    stringFormatter,
    instruction: own(new iced.Instruction()),
    busy: false,
  };
  if (share) sharedTools = tools;
  return tools;
}

/**
 * Decode instructions from the start of `bytes`, which sit at virtual address `vaddr`: a
 * linear sweep that stops at the end of the bytes or after `options.maxCount` instructions.
 * An instruction that cannot be decoded, or that runs past the end of the bytes, is returned
 * with `invalid: true` and ends the list.
 */
export function decodeInstructions(
  bytes: Uint8Array,
  vaddr: bigint,
  options: DecodeOptions = {},
): DecodedInstruction[] {
  const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;
  if (!(maxCount >= 0) || (Number.isFinite(maxCount) && !Number.isInteger(maxCount))) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot decode machine code: maxCount ${String(maxCount)} is not a whole number of instructions`,
    );
  }
  const result: DecodedInstruction[] = [];
  if (maxCount === 0) return result;
  // Hand the decoder only the bytes it may need: it copies its input into WebAssembly memory.
  const window = Number.isFinite(maxCount)
    ? bytes.subarray(0, Math.min(bytes.length, maxCount * MAX_INSTRUCTION_LENGTH))
    : bytes;
  sweepInstructions(window, vaddr, (instruction) => {
    result.push(instruction);
    return result.length < maxCount;
  });
  return result;
}

/**
 * The addresses that the %rip-relative memory operands of the code in `bytes` (at `vaddr`)
 * refer to, in order, decoding until the end of the bytes or the first invalid instruction.
 * Compiled code loads the address of a function or variable with such an operand (`lea
 * 0x1234(%rip),%rax`), which is how an IFUNC resolver names its implementations.
 */
export function ripRelativeTargets(bytes: Uint8Array, vaddr: bigint): bigint[] {
  const targets: bigint[] = [];
  sweepInstructions(bytes, vaddr, (instruction) => {
    if (instruction.ripTarget !== undefined) targets.push(instruction.ripTarget);
    return true;
  });
  return targets;
}
