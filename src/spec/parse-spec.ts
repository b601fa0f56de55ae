import { InternalError, ProbeError, quote, type Span } from '../errors/index.js';
import { closest as closestNames } from '../internal/index.js';
import { readGlobClass } from './glob.js';
import { impliedFetchNames, positionalName } from './print-spec.js';
import { REGISTER_NAMES, registerInfo } from './registers.js';
import {
  type Diagnostic,
  type DiagnosticCode,
  FETCH_TYPES,
  type FetchArg,
  type FetchExpr,
  type FetchType,
  type Location,
  type ParseSpecResult,
  type ProbeKind,
  type ProbeSpec,
  type VariableStep,
} from './types.js';

/** arg0..arg5 are the ABI's argument registers; arg6..arg15 are read from the stack. */
export const MAX_ARG_INDEX = 15;
/** The highest N of `retvalN` (Go returns up to nine integer results in registers). */
export const MAX_RETVAL_INDEX = 8;
/** The kernel's limit on fetch args per probe (MAX_TRACE_ARGS), kept by every engine. */
export const MAX_FETCHES = 128;
/** Nested dereferences, `+8(+16(...))`, allowed in one fetch. */
export const MAX_DEREF_DEPTH = 16;

const SYMBOL_OFFSET_LIMIT = 1n << 32n;
const ADDRESS_LIMIT = 1n << 64n;
const DEREF_LIMIT = 1n << 63n;
const NUMBER_LIMIT = 2 ** 31 - 1;
/** Stands for any number too long to be worth converting; fails every range check. */
const HUGE = 1n << 256n;

const KINDS: Readonly<Record<string, ProbeKind>> = { p: 'entry', r: 'return', u: 'usdt' };

const HINT_FORM = 'Write a probe spec as [KIND:]TARGET:LOCATION, for example libc:malloc';
const HINT_RETURN = 'Write a return probe as r:TARGET:FUNCTION, for example r:libc:malloc';
const HINT_USDT =
  'Write a USDT probe as u:TARGET:PROVIDER:NAME, for example u:python3:python:function__entry';
const HINT_FETCH =
  'A fetch is arg0..arg15, retval, retval1.., %REGISTER, ip, sp, comm, +OFF(FETCH) or a variable name';
const HINT_DEREF = 'Read memory as +OFF(FETCH), for example +8(arg0) or -16(%rbp)';
const HINT_TYPES = `Types are ${FETCH_TYPES.join(', ')}`;
const HINT_NAME = 'A fetch name starts with a letter or "_" and has only letters, digits and "_"';
const HINT_QUOTE_SPACES =
  'Quote a location that has spaces or special characters, and the spec for the shell: "app:\'operator new(unsigned long)\'"';
const RESERVED_NAME = /^(common_|__probe_)/;
const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;
const FETCH_TYPE_SET: ReadonlySet<string> = new Set(FETCH_TYPES);

/** The one candidate close enough to `word` to be a likely typo (at most two edits). */
function closest(word: string, candidates: Iterable<string>): string | undefined {
  const maxDistance = Math.min(2, word.length - 1);
  return maxDistance < 1 ? undefined : closestNames(word, candidates, 1, { maxDistance })[0];
}

/** A spec as typed in a shell: in single quotes when it has characters a shell would take. */
function shellArgument(text: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(text) ? text : `'${text}'`;
}

