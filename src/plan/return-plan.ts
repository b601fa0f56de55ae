import {
  analyzeKernelHandling,
  type CodePart,
  type DecodedInstruction,
  decodeInstructions,
  findReturnInstructions,
  type KernelHandling,
  type ReturnInstruction,
  type ReturnScan,
} from '../arch/index.js';
import { ProbeError, quote } from '../errors/index.js';
import {
  type ElfFile,
  type FunctionSymbol,
  functionDisplayName,
  type SymbolIndex,
} from '../symbols/index.js';
import type { CallingConvention } from './calling-convention.js';

/**
 * How return probes are placed: `trampoline` replaces the return address at the entry with a
 * trampoline's (the kernel's uretprobes, the ptrace engine's own), one probe for every return;
 * `sites` leaves return addresses alone and probes every instruction the function leaves by
 * (a trap more per call on the kernel engines: `ret` is single-stepped); `auto` picks sites
 * where the program may walk or unwind its stack through the function, else the trampoline.
 */
export type ReturnProbeMode = 'auto' | 'sites' | 'trampoline';

/** One instruction a function leaves by, probed in place of its return address. */
export interface ReturnSitePlan {
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
  /** `ret`, or `tail-call`: a jump to another function, which returns for this one. */
  readonly kind: 'ret' | 'tail-call';
  /** The instruction, as objdump writes it. */
  readonly text: string;
  /** How the kernel runs a probe on it. */
  readonly handling: KernelHandling;
}

/** How the returns of one probed function are caught. */
export interface ReturnPlan {
  readonly mode: 'trampoline' | 'sites';
  /** Why this way, in one line (`resolve` shows it). */
  readonly why: string;
  /** With sites: every instruction the function leaves by. */
  readonly sites: readonly ReturnSitePlan[];
  /**
   * Where a call begins: the function's first instruction, or for a Go function the first
   * after its stack check (a call whose stack grows runs its start twice).
   */
  readonly entry: { readonly vaddr: bigint; readonly fileOffset: bigint };
  /**
   * What a call's frame is kept per, to pair its entry and return and to close frames that an
   * unwind or a longjmp left: a thread, by its stack pointer at the entry (C, C++, Rust), or a
   * goroutine (%r14 under Go's register ABI), by the distance from the top of its stack,
   * which a copy of the stack keeps.
   */
  readonly frames: 'thread' | 'goroutine';
  /**
   * With sites: a jump of the function goes back to where its calls begin (a loop whose head
   * is its first instruction, or a call to itself made a jump), so its entry probe is hit
   * again within a call: an entry at the stack pointer of the function's call still open on
   * its thread goes on with that call, rather than closing it as unwound and opening another.
   * Not said of Go functions (their stack check's block jumps back to the start, before the
   * entry probe).
   */
  readonly loopsAtEntry?: boolean | undefined;
  /**
   * The exits one by one without an object each, where the plan has them so (a kept plan's
   * columns): see exitsByIndex().
   */
  readonly byIndex?: ExitsByIndex | undefined;
}

/** A return plan's exits by index (its `sites` as columns). */
export interface ExitsByIndex {
  readonly exitCount: number;
  exitVaddr(index: number): bigint;
  exitFileOffset(index: number): bigint;
  exitKind(index: number): 'ret' | 'tail-call';
  exitHandling(index: number): KernelHandling;
}

/** The exits of a plan as they are in it: a kept plan's own columns, or its `sites`. */
class ExitSites implements ExitsByIndex {
  constructor(readonly sites: readonly ReturnSitePlan[]) {}
  get exitCount(): number {
    return this.sites.length;
  }
  exitVaddr(index: number): bigint {
    return this.sites[index]!.vaddr;
  }
  exitFileOffset(index: number): bigint {
    return this.sites[index]!.fileOffset;
  }
  exitKind(index: number): 'ret' | 'tail-call' {
    return this.sites[index]!.kind;
  }
  exitHandling(index: number): KernelHandling {
    return this.sites[index]!.handling;
  }
}

/**
 * A plan's exits by index: what attaching every function of a large program reads of them
 * (node's `_ZN[1-9S]*` returns have 71,337 exits, an object and two bigints each when made).
 */
export function exitsByIndex(plan: ReturnPlan): ExitsByIndex {
  return plan.byIndex ?? new ExitSites(plan.sites);
}

