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

test('with exactEnds, slices that end together still end together when ts + dur is added as doubles', () => {
  // 377.672 + 15.470 is not the double of 393.142: read naively, the callee would outlast its
  // caller (speedscope then closes the wrong frame).
  const events = [
    event('entry', 'outer', 1, 1_000),
    event('entry', 'inner', 1, 1_000 + 377_672),
    event('return', 'inner', 1, 1_000 + 393_142),
    event('return', 'outer', 1, 1_000 + 393_142),
  ];
  const ends = (exactEnds: boolean) =>
    JSON.parse(renderChromeTrace(events, { startNs: 1_000n, exactEnds }))
      .traceEvents.filter((e: { ph: string }) => e.ph === 'X')
      .map((e: { name: string; ts: number; dur: number }) => [e.name, e.ts + e.dur]);
  assert.deepEqual(ends(true), [
    ['inner', 393.142],
    ['outer', 393.142],
  ]);
  assert.notDeepEqual(ends(false), ends(true), 'the exact decimals alone do not add up');
});
