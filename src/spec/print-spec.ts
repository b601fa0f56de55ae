import { ProbeError, quote } from '../errors/index.js';
import type { FetchArg, FetchExpr, Location, ProbeKind, ProbeSpec } from './types.js';

const KIND_LETTERS: Readonly<Record<ProbeKind, string>> = { entry: 'p', return: 'r', usdt: 'u' };
const KIND_NAMES: ReadonlySet<string> = new Set(Object.values(KIND_LETTERS));

/** A symbol name that reads back as the same symbol without quotes. */
const PLAIN_SYMBOL = /^[A-Za-z_.$][A-Za-z0-9_.$]*(::[A-Za-z0-9_.$]+)*$/;

/** A symbol name as a spec's location holds it: as it is, or quoted when it must be. */
export function printSymbolName(name: string): string {
  if (PLAIN_SYMBOL.test(name)) return name;
  if (name.includes("'")) {
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot print probe spec: the symbol ${quote(name)} has a quote, which a spec cannot hold`,
    );
  }
  return `'${name}'`;
}

/** Characters a POSIX shell takes as they are in a word. */
const SHELL_PLAIN = /^[A-Za-z0-9_./:@%+=,-]+$/;

/**
 * A command-line argument as it must be typed in a POSIX shell (bash) to reach the program as
 * `text`: as it is, in single quotes, or (when it holds a single quote, as a quoted location
 * does) in double quotes with `"`, `$`, `` ` `` and `\` escaped. For hints that show a spec to
 * copy: `"./app:'ns::Class::method(int)'"`.
 */
export function shellWord(text: string): string {
  if (SHELL_PLAIN.test(text)) return text;
  if (!text.includes("'")) return `'${text}'`;
  return `"${text.replace(/["$`\\]/g, (c) => `\\${c}`)}"`;
}

function printLocation(location: Location): string {
  switch (location.type) {
    case 'symbol': {
      const version = location.version === undefined ? '' : `@${location.version}`;
      const offset = location.offset === 0n ? '' : `+0x${location.offset.toString(16)}`;
      return `${printSymbolName(location.name)}${version}${offset}`;
    }
    case 'glob':
      return location.pattern;
    case 'vaddr':
      return `0x${location.vaddr.toString(16)}`;
    case 'file-offset':
      return `@0x${location.fileOffset.toString(16)}`;
    case 'line':
      return `${location.file}:${location.line}`;
    case 'usdt':
      return `${location.provider}:${location.name}`;
  }
}

/**
 * A fetch expression in canonical form: lowercase registers, decimal dereference offsets. The
 * planner's own kinds print as the kernel writes an immediate (`\5`) and as
 * `%rax+%rdx*8` (an address of two registers).
 */
export function printFetchExpr(expr: FetchExpr): string {
  switch (expr.kind) {
    case 'arg':
      return `arg${expr.index}`;
    case 'register':
      return `%${expr.name}`;
    case 'deref': {
      const sign = expr.offset < 0n ? '' : '+';
      return `${sign}${expr.offset}(${printFetchExpr(expr.inner)})`;
    }
    case 'retval':
      return expr.index === undefined || expr.index === 0 ? 'retval' : `retval${expr.index}`;
    case 'constant':
      return `\\${expr.value}`;
    case 'indexed':
      return `${expr.base === undefined ? '' : `%${expr.base}+`}%${expr.index}*${expr.scale}`;
    case 'variable':
      return (
        expr.name +
        expr.path
          .map((step) => (step.op === '[]' ? `[${step.index}]` : `${step.op}${step.field}`))
          .join('')
      );
    default:
      return expr.kind;
  }
}

/**
 * What each fetch is called when it is not named: one written as a word (arg0, retval, comm, a
 * variable) by that word, as a user reads it back; any other by its position from 1 (arg1,
 * arg2, ...), as perf probe names them, as is a word that a name given (`NAME=FETCH`), another
 * fetch's position or an earlier fetch took (`retval:u8 retval:bool`: retval and arg2).
 */
export function impliedFetchNames(
  fetches: readonly Pick<FetchArg, 'expr' | 'name' | 'nameExplicit'>[],
): string[] {
  const given = new Set(fetches.filter((f) => f.nameExplicit).map((f) => f.name));
  // A word for each fetch that may be called by it: the first of its kind, not given.
  const seen = new Set<string>();
  const words = fetches.map((fetch) => {
    const text = printFetchExpr(fetch.expr);
    if (
      fetch.nameExplicit ||
      !/^[A-Za-z_]\w*$/.test(text) ||
      /^(common_|__probe_)/.test(text) || // the kernel's own fields' names
      given.has(text) ||
      seen.has(text)
    ) {
      return undefined;
    }
    seen.add(text);
    return text;
  });
  // A word that is another fetch's position name yields too, and its own position name may
  // then be another's word: until none is.
  for (let changed = true; changed; ) {
    changed = false;
    const positions = new Set(
      fetches.flatMap((f, i) =>
        f.nameExplicit || words[i] !== undefined ? [] : [positionalName(i)],
      ),
    );
    words.forEach((word, i) => {
      if (word !== undefined && positions.has(word)) {
        words[i] = undefined;
        changed = true;
      }
    });
  }
  return fetches.map((_, i) => words[i] ?? positionalName(i));
}

/** The name of an unnamed fetch by its position: `arg` and its place from 1. */
export function positionalName(position: number): string {
  return `arg${position + 1}`;
}

function printFetch(fetch: FetchArg, implied: string): string {
  // The name is left out where parsing gives it again.
  const named = fetch.nameExplicit || fetch.name !== implied;
  const type = fetch.type === undefined ? '' : `:${fetch.type}`;
  return `${named ? `${fetch.name}=` : ''}${printFetchExpr(fetch.expr)}${type}`;
}

/**
 * The canonical text of a spec: the kind only when it was written (or is needed), symbol
 * offsets and addresses in hex, names given only when they were written. Parsing the result
 * gives an equal spec, spans and `text` aside.
 */
export function printSpec(spec: ProbeSpec): string {
  const target = spec.target.text;
  // An inferred kind is left out; a target named p, r or u needs the kind to read as a target.
  const needsKind =
    spec.kindExplicit ||
    spec.kind === 'return' ||
    (spec.kind === 'usdt') !== (spec.location.type === 'usdt') ||
    KIND_NAMES.has(target);
  const prefix = needsKind ? `${KIND_LETTERS[spec.kind]}:` : '';
  const head = `${prefix}${target}:${printLocation(spec.location)}`;
  const implied = impliedFetchNames(spec.fetches);
  return [head, ...spec.fetches.map((fetch, i) => printFetch(fetch, implied[i]!))].join(' ');
}
