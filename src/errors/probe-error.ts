import { categoryOf, type ErrorCategory, type ErrorCode } from './codes.js';

/** A half-open range of characters in a spec string. */
export interface Span {
  readonly start: number;
  readonly end: number;
}

export interface ProbeErrorOptions {
  /** Separate lines telling the user what to do; rendered as `hint: ...`. */
  readonly hints?: readonly string[];
  /** Structured context for JSON output and tests (paths, addresses, ...). */
  readonly details?: Readonly<Record<string, unknown>>;
  readonly cause?: unknown;
  /** When the error is about part of a spec: the spec text and the span to underline. */
  readonly source?: { readonly text: string; readonly span: Span };
}

/**
 * Every error upscope reports to a user. The message follows one style: the failed action
 * first, then a colon and the reason (`Cannot read "/x": file is truncated`), no final period.
 */
export class ProbeError extends Error {
  override readonly name = 'ProbeError';
  readonly code: ErrorCode;
  readonly category: ErrorCategory;
  readonly hints: readonly string[];
  readonly details: Readonly<Record<string, unknown>>;
  readonly source: ProbeErrorOptions['source'];

  constructor(code: ErrorCode, message: string, options: ProbeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.category = categoryOf(code);
    this.hints = options.hints ?? [];
    this.details = options.details ?? {};
    this.source = options.source;
  }
}

/** A broken invariant: a bug in upscope, never the user's fault. */
export class InternalError extends ProbeError {
  constructor(message: string, cause?: unknown) {
    super('ERR_INTERNAL', message, {
      cause,
      hints: ['This is a bug in upscope; please file it with the command you ran'],
    });
  }
}

export function isProbeError(err: unknown): err is ProbeError {
  return err instanceof ProbeError;
}

export function isNotSupported(err: unknown): boolean {
  return err instanceof ProbeError && err.category === 'not-supported';
}

/** Quote a user value in a message the same way everywhere. */
export function quote(value: string | bigint | number): string {
  return `"${String(value)}"`;
}
