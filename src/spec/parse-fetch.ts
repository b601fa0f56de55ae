import { InternalError, ProbeError } from '../errors/index.js';
import { parseSpec } from './parse-spec.js';
import type { FetchArg, FetchExpr } from './types.js';

/** A return probe's spec around the text: every fetch, `retval` included, may appear in it. */
const PREFIX = 'r:_:_ ';

/**
 * Parse one fetch (`arg0`, `retval:s32`, `+8(arg0):u32`, `+0(%si):string`) given on its own,
 * as for `--by` or a histogram's value. `what` names it in errors (`--by`). Throws ProbeError.
 */
export function parseFetchOrThrow(text: string, what: string): FetchArg {
  const { spec, diagnostics } = parseSpec(PREFIX + text);
  const first = diagnostics.find((d) => d.severity === 'error');
  if (first !== undefined) {
    throw new ProbeError(
      first.code,
      `${first.message.replace(/^Cannot parse probe spec/, `Cannot parse ${what}`)}`,
      {
        source: {
          text,
          span: {
            start: Math.max(0, first.span.start - PREFIX.length),
            end: Math.max(0, first.span.end - PREFIX.length),
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
  return fetch;
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
    fetch: parseFetchOrThrow(fetchText!, what),
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
