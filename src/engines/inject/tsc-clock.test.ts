// The TSC clock against a simulated machine: a TSC that runs at 3 ticks per ns of true time
// (simulated too: see machine()), and a CLOCK_MONOTONIC that reads true time, except where a
// test makes a reading late (the thread preempted between the clocks) or off by a few
// microseconds (the jitter of reading two clocks one after the other on a loaded machine).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TscClock } from './tsc-clock.js';

const TICKS_PER_NS = 3n;

/**
 * True time moves on 10 ns at each reading of a clock, and by what the test moves it on by:
 * never by the real time the test takes (on a loaded machine, with its code not compiled yet,
 * the first test's readings were microseconds apart, and its result 1.3 µs off: CI failed).
 */
function machine(bootNs = 1_000_000_000n) {
  let extra = 0n;
  let read = bootNs;
  const state = {
    /** Time lost between the next TSC read and the clock read after it (once). */
    preemptNs: 0n,
    /** The error of every clock reading from now on. */
    jitterNs: 0n,
    now: () => {
      read += 10n;
      return read + extra;
    },
    advance: (ns: bigint) => {
      extra += ns;
    },
    tsc: () => state.now() * TICKS_PER_NS,
    monotonicNs: () => {
      extra += state.preemptNs;
      state.preemptNs = 0n;
      return state.now() + state.jitterNs;
    },
  };
  return state;
}

test('a reading whose thread was preempted between the two clocks is not taken: the conversion is within a microsecond, not half the preemption off', () => {
  const m = machine();
  m.preemptNs = 2_000_000n;
  const clock = new TscClock({ readTsc: m.tsc }, m.monotonicNs);
  m.advance(50_000_000n);
  clock.update();
  const at = m.tsc();
  const error = clock.toNs(at) - at / TICKS_PER_NS;
  assert.ok(error < 1000n && error > -1000n, `off by ${error} ns`);
});

test('times never go back: a TSC value later than another converts to a time no earlier, across updates whose clock readings jitter', () => {
  const m = machine();
  const clock = new TscClock({ readTsc: m.tsc }, m.monotonicNs);
  let last = -1n;
  let backwards = 0;
  for (let k = 0; k < 400; k++) {
    m.advance(25_000_000n);
    // An entry converted before the update, its return made just after it.
    const entry = m.tsc();
    const entryNs = clock.toNs(entry);
    m.jitterNs = k % 2 === 0 ? 5000n : -5000n;
    clock.update();
    const returned = clock.toNs(m.tsc());
    if (returned < entryNs) backwards++;
    // Records read late, after the update: converted as before it.
    assert.equal(clock.toNs(entry), entryNs, 'a time already given is given again');
    if (entryNs < last) backwards++;
    last = returned;
  }
  assert.equal(backwards, 0);
});

test('the conversion stays on the clock: readings jittering by 5 µs keep it within 10 µs; a first reading 20 µs off is made good within seconds', () => {
  const m = machine();
  const clock = new TscClock({ readTsc: m.tsc }, m.monotonicNs);
  for (let k = 0; k < 400; k++) {
    m.advance(10_000_000n);
    m.jitterNs = BigInt(((k * 7919) % 11) - 5) * 1000n;
    clock.update();
  }
  m.jitterNs = 0n;
  const at = m.tsc();
  const error = clock.toNs(at) - at / TICKS_PER_NS;
  assert.ok(error < 10_000n && error > -10_000n, `off by ${error} ns after 4 s`);
  const measured = clock.nsPerTick * Number(TICKS_PER_NS);
  assert.ok(Math.abs(measured - 1) < 1e-5, `rate ${measured}`);

  const late = machine();
  late.preemptNs = 0n;
  late.jitterNs = 20_000n;
  const off = new TscClock({ readTsc: late.tsc }, late.monotonicNs);
  late.jitterNs = 0n;
  for (let k = 0; k < 600; k++) {
    late.advance(10_000_000n);
    off.update();
  }
  const then = late.tsc();
  const left = off.toNs(then) - then / TICKS_PER_NS;
  assert.ok(left < 2000n && left > -2000n, `off by ${left} ns after 6 s`);
});

for (const [when, bootNs] of [
  ['', 1_000_000_000n],
  // Past 2^53 ns (104 days), where a time is no longer exact as a number.
  [', on a clock past 104 days', (1n << 53n) + 12_345n],
] as const) {
  test(`a TSC value given by its two 32-bit words converts as the value itself, across updates and the low word's wrap${when}`, () => {
    const m = machine(bootNs);
    // A TSC far above 2^32 whose low word wraps while the test runs.
    const offset = (1n << 44n) - 2_000_000_000n;
    const tsc = () => m.tsc() + offset;
    const clock = new TscClock({ readTsc: tsc }, m.monotonicNs);
    const early = tsc() - 5_000_000n;
    const seen: bigint[] = [early];
    for (let k = 0; k < 100; k++) {
      m.advance(25_000_000n);
      seen.push(tsc());
      clock.update();
      seen.push(tsc() + 7n);
    }
    assert.ok(
      seen.some((t) => t >> 32n !== seen[0]! >> 32n),
      'the high word moved on',
    );
    for (const t of seen) {
      const high = Number(t >> 32n);
      const low = Number(t & 0xffffffffn);
      const ns = clock.toNsOfWords(high, low);
      assert.equal(BigInt(ns), clock.toNs(t), `TSC ${t}`);
      // A number while exact, a bigint past it.
      assert.equal(typeof ns, bootNs < 2n ** 53n ? 'number' : 'bigint');
    }
  });
}
