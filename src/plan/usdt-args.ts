import { ProbeError, quote, type Span } from '../errors/index.js';
import { type FetchArg, type FetchExpr, type FetchType, printFetchExpr } from '../spec/index.js';
import {
  type ElfFile,
  openElf,
  parseUsdtArguments,
  type UsdtArgument,
  type UsdtOperand,
  type UsdtRegister,
} from '../symbols/index.js';
import { lowerForConvention, readsArgumentsOrResults } from './calling-convention.js';
import type { ProbeSite } from './probe-site.js';

/** What lowering a USDT probe's arguments needs to know about the probe and its file. */
export interface UsdtArgsContext {
  /** `provider:name`, for errors. */
  readonly probe: string;
  /** The file, for errors. */
  readonly path: string;
  /** The note's argument string. */
  readonly args: string;
  /** The probe's virtual address in the file (where %ip points while a handler runs). */
  readonly vaddr: bigint;
  /** A defined symbol's virtual address in the file (for `counter(%rip)` operands). */
  symbolVaddr(name: string): bigint | undefined;
  /** The spec's text and the span errors about the probe itself point at. */
  readonly spec: string;
  readonly span: Span;
}

/**
 * The fetches of a probe on a USDT note, in the kinds every engine runs:
 * - with no fetches, every argument of the note, named arg0, arg1, ... (0-based, as bpftrace
 *   names them; perf probe names its SDT events' arguments arg1, arg2, ...), typed by the
 *   note's size and sign (`-4@` is s32, `8@` u64);
 * - otherwise the fetches given, where `argN` means the note's N-th argument (0-based), a
 *   bare `argN` without a type takes the note's type, and `argN:string` reads the string the
 *   argument points at, wherever the argument is held.
 *
 * Operands become: a register (its 64-bit name, or `ah`-style), a constant, a dereference of
 * a register plus displacement, of `%ip` plus the distance from the probe to a symbol (the
 * kernel, the bpf engine and the ptrace engine all see %ip at the probe's address while a
 * handler runs, so no load bias is needed), or of `base + index * scale`.
 */
export function usdtFetches(fetches: readonly FetchArg[], context: UsdtArgsContext): FetchArg[] {
  const args = parseUsdtArguments(context.args, { probe: context.probe, path: context.path });
  const lowered = args.map((arg) => lowerArgument(arg, context));
  if (fetches.length === 0) {
    return args.map((arg, i) => ({
      name: `arg${i}`,
      nameExplicit: false,
      expr: lowered[i]!,
      type: argumentType(arg),
      span: context.span,
    }));
  }
  return fetches.map((fetch) => {
    let expr = substitute(fetch.expr, lowered, context);
    // `argN:string` is the string at the argument's value (bpftrace's `str(argN)`): an
    // argument held in memory is read first, as a string's address.
    if (fetch.expr.kind === 'arg' && isStringType(fetch.type) && expr.kind === 'deref') {
      expr = { kind: 'deref', offset: 0n, inner: expr, span: expr.span };
    }
    const type =
      fetch.type ?? (fetch.expr.kind === 'arg' ? argumentType(args[fetch.expr.index]!) : undefined);
    return { ...fetch, expr, type };
  });
}

function isStringType(type: FetchType | undefined): boolean {
  return type === 'string' || type === 'ustring';
}

function argumentType(arg: UsdtArgument): FetchType {
  return `${arg.signed ? 's' : 'u'}${arg.sizeBytes * 8}` as FetchType;
}

/** Replace each `argN` in an expression by the note's N-th argument. */
function substitute(
  expr: FetchExpr,
  lowered: readonly FetchExpr[],
  context: UsdtArgsContext,
): FetchExpr {
  if (expr.kind === 'deref') {
    return { ...expr, inner: substitute(expr.inner, lowered, context) };
  }
  if (expr.kind !== 'arg') return expr;
  const arg = lowered[expr.index];
  if (arg === undefined) {
    const count = lowered.length;
    const has =
      count === 0
        ? 'it has no arguments'
        : `it has ${count} argument${count === 1 ? '' : 's'}, arg0 to arg${count - 1}`;
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot fetch arg${expr.index} at USDT probe ${quote(context.probe)}: ${has}`,
      {
        source: { text: context.spec, span: expr.span },
        hints: [`See its arguments with: upscope list --usdt ${context.path}`],
      },
    );
  }
  return { ...arg, span: expr.span };
}

function registerName(register: UsdtRegister): string {
  // The fetch grammar's names follow the kernel's (%ax is all of rax): a value is read from
  // the 64-bit register and narrowed by its type, except the second-byte registers, which
  // need their shift.
  return register.shift !== 0 ? register.name : register.base;
}

/** A register in an address: 64 bits, or 32 (`(%eax)`, same name in both grammars). */
function addressRegisterName(register: UsdtRegister): string {
  return register.bits === 64 ? register.base : register.name;
}

function lowerArgument(arg: UsdtArgument, context: UsdtArgsContext): FetchExpr {
  const span = context.span;
  const op: UsdtOperand = arg.operand;
  switch (op.kind) {
    case 'register':
      if (op.register.base === 'rip') return { kind: 'ip', span };
      return { kind: 'register', name: registerName(op.register), span };
    case 'constant':
      return { kind: 'constant', value: op.value, span };
    case 'memory': {
      if (op.index !== undefined) {
        const inner: FetchExpr = {
          kind: 'indexed',
          base: op.base === undefined ? undefined : addressRegisterName(op.base),
          index: addressRegisterName(op.index),
          scale: op.scale,
          span,
        };
        return { kind: 'deref', offset: op.displacement, inner, span };
      }
      if (op.base !== undefined && op.base.base !== 'rip' && op.symbol === undefined) {
        const inner: FetchExpr = { kind: 'register', name: addressRegisterName(op.base), span };
        return { kind: 'deref', offset: op.displacement, inner, span };
      }
      if (op.base !== undefined && op.base.base !== 'rip') {
        // `sym(%rbx)`: a symbol's absolute address plus a register: not what gcc emits.
        throw notSupported(arg, context, 'a symbol added to a register needs the load address');
      }
      // `sym(%rip)`, `sym`, `disp(%rip)`, `0x601040`: an address in the file, reached from %ip.
      let target: bigint;
      if (op.symbol !== undefined) {
        const vaddr = context.symbolVaddr(op.symbol);
        if (vaddr === undefined) {
          throw notSupported(
            arg,
            context,
            `the symbol ${quote(op.symbol)} is not in the file's symbol tables (stripped?)`,
          );
        }
        target = vaddr + op.displacement;
      } else {
        // `disp(%rip)` counts from the probe's address (where %ip is in handlers).
        target = op.base === undefined ? op.displacement : context.vaddr + op.displacement;
      }
      const inner: FetchExpr = { kind: 'ip', span };
      return { kind: 'deref', offset: target - context.vaddr, inner, span };
    }
  }
}

