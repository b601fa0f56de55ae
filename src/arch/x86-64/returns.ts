import { type DecodedInstruction, decodeInstructions, sweepInstructions } from './decode.js';
import { QUICK_FLOW, quick, quickLength } from './quick-length.js';

/** A piece of a function's code: its body, or a part the compiler moved away (`f.cold`). */
export interface CodePart {
  readonly vaddr: bigint;
  readonly bytes: Uint8Array;
}

/** One way out of a function. */
export interface ReturnInstruction {
  readonly instruction: DecodedInstruction;
  /**
   * `ret`: the function returns from here. `tail-call`: it jumps to another function, which
   * returns to its caller for it (the stack pointer is where it was at the entry, as at a
   * `ret`; the result is not made yet).
   */
  readonly kind: 'ret' | 'tail-call';
}

export type ReturnScan =
  | {
      readonly ok: true;
      readonly exits: readonly ReturnInstruction[];
      /**
       * The lowest address of the function's first START_BYTES that a jmp or jcc of its own
       * goes to (a loop whose head is where its calls begin), or undefined.
       */
      readonly startJump?: bigint | undefined;
    }
  | { readonly ok: false; readonly reason: string; readonly at: bigint | undefined };

/** How far from a function's start a jump back is told (ReturnScan.startJump). */
const START_BYTES = 16;

/**
 * ReturnScan.startJump, as the sweep goes: `lowest` (the lowest so far) or the target of a
 * jmp or jcc (not a call) at `target`, where it is among the START_BYTES from `start`.
 */
function lowerStartJump(
  lowest: number | undefined,
  target: number,
  call: boolean,
  start: number,
): number | undefined {
  if (call || target < start || target >= start + START_BYTES) return lowest;
  return lowest === undefined || target < lowest ? target : lowest;
}

/** How many instructions before an indirect `jmp` are searched for its jump-table load. */
const TABLE_LOOKBACK = 4;

/** `(base,index,scale)` or `(,index,scale)` in AT&T text: a memory operand with an index. */
const INDEXED_MEMORY = /\([^)]*,%[a-z0-9]+,[1248]\)/;

/**
 * Every instruction a function leaves by, found by decoding all of its code (every part, in
 * full): each `ret`, and each jump out of it: a direct `jmp` to an address outside its parts,
 * an indirect `jmp` through memory at a fixed place (`jmp *0x2fe2(%rip)`, a GOT slot) or
 * through a register or pointer that no jump table filled (`jmp *%rax` after a call's
 * arguments, `jmp *0x10(%rax)`, a virtual call). An indirect jump through a table
 * (`jmp *0x402010(,%rax,8)`, or `jmp *%rax` shortly after a load indexed by the same
 * register's source, as gcc and Go 1.19 write switch tables) stays inside.
 *
 * Fails, with the reason and where, when the code cannot be decoded to its end (data in the
 * code, or a size that cuts an instruction), or when it leaves by a conditional jump to
 * another function: a probe there cannot tell a taken jump from one not taken.
 */
export function findReturnInstructions(
  parts: readonly CodePart[],
  onJump?: JumpObserver,
): ReturnScan {
  return quickReturnInstructions(parts, onJump) ?? sweptReturnInstructions(parts, onJump);
}

/**
 * Told, while the code is swept, each direct jmp, jcc or call's target, and undefined for an
 * indirect jmp that stays in the function (through a jump table, which may land anywhere in
 * it). A target may be told twice (a sweep begun again with iced).
 */
export type JumpObserver = (target: number | undefined) => void;

/** findReturnInstructions() through iced alone, every instruction decoded in full. */
export function sweptReturnInstructions(
  parts: readonly CodePart[],
  onJump?: JumpObserver,
): ReturnScan {
  const inside = (address: bigint) =>
    parts.some((part) => address >= part.vaddr && address < part.vaddr + BigInt(part.bytes.length));
  const exits: ReturnInstruction[] = [];
  const start = Number(parts[0]?.vaddr ?? 0n);
  let startJump: number | undefined;
  for (const part of parts) {
    const recent: DecodedInstruction[] = [];
    let failure: ReturnScan | undefined;
    sweepInstructions(part.bytes, part.vaddr, (instruction) => {
      if (instruction.invalid) {
        failure = {
          ok: false,
          reason: `the bytes at 0x${instruction.vaddr.toString(16)} are not an instruction (data in the code, or a symbol size that cuts one)`,
          at: instruction.vaddr,
        };
        return false;
      }
      const kind = exitKind(instruction, recent, inside);
      if (kind === 'conditional') {
        failure = conditionalExit(instruction);
        return false;
      }
      const target = instruction.branchTarget;
      if (target !== undefined) {
        startJump = lowerStartJump(
          startJump,
          Number(target),
          instruction.mnemonic === 'call',
          start,
        );
      }
      if (onJump !== undefined) {
        if (target !== undefined) onJump(Number(target));
        else if (kind === undefined && instruction.mnemonic === 'jmp') onJump(undefined);
      }
      if (kind !== undefined) exits.push({ instruction, kind });
      recent.push(instruction);
      if (recent.length > TABLE_LOOKBACK) recent.shift();
      return true;
    });
    if (failure !== undefined) return failure;
  }
  return scanned(exits, startJump);
}

