import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hexFieldsOf, traceEvents } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import type { ProbeEvent } from '../events/index.js';
import { CallPairer } from './calls.js';
import { renderChromeTrace } from './chrome-trace.js';

function event(
  kind: ProbeEvent['kind'],
  probe: string,
  tid: number,
  ns: number,
  fields = {},
): ProbeEvent {
  return {
    probe,
    spec: probe,
    kind,
    pid: 10,
    tid,
    cpu: 0,
    timestampNs: BigInt(ns),
    comm: `t${tid}`,
    fields,
  };
}

test('renderChromeTrace() writes a recorded trace as trace-event JSON', () => {
  const { events, hexFields, stats } = traceEvents();
  const text = renderChromeTrace(events, {
    hexFields: hexFieldsOf(hexFields),
    returning: new Set(['f_ints', 'f_str']),
    lost: stats.lost,
  });
  assertGolden('trace.chrome.json', text);
  const trace = JSON.parse(text);
  const count = (ph: string, name: string) =>
    trace.traceEvents.filter((e: { ph: string; name: string }) => e.ph === ph && e.name === name)
      .length;
  // Each traced call is one slice; the entry-only probe's hits are instants.
  const calls = (probe: string) =>
    events.filter((e) => e.probe === probe && e.kind === 'return').length;
  assert.equal(count('X', 'f_ints'), calls('f_ints'));
  assert.equal(count('X', 'f_str'), calls('f_str'));
  assert.equal(count('i', 'lib_add'), events.filter((e) => e.probe === 'lib_add').length);
  assert.equal(count('M', 'thread_name'), new Set(events.map((e) => e.tid)).size);
});

test('a slice has the entry and return values, its start and exact duration', () => {
  const text = renderChromeTrace(
    [
      event('entry', 'f', 1, 1_000, { n: 5n, p: 4096 }),
      event('entry', 'g', 1, 1_500),
      event('return', 'f', 1, 3_250, { ret: -1 }),
    ],
    { startNs: 0n, hexFields: new Map([['f', new Map([['p', true]])]]) },
  );
  const events = JSON.parse(text).traceEvents;
  assert.deepEqual(events.slice(0, 2), [
    { ts: 1.5, name: 'g', cat: 'entry', ph: 'i', s: 't', pid: 10, tid: 1, args: {} },
    {
      ts: 1,
      dur: 2.25,
      name: 'f',
      cat: 'call',
      ph: 'X',
      pid: 10,
      tid: 1,
      args: { n: '5', p: '0x1000', ret: -1 },
    },
  ]);
  assert.match(text, /"ts":1\.000,"dur":2\.250,/);
});

test('CallPairer matches returns to the latest entry of their probe on their thread', () => {
  const pairer = new CallPairer();
  assert.deepEqual(pairer.push(event('entry', 'r', 1, 1)), []);
  assert.deepEqual(pairer.push(event('entry', 'r', 2, 2)), []);
  assert.deepEqual(pairer.push(event('entry', 'r', 1, 3)), []);
  const inner = pairer.push(event('return', 'r', 1, 4));
  assert.deepEqual(
    inner.map((d) => d.kind === 'call' && [d.startNs, d.endNs]),
    [[3n, 4n]],
  );
  // A return with no entry, but its latency known, is a call from its latency.
  const late = pairer.push({ ...event('return', 'q', 3, 100), latencyNs: 40n });
  assert.deepEqual(
    late.map((d) => d.kind === 'call' && [d.startNs, d.endNs]),
    [[60n, 100n]],
  );
  assert.deepEqual(
    pairer.flush().map((d) => [d.event.tid, d.event.timestampNs]),
    [
      [1, 1n],
      [2, 2n],
    ],
  );
});

test('an entry unwound past (longjmp, an exception) becomes an instant when an outer call returns', () => {
  const pairer = new CallPairer();
  pairer.push(event('entry', 'outer', 1, 1));
  pairer.push(event('entry', 'thrower', 1, 2));
  const done = pairer.push(event('return', 'outer', 1, 5));
  assert.deepEqual(
    done.map((d) => d.kind),
    ['instant', 'call'],
  );
});

/** A call as a replay gives it: its return, at its end, with its duration. */
function call(probe: string, tid: number, startNs: number, endNs: number): ProbeEvent {
  return { ...event('return', probe, tid, endNs), latencyNs: BigInt(endNs - startNs) };
}

/**
 * Where speedscope ends each slice: (ts - first) + dur, each step a double, `first` the
 * earliest ts of the thread's slices (its trace-event import, read).
 */
function speedscopeEnds(text: string): [string, number][] {
  const slices = JSON.parse(text).traceEvents.filter((e: { ph: string }) => e.ph === 'X') as {
    name: string;
    tid: number;
    ts: number;
    dur: number;
  }[];
  return slices.map((e) => {
    const first = Math.min(...slices.filter((o) => o.tid === e.tid).map((o) => o.ts));
    return [e.name, e.ts - first + e.dur];
  });
}

test('with exactEnds, slices that end together still end together when read as doubles', () => {
  // Calls in order of their start, as a replay writes them. Thread 1's first slice starts at
  // time zero: 377.672 + 15.470 is not the double of 393.142, and read naively the callee
  // would outlast its caller (speedscope then closes the wrong frame). Thread 2's starts at
  // 22.756, which speedscope subtracts first: (400.432 - 22.756) + 15.470 is not the double
  // of 415.902 - 22.756 either, nor is a dur that makes ts + dur the double of 415.902.
  const events = [
    call('outer', 1, 1_000, 1_000 + 393_142),
    call('inner', 1, 1_000 + 377_672, 1_000 + 393_142),
    call('outer', 2, 1_000 + 22_756, 1_000 + 415_902),
    call('inner', 2, 1_000 + 400_432, 1_000 + 415_902),
  ];
  const ends = (exactEnds: boolean) =>
    speedscopeEnds(renderChromeTrace(events, { startNs: 1_000n, exactEnds, returning: new Set() }));
  const first = 393.142;
  const second = 415.902 - 22.756;
  assert.deepEqual(ends(true), [
    ['outer', first],
    ['inner', first],
    ['outer', second],
    ['inner', second],
  ]);
  const naive = ends(false);
  assert.notEqual(naive[0]![1], naive[1]![1], 'the exact decimals alone do not add up');
  assert.notEqual(naive[2]![1], naive[3]![1], 'nor once the first start is taken away');
});
