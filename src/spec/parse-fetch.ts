import { InternalError, ProbeError } from '../errors/index.js';
import { parseSpec } from './parse-spec.js';
import type { FetchArg, FetchExpr } from './types.js';

/** A return probe's spec around the text: every fetch, `retval` included, may appear in it. */
const PREFIX = 'r:_:_ ';

/** Where a fetch's text sits in the text the user gave (a key of `--by comm,KEY`). */
export interface FetchWithin {
  /** The whole text given (`comm,arg0`); the fetch's spans are ranges in it. */
  readonly text: string;
  /** Where the fetch's text starts in it. */
  readonly offset: number;
}

/** A copy of `value` with every `span` moved by `delta` characters. */
function shiftSpans<T>(value: T, delta: number): T {
  if (Array.isArray(value)) return value.map((item) => shiftSpans(item, delta)) as T;
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    const span = item as { start?: unknown; end?: unknown };
    out[key] =
      key === 'span' && typeof span.start === 'number' && typeof span.end === 'number'
        ? { start: span.start + delta, end: span.end + delta }
        : shiftSpans(item, delta);
  }
  return out as T;
}

/**
 * Parse one fetch (`arg0`, `retval:s32`, `+8(arg0):u32`, `+0(%si):string`) given on its own,
 * as for `--by` or a histogram's value. `what` names it in errors (`--by`). Its spans are
 * ranges in `text`, or in `source.text` when it is part of that. Throws ProbeError.
 */
export function parseFetchOrThrow(text: string, what: string, source?: FetchWithin): FetchArg {
  const whole = source ?? { text, offset: 0 };
  const delta = whole.offset - PREFIX.length;
  const { spec, diagnostics } = parseSpec(PREFIX + text);
  const first = diagnostics.find((d) => d.severity === 'error');
  if (first !== undefined) {
    throw new ProbeError(
      first.code,
      `${first.message.replace(/^Cannot parse probe spec/, `Cannot parse ${what}`)}`,
      {
        source: {
          text: whole.text,
          span: {
            start: Math.max(whole.offset, first.span.start + delta),
            end: Math.max(whole.offset, first.span.end + delta),
          },
        },
        hints: first.hints,
      },
    );
  }
  if (spec === undefined)
    throw new InternalError('parseSpec() returned neither a spec nor an error');
  const [fetch, ...more] = spec.fetches;
  if (fetch === undefined || more.length > 0) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use ${what} "${text}": give one value, e.g. arg0, retval or +8(arg0):u32`,
    );
  }
  return shiftSpans(fetch, delta);
}

export type ComparisonOp = '==' | '!=' | '<' | '<=' | '>' | '>=';

export interface Comparison {
  readonly fetch: FetchArg;
  readonly op: ComparisonOp;
  readonly value: bigint;
}

/** Parse `FETCH[:TYPE] OP NUMBER` (`arg0 > 4096`, `retval:s32 < 0`, `+8(arg0):u32 == 0x10`). */
export function parseComparisonOrThrow(text: string, what: string): Comparison {
  const match = /^(.*?)\s*(==|!=|<=|>=|<|>)\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*$/.exec(text);
  if (match === null) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot parse ${what} "${text}": expected VALUE OP NUMBER with OP one of == != < <= > >=`,
      { hints: ["For example: --filter 'arg0 > 4096' or --filter 'retval:s32 < 0'"] },
    );
  }
  const [, fetchText, op, number] = match;
  const negative = number!.startsWith('-');
  const magnitude = BigInt(negative ? number!.slice(1) : number!);
  return {
    // The fetch starts the text: its spans are ranges in the whole comparison.
    fetch: parseFetchOrThrow(fetchText!, what, { text, offset: 0 }),
    op: op as ComparisonOp,
    value: negative ? -magnitude : magnitude,
  };
}

/**
 * Whether a fetch reads the return value (`retval`, `+8(retval)`): a filter that does is
 * decided at a function's return; any other, at its entry, where the arguments are (at the
 * return, the argument registers hold other values).
 */
export function readsReturnValue(expr: FetchExpr): boolean {
  if (expr.kind === 'retval') return true;
  return expr.kind === 'deref' && readsReturnValue(expr.inner);
}
