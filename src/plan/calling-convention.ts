import { ProbeError } from '../errors/index.js';
import {
  ARGUMENT_REGISTERS,
  type FetchArg,
  type FetchExpr,
  MAX_RETVAL_INDEX,
  type RegisterBase,
} from '../spec/index.js';
import {
  type ElfFile,
  type FunctionSymbol,
  type GoInfo,
  goFunctionEntries,
  goInfo,
  isGoFunctionEntry,
} from '../symbols/index.js';

/**
 * How a function takes its arguments and gives its results, which decides what `argN` and
 * `retvalN` read:
 * - `sysv`: the System V x86-64 ABI of C, C++ and Rust (arguments in %rdi, %rsi, %rdx, %rcx,
 *   %r8, %r9, then the stack; results in %rax, %rdx);
 * - `go-register`: Go's internal ABI on amd64 since Go 1.17 (integer arguments and results
 *   in %rax, %rbx, %rcx, %rdi, %rsi, %r8, %r9, %r10, %r11, then the stack; %r14 holds the
 *   running goroutine);
 * - `go-stack`: Go before 1.17, and Go assembly functions (ABI0, `name.abi0`): everything on
 *   the stack, arguments from 8(%rsp) at the entry.
 */
export type CallingConvention =
  | { readonly kind: 'sysv'; readonly why: string }
  | { readonly kind: 'go-register'; readonly goVersion: string | undefined; readonly why: string }
  | { readonly kind: 'go-stack'; readonly goVersion: string | undefined; readonly why: string };

/** Go's integer argument and result registers, in order (`cmd/compile/abi-internal.md`). */
export const GO_INTEGER_REGISTERS: readonly RegisterBase[] = [
  'rax',
  'rbx',
  'rcx',
  'rdi',
  'rsi',
  'r8',
  'r9',
  'r10',
  'r11',
];

/** The SysV result registers: %rax, then %rdx for a second eightbyte. */
const SYSV_RESULT_REGISTERS: readonly RegisterBase[] = ['rax', 'rdx'];

/** What a target file says about Go, read once per file. */
export interface GoFacts {
  readonly info: GoInfo;
  /** Entries of the Go toolchain's functions (cgo C functions are not among them). */
  readonly entries: Float64Array | undefined;
}

/** The Go facts of a file, or undefined for a file not built by the Go toolchain. */
export function goFacts(elf: ElfFile): GoFacts | undefined {
  const info = goInfo(elf);
  if (info === undefined) return undefined;
  return { info, entries: goFunctionEntries(elf) };
}

/** Whether `fn` (in a file with these Go facts) is Go code rather than C linked in by cgo. */
export function isGoFunction(go: GoFacts | undefined, fn: FunctionSymbol | undefined): boolean {
  if (go === undefined || fn === undefined) return false;
  if (go.entries !== undefined) return isGoFunctionEntry(go.entries, fn.vaddr);
  // Without a function table, Go's names are package-qualified (`main.f`, `net/http.(*T).f`).
  return fn.name.includes('.');
}

/** The calling convention of `fn` in a file with these Go facts (none: not a Go program). */
export function callingConvention(
  go: GoFacts | undefined,
  fn: FunctionSymbol | undefined,
): CallingConvention {
  if (go === undefined) return { kind: 'sysv', why: 'C ABI (System V x86-64)' };
  const version = go.info.version;
  const built = version === undefined ? 'a Go program' : `a Go program (${version})`;
  if (fn === undefined || !isGoFunction(go, fn)) {
    return {
      kind: 'sysv',
      why: `C ABI (System V x86-64): a C function in ${built}, not in Go's function table`,
    };
  }
  if (fn.name.endsWith('.abi0')) {
    return {
      kind: 'go-stack',
      goVersion: version,
      why: `Go's stack ABI (ABI0): an assembly function (.abi0) of ${built}; arguments from 8(%rsp)`,
    };
  }
  if (go.info.registerAbi === false) {
    return {
      kind: 'go-stack',
      goVersion: version,
      why: `Go's stack ABI: ${built} from before Go 1.17; arguments from 8(%rsp)`,
    };
  }
  const assumed = go.info.registerAbi === undefined ? ' (its version unknown: taken as 1.17+)' : '';
  return {
    kind: 'go-register',
    goVersion: version,
    why: `Go's register ABI: a Go function of ${built}${assumed}; arg0..arg8 in %rax, %rbx, %rcx, %rdi, %rsi, %r8, %r9, %r10, %r11, results likewise`,
  };
}

