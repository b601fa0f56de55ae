import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, test } from 'node:test';
import { FETCH_TYPES, type ProbeSpec, parseSpec, printSpec, REGISTER_NAMES } from './index.js';

/** mulberry32: a small seeded PRNG, so every run builds the same cases. */
function prng(seed: number) {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo: number, hi: number): number => lo + Math.floor(next() * (hi - lo + 1));
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)]!;
  const chance = (p: number): boolean => next() < p;
  const chars = (alphabet: string, lo: number, hi: number): string => {
    let out = '';
    for (let n = int(lo, hi); n > 0; n--) out += alphabet[int(0, alphabet.length - 1)];
    return out;
  };
  return { next, int, pick, chance, chars };
}
type Rng = ReturnType<typeof prng>;

const LOWER = 'abcdefghijklmnopqrstuvwxyz';
const IDENT_START = `${LOWER}ABCDEFGHIJKLMNOPQRSTUVWXYZ_`;
const IDENT = `${IDENT_START}0123456789`;
const SYMBOL_START = `${IDENT_START}.$`;
const SYMBOL = `${IDENT}.$`;

function ident(r: Rng, lo = 0, hi = 8): string {
  return r.chars(IDENT_START, 1, 1) + r.chars(IDENT, lo, hi);
}

function ws(r: Rng, min: number): string {
  return r.chars('     \t', min, min + 2);
}

function number(r: Rng, max: bigint): string {
  const value = BigInt(Math.floor(r.next() * Number(max))) % max;
  const zeros = r.chance(0.1) ? '00' : '';
  if (r.chance(0.5)) return `${zeros}${value}`;
  const digits = value.toString(16);
  return `${r.pick(['0x', '0X'])}${zeros}${r.chance(0.3) ? digits.toUpperCase() : digits}`;
}

function symbolName(r: Rng): string {
  const segments = [r.chars(SYMBOL_START, 1, 1) + r.chars(SYMBOL, 0, 10)];
  while (r.chance(0.2)) segments.push(r.chars(SYMBOL, 1, 6));
  return segments.join('::');
}

function quotedName(r: Rng): string {
  return `'${r.chars(`${SYMBOL}()<>,~*&:@+ [];!é\t`, 1, 24)}'`;
}

function globPattern(r: Rng, alphabet: string): string {
  const parts: string[] = [];
  const pieces = r.int(1, 4);
  let meta = false;
  for (let k = 0; k < pieces; k++) {
    switch (r.int(0, 5)) {
      case 0:
        parts.push('*');
        meta = true;
        break;
      case 1:
        parts.push('?');
        meta = true;
        break;
      case 2: {
        const a = r.chars(LOWER, 1, 1);
        const b = r.chars(LOWER, 1, 1);
        const range = a <= b ? `${a}-${b}` : `${b}-${a}`;
        parts.push(`[${r.pick(['', '!', '^'])}${r.chance(0.5) ? range : r.chars(IDENT, 1, 4)}]`);
        meta = true;
        break;
      }
      default:
        parts.push(r.chars(alphabet, 1, 5));
    }
  }
  if (!meta) parts.push('*');
  let pattern = parts.join('');
  if (/^[0-9]/.test(pattern)) pattern = `_${pattern}`;
  return pattern;
}

function usdtPart(r: Rng): string {
  if (r.chance(0.3)) return globPattern(r, IDENT);
  return ident(r);
}

function location(r: Rng, kind: string): string {
  if (kind === 'u:') return `${usdtPart(r)}:${usdtPart(r)}`;
  const symbolLike = () => {
    const name = r.chance(0.15) ? quotedName(r) : symbolName(r);
    const version = r.chance(0.15)
      ? `${r.pick(['@', '@@'])}${r.pick(['GLIBC_2.2.5', 'V1', 'Base', 'LIBSSL_3.0'])}`
      : '';
    return name + version;
  };
  if (kind === 'r:') {
    if (r.chance(0.3)) return globPattern(r, SYMBOL);
    return symbolLike() + (r.chance(0.1) ? '+0' : '');
  }
  switch (r.int(0, kind === '' ? 6 : 5)) {
    case 0:
      return symbolLike() + (r.chance(0.5) ? `+${number(r, 1n << 32n)}` : '');
    case 1:
      return globPattern(r, SYMBOL);
    case 2:
      return `0${r.pick(['x', 'X'])}${r.chars('0123456789abcdefABCDEF', 1, 16)}`;
    case 3:
      return `@${number(r, 1n << 48n)}`;
    case 4:
      return `${r.pick(['', 'src/', '../lib/'])}${ident(r)}.${r.pick(['c', 'cc', 'h', 'rs'])}:${r.int(1, 100000)}`;
    case 5:
      return symbolLike();
    default:
      return `${usdtPart(r)}:${usdtPart(r)}`;
  }
}