/** What planning a function's returns needs to know about its file and the program. */
export interface ReturnPlanContext {
  readonly elf: ElfFile;
  readonly symbols: SymbolIndex;
  readonly displayPath: string;
  /** The file was built by the Go toolchain. */
  readonly goProgram: boolean;
  readonly convention: CallingConvention;
  /** Why the program can unwind through this code (an unwinder linked), else undefined. */
  readonly unwinder: () => string | undefined;
  /** Whether unwind information (.eh_frame) covers an address. */
  readonly hasUnwindInfo: (vaddr: bigint) => boolean;
  readonly mode: ReturnProbeMode;
  /** The sites are for a kernel engine (whose refusals apply), not ptrace. */
  readonly kernelEngine: boolean;
  readonly kernel: { readonly major: number; readonly minor: number } | undefined;
  /**
   * How the kernel runs a probe on each kind of `ret` met (`ret`, `repz ret`, `ret $8`), kept
   * by its bytes across the functions of a file.
   */
  readonly retHandlings?: Map<number, KernelHandling> | undefined;
  /**
   * The scan of a function's code for its exits, when it was done ahead (see
   * return-scan.ts); undefined: scan it here.
   */
  readonly scannedAhead?: ((fn: FunctionSymbol) => ReturnScan | undefined) | undefined;
}

/** The ways a spec names, to point errors at: its text and the span of its location. */
export interface SpecRef {
  readonly text: string;
  readonly span: { readonly start: number; readonly end: number };
}

/**
 * Decide how the returns of `fn` are caught, and find them when they are probed in place.
 * Throws ProbeError ERR_RETURN_ADDRESS_UNSAFE when a trampoline is asked for in Go code or
 * at the program's entry point (which has no return address: skipped by a pattern), and
 * ERR_RETURNS_NOT_FOUND when the returns must be probed in place but cannot all be found (or
 * one of them cannot take a kernel probe).
 */
export function planReturns(
  fn: FunctionSymbol,
  entryVaddr: bigint,
  context: ReturnPlanContext,
  spec: SpecRef,
): ReturnPlan {
  // Spelled only for an error (a demangled name may not be made yet: see demangleAllSoon()).
  const where = () => `${quote(functionDisplayName(fn))} in ${quote(context.displayPath)}`;
  const entry = { vaddr: entryVaddr, fileOffset: context.elf.vaddrToFileOffset(entryVaddr)! };
  const frames =
    context.goProgram && context.convention.kind === 'go-register' ? 'goroutine' : 'thread';
  const trampoline = (why: string): ReturnPlan => ({
    mode: 'trampoline',
    why,
    sites: [],
    entry,
    frames,
  });
  // The program's entry point (_start) is jumped to by the kernel with argc, not a return
  // address, on top of the stack: a trampoline would overwrite argc, and it never returns.
  if (context.elf.entry !== 0n && fn.vaddr === context.elf.entry) {
    throw new ProbeError(
      'ERR_RETURN_ADDRESS_UNSAFE',
      `Cannot place a return probe on ${where()}: it is the program's entry point, entered with no return address (argc is where one would be), and it never returns`,
      {
        source: { text: spec.text, span: spec.span },
        hints: ['Probe its entry, or the return of main'],
        details: { skipReason: 'program entry point' },
      },
    );
  }
  let why: string;
  if (context.goProgram) {
    if (context.mode === 'trampoline') {
      throw new ProbeError(
        'ERR_RETURN_ADDRESS_UNSAFE',
        `Cannot place a return trampoline in ${where()}: it is a Go program, whose runtime walks and copies goroutine stacks and aborts on a replaced return address`,
        {
          source: { text: spec.text, span: spec.span },
          hints: ['Leave out --return-probes=trampoline: its returns are probed in place'],
        },
      );
    }
    why =
      'a Go program: its runtime walks and copies goroutine stacks, so return addresses stay as they are';
  } else if (context.mode === 'trampoline') {
    return trampoline('asked for with --return-probes=trampoline');
  } else if (context.mode === 'sites') {
    why = 'asked for with --return-probes=sites';
  } else {
    const unwinder = context.unwinder();
    if (unwinder === undefined) {
      return trampoline(
        'no unwinder can pass through it: the program links none (no C++ exceptions, Rust panics or forced unwinds)',
      );
    }
    if (!context.hasUnwindInfo(fn.vaddr)) {
      return trampoline(
        `no unwinder can pass through it: it has no unwind information (.eh_frame), though ${unwinder}`,
      );
    }
    why = `an exception or a forced unwind (pthread_cancel) can pass through it: it has unwind information and ${unwinder}`;
  }
  const { sites, startJump } = findSites(fn, context, where, spec);
  const loopsAtEntry =
    !context.goProgram && startJump !== undefined && startJump <= entry.vaddr ? true : undefined;
  return { mode: 'sites', why, sites, entry, frames, loopsAtEntry };
}