function notSupported(arg: UsdtArgument, context: UsdtArgsContext, why: string): ProbeError {
  return new ProbeError(
    'ERR_USDT_ARGUMENT',
    `Cannot read argument ${quote(arg.text)} of USDT probe ${quote(context.probe)} in ${quote(context.path)}: ${why}`,
    { source: { text: context.spec, span: context.span } },
  );
}

/** A defined symbol's address in the file: .symtab first, then .dynsym. */
export function elfSymbolVaddr(elf: ElfFile, name: string): bigint | undefined {
  for (const table of ['symtab', 'dynsym'] as const) {
    const found = elf.symbols(table).find((sym) => sym.name === name && sym.sectionIndex !== 0);
    if (found !== undefined) return found.value;
  }
  return undefined;
}

/**
 * A fetch given apart from the specs (`--by`, `--filter`, a histogram's value) as it reads at
 * `site`: at a USDT probe, `argN` is the note's N-th argument; in a function, `argN` and
 * `retvalN` read what its calling convention says (Go's registers in Go code); elsewhere the
 * fetch as given.
 */
export function fetchAtSite(fetch: FetchArg, site: ProbeSite): FetchArg {
  const usdt = site.usdt;
  if (usdt === undefined) {
    if (site.convention === undefined || !readsArgumentsOrResults(fetch.expr)) return fetch;
    return lowerForConvention(fetch, site.convention, undefined);
  }
  if (!hasArg(fetch.expr)) return fetch;
  const elf = openElf(site.target.path);
  try {
    const [lowered] = usdtFetches([fetch], {
      probe: `${usdt.provider}:${usdt.name}`,
      path: site.target.displayPath,
      args: usdt.args,
      vaddr: site.vaddr,
      symbolVaddr: (name) => elfSymbolVaddr(elf, name),
      spec: site.spec,
      span: { start: 0, end: site.spec.length },
    });
    return lowered!;
  } finally {
    elf.close();
  }
}

/**
 * One fetch for every site of an in-kernel aggregation, whose program reads the same thing at
 * each: `argN` and `retvalN` read as each site says (fetchAtSite()), which must then be the
 * same place at every site (else ProbeError ERR_NOT_SUPPORTED, naming `what`, e.g. "--by").
 */
export function fetchForSites(
  fetch: FetchArg,
  sites: readonly ProbeSite[],
  what: string,
  /** The fetch's index in the sites' `optionFetches`, where it was lowered (variables). */
  option?: number,
): FetchArg {
  const own = (site: ProbeSite) =>
    option === undefined ? fetch : (site.optionFetches?.[option] ?? fetch);
  if (sites.length === 0) return fetch;
  if (!sites.some((site) => readsArgumentsOrResults(own(site).expr) || own(site) !== fetch)) {
    return fetch;
  }
  const lowered = sites.map((site) => fetchAtSite(own(site), site));
  const text = (f: FetchArg) => `${printFetchExpr(f.expr)}:${f.type ?? ''}`;
  const first = lowered[0]!;
  if (lowered.some((f) => text(f) !== text(first))) {
    const usdt = sites.some((site) => site.usdt !== undefined);
    const variable = sites.some((site) => own(site) !== fetch);
    const why = variable
      ? 'the debug info puts this variable in different registers or stack slots at different probes'
      : usdt
        ? "at USDT probes argN is the note's argument"
        : "each function's calling convention puts it elsewhere (Go's, C's)";
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot read ${quote(printFetchExpr(fetch.expr))} for ${what} at these probes together: ${why}, and it is in different places at different probes`,
      {
        hints: [
          variable || usdt
            ? `Aggregate one ${usdt ? 'USDT probe' : 'function'} at a time`
            : 'Aggregate the Go and the C functions apart',
        ],
      },
    );
  }
  return first;
}

function hasArg(expr: FetchExpr): boolean {
  if (expr.kind === 'deref') return hasArg(expr.inner);
  return expr.kind === 'arg';
}