function fetchExpr(r: Rng, kind: string, depth: number): string {
  switch (r.int(0, depth >= 3 ? 6 : 8)) {
    case 0:
      return `arg${r.chance(0.1) ? '0' : ''}${r.int(0, 15)}`;
    case 1:
      return kind === 'r:' ? 'retval' : 'ip';
    case 2: {
      const name = r.pick(REGISTER_NAMES);
      return `%${r.chance(0.2) ? name.toUpperCase() : name}`;
    }
    case 3:
      return r.pick(['ip', 'sp']);
    case 4:
    case 5:
    case 6: {
      let name = ident(r);
      if (/^(arg[0-9]+|retval|ip|sp|comm)$/.test(name)) name = `v_${name}`;
      let path = '';
      for (let n = r.int(0, 3); n > 0; n--) {
        path +=
          r.pick(['->', '.', '[]']) === '[]'
            ? `[${r.int(0, 999)}]`
            : `${r.pick(['->', '.'])}${ident(r)}`;
      }
      return name + path;
    }
    default: {
      const sign = r.pick(['+', '-', '']);
      return `${sign}${number(r, 1n << 40n)}(${fetchExpr(r, kind, depth + 1)})`;
    }
  }
}

function fetches(r: Rng, kind: string): string[] {
  const out: string[] = [];
  const used = new Set<string>();
  const count = r.int(0, 5);
  for (let position = 0; position < count; position++) {
    let expr: string;
    let type = '';
    if (r.chance(0.05)) {
      expr = 'comm';
      if (r.chance(0.5)) type = ':string';
    } else {
      expr = fetchExpr(r, kind, 0);
      if (r.chance(0.5)) type = `:${r.pick(FETCH_TYPES)}`;
    }
    let name = '';
    if (r.chance(0.5)) {
      const chosen = `f_${ident(r, 0, 5)}`;
      if (!used.has(chosen)) {
        used.add(chosen);
        name = `${chosen}=`;
      }
    }
    if (name === '') {
      const byPosition = `arg${position + 1}`;
      if (used.has(byPosition)) continue;
      used.add(byPosition);
    }
    out.push(name + expr + type);
  }
  return out;
}

const TARGETS = [
  'libc',
  'libssl',
  'bash',
  './app',
  './p',
  '../bin/a.out',
  '/usr/lib/x86_64-linux-gnu/libc.so.6',
  'libstdc++.so.6',
];

/** A random spec that the grammar accepts, with varied spelling of the same things. */
function validSpec(r: Rng): string {
  const kind = r.pick(['', '', 'p:', 'r:', 'u:']);
  const target = r.chance(0.7) ? r.pick(TARGETS) : `${r.chars(`${IDENT}./+-@`, 2, 12)}`;
  return (
    ws(r, 0) +
    [`${kind}${target}:${location(r, kind)}`, ...fetches(r, kind)].join(ws(r, 1)) +
    ws(r, 0)
  );
}

/** The spec without `text` and spans, which printing does not keep. */
function shape(spec: ProbeSpec): unknown {
  return JSON.parse(
    JSON.stringify(spec, (key, value) => {
      if (key === 'span' || key === 'offsetSpan' || key === 'text') return undefined;
      return typeof value === 'bigint' ? `${value}n` : value;
    }),
  );
}

function mutate(r: Rng, text: string): string {
  let out = text;
  for (let n = r.int(1, 4); n > 0; n--) {
    const at = r.int(0, out.length);
    const c = r.chars(`pru:/.@+-*?[]!^'()%$=,<>~ \t09afxX_${IDENT}é`, 1, 1);
    switch (r.int(0, 5)) {
      case 0:
        out = out.slice(0, at) + c + out.slice(at);
        break;
      case 1:
        out = out.slice(0, at) + out.slice(at + 1);
        break;
      case 2:
        out = out.slice(0, at) + c + out.slice(at + 1);
        break;
      case 3:
        out = out.slice(0, at) + out.slice(r.int(0, at), at) + out.slice(at);
        break;
      case 4:
        out = out.slice(0, at);
        break;
      default:
        out = out.slice(at) + out.slice(0, at);
    }
  }
  return out;
}

