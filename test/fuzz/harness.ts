import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { TestContext } from 'node:test';
import fc from 'fast-check';
import { ProbeError } from '../../src/errors/index.js';

// Fuzzing harness: a parser gets inputs made by fast-check (mutations of real seeds, or
// generated from a grammar) and must return, or throw its own documented error, for each one;
// never another exception (TypeError, RangeError, ...), never a slow input, never a huge
// allocation. `npm test` runs a short pass; `npm run fuzz` (scripts/fuzz.mjs) sets FUZZ_RUNS
// for a long one and FUZZ_STATS for the per-parser counts it prints.

/** Inputs per parser: FUZZ_RUNS, or the short pass of `npm test`. */
export function fuzzRuns(short: number): number {
  const runs = Number(process.env.FUZZ_RUNS);
  return Number.isInteger(runs) && runs > 0 ? runs : short;
}

/** One input must finish within this, measured at its fastest of two tries. */
export const TIME_LIMIT_MS = 200;
/** What one input may grow the heap and array buffers by. */
export const MEMORY_LIMIT_BYTES = 256 * 1024 * 1024;

export interface FuzzTarget<T> {
  /** Shown in the report: "elf: parseElf + every reader". */
  readonly name: string;
  readonly input: fc.Arbitrary<T>;
  /** Parses the input and reads everything a caller can ask of the result. */
  readonly run: (input: T) => void;
  /** The errors the parser documents; anything else fails the input. */
  readonly expected: (err: unknown) => boolean;
  /** The short pass's input count (npm test). */
  readonly shortRuns: number;
}

/** A ProbeError that is not an internal error (ERR_INTERNAL is a bug report). */
export function isProbeError(...codes: string[]): (err: unknown) => boolean {
  return (err) =>
    err instanceof ProbeError &&
    err.code !== 'ERR_INTERNAL' &&
    (codes.length === 0 || codes.includes(err.code));
}

function memory(): number {
  const usage = process.memoryUsage();
  return usage.heapUsed + usage.arrayBuffers;
}