function findSites(
  fn: FunctionSymbol,
  context: ReturnPlanContext,
  where: () => string,
  spec: SpecRef,
): { sites: ReturnSitePlan[]; startJump: bigint | undefined } {
  // A pattern leaves such a function out (said with the others skipped), not the whole pattern.
  const refuse = (reason: string, hints: string[] = [], skipReason = 'returns not found') =>
    new ProbeError(
      'ERR_RETURNS_NOT_FOUND',
      `Cannot place a return probe on ${where()}: ${reason}`,
      {
        source: { text: spec.text, span: spec.span },
        details: { skipReason },
        hints: [
          ...hints,
          context.goProgram
            ? 'Probe its callers after the call instead (FUNCTION+OFFSET), or its entry'
            : 'Probe its entry, or its callers after the call; --return-probes=trampoline replaces return addresses instead (a throw through it then ends the program)',
        ],
      },
    );
  if (fn.sizeBytes === 0n) {
    throw refuse('its symbol has no size, so where its code ends is not known');
  }
  const scan =
    context.scannedAhead?.(fn) ??
    findReturnInstructions(codeParts(fn, context.elf, context.symbols));
  if (!scan.ok) throw refuse(`its returns cannot be found safely: ${scan.reason}`);
  const sites: ReturnSitePlan[] = [];
  for (const exit of scan.exits) {
    const handling = exitHandling(exit, context);
    if (
      context.kernelEngine &&
      (handling.strategy === 'refuse' || handling.strategy === 'unsafe')
    ) {
      throw refuse(
        `the kernel cannot probe its exit "${exit.instruction.text}" at 0x${exit.instruction.vaddr.toString(16)}: ${handling.reason}`,
        ['The ptrace engine can (--engine ptrace with -p or -c)'],
        'an exit the kernel cannot probe',
      );
    }
    const { instruction } = exit;
    sites.push(
      new PlannedExit(
        instruction,
        context.elf.vaddrToFileOffset(instruction.vaddr)!,
        exit.kind,
        handling,
      ),
    );
  }
  return { sites, startJump: scan.startJump };
}

/** How the kernel runs a probe on an exit: worked out once per kind of `ret`. */
function exitHandling(exit: ReturnInstruction, context: ReturnPlanContext): KernelHandling {
  const kept = context.retHandlings;
  const { instruction } = exit;
  if (kept === undefined || exit.kind !== 'ret' || instruction.length > 3) {
    return analyzeKernelHandling(instruction, { kernel: context.kernel });
  }
  const bytes = instruction.bytes;
  let key = bytes.length;
  for (const byte of bytes) key = key * 256 + byte;
  let handling = kept.get(key);
  if (handling === undefined) {
    handling = analyzeKernelHandling(instruction, { kernel: context.kernel });
    kept.set(key, handling);
  }
  return handling;
}

/**
 * An exit found: its instruction spelled when asked (resolve shows it), from the instruction's
 * own bytes (the file is closed by then): spelling every exit of every function was a good
 * part of planning all the functions of a large program. A class, not an object with a getter
 * of its own: a closure per exit was a tenth of the memory planning all of them kept.
 */
class PlannedExit implements ReturnSitePlan {
  readonly vaddr: bigint;
  readonly #instruction: DecodedInstruction;

  constructor(
    instruction: DecodedInstruction,
    readonly fileOffset: bigint,
    readonly kind: 'ret' | 'tail-call',
    readonly handling: KernelHandling,
  ) {
    this.vaddr = instruction.vaddr;
    this.#instruction = instruction;
  }

  get text(): string {
    return this.#instruction.text;
  }
}