describe('parseSpec() and printSpec() properties', () => {
  test('printSpec(parseSpec(x)) is a fixed point for 5000 random valid specs', () => {
    const r = prng(0x5eed);
    for (let k = 0; k < 5000; k++) {
      const text = validSpec(r);
      const first = parseSpec(text);
      const errors = first.diagnostics.filter((d) => d.severity === 'error');
      assert.deepEqual(errors, [], `case ${k}: ${JSON.stringify(text)}`);
      assert.ok(first.spec !== undefined);
      const printed = printSpec(first.spec);
      const second = parseSpec(printed);
      assert.ok(second.spec !== undefined, `case ${k}: ${JSON.stringify(printed)} does not parse`);
      assert.equal(printSpec(second.spec), printed, `case ${k}: ${JSON.stringify(text)}`);
      assert.deepEqual(shape(second.spec), shape(first.spec), `case ${k}: ${JSON.stringify(text)}`);
    }
  });

  test('5000 random and mutated strings never throw and always get a spec or a located error', () => {
    const r = prng(0xf022);
    const valid = Array.from({ length: 200 }, () => validSpec(r));
    for (let k = 0; k < 5000; k++) {
      const text =
        k % 3 === 0
          ? r.chars(`pru:/.@+-*?[]!^'()%$=,<>~ \t0123456789abcxyzAFX_`, 0, 40)
          : mutate(r, r.pick(valid));
      const label = `case ${k}: ${JSON.stringify(text)}`;
      const { spec, diagnostics } = parseSpec(text);
      for (const d of diagnostics) {
        assert.ok(
          0 <= d.span.start && d.span.start <= d.span.end && d.span.end <= text.length,
          label,
        );
        assert.doesNotMatch(d.message, /internal parser error/, label);
        assert.match(d.message, /^(Cannot|Reading) /, label);
      }
      const errors = diagnostics.filter((d) => d.severity === 'error');
      if (spec === undefined) {
        assert.ok(errors.length > 0, label);
      } else {
        assert.equal(errors.length, 0, label);
        const again = parseSpec(printSpec(spec));
        assert.ok(again.spec !== undefined, label);
        assert.deepEqual(shape(again.spec), shape(spec), label);
      }
    }
  });

  test('stays linear and shallow on huge inputs', () => {
    const huge = [
      `x:f ${'+8('.repeat(100_000)}arg0${')'.repeat(100_000)}`,
      `x:f ${'a->'.repeat(100_000)}b`,
      `x:${'a'.repeat(1_000_000)}`,
      `x:${'['.repeat(100_000)}`,
      `x:f ${'arg0 '.repeat(10_000)}`,
      `x:f +${'9'.repeat(100_000)}(arg0)`,
      `x:'${' '.repeat(100_000)}`,
    ];
    const start = performance.now();
    for (const text of huge) {
      const { spec, diagnostics } = parseSpec(text);
      assert.ok(spec !== undefined || diagnostics.some((d) => d.severity === 'error'));
    }
    assert.ok(performance.now() - start < 5000, 'huge inputs took more than 5 s');
  });

  test('parses a typical spec in microseconds', (t) => {
    const r = prng(7);
    const texts = Array.from({ length: 2000 }, () => validSpec(r));
    for (const text of texts) parseSpec(text);
    const rounds = 5;
    const start = performance.now();
    for (let k = 0; k < rounds; k++) for (const text of texts) parseSpec(text);
    const perSpecUs = ((performance.now() - start) * 1000) / (rounds * texts.length);
    t.diagnostic(`parseSpec(): ${perSpecUs.toFixed(2)} µs per random valid spec`);
    const design = 'libc:malloc size=arg0:u64';
    const designStart = performance.now();
    for (let k = 0; k < 20_000; k++) parseSpec(design);
    t.diagnostic(
      `parseSpec(): ${(((performance.now() - designStart) * 1000) / 20_000).toFixed(2)} µs for ${design}`,
    );
    assert.ok(perSpecUs < 500, `${perSpecUs} µs per spec`);
  });
});