/**
 * findReturnInstructions() through the quick length decoder, iced decoding only the exits
 * (and what an indirect jmp needs); undefined when the quick decoder does not know an
 * instruction of the code (iced then does it all, and says why if it fails).
 */
function quickReturnInstructions(
  parts: readonly CodePart[],
  onJump: JumpObserver | undefined,
): ReturnScan | undefined {
  const starts = parts.map((part) => Number(part.vaddr));
  if (starts.some((start) => !Number.isSafeInteger(start + 2 ** 32))) return undefined;
  const inside = (address: number) =>
    parts.some((part, k) => address >= starts[k]! && address < starts[k]! + part.bytes.length);
  const insideBig = (address: bigint) => inside(Number(address));
  const exits: ReturnInstruction[] = [];
  let startJump: number | undefined;
  const recent = new Int32Array(TABLE_LOOKBACK);
  for (let k = 0; k < parts.length; k++) {
    const part = parts[k]!;
    const bytes = part.bytes;
    let seen = 0;
    for (let at = 0; at < bytes.length; ) {
      const length = quickLength(bytes, at, bytes.length);
      if (length === 0) return undefined;
      const flow = quick.flow;
      if (flow !== QUICK_FLOW.none) {
        let kind: ReturnInstruction['kind'] | 'conditional' | undefined;
        let instruction: DecodedInstruction | undefined;
        if (flow === QUICK_FLOW.ret) {
          kind = 'ret';
        } else if (flow === QUICK_FLOW.jmpIndirect) {
          instruction = decodeOne(part, at, length);
          const before: DecodedInstruction[] = [];
          for (let r = Math.max(0, seen - TABLE_LOOKBACK); r < seen; r++) {
            const from = recent[r % TABLE_LOOKBACK]!;
            const previous = decodeOne(part, from, quickLength(bytes, from, bytes.length));
            if (previous === undefined) return undefined;
            before.push(previous);
          }
          if (instruction === undefined) return undefined;
          kind = exitKind(instruction, before, insideBig);
          if (kind === undefined) onJump?.(undefined);
        } else {
          const target = starts[k]! + at + length + quick.displacement;
          onJump?.(target);
          startJump = lowerStartJump(startJump, target, flow === QUICK_FLOW.call, starts[0]!);
          if (flow === QUICK_FLOW.call || inside(target)) kind = undefined;
          else kind = flow === QUICK_FLOW.jmp ? 'tail-call' : 'conditional';
        }
        if (kind === 'conditional') {
          instruction ??= decodeOne(part, at, length);
          return instruction === undefined ? undefined : conditionalExit(instruction);
        }
        if (kind !== undefined) {
          instruction ??= new QuickExit(part, at, length, flow === QUICK_FLOW.ret ? 'ret' : 'jmp');
          exits.push({ instruction, kind });
        }
      }
      recent[seen % TABLE_LOOKBACK] = at;
      seen++;
      at += length;
    }
  }
  return scanned(exits, startJump);
}

/** A sweep's result: its exits and its startJump, or NO_EXIT. */
function scanned(exits: ReturnInstruction[], startJump: number | undefined): ReturnScan {
  if (exits.length === 0) return NO_EXIT;
  return { ok: true, exits, startJump: startJump === undefined ? undefined : BigInt(startJump) };
}

/** The scan of a function that has no way out. */
const NO_EXIT: ReturnScan = {
  ok: false,
  reason: 'no ret or jump out of it was found (a function that never returns?)',
  at: undefined,
};

/** The scan of a function that leaves by a conditional jump to another. */
function conditionalExit(instruction: DecodedInstruction): ReturnScan {
  return {
    ok: false,
    reason: `it leaves by a conditional jump to another function ("${instruction.text}" at 0x${instruction.vaddr.toString(16)}), which a probe cannot tell taken from not taken`,
    at: instruction.vaddr,
  };
}

/**
 * A ret or direct jmp found by the quick decoder: what the return plan reads of it (address,
 * bytes, mnemonic, target) without iced; its text is spelled by iced when asked.
 */