function isWs(c: string): boolean {
  return c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v';
}
function isDigit(c: string): boolean {
  return c >= '0' && c <= '9';
}
function isHexDigit(c: string): boolean {
  return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
function isIdentStart(c: string): boolean {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_';
}
function isIdentChar(c: string): boolean {
  return isIdentStart(c) || isDigit(c);
}
/** Characters of an unquoted symbol, besides `::` and glob metacharacters. */
function isSymbolChar(c: string): boolean {
  return isIdentChar(c) || c === '.' || c === '$';
}
function isVersionChar(c: string): boolean {
  return isIdentChar(c) || c === '.';
}
function isFileChar(c: string): boolean {
  return isIdentChar(c) || c === '.' || c === '/' || c === '-' || c === '+';
}

function toBigInt(digits: string, radix: 10 | 16): bigint {
  const trimmed = digits.replace(/^0+/, '');
  if (trimmed === '') return 0n;
  if (trimmed.length > 40) return HUGE;
  return BigInt(radix === 16 ? `0x${trimmed}` : trimmed);
}

type NumberScan = { ok: true; value: bigint; end: number } | { ok: false; end: number };

/** Reads `0xHEX` or `DEC` starting at `i`, not past `end`. */
function scanNumber(text: string, i: number, end: number): NumberScan {
  if (text[i] === '0' && (text[i + 1] === 'x' || text[i + 1] === 'X') && i + 1 < end) {
    let j = i + 2;
    while (j < end && isHexDigit(text[j]!)) j++;
    if (j === i + 2) return { ok: false, end: j };
    return { ok: true, value: toBigInt(text.slice(i + 2, j), 16), end: j };
  }
  let j = i;
  while (j < end && isDigit(text[j]!)) j++;
  if (j === i) return { ok: false, end: i };
  return { ok: true, value: toBigInt(text.slice(i, j), 10), end: j };
}

function hex(value: bigint): string {
  return `0x${value.toString(16)}`;
}

interface ParsedFetch {
  readonly arg: FetchArg;
  readonly nameSpan: Span | undefined;
}

/**
 * Where a C++ name written at `start` ends when it has a parameter list with spaces in it
 * (`ns::f(char const*, int) const`): after its balanced `(...)` and the qualifiers after it;
 * `start` when it has no parenthesis open at a space.
 */
function cxxNameEnd(text: string, start: number): number {
  let depth = 0;
  let i = start;
  for (; i < text.length; i++) {
    const c = text[i]!;
    if (c === '(') depth++;
    else if (c === ')') {
      depth--;
      if (depth < 0) return start;
    } else if (isWs(c) && depth === 0) break;
  }
  if (depth !== 0) return start;
  for (;;) {
    const qualifier = /^ (?:const|volatile|&&|&)(?=\s|$)/.exec(text.slice(i));
    if (qualifier === null) return i;
    i += qualifier[0].length;
  }
}

/** A hand-written scanner and recursive-descent parser over one spec string. */
class SpecParser {
  readonly diagnostics: Diagnostic[] = [];
  private readonly text: string;
  private readonly n: number;
  /** Where the current fetch arg starts, for messages that quote what came before. */
  private fetchStart = 0;
  private targetText = '';
  private kind: ProbeKind = 'entry';
  private kindExplicit = false;

  constructor(text: string) {
    this.text = text;
    this.n = text.length;
  }

  private add(
    severity: Diagnostic['severity'],
    code: DiagnosticCode,
    message: string,
    start: number,
    end: number,
    hints: string[],
  ): void {
    this.diagnostics.push({ severity, code, message, span: { start, end }, hints });
  }

  private syntax(message: string, start: number, end: number, hints: string[] = []): undefined {
    this.add('error', 'ERR_SPEC_SYNTAX', `Cannot parse probe spec: ${message}`, start, end, hints);
    return undefined;
  }

  private invalid(message: string, span: Span, hints: string[] = []): void {
    this.add('error', 'ERR_SPEC_INVALID', message, span.start, span.end, hints);
  }

  private warn(message: string, span: Span, hints: string[] = []): void {
    this.add('warning', 'ERR_SPEC_INVALID', message, span.start, span.end, hints);
  }

  /** The span of the character at `i`, or an empty span when `i` is at `end`. */
  private at(i: number, end: number): [number, number] {
    return [i, i < end ? i + 1 : i];
  }

  private wordEnd(i: number, end: number, test: (c: string) => boolean): number {
    let j = i;
    while (j < end && test(this.text[j]!)) j++;
    return j;
  }

  parse(): ProbeSpec | undefined {
    const { text, n } = this;
    let i = this.wordEnd(0, n, isWs);
    const specStart = i;
    if (i === n) return this.syntax('the spec is empty', i, i, [HINT_FORM]);

    const kindLetter = text[i]!;
    const explicitKind = text[i + 1] === ':' ? KINDS[kindLetter] : undefined;
    if (explicitKind !== undefined) {
      this.kind = explicitKind;
      this.kindExplicit = true;
      i += 2;
    }

    const kindHints = [HINT_FORM];
    if (this.kindExplicit) {
      kindHints.push(
        `The spec starts with the kind "${kindLetter}:"; write a target named ${kindLetter} as ./${kindLetter}`,
      );
    }
    const targetStart = i;
    i = this.wordEnd(i, n, (c) => c !== ':' && !isWs(c));
    const target = { text: text.slice(targetStart, i), span: { start: targetStart, end: i } };
    this.targetText = target.text;
    if (text[i] !== ':') {
      const before = quote(text.slice(specStart, i));
      if (target.text === '')
        return this.syntax(`expected a target after ${before}`, i, i, [HINT_FORM]);
      return this.syntax(`expected ":" and a location after ${before}`, i, i, kindHints);
    }
    if (text[i + 1] === ':' && target.text !== '' && !target.text.includes('/')) {
      // `app::Calc::add`: a C++ or Rust name, and no target before it.
      const nameEnd = Math.max(
        this.wordEnd(targetStart, n, (c) => !isWs(c)),
        cxxNameEnd(text, targetStart),
      );
      const name = text.slice(targetStart, nameEnd);
      return this.syntax(
        `${quote(name)} has no target: a spec is TARGET:LOCATION`,
        targetStart,
        nameEnd,
        [
          `Name the program or library that has the function first, e.g. ${shellArgument(`./app:${name}`)} or ${shellArgument(`libfoo:${name}`)}`,
        ],
      );
    }
    const quoteAt = target.text.indexOf("'");
    if (quoteAt >= 0) {
      this.syntax(`a target cannot be quoted: ${quote(target.text)}`, targetStart + quoteAt, i, [
        'Write the target without quotes; a target cannot contain ":" or spaces',
      ]);
    } else if (target.text === '') {
      this.invalid('Cannot place a probe: the target is empty', target.span, [
        'Name a file, library or program before the location: libc:malloc, ./app:main',
      ]);
    }
    i++;

    let location: Location | undefined;
    if (i === n || isWs(text[i]!)) {
      this.syntax(`expected a location after ${quote(text.slice(specStart, i))}`, i, i, [
        HINT_FORM,
      ]);
    } else {
      const parsed = this.parseLocation(i);
      location = parsed.location;
      i = parsed.end;
    }

    const fetches: ParsedFetch[] = [];
    let position = 0;
    for (;;) {
      i = this.wordEnd(i, n, isWs);
      if (i === n) break;
      const end = this.wordEnd(i, n, (c) => !isWs(c));
      const fetch = this.parseFetchArg(i, end, position);
      if (fetch !== undefined) fetches.push(fetch);
      position++;
      i = end;
    }

    if (location === undefined) return undefined;
    if (location.type === 'usdt' && !this.kindExplicit) this.kind = 'usdt';
    this.checkKind(location, target.text, specStart);
    this.checkTarget(target, location);
    const named = nameFetches(fetches);
    this.checkFetches(named, location);
    if (this.diagnostics.some((d) => d.severity === 'error')) return undefined;
    return {
      text,
      kind: this.kind,
      kindExplicit: this.kindExplicit,
      target,
      location,
      fetches: named.map((f) => f.arg),
    };
  }

  // ---- location ----

  private parseLocation(start: number): { location: Location | undefined; end: number } {
    const { text, n } = this;
    if (text[start] === "'") return this.parseQuoted(start);
    const end = this.wordEnd(start, n, (c) => !isWs(c));
    const token = text.slice(start, end);
    let separator = -1;
    for (let j = start; j < end; ) {
      const c = text[j]!;
      if (c === "'") {
        this.syntax(`unexpected quote in location ${quote(token)}`, j, j + 1, [
          'Quote the whole location, and the spec for the shell: "app:\'operator new(unsigned long)\'"',
        ]);
        return { location: undefined, end };
      }
      if (c !== ':') {
        j++;
        continue;
      }
      const runEnd = this.wordEnd(j, end, (x) => x === ':');
      if (runEnd - j === 1) {
        if (separator >= 0) {
          this.syntax(`unexpected ":" in location ${quote(token)}`, j, j + 1, [
            'A location has at most one ":", as in main.c:42 or PROVIDER:NAME',
          ]);
          return { location: undefined, end };
        }
        separator = j;
      } else if (runEnd - j > 2) {
        this.syntax(
          `unexpected ${quote(text.slice(j, runEnd))} in location ${quote(token)}`,
          j,
          runEnd,
        );
        return { location: undefined, end };
      }
      j = runEnd;
    }
    if (separator >= 0) return { location: this.parseColonLocation(start, separator, end), end };
    const c = text[start]!;
    if (c === '@') return { location: this.parseFileOffset(start, end), end };
    if (isDigit(c)) return { location: this.parseAddress(start, end), end };
    return { location: this.parseSymbolOrGlob(start, end), end };
  }

  /**
   * How to write the location at `start` (a word that ends at `end`): quoted, with the spec in
   * double quotes so that a shell passes the quotes on. A C++ name the shell split at a space
   * (`ns::f(char const*, int) const`) is taken whole, up to its closing parenthesis.
   */
  private quoteHint(start: number, end: number): string {
    const token = this.text.slice(start, Math.max(end, cxxNameEnd(this.text, start)));
    const cxx = /::|[()<>~]/.test(token);
    const kind = this.kindExplicit
      ? `${this.text.slice(0, this.text.indexOf(':') + 1).trim()}`
      : '';
    return `Quote ${cxx ? 'the C++ name' : 'the name'}, and the spec for the shell: "${kind}${this.targetText}:'${token}'"`;
  }

  private parseQuoted(start: number): { location: Location | undefined; end: number } {
    const { text, n } = this;
    const close = text.indexOf("'", start + 1);
    if (close < 0) {
      this.syntax(
        `expected "'" to close the quoted location ${quote(text.slice(start))}`,
        start,
        n,
        [
          'End a quoted location with a quote (and keep the quotes from the shell: "app:\'operator new(unsigned long)\'")',
        ],
      );
      return { location: undefined, end: n };
    }
    const end = this.wordEnd(close + 1, n, (c) => !isWs(c));
    const name = text.slice(start + 1, close);
    if (name === '') {
      this.syntax('expected a symbol name between the quotes', start, close + 1);
      return { location: undefined, end };
    }
    return { location: this.parseSymbolSuffix(start, close + 1, end, name, false), end };
  }

  private parseFileOffset(start: number, end: number): Location | undefined {
    const num = scanNumber(this.text, start + 1, end);
    const hints = ['Write a file offset as @0x1136 or @4406'];
    if (!num.ok) {
      return this.syntax(
        `expected a file offset after "@"`,
        start + 1,
        Math.max(end, start + 1),
        hints,
      );
    }
    if (num.end < end) return this.unexpectedAfter(num.end, start, 'file offset');
    const span = { start, end };
    if (num.value >= ADDRESS_LIMIT) {
      this.invalid(
        `Cannot place a probe at file offset ${quote(this.text.slice(start + 1, end))}: it does not fit in 64 bits`,
        span,
      );
    }
    return { type: 'file-offset', fileOffset: num.value, span };
  }

  private parseAddress(start: number, end: number): Location | undefined {
    const { text } = this;
    const token = text.slice(start, end);
    const num = scanNumber(text, start, end);
    if (!num.ok) return this.syntax(`expected hex digits after "0x"`, num.end, end);
    const isHex = text[start + 1] === 'x' || text[start + 1] === 'X';
    if (!isHex) {
      if (num.end === end) {
        return this.syntax(`a location cannot be a decimal number: ${quote(token)}`, start, end, [
          `Write a virtual address in hex: ${hex(num.value)}`,
          `Write a file offset with "@": @${token}`,
        ]);
      }
      return this.syntax(`a symbol cannot start with a digit: ${quote(token)}`, start, start + 1, [
        this.quoteHint(start, end),
      ]);
    }
    if (num.end < end) {
      const hints =
        text[num.end] === '+'
          ? ['Add the offset to the address yourself, or write SYMBOL+OFFSET']
          : ['Write a virtual address as 0x followed by hex digits, for example 0x401136'];
      return this.syntax(
        `unexpected ${quote(text[num.end]!)} in address ${quote(token)}`,
        num.end,
        num.end + 1,
        hints,
      );
    }
    const span = { start, end };
    if (num.value >= ADDRESS_LIMIT) {
      this.invalid(`Cannot place a probe at ${quote(token)}: it does not fit in 64 bits`, span);
    }
    return { type: 'vaddr', vaddr: num.value, span };
  }

  private unexpectedAfter(j: number, start: number, what: string): undefined {
    const text = this.text;
    return this.syntax(
      `unexpected ${quote(text[j]!)} after ${what} ${quote(text.slice(start, j))}`,
      j,
      j + 1,
    );
  }

  /** PROVIDER:NAME for USDT, or FILE.EXT:LINE. */
  private parseColonLocation(start: number, separator: number, end: number): Location | undefined {
    const { text } = this;
    const left = text.slice(start, separator);
    const right = text.slice(separator + 1, end);
    const usdtForced = this.kindExplicit && this.kind === 'usdt';
    if (left.includes('.') && !usdtForced) return this.parseLine(start, separator, end);
    if (!usdtForced && right !== '' && /^[0-9]+$/.test(right)) {
      return this.syntax(
        `expected a file name with an extension before ${quote(`:${right}`)}`,
        start,
        separator,
        ['Write a source line as FILE:LINE, for example main.c:42', HINT_USDT],
      );
    }
    if (left === '') {
      return this.syntax(`expected a USDT provider before ${quote(`:${right}`)}`, start, start, [
        HINT_USDT,
        'Use * for any provider: u:TARGET:*:NAME',
      ]);
    }
    if (right === '') {
      return this.syntax(`expected a USDT probe name after ${quote(`${left}:`)}`, end, end, [
        HINT_USDT,
      ]);
    }
    if (!this.checkPattern(start, separator, 'USDT provider', isIdentChar)) return undefined;
    if (!this.checkPattern(separator + 1, end, 'USDT probe name', isIdentChar)) return undefined;
    return { type: 'usdt', provider: left, name: right, span: { start, end } };
  }

  private parseLine(start: number, separator: number, end: number): Location | undefined {
    const { text } = this;
    const file = text.slice(start, separator);
    for (let j = start; j < separator; j++) {
      if (!isFileChar(text[j]!)) {
        return this.syntax(`unexpected ${quote(text[j]!)} in file name ${quote(file)}`, j, j + 1, [
          'Write a source line as FILE:LINE, for example main.c:42',
        ]);
      }
    }
    const digitsEnd = this.wordEnd(separator + 1, end, isDigit);
    if (digitsEnd === separator + 1 || digitsEnd < end) {
      return this.syntax(`expected a line number after ${quote(`${file}:`)}`, separator + 1, end, [
        'Write a source line as FILE:LINE, for example main.c:42',
      ]);
    }
    const value = toBigInt(text.slice(separator + 1, end), 10);
    const lineSpan = { start: separator + 1, end };
    if (value === 0n) {
      this.invalid(`Cannot place a probe at line 0 of ${quote(file)}: lines start at 1`, lineSpan);
    } else if (value > BigInt(NUMBER_LIMIT)) {
      this.invalid(
        `Cannot place a probe at line ${text.slice(separator + 1, end)} of ${quote(file)}: the line number is too large`,
        lineSpan,
      );
    }
    const line = value > BigInt(NUMBER_LIMIT) ? NUMBER_LIMIT : Number(value);
    return { type: 'line', file, line, span: { start, end } };
  }

  /**
   * Checks the characters of a name or glob pattern in [start, end): `ok` characters, glob
   * metacharacters and well-formed `[...]` classes. Reports the first problem.
   */
  private checkPattern(
    start: number,
    end: number,
    what: string,
    ok: (c: string) => boolean,
  ): boolean {
    const { text } = this;
    const part = text.slice(start, end);
    for (let j = start; j < end; ) {
      const c = text[j]!;
      if (c === '[') {
        const cls = readGlobClass(part, j - start);
        if (cls === undefined) {
          this.syntax(`expected "]" to close the "[" in ${what} ${quote(part)}`, j, end, [
            'A class lists characters or ranges: str[cn]py, [a-z]*, [!_]*',
          ]);
          return false;
        }
        for (const [from, to] of cls.ranges) {
          if (from > to) {
            this.invalid(
              `Cannot match ${what} ${quote(part)}: the range ${quote(`${from}-${to}`)} runs backwards`,
              { start: j, end: start + cls.end },
              [`Write the range low to high: ${to}-${from}`],
            );
          }
        }
        j = start + cls.end;
      } else if (ok(c) || c === '*' || c === '?') {
        j++;
      } else {
        this.syntax(`unexpected ${quote(c)} in ${what} ${quote(part)}`, j, j + 1);
        return false;
      }
    }
    return true;
  }

  private parseSymbolOrGlob(start: number, end: number): Location | undefined {
    const { text } = this;
    const token = text.slice(start, end);
    let j = start;
    let glob = false;
    while (j < end) {
      const c = text[j]!;
      if (c === '@' || c === '+') break;
      if (c === '[') {
        const cls = readGlobClass(text.slice(0, end), j);
        if (cls === undefined) {
          return this.syntax(`expected "]" to close the "[" in ${quote(token)}`, j, end, [
            'A class lists characters or ranges: str[cn]py, [a-z]*, [!_]*',
            this.quoteHint(start, end),
          ]);
        }
        glob = true;
        j = cls.end;
      } else if (c === '*' || c === '?') {
        glob = true;
        j++;
      } else if (isSymbolChar(c) || c === ':') {
        j++;
      } else {
        const hints = [this.quoteHint(start, end)];
        if (c === '-' && isDigit(text[j + 1] ?? '')) {
          hints.unshift(
            'An offset into a function is written FUNCTION+OFFSET, for example malloc+0x10',
          );
        }
        return this.syntax(`unexpected ${quote(c)} in symbol ${quote(token)}`, j, j + 1, hints);
      }
    }
    const name = text.slice(start, j);
    if (name === '') {
      return this.syntax(`expected a symbol before ${quote(text[j]!)}`, start, start, [HINT_FORM]);
    }
    if (name.startsWith('::') || name.endsWith('::')) {
      const at = name.startsWith('::') ? start : j - 2;
      return this.syntax(`expected a name on both sides of "::" in ${quote(name)}`, at, at + 2, [
        this.quoteHint(start, end),
      ]);
    }
    if (glob) {
      const span = { start, end };
      for (const [from, to, at] of this.classRanges(start, j)) {
        this.invalid(
          `Cannot match pattern ${quote(name)}: the range ${quote(`${from}-${to}`)} runs backwards`,
          at,
          [`Write the range low to high: ${to}-${from}`],
        );
      }
      if (text[j] === '@') {
        return this.syntax(`a pattern cannot name a symbol version: ${quote(token)}`, j, end, [
          'Match the name only, for example mem*',
        ]);
      }
      if (text[j] === '+') {
        const offset = this.parseOffset(start, j, end);
        if (offset === undefined) return undefined;
        this.invalid(
          `Cannot place a probe at ${quote(token)}: an offset needs one function, not a pattern`,
          offset.span,
          ['Name one function: malloc+0x10'],
        );
      }
      return { type: 'glob', pattern: name, span };
    }
    return this.parseSymbolSuffix(start, j, end, name, true);
  }

  /** The backwards ranges of the classes in [start, end), each with its class's span. */
  private classRanges(start: number, end: number): [string, string, Span][] {
    const part = this.text.slice(start, end);
    const found: [string, string, Span][] = [];
    for (let j = 0; j < part.length; j++) {
      if (part[j] !== '[') continue;
      const cls = readGlobClass(part, j);
      if (cls === undefined) continue;
      for (const [from, to] of cls.ranges) {
        if (from > to) found.push([from, to, { start: start + j, end: start + cls.end }]);
      }
      j = cls.end - 1;
    }
    return found;
  }

  /** `+OFF` at `plus`, running to `end`. */
  private parseOffset(
    start: number,
    plus: number,
    end: number,
  ): { value: bigint; span: Span } | undefined {
    const { text } = this;
    const num = scanNumber(text, plus + 1, end);
    if (!num.ok) {
      return this.syntax(
        `expected an offset after ${quote(text.slice(start, plus + 1))}`,
        plus + 1,
        end,
        [`Write an offset in decimal or 0x hex: ${text.slice(start, plus)}+0x10`],
      );
    }
    if (num.end < end) {
      return this.syntax(
        `unexpected ${quote(text[num.end]!)} after offset ${quote(text.slice(plus + 1, num.end))}`,
        num.end,
        num.end + 1,
      );
    }
    return { value: num.value, span: { start: plus, end } };
  }

  /** After a symbol name ending at `j`: optional `@VERSION` or `@@VERSION`, then `+OFF`. */
  private parseSymbolSuffix(
    start: number,
    j: number,
    end: number,
    name: string,
    unquoted: boolean,
  ): Location | undefined {
    const { text } = this;
    let version: string | undefined;
    if (text[j] === '@' && j < end) {
      let v = j + 1;
      if (text[v] === '@') v++;
      const versionStart = v;
      v = this.wordEnd(v, end, isVersionChar);
      if (v === versionStart) {
        return this.syntax(
          `expected a version name after ${quote(text.slice(start, versionStart))}`,
          versionStart,
          end,
          ['Write a versioned symbol as NAME@VERSION, for example memcpy@GLIBC_2.2.5'],
        );
      }
      version = text.slice(versionStart, v);
      j = v;
    }
    let offset = 0n;
    let offsetSpan: Span | undefined;
    if (text[j] === '+' && j < end) {
      const parsed = this.parseOffset(start, j, end);
      if (parsed === undefined) return undefined;
      offset = parsed.value;
      offsetSpan = parsed.span;
      if (offset >= SYMBOL_OFFSET_LIMIT) {
        this.invalid(
          `Cannot place a probe at ${quote(text.slice(start, end))}: an offset into a function must be below 0x100000000`,
          offsetSpan,
          [
            'Use a virtual address (0x...) or a file offset (@0x...) for a place outside any function',
          ],
        );
      }
    } else if (j < end) {
      const hints = unquoted ? [this.quoteHint(start, end)] : [];
      return this.syntax(
        `unexpected ${quote(text[j]!)} after symbol ${quote(text.slice(start, j))}`,
        j,
        j + 1,
        hints,
      );
    }
    return { type: 'symbol', name, version, offset, offsetSpan, span: { start, end } };
  }

  // ---- fetch args ----

  private parseFetchArg(start: number, end: number, position: number): ParsedFetch | undefined {
    const { text } = this;
    this.fetchStart = start;
    let name = positionalName(position);
    let nameExplicit = false;
    let nameSpan: Span | undefined;
    let exprStart = start;
    const eq = text.indexOf('=', start);
    if (eq >= 0 && eq < end) {
      name = text.slice(start, eq);
      if (name === '') {
        return this.syntax('expected a name before "="', start, start, [
          'Name a fetch as NAME=FETCH, for example size=arg0',
        ]);
      }
      if (!IDENT.test(name)) {
        const bad = isDigit(name[0]!) ? 0 : [...name].findIndex((c) => !isIdentChar(c));
        return this.syntax(
          `unexpected ${quote(name[bad]!)} in fetch name ${quote(name)}`,
          start + bad,
          start + bad + 1,
          [HINT_NAME],
        );
      }
      nameExplicit = true;
      nameSpan = { start, end: eq };
      exprStart = eq + 1;
      if (exprStart === end) {
        return this.syntax(`expected a fetch after ${quote(`${name}=`)}`, end, end, [HINT_FETCH]);
      }
    }
    const parsed = this.parseFetch(exprStart, end, 0);
    if (parsed === undefined) return undefined;
    const { expr } = parsed;
    let j = parsed.end;
    let type: FetchType | undefined;
    if (text[j] === ':' && j < end) {
      const typeStart = j + 1;
      const typeEnd = this.wordEnd(typeStart, end, isIdentChar);
      const typeName = text.slice(typeStart, typeEnd);
      if (typeName === '') {
        return this.syntax(
          `expected a type after ${quote(text.slice(start, typeStart))}`,
          ...this.at(typeStart, end),
          [HINT_TYPES],
        );
      }
      if (!FETCH_TYPE_SET.has(typeName)) {
        const near = closest(typeName.toLowerCase(), FETCH_TYPES);
        const hints = near === undefined ? [HINT_TYPES] : [`Did you mean ${near}?`, HINT_TYPES];
        return this.syntax(`unknown type ${quote(typeName)}`, typeStart, typeEnd, hints);
      }
      type = typeName as FetchType;
      if (expr.kind === 'comm' && type !== 'string') {
        this.invalid(
          `Cannot fetch comm as ${type}: comm is the thread name, a string`,
          { start: typeStart, end: typeEnd },
          ['Write comm or comm:string'],
        );
      }
      j = typeEnd;
    }
    if (j < end) {
      const c = text[j]!;
      const follows = text.slice(exprStart, j);
      if ((c === '-' && text[j + 1] === '>') || c === '.' || c === '[') {
        if (expr.kind !== 'variable') {
          const op = c === '-' ? '->' : c;
          return this.syntax(
            `unexpected ${quote(op)} after ${quote(follows)}: only a variable has fields`,
            j,
            j + op.length,
            [HINT_DEREF],
          );
        }
      }
      const hints = '()<>,~&'.includes(c) ? [HINT_QUOTE_SPACES] : [HINT_FETCH];
      return this.syntax(`unexpected ${quote(c)} after ${quote(follows)}`, j, j + 1, hints);
    }
    const arg: FetchArg = { name, nameExplicit, expr, type, span: { start, end } };
    return { arg, nameSpan };
  }

  private parseFetch(
    i: number,
    end: number,
    depth: number,
  ): { expr: FetchExpr; end: number } | undefined {
    const { text } = this;
    if (i >= end) {
      return this.syntax(`expected a fetch after ${quote(text.slice(this.fetchStart, i))}`, i, i, [
        HINT_FETCH,
      ]);
    }
    const c = text[i]!;
    if (c === '%') return this.parseRegister(i, end);
    if (c === '+' || c === '-' || isDigit(c)) return this.parseDeref(i, end, depth);
    if (c === '$') return this.parseDollar(i, end);
    if (isIdentStart(c)) return this.parseWord(i, end);
    return this.syntax(
      `unexpected ${quote(c)} in fetch ${quote(text.slice(this.fetchStart, end))}`,
      i,
      i + 1,
      [HINT_FETCH],
    );
  }

  private parseRegister(i: number, end: number): { expr: FetchExpr; end: number } | undefined {
    const j = this.wordEnd(i + 1, end, isIdentChar);
    const written = this.text.slice(i + 1, j);
    const hint = 'Write a register like %rdi, %eax, %al, %r8, %rip or %flags';
    if (written === '') {
      return this.syntax('expected a register name after "%"', ...this.at(i + 1, end), [hint]);
    }
    const name = written.toLowerCase();
    if (registerInfo(name) === undefined) {
      const near = closest(name, REGISTER_NAMES);
      const hints = near === undefined ? [hint] : [`Did you mean %${near}?`];
      return this.syntax(`unknown register ${quote(`%${written}`)}`, i, j, hints);
    }
    return { expr: { kind: 'register', name, span: { start: i, end: j } }, end: j };
  }

  private parseDeref(
    i: number,
    end: number,
    depth: number,
  ): { expr: FetchExpr; end: number } | undefined {
    const { text } = this;
    const signed = text[i] === '+' || text[i] === '-';
    const negative = text[i] === '-';
    const digits = signed ? i + 1 : i;
    const num = scanNumber(text, digits, end);
    if (!num.ok) {
      return this.syntax(
        `expected an offset after ${quote(text.slice(this.fetchStart, digits))}`,
        digits,
        Math.max(num.end, digits),
        [HINT_DEREF],
      );
    }
    const open = num.end;
    if (text[open] !== '(' || open >= end) {
      return this.syntax(
        `expected "(" after ${quote(text.slice(this.fetchStart, open))}`,
        ...this.at(open, end),
        [HINT_DEREF],
      );
    }
    if (depth >= MAX_DEREF_DEPTH) {
      this.invalid(
        `Cannot dereference this deep: the limit is ${MAX_DEREF_DEPTH} nested dereferences`,
        { start: i, end: open + 1 },
        ['Split the fetch into shorter ones'],
      );
      return undefined;
    }
    const inner = this.parseFetch(open + 1, end, depth + 1);
    if (inner === undefined) return undefined;
    if (inner.expr.kind === 'comm') {
      this.invalid(
        'Cannot dereference comm: it is the thread name, not an address',
        inner.expr.span,
        ['Write comm alone to fetch the thread name'],
      );
    }
    const close = inner.end;
    if (text[close] !== ')' || close >= end) {
      return this.syntax(
        `expected ")" after ${quote(text.slice(this.fetchStart, close))}`,
        ...this.at(close, end),
        [HINT_DEREF],
      );
    }
    const span = { start: i, end: close + 1 };
    if (num.value > DEREF_LIMIT || (!negative && num.value === DEREF_LIMIT)) {
      this.invalid(
        `Cannot read memory at offset ${quote(text.slice(i, open))}: it does not fit in 64 bits`,
        { start: i, end: open },
      );
    }
    const offset = negative ? -num.value : num.value;
    return { expr: { kind: 'deref', offset, inner: inner.expr, span }, end: close + 1 };
  }

  private parseDollar(i: number, end: number): undefined {
    const word = this.text.slice(i + 1, this.wordEnd(i + 1, end, isIdentChar));
    const hints: string[] = [];
    const arg = /^arg([0-9]+)$/.exec(word);
    if (word === 'retval' || word === 'comm') {
      hints.push(`Write ${word} without "$"`);
    } else if (arg !== null && Number(arg[1]) >= 1 && Number(arg[1]) <= MAX_ARG_INDEX + 1) {
      const k = Number(arg[1]);
      hints.push(`upscope counts arguments from arg0: write arg${k - 1} for the kernel's $arg${k}`);
    } else if (word.startsWith('stack')) {
      hints.push('Read stack arguments as arg6..arg15, or any stack slot as +OFF(%sp)');
    } else {
      hints.push(HINT_FETCH);
    }
    return this.syntax(
      `unexpected "$" in fetch ${quote(this.text.slice(this.fetchStart, end))}`,
      i,
      i + 1,
      hints,
    );
  }

  private parseWord(i: number, end: number): { expr: FetchExpr; end: number } | undefined {
    const { text } = this;
    const j = this.wordEnd(i, end, isIdentChar);
    const word = text.slice(i, j);
    const span = { start: i, end: j };
    const arg = /^arg([0-9]+)$/.exec(word);
    if (arg !== null) {
      const index = toBigInt(arg[1]!, 10);
      if (index > BigInt(MAX_ARG_INDEX)) {
        this.invalid(
          `Cannot fetch ${quote(word)}: arguments go from arg0 to arg${MAX_ARG_INDEX}`,
          span,
          [
            'Arguments arg0 to arg5 are in registers and arg6 to arg15 on the stack; read others with +OFF(%sp)',
          ],
        );
      }
      const clamped = index > BigInt(MAX_ARG_INDEX) ? MAX_ARG_INDEX + 1 : Number(index);
      return { expr: { kind: 'arg', index: clamped, span }, end: j };
    }
    if (word === 'retval' || word === 'ip' || word === 'sp' || word === 'comm') {
      return { expr: { kind: word, span }, end: j };
    }
    const result = /^retval([0-9]+)$/.exec(word);
    if (result !== null) {
      const index = Number(result[1]);
      if (index > MAX_RETVAL_INDEX) {
        this.invalid(
          `Cannot fetch ${quote(word)}: return values go from retval (retval0) to retval${MAX_RETVAL_INDEX}`,
          span,
          ['retval1 is the second result register (C: %rdx; Go: %rbx), and so on'],
        );
      }
      return {
        expr: index === 0 ? { kind: 'retval', span } : { kind: 'retval', index, span },
        end: j,
      };
    }
    const path: VariableStep[] = [];
    let k = j;
    for (;;) {
      const c = text[k];
      if (k >= end || c === undefined) break;
      if ((c === '-' && text[k + 1] === '>' && k + 1 < end) || c === '.') {
        const op = c === '.' ? '.' : '->';
        const fieldStart = k + op.length;
        const fieldEnd = isIdentStart(text[fieldStart] ?? '')
          ? this.wordEnd(fieldStart, end, isIdentChar)
          : fieldStart;
        if (fieldEnd === fieldStart) {
          return this.syntax(
            `expected a field name after ${quote(text.slice(i, fieldStart))}`,
            ...this.at(fieldStart, end),
            ['Write a field access as req->len, hdr.size or arr[2]'],
          );
        }
        path.push({ op, field: text.slice(fieldStart, fieldEnd) });
        k = fieldEnd;
      } else if (c === '[') {
        const digitsEnd = this.wordEnd(k + 1, end, isDigit);
        if (digitsEnd === k + 1) {
          return this.syntax(
            `expected an index after ${quote(text.slice(i, k + 1))}`,
            ...this.at(k + 1, end),
            ['Write an array element as arr[2]'],
          );
        }
        if (text[digitsEnd] !== ']' || digitsEnd >= end) {
          return this.syntax(
            `expected "]" after ${quote(text.slice(i, digitsEnd))}`,
            ...this.at(digitsEnd, end),
            ['Write an array element as arr[2]'],
          );
        }
        const index = toBigInt(text.slice(k + 1, digitsEnd), 10);
        if (index > BigInt(NUMBER_LIMIT)) {
          this.invalid(
            `Cannot index ${quote(text.slice(i, k))} by ${text.slice(k + 1, digitsEnd)}: the index is too large`,
            {
              start: k + 1,
              end: digitsEnd,
            },
          );
        }
        path.push({ op: '[]', index: index > BigInt(NUMBER_LIMIT) ? NUMBER_LIMIT : Number(index) });
        k = digitsEnd + 1;
      } else {
        break;
      }
    }
    if (path.length === 0 && /^[re]/.test(word) && registerInfo(word) !== undefined) {
      this.warn(`Reading ${quote(word)} as a variable, not a register`, span, [
        `Write %${word} for the register`,
      ]);
    }
    return { expr: { kind: 'variable', name: word, path, span: { start: i, end: k } }, end: k };
  }

  // ---- checks that need the whole spec ----

  private checkKind(location: Location, target: string, specStart: number): void {
    const written = this.text.slice(location.span.start, location.span.end);
    const where = quote(written);
    if (this.kind === 'return') {
      if (location.type === 'glob') return;
      if (location.type === 'symbol') {
        if (location.offset === 0n || location.offsetSpan === undefined) return;
        this.invalid(
          `Cannot place a return probe at ${where}: return probes go on a function entry, not at an offset into it`,
          location.offsetSpan,
          [HINT_RETURN, `For a probe at that instruction write p:${target}:${written}`],
        );
        return;
      }
      const hints = location.type === 'usdt' ? [HINT_USDT] : [HINT_RETURN];
      this.invalid(
        `Cannot place a return probe at ${where}: return probes go on a function entry`,
        location.span,
        hints,
      );
      return;
    }
    if (this.kind === 'usdt' && location.type !== 'usdt') {
      this.invalid(
        `Cannot place a USDT probe at ${where}: a USDT probe is named PROVIDER:NAME`,
        location.span,
        [HINT_USDT, 'Use * for any provider: u:TARGET:*:NAME'],
      );
      return;
    }
    if (this.kind === 'entry' && this.kindExplicit && location.type === 'usdt') {
      this.invalid(
        `Cannot place an entry probe at USDT probe ${where}: USDT probes take the kind u`,
        { start: specStart, end: specStart + 1 },
        [`Write u:${target}:${written}, or leave out the kind`],
      );
    }
  }

  private checkTarget(target: { text: string; span: Span }, location: Location): void {
    if (this.kindExplicit || location.type !== 'usdt' || !/^[A-Za-z]$/.test(target.text)) return;
    this.warn(
      `Reading ${quote(target.text)} as the target: the kinds are p, r and u`,
      target.span,
      [`Write ./${target.text} if ${target.text} is a file`],
    );
  }

  private checkFetches(fetches: readonly ParsedFetch[], location: Location): void {
    // Names implied never meet (see impliedFetchNames()): a name given meets another, or the
    // name of a position.
    const seen = new Set<string>();
    fetches.forEach(({ arg, nameSpan }, index) => {
      if (RESERVED_NAME.test(arg.name) && nameSpan !== undefined) {
        this.invalid(
          `Cannot name a fetch ${quote(arg.name)}: names starting with "common_" or "__probe_" are reserved`,
          nameSpan,
          ['Choose another name'],
        );
      }
      if (seen.has(arg.name)) {
        if (nameSpan !== undefined) {
          this.invalid(
            `Cannot name two fetches ${quote(arg.name)}: each fetch needs its own name`,
            nameSpan,
            ['Rename one of them: NAME=FETCH'],
          );
        } else {
          this.invalid(
            `Cannot name fetch ${index + 1} ${quote(arg.name)} by its position: another fetch has that name`,
            arg.span,
            ['Give it a name: NAME=FETCH'],
          );
        }
      }
      seen.add(arg.name);
      if (this.kind !== 'return') this.checkRetval(arg.expr, location);
    });
    if (fetches.length > MAX_FETCHES) {
      const first = fetches[MAX_FETCHES]!.arg.span;
      const last = fetches[fetches.length - 1]!.arg.span;
      this.invalid(
        `Cannot fetch ${fetches.length} values in one probe: the limit is ${MAX_FETCHES}`,
        { start: first.start, end: last.end },
        ['Split the fetches over several probes'],
      );
    }
  }

  private checkRetval(expr: FetchExpr, location: Location): void {
    if (expr.kind === 'deref') {
      this.checkRetval(expr.inner, location);
      return;
    }
    if (expr.kind !== 'retval') return;
    const probe = this.kind === 'usdt' ? 'a USDT probe' : 'an entry probe';
    const hint =
      location.type === 'symbol' || location.type === 'glob'
        ? `Write a return probe: r:${this.targetText}:${this.text.slice(location.span.start, location.span.end)}`
        : HINT_RETURN;
    this.invalid(
      `Cannot fetch retval in ${probe}: a return value exists only when a function returns`,
      expr.span,
      [hint],
    );
  }
}

function ordered(diagnostics: Diagnostic[]): Diagnostic[] {
  const rank = (d: Diagnostic) => (d.severity === 'error' ? 0 : 1);
  return [...diagnostics].sort((a, b) => rank(a) - rank(b) || a.span.start - b.span.start);
}

/**
 * Parse a probe spec (`[KIND:]TARGET:LOCATION [NAME=FETCH[:TYPE] ...]`). Never throws: every
 * problem becomes a diagnostic with the span of the characters at fault, and `spec` is
 * undefined when any of them is an error. Warnings come with a spec.
 */
export function parseSpec(text: string): ParseSpecResult {
  if (typeof text !== 'string') {
    const message = `Cannot parse probe spec: expected a string, not ${typeof text}`;
    const span = { start: 0, end: 0 };
    return {
      spec: undefined,
      diagnostics: [{ severity: 'error', code: 'ERR_SPEC_SYNTAX', message, span, hints: [] }],
    };
  }
  try {
    const parser = new SpecParser(text);
    const spec = parser.parse();
    const diagnostics = ordered(parser.diagnostics);
    if (spec === undefined && !diagnostics.some((d) => d.severity === 'error')) {
      throw new Error('parser returned no spec and no error');
    }
    return { spec, diagnostics };
  } catch (err) {
    // A bug in the parser; report it as a diagnostic to keep the never-throws promise.
    const detail = err instanceof Error ? err.message : String(err);
    return {
      spec: undefined,
      diagnostics: [
        {
          severity: 'error',
          code: 'ERR_SPEC_SYNTAX',
          message: `Cannot parse probe spec: internal parser error (${detail})`,
          span: { start: 0, end: text.length },
          hints: ['This is a bug in upscope; please file it with the spec you wrote'],
        },
      ],
    };
  }
}

/** Parse a probe spec or throw a `ProbeError` for its first error (warnings are dropped). */
export function parseSpecOrThrow(text: string): ProbeSpec {
  const { spec, diagnostics } = parseSpec(text);
  const first = diagnostics.find((d) => d.severity === 'error');
  if (first !== undefined) {
    throw new ProbeError(first.code, first.message, {
      source: { text, span: first.span },
      hints: first.hints,
    });
  }
  if (spec === undefined)
    throw new InternalError('parseSpec() returned neither a spec nor an error');
  return spec;
}

/** The fetches with their names (see impliedFetchNames()). */
function nameFetches(fetches: readonly ParsedFetch[]): ParsedFetch[] {
  const implied = impliedFetchNames(fetches.map((f) => f.arg));
  return fetches.map((fetch, i) =>
    fetch.arg.nameExplicit || fetch.arg.name === implied[i]
      ? fetch
      : { ...fetch, arg: { ...fetch.arg, name: implied[i]! } },
  );
}