function describeError(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}\n${err.stack ?? ''}`;
  return String(err);
}

/** Runs one input once; returns how long it took, throws when it misbehaved. */
function runOnce<T>(target: FuzzTarget<T>, input: T): number {
  const before = memory();
  const start = performance.now();
  try {
    target.run(input);
  } catch (err) {
    if (!target.expected(err)) {
      throw new Error(`${target.name}: unexpected ${describeError(err)}`, { cause: err });
    }
  }
  const elapsed = performance.now() - start;
  const grown = memory() - before;
  if (grown > MEMORY_LIMIT_BYTES) {
    throw new Error(`${target.name}: one input grew memory by ${(grown / 2 ** 20).toFixed(0)} MiB`);
  }
  return elapsed;
}

/**
 * Runs the target over fuzzRuns(shortRuns) inputs (seed: FUZZ_SEED when set, so a failure's
 * printed seed replays it) and reports the count and time through the test's diagnostics and
 * FUZZ_STATS.
 */
export function fuzz<T>(t: TestContext, target: FuzzTarget<T>): void {
  const numRuns = fuzzRuns(target.shortRuns);
  const seedText = process.env.FUZZ_SEED;
  const seed = seedText === undefined ? undefined : Number(seedText);
  let inputs = 0;
  let slowest = 0;
  const start = performance.now();
  fc.assert(
    fc.property(target.input, (input) => {
      inputs++;
      let elapsed = runOnce(target, input);
      // A pause of the collector or of a busy machine is not the parser's: time it again.
      if (elapsed > TIME_LIMIT_MS) elapsed = Math.min(elapsed, runOnce(target, input));
      slowest = Math.max(slowest, elapsed);
      assert.ok(
        elapsed <= TIME_LIMIT_MS,
        `${target.name}: one input took ${elapsed.toFixed(0)} ms (limit ${TIME_LIMIT_MS} ms)`,
      );
    }),
    { numRuns, ...(seed === undefined ? {} : { seed }) },
  );
  const seconds = (performance.now() - start) / 1000;
  const line = `${target.name}: ${inputs} inputs in ${seconds.toFixed(1)} s (slowest ${slowest.toFixed(1)} ms)`;
  t.diagnostic(line);
  const stats = process.env.FUZZ_STATS;
  if (stats !== undefined) {
    appendFileSync(stats, `${JSON.stringify({ name: target.name, inputs, seconds, slowest })}\n`);
  }
}

// ---- byte mutation -------------------------------------------------------------------------

/** A real input and the byte ranges worth mutating most (headers, tables, notes). */
export interface ByteSeed {
  readonly label: string;
  readonly bytes: Uint8Array;
  readonly hotspots?: readonly (readonly [number, number])[];
}

type Mutation =
  | { readonly kind: 'bit'; readonly at: Where; readonly bit: number }
  | { readonly kind: 'byte'; readonly at: Where; readonly value: number }
  | { readonly kind: 'word'; readonly at: Where; readonly size: 2 | 4 | 8; readonly value: bigint }
  | { readonly kind: 'truncate'; readonly at: Where }
  | { readonly kind: 'delete'; readonly at: Where; readonly length: number }
  | { readonly kind: 'insert'; readonly at: Where; readonly bytes: Uint8Array }
  | { readonly kind: 'copy'; readonly from: Where; readonly at: Where; readonly length: number };

/** A position: in a hotspot (index into the seed's list) or anywhere, as a fraction. */
interface Where {
  readonly hotspot: number | undefined;
  readonly fraction: number;
}

const where: fc.Arbitrary<Where> = fc.record({
  hotspot: fc.option(fc.nat(63), { freq: 4, nil: undefined }),
  fraction: fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }),
});

/** Values that break length and offset fields: 0, ±1, sign bits, all ones, powers of two. */
const INTERESTING = [
  0n,
  1n,
  2n,
  4n,
  8n,
  0x7fn,
  0x80n,
  0xffn,
  0x100n,
  0x7fffn,
  0x8000n,
  0xffffn,
  0x10000n,
  0x7fffffffn,
  0x80000000n,
  0xfffffff0n,
  0xffffffffn,
  0x100000000n,
  0x7fffffffffffffffn,
  0x8000000000000000n,
  0xffffffffffffffffn,
];

const wordValue = fc.oneof(
  fc.constantFrom(...INTERESTING),
  fc.bigInt({ min: 0n, max: 0xffffffffffffffffn }),
  fc.bigInt({ min: 0n, max: 0x10000n }),
);

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('bit' as const), at: where, bit: fc.nat(7) }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('byte' as const),
      at: where,
      value: fc.oneof(fc.constantFrom(0, 1, 0x7f, 0x80, 0xff), fc.nat(255)),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('word' as const),
      at: where,
      size: fc.constantFrom(2 as const, 4 as const, 8 as const),
      value: wordValue,
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncate' as const), at: where }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('delete' as const), at: where, length: fc.nat(64) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('insert' as const),
      at: where,
      bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('copy' as const),
      from: where,
      at: where,
      length: fc.integer({ min: 1, max: 64 }),
    }),
  },
);

function position(seed: ByteSeed, length: number, at: Where): number {
  const spots = seed.hotspots ?? [];
  if (at.hotspot !== undefined && spots.length > 0) {
    const [lo, hi] = spots[at.hotspot % spots.length]!;
    const end = Math.min(hi, length);
    if (end > lo) return lo + Math.floor(at.fraction * (end - lo));
  }
  return Math.floor(at.fraction * length);
}

function writeWord(bytes: Uint8Array, at: number, size: number, value: bigint): void {
  for (let i = 0; i < size && at + i < bytes.length; i++) {
    bytes[at + i] = Number((value >> BigInt(8 * i)) & 0xffn);
  }
}

/** Applies mutations to a copy of the seed's bytes. */
export function mutate(seed: ByteSeed, mutations: readonly Mutation[]): Uint8Array {
  let bytes = Uint8Array.from(seed.bytes);
  for (const m of mutations) {
    const at = position(seed, bytes.length, m.at);
    switch (m.kind) {
      case 'bit':
        if (at < bytes.length) bytes[at]! ^= 1 << m.bit;
        break;
      case 'byte':
        if (at < bytes.length) bytes[at] = m.value;
        break;
      case 'word':
        writeWord(bytes, at, m.size, m.value);
        break;
      case 'truncate':
        bytes = bytes.slice(0, at);
        break;
      case 'delete': {
        const out = new Uint8Array(bytes.length - Math.min(m.length, bytes.length - at));
        out.set(bytes.subarray(0, at));
        out.set(bytes.subarray(at + m.length), at);
        bytes = out;
        break;
      }
      case 'insert': {
        const out = new Uint8Array(bytes.length + m.bytes.length);
        out.set(bytes.subarray(0, at));
        out.set(m.bytes, at);
        out.set(bytes.subarray(at), at + m.bytes.length);
        bytes = out;
        break;
      }
      case 'copy': {
        const from = position(seed, bytes.length, m.from);
        bytes.copyWithin(at, from, from + m.length);
        break;
      }
    }
  }
  return bytes;
}

/** A mutated copy of one of the seeds (up to 8 mutations; sometimes the seed unchanged). */
export function mutatedBytes(seeds: readonly ByteSeed[]): fc.Arbitrary<Uint8Array> {
  return mutatedSeed(seeds).map(({ bytes }) => bytes);
}

/** Like mutatedBytes(), with the seed the bytes came from. */
export function mutatedSeed<S extends ByteSeed>(
  seeds: readonly S[],
): fc.Arbitrary<{ readonly seed: S; readonly bytes: Uint8Array }> {
  assert.ok(seeds.length > 0, 'no seeds to mutate');
  return fc
    .tuple(fc.nat(seeds.length - 1), fc.array(mutation, { minLength: 0, maxLength: 8 }))
    .map(([index, mutations]) => ({
      seed: seeds[index]!,
      bytes: mutate(seeds[index]!, mutations),
    }));
}

// ---- text mutation -------------------------------------------------------------------------

type TextEdit =
  | {
      readonly kind: 'replace';
      readonly at: number;
      readonly length: number;
      readonly text: string;
    }
  | { readonly kind: 'cut'; readonly at: number };

/**
 * A mutated copy of one of the seed texts: pieces replaced with `alphabet` characters or with
 * pieces of other seeds, or the text cut short.
 */
export function mutatedText(seeds: readonly string[], alphabet: string): fc.Arbitrary<string> {
  assert.ok(seeds.length > 0, 'no seeds to mutate');
  const chars = [...alphabet];
  const piece = fc.oneof(
    fc.string({ unit: fc.constantFrom(...chars), maxLength: 8 }),
    fc.string({ maxLength: 4 }),
    fc.tuple(fc.nat(seeds.length - 1), fc.nat(), fc.nat(24)).map(([i, at, n]) => {
      const s = seeds[i]!;
      const from = s.length === 0 ? 0 : at % s.length;
      return s.slice(from, from + n);
    }),
  );
  const edit: fc.Arbitrary<TextEdit> = fc.oneof(
    {
      weight: 8,
      arbitrary: fc.record({
        kind: fc.constant('replace' as const),
        at: fc.nat(),
        length: fc.nat(4),
        text: piece,
      }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }) },
  );
  return fc
    .tuple(fc.nat(seeds.length - 1), fc.array(edit, { maxLength: 6 }))
    .map(([index, edits]) => {
      let text = seeds[index]!;
      for (const e of edits) {
        const at = e.at % (text.length + 1);
        text =
          e.kind === 'cut'
            ? text.slice(0, at)
            : text.slice(0, at) + e.text + text.slice(at + e.length);
      }
      return text;
    });
}