class QuickExit implements DecodedInstruction {
  readonly vaddr: bigint;
  readonly invalid = false;
  readonly ripRelative = false;
  readonly ripTarget = undefined;
  readonly branchTarget: bigint | undefined;
  /**
   * The bytes, packed into a number when there are at most 6 (a ret, a jmp): an array for
   * each of the exits of every function of a large program was a tenth of what planning them
   * kept.
   */
  readonly #packed: number | Uint8Array;
  #text: string | undefined;

  constructor(
    part: CodePart,
    at: number,
    readonly length: number,
    readonly mnemonic: 'ret' | 'jmp',
  ) {
    this.vaddr = part.vaddr + BigInt(at);
    if (length <= 6) {
      let packed = 0;
      for (let i = length - 1; i >= 0; i--) packed = packed * 256 + part.bytes[at + i]!;
      this.#packed = packed;
    } else {
      this.#packed = new Uint8Array(part.bytes.subarray(at, at + length));
    }
    this.branchTarget =
      mnemonic === 'jmp' ? this.vaddr + BigInt(length + quick.displacement) : undefined;
  }

  /** A copy of the instruction's bytes. */
  get bytes(): Uint8Array {
    const packed = this.#packed;
    if (typeof packed !== 'number') return packed.slice();
    const bytes = new Uint8Array(this.length);
    for (let i = 0, rest = packed; i < this.length; i++, rest = Math.floor(rest / 256)) {
      bytes[i] = rest % 256;
    }
    return bytes;
  }

  get text(): string {
    this.#text ??= decodeInstructions(this.bytes, this.vaddr, { maxCount: 1 })[0]!.text;
    return this.#text;
  }
}

/**
 * A way out of a function found elsewhere (a worker's scan), made again from its bytes as the
 * scan made it: a ret or direct jmp the quick decoder knows as such (spelled when asked), any
 * other by iced. Undefined when the bytes are not one instruction of that length.
 */
export function exitInstructionAt(
  vaddr: bigint,
  bytes: Uint8Array,
): DecodedInstruction | undefined {
  const length = quickLength(bytes, 0, bytes.length);
  if (length === bytes.length && (quick.flow === QUICK_FLOW.ret || quick.flow === QUICK_FLOW.jmp)) {
    return new QuickExit(
      { vaddr, bytes },
      0,
      length,
      quick.flow === QUICK_FLOW.ret ? 'ret' : 'jmp',
    );
  }
  return decodeOne({ vaddr, bytes }, 0, bytes.length);
}

/** The instruction at `at` of `part` by iced, if iced agrees on its length. */
function decodeOne(part: CodePart, at: number, length: number): DecodedInstruction | undefined {
  const [instruction] = decodeInstructions(
    part.bytes.subarray(at, at + length),
    part.vaddr + BigInt(at),
    { maxCount: 1 },
  );
  return instruction !== undefined && !instruction.invalid && instruction.length === length
    ? instruction
    : undefined;
}

function exitKind(
  instruction: DecodedInstruction,
  recent: readonly DecodedInstruction[],
  inside: (address: bigint) => boolean,
): ReturnInstruction['kind'] | 'conditional' | undefined {
  const { mnemonic } = instruction;
  if (mnemonic === 'ret') return 'ret';
  const target = instruction.branchTarget;
  if (target !== undefined) {
    if (mnemonic === 'call' || inside(target)) return undefined;
    return mnemonic === 'jmp' ? 'tail-call' : 'conditional';
  }
  if (mnemonic !== 'jmp') return undefined;
  if (instruction.ripRelative) return 'tail-call';
  const { text } = instruction;
  const operand = text.slice(text.indexOf('*') + 1);
  if (INDEXED_MEMORY.test(operand)) return undefined;
  if (/^%[a-z0-9]+$/.test(operand) && filledFromTable(operand, recent)) return undefined;
  return 'tail-call';
}

/**
 * Whether `register` was just computed from a table: loaded from memory indexed by a register
 * (`movslq (%rdx,%rax,4),%rax`, `mov (%rdx,%rcx,8),%rdx`), possibly then added to the table's
 * base (`add %rdx,%rax`).
 */
function filledFromTable(register: string, recent: readonly DecodedInstruction[]): boolean {
  for (let i = recent.length - 1; i >= 0; i--) {
    const text = recent[i]!.text;
    const destination = /,(%[a-z0-9]+)$/.exec(text)?.[1];
    if (destination !== register) continue;
    if (INDEXED_MEMORY.test(text)) return true;
    // `add %rdx,%rax`: the sum of a table's base and an entry loaded just before.
    if (!/^add %[a-z0-9]+,%[a-z0-9]+$/.test(text)) return false;
  }
  return false;
}