/** How many arguments the convention passes in registers. */
export function registerArguments(convention: CallingConvention): number {
  switch (convention.kind) {
    case 'sysv':
      return ARGUMENT_REGISTERS.length;
    case 'go-register':
      return GO_INTEGER_REGISTERS.length;
    case 'go-stack':
      return 0;
  }
}

/**
 * A fetch with `argN` and `retvalN` read as the convention says: under Go's conventions
 * `argN` becomes its register or stack slot (at the entry: the return address at the stack
 * pointer, arguments after it) and `retvalN` (N >= 1) its result register; under the C ABI
 * `argN` stays (every engine reads it so) and `retval1` becomes %rdx. Throws ProbeError for
 * a result the convention has no register for. `spec` is the text errors point into.
 */
export function lowerForConvention(
  fetch: FetchArg,
  convention: CallingConvention,
  spec: string | undefined,
): FetchArg {
  const expr = lowerExpr(fetch.expr, convention, spec);
  return expr === fetch.expr ? fetch : { ...fetch, expr };
}

function lowerExpr(
  expr: FetchExpr,
  convention: CallingConvention,
  spec: string | undefined,
): FetchExpr {
  switch (expr.kind) {
    case 'deref': {
      const inner = lowerExpr(expr.inner, convention, spec);
      return inner === expr.inner ? expr : { ...expr, inner };
    }
    case 'arg':
      return lowerArg(expr, convention);
    case 'retval':
      return lowerRetval(expr, convention, spec);
    default:
      return expr;
  }
}

function lowerArg(
  expr: Extract<FetchExpr, { kind: 'arg' }>,
  convention: CallingConvention,
): FetchExpr {
  if (convention.kind === 'sysv') return expr;
  const registers = registerArguments(convention);
  if (expr.index < registers) {
    return { kind: 'register', name: GO_INTEGER_REGISTERS[expr.index]!, span: expr.span };
  }
  // The stack-assigned ones follow the return address, one word each.
  const offset = BigInt(8 * (expr.index - registers + 1));
  return { kind: 'deref', offset, inner: { kind: 'sp', span: expr.span }, span: expr.span };
}

function lowerRetval(
  expr: Extract<FetchExpr, { kind: 'retval' }>,
  convention: CallingConvention,
  spec: string | undefined,
): FetchExpr {
  const index = expr.index ?? 0;
  if (convention.kind === 'go-stack') {
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot fetch ${index === 0 ? 'retval' : `retval${index}`} under Go's stack ABI: its results are on the stack after its arguments, not in registers`,
      {
        source: spec === undefined ? undefined : { text: spec, span: expr.span },
        hints: ['Read the result slot as +OFF(%sp): 8 bytes per argument word after 8(%sp)'],
      },
    );
  }
  if (index === 0) return expr;
  const registers = convention.kind === 'sysv' ? SYSV_RESULT_REGISTERS : GO_INTEGER_REGISTERS;
  const register = registers[index];
  if (register === undefined) {
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot fetch retval${index}: the C ABI returns at most two registers (%rax, %rdx)`,
      {
        source: spec === undefined ? undefined : { text: spec, span: expr.span },
        hints: [
          `Go functions return up to retval${MAX_RETVAL_INDEX} in registers; C ones retval and retval1`,
        ],
      },
    );
  }
  return { kind: 'register', name: register, span: expr.span };
}

/** Where a fetch that reads `argN` or `retvalN` (anywhere in it) needs a convention. */
export function readsArgumentsOrResults(expr: FetchExpr): boolean {
  if (expr.kind === 'deref') return readsArgumentsOrResults(expr.inner);
  return expr.kind === 'arg' || (expr.kind === 'retval' && (expr.index ?? 0) !== 0);
}