/** A part of a function's code: where it is, and where in the file (undefined: not in it). */
export interface CodeRange {
  readonly vaddr: bigint;
  readonly fileOffset: bigint | undefined;
  readonly size: bigint;
}

/**
 * Where the function's code is: its body, and its cold part (`f.cold`, which gcc moves away
 * from the hot path).
 */
export function codeRanges(fn: FunctionSymbol, elf: ElfFile, symbols: SymbolIndex): CodeRange[] {
  const range = (vaddr: bigint, size: bigint) => ({
    vaddr,
    fileOffset: elf.vaddrToFileOffset(vaddr),
    size,
  });
  const ranges = [range(fn.vaddr, fn.sizeBytes)];
  for (const cold of symbols.coldPartsOf(fn.name)) {
    if (cold.sizeBytes > 0n) ranges.push(range(cold.vaddr, cold.sizeBytes));
  }
  return ranges;
}

/** The bytes of the function's code (see codeRanges()). */
export function codeParts(fn: FunctionSymbol, elf: ElfFile, symbols: SymbolIndex): CodePart[] {
  return codeRanges(fn, elf, symbols).map(({ vaddr, fileOffset, size }) => ({
    vaddr,
    bytes: fileOffset === undefined ? new Uint8Array(0) : elf.view(fileOffset, Number(size)),
  }));
}

/** How many instructions from a Go function's start its stack check may take. */
const STACK_CHECK_INSTRUCTIONS = 8;
/**
 * How far into the block a stack check jumps to its `call runtime.morestack*` is: the
 * register arguments are spilled first, up to 9 integer and 15 floating-point ones under
 * Go's register ABI (runtime.concatstring4's 9 moves and a nop were past 8).
 */
const MORESTACK_BLOCK_INSTRUCTIONS = 32;

/**
 * Where a Go function's work starts: after the stack check at its start (`cmp 0x10(%r14),%rsp;
 * jbe more`, with `more:` calling runtime.morestack and jumping back to the start once the
 * stack has grown), so that a call whose stack grows is seen once, not twice. Undefined for
 * a function with no stack check (NOSPLIT).
 */
export function afterGoStackCheck(
  fn: FunctionSymbol,
  elf: ElfFile,
  symbols: SymbolIndex,
): bigint | undefined {
  const decode = (vaddr: bigint, count: number): DecodedInstruction[] => {
    const fileOffset = elf.vaddrToFileOffset(vaddr);
    if (fileOffset === undefined) return [];
    const end = fn.vaddr + fn.sizeBytes;
    const available = end > vaddr ? Number(end - vaddr) : 0;
    const bytes = elf.read(fileOffset, Math.min(available, count * 15));
    return decodeInstructions(bytes, vaddr, { maxCount: count }).filter((i) => !i.invalid);
  };
  /**
   * Whether the block at `vaddr` is the stack check's: its first call is to
   * runtime.morestack*. Not a block that calls runtime.throw first, which the compiler may
   * place just before it (mallocgc's `if gcphase == _GCmarktermination { throw(...) }`, a
   * branch of its first instructions too, was taken for the check: its entry was probed past
   * the frame's `sub $0x70,%rsp`, and no return matched its call).
   */
  const callsMorestack = (vaddr: bigint) => {
    const call = decode(vaddr, MORESTACK_BLOCK_INSTRUCTIONS).find(
      (insn) => insn.mnemonic === 'call' || insn.mnemonic === 'jmp' || insn.mnemonic === 'ret',
    );
    return (
      call?.mnemonic === 'call' &&
      call.branchTarget !== undefined &&
      symbols.containing(call.branchTarget)?.name.startsWith('runtime.morestack') === true
    );
  };
  const start = decode(fn.vaddr, STACK_CHECK_INSTRUCTIONS + 1);
  // After the last branch to that block: a large frame's check has two (`jb` where the
  // frame's size would wrap below 0, then `jbe` against the stack guard).
  const at = start.slice(0, STACK_CHECK_INSTRUCTIONS).findLastIndex((insn) => {
    const target = insn.branchTarget;
    return (
      target !== undefined &&
      insn.mnemonic !== 'jmp' &&
      insn.mnemonic !== 'call' &&
      target > insn.vaddr &&
      target < fn.vaddr + fn.sizeBytes &&
      callsMorestack(target)
    );
  });
  return at < 0 ? undefined : start[at + 1]?.vaddr;
}
