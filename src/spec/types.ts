import type { Span } from '../errors/index.js';

export type { Span };

/** `p` gives `entry` (a function entry or any instruction), `r` gives `return`, `u` gives `usdt`. */
export type ProbeKind = 'entry' | 'return' | 'usdt';

/**
 * A parsed probe spec: what the user asked for, before anything is looked up. Plain data;
 * every span is a half-open range of characters in `text`.
 */
export interface ProbeSpec {
  /** The text the spec was parsed from, exactly as given. */
  readonly text: string;
  readonly kind: ProbeKind;
  /** True when the spec starts with `p:`, `r:` or `u:`; false when the kind was inferred. */
  readonly kindExplicit: boolean;
  readonly target: { readonly text: string; readonly span: Span };
  readonly location: Location;
  readonly fetches: readonly FetchArg[];
}

export type Location =
  | {
      readonly type: 'symbol';
      readonly name: string;
      /**
       * ELF symbol version name (`GLIBC_2.2.5`), written `name@VER` or `name@@VER`. A version
       * name identifies one version, so `@` and `@@` select the same thing and print as `@`.
       */
      readonly version: string | undefined;
      /** Byte offset into the function; `0n` when absent. Below 2^32. */
      readonly offset: bigint;
      /** The `+OFF` text, plus sign included, when one was written. */
      readonly offsetSpan: Span | undefined;
      readonly span: Span;
    }
  | { readonly type: 'glob'; readonly pattern: string; readonly span: Span }
  | { readonly type: 'vaddr'; readonly vaddr: bigint; readonly span: Span }
  | { readonly type: 'file-offset'; readonly fileOffset: bigint; readonly span: Span }
  | { readonly type: 'line'; readonly file: string; readonly line: number; readonly span: Span }
  | {
      readonly type: 'usdt';
      /** Either part may be a glob pattern (see `isGlob`). */
      readonly provider: string;
      readonly name: string;
      readonly span: Span;
    };

export interface FetchArg {
  /** The explicit `NAME=`, or `arg1`, `arg2`, ... by position (1-based) when omitted. */
  readonly name: string;
  readonly nameExplicit: boolean;
  readonly expr: FetchExpr;
  readonly type: FetchType | undefined;
  /** The whole `NAME=FETCH:TYPE` text. */
  readonly span: Span;
}

export type VariableStep =
  | { readonly op: '->' | '.'; readonly field: string }
  | { readonly op: '[]'; readonly index: number };

export type FetchExpr =
  /** ABI argument by position: arg0..arg5 in registers, arg6..arg15 on the stack. */
  | { readonly kind: 'arg'; readonly index: number; readonly span: Span }
  /**
   * A return value: `retval` (index 0) or `retvalN`, the N-th result register of the
   * function's calling convention (C: %rax then %rdx; Go: %rax, %rbx, %rcx, ...). The planner
   * turns N >= 1 into the register; engines see only `retval` itself.
   */
  | { readonly kind: 'retval'; readonly index?: number | undefined; readonly span: Span }
  /** A register, lowercase and without `%` (see `registerInfo` for what each name reads). */
  | { readonly kind: 'register'; readonly name: string; readonly span: Span }
  | { readonly kind: 'ip'; readonly span: Span }
  | { readonly kind: 'sp'; readonly span: Span }
  | { readonly kind: 'comm'; readonly span: Span }
  /** Read memory at `offset` bytes from the address `inner` gives. */
  | {
      readonly kind: 'deref';
      readonly offset: bigint;
      readonly inner: FetchExpr;
      readonly span: Span;
    }
  /**
   * A constant (a USDT argument such as `$5`); made by the planner from a note, never parsed
   * from a spec. Printed as the kernel's immediate, `\5`.
   */
  | { readonly kind: 'constant'; readonly value: bigint; readonly span: Span }
  /**
   * `base + index * scale` of two registers (the address of a USDT argument such as
   * `8(%rax,%rdx,8)`, under a `deref`); made by the planner, never parsed. Register names as
   * in `register`; no base for the `(,%rcx,2)` form. The kernel's fetch-args cannot add
   * registers, so the tracefs engine refuses it.
   */
  | {
      readonly kind: 'indexed';
      readonly base: string | undefined;
      readonly index: string;
      readonly scale: 1 | 2 | 4 | 8;
      readonly span: Span;
    }
  /** A DWARF variable or parameter with an optional access path (`req->hdr.len`, `arr[2]`). */
  | {
      readonly kind: 'variable';
      readonly name: string;
      readonly path: readonly VariableStep[];
      readonly span: Span;
    };

export const FETCH_TYPES = [
  's8',
  's16',
  's32',
  's64',
  'u8',
  'u16',
  'u32',
  'u64',
  'x8',
  'x16',
  'x32',
  'x64',
  'string',
  'ustring',
  'ptr',
  'char',
  'bool',
] as const;

/** `ptr` means `x64`; the others read as their names say (`ustring` is a user-space string). */
export type FetchType = (typeof FETCH_TYPES)[number];

const FETCH_TYPE_BYTES: Readonly<Partial<Record<FetchType, number>>> = {
  s8: 1,
  u8: 1,
  x8: 1,
  char: 1,
  bool: 1,
  s16: 2,
  u16: 2,
  x16: 2,
  s32: 4,
  u32: 4,
  x32: 4,
};

/** Bytes a numeric fetch type reads (8 for the 64-bit ones and ptr). */
export function fetchTypeBytes(type: FetchType): number {
  return FETCH_TYPE_BYTES[type] ?? 8;
}

export type DiagnosticCode = 'ERR_SPEC_SYNTAX' | 'ERR_SPEC_INVALID';

export interface Diagnostic {
  readonly severity: 'error' | 'warning';
  readonly code: DiagnosticCode;
  /** One line in the house style: `Cannot parse probe spec: expected ...`. */
  readonly message: string;
  /** The characters to underline; may be empty (start === end) to point between characters. */
  readonly span: Span;
  readonly hints: string[];
}

export interface ParseSpecResult {
  /** Undefined when any diagnostic is an error. */
  readonly spec: ProbeSpec | undefined;
  /** Errors and warnings, errors first, each group in text order. */
  readonly diagnostics: Diagnostic[];
}
