import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  CallGraphs,
  CallTimeline,
  callGraph,
  FunctionStatsBuilder,
  functionStats,
  replayCalls,
} from './call-analysis.js';
import {
  CALL_RECORD_BYTES,
  CALLS_HEADER_BYTES,
  type CallRecord,
  CallRecordDecoder,
  checkCallsHeader,
  encodeCallFields,
  encodeCallRecord,
  encodeCallsHeader,
} from './call-records.js';
import {
  type CallNode,
  CallTreeBuilder,
  KERNEL_TRAMPOLINE_DEPTH,
  type ThreadCalls,
} from './call-tree.js';

/**
 * Records from a script: `+f` enters f, `*f` enters f with no return to come (a lone entry),
 * `=f` a call of f whose returns are not probed, `-f` returns from f, `~f` an unwind of f.
 */
function records(tid: number, script: string, fns: string[], t0 = 0): CallRecord[] {
  return script.split(' ').map((step, i) => {
    const name = step.slice(1);
    if (!fns.includes(name)) fns.push(name);
    const kind =
      step[0] === '+'
        ? 'entry'
        : step[0] === '*'
          ? 'lone-entry'
          : step[0] === '='
            ? 'call'
            : step[0] === '-'
              ? 'return'
              : 'unwind';
    return { kind, tid, pid: 1, fn: fns.indexOf(name), timeNs: BigInt(t0 + i * 10) };
  });
}

/** A thread's tree as text: f(g h) with a mark for calls not ended by their return. */
function shape(thread: ThreadCalls, fns: string[]): string {
  const one = (n: CallNode): string => {
    const mark =
      n.end === 'return' ? '' : n.end === 'unwind' ? '!' : n.end === 'untimed' ? '=' : '?';
    const inner = n.children.map(one).join(' ');
    return `${fns[n.fn]}${mark}${inner === '' ? '' : `(${inner})`}`;
  };
  return thread.roots.map(one).join(' ');
}

function build(...recs: CallRecord[][]): ThreadCalls[] {
  const builder = new CallTreeBuilder();
  for (const r of recs.flat()) builder.push(r);
  return builder.finish();
}

test('CallTreeBuilder nests recursion and pairs each return with the innermost call', () => {
  const fns: string[] = [];
  const [t] = build(records(1, '+main +rec +rec +rec -rec -rec -rec -main', fns));
  assert.equal(shape(t!, fns), 'main(rec(rec(rec)))');
  assert.equal(t!.roots[0]!.children[0]!.endNs - t!.roots[0]!.children[0]!.startNs, 50n);
});

test('CallTreeBuilder closes the frames a longjmp skipped as unwound at the return of an outer frame', () => {
  const fns: string[] = [];
  const [t] = build(records(1, '+main +jumper +deep +deep +deep -jumper -main', fns));
  assert.equal(shape(t!, fns), 'main(jumper(deep!(deep!(deep!))))');
});

test('CallTreeBuilder marks a return the engine saw as an unwind (a C++ throw)', () => {
  const fns: string[] = [];
  const [t] = build(records(1, '+main +a +b ~b ~a -main', fns));
  assert.equal(shape(t!, fns), 'main(a!(b!))');
});

test('CallTreeBuilder leaves a thread that ended in a callee (exit()) open, per thread', () => {
  const fns: string[] = [];
  const threads = build(
    records(1, '+main +work +quit', fns),
    records(2, '+worker -worker', fns, 5),
  );
  assert.equal(threads.length, 2);
  assert.equal(shape(threads[0]!, fns), 'main?(work?(quit?))');
  assert.equal(threads[0]!.roots[0]!.endNs, 20n);
  assert.equal(shape(threads[1]!, fns), 'worker');
});

test('CallTreeBuilder ends a call whose returns are not probed as it begins: what follows is its caller’s', () => {
  const fns: string[] = [];
  const [t] = build(records(1, '+main +f =odd +g -g =odd -f -main', fns));
  assert.equal(shape(t!, fns), 'main(f(odd= g odd=))');
  const by = new Map(functionStats([t!]).map((r) => [fns[r.fn], r]));
  assert.deepEqual(
    [by.get('odd')!.calls, by.get('odd')!.untimed, by.get('odd')!.totalNs],
    [2, 2, 0n],
  );
  assert.deepEqual([by.get('f')!.unwound, by.get('f')!.open, by.get('f')!.totalNs], [0, 0, 50n]);
  // g's time is f's callees' alone.
  assert.equal(by.get('f')!.selfNs, 40n);
  // Written and read back as such.
  const bytes = new Uint8Array(CALL_RECORD_BYTES);
  encodeCallRecord(records(1, '=odd', ['odd'])[0]!, bytes, 0);
  assert.equal(new CallRecordDecoder(1).push(bytes)[0]!.kind, 'call');
});

test('CallTreeBuilder counts a return whose call began before the recording', () => {
  const fns: string[] = [];
  const [t] = build(records(1, '-old +f -f', fns));
  assert.equal(t!.unmatched, 1);
  assert.equal(shape(t!, fns), 'f');
});

test('functionStats counts calls, self and total time, a recursion once in total', () => {
  const fns: string[] = [];
  // main 0..70, rec 10..60, rec 20..50, leaf 30..40
  const threads = build(records(1, '+main +rec +rec +leaf -leaf -rec -rec -main', fns));
  const by = new Map(functionStats(threads).map((r) => [fns[r.fn], r]));
  assert.deepEqual(
    [by.get('rec')!.calls, by.get('rec')!.totalNs, by.get('rec')!.selfNs],
    [2, 50n, 40n],
  );
  assert.deepEqual(
    [by.get('rec')!.minNs, by.get('rec')!.maxNs, by.get('rec')!.sumNs],
    [30n, 50n, 80n],
  );
  assert.deepEqual([by.get('main')!.totalNs, by.get('main')!.selfNs], [70n, 20n]);
});

test('callGraph merges equal paths and starts from a function when asked', () => {
  const fns: string[] = [];
  const threads = build(
    records(1, '+main +a +b -b -a +a +b -b -a -main', fns),
    records(2, '+t +a -a -t', fns, 100),
  );
  const graph = callGraph(threads);
  assert.deepEqual(
    graph.map((g) => [fns[g.fn], g.calls, g.children.map((c) => [fns[c.fn], c.calls])]),
    [
      ['main', 1, [['a', 2]]],
      ['t', 1, [['a', 1]]],
    ],
  );
  const fromA = callGraph(threads, { from: fns.indexOf('a') });
  assert.deepEqual(
    fromA.map((g) => [fns[g.fn], g.calls, g.children.length]),
    [['a', 3, 1]],
  );
});

test('replayCalls applies depth, -F, -N, time and thread filters', () => {
  const fns: string[] = [];
  const threads = build(records(1, '+main +a +b -b -a +c -c -main', fns), records(2, '+t -t', fns));
  const names = (o: Parameters<typeof replayCalls>[1]) =>
    [...replayCalls(threads, o)].map((c) => `${c.tid}:${'.'.repeat(c.depth)}${fns[c.fn]}`);
  assert.deepEqual(names({}), ['1:main', '1:.a', '1:..b', '1:.c', '2:t']);
  assert.deepEqual(names({ depth: 2 }), ['1:main', '1:.a', '1:.c', '2:t']);
  assert.deepEqual(names({ only: new Set([fns.indexOf('a')]) }), ['1:a', '1:.b']);
  assert.deepEqual(names({ hide: new Set([fns.indexOf('a')]) }), ['1:main', '1:.c', '2:t']);
  assert.deepEqual(names({ minDurationNs: 20n }), ['1:main', '1:.a']);
  // A call whose returns are not probed has no time to compare: it is kept.
  const untimed = build(records(1, '+main =odd +a -a -main', fns));
  assert.deepEqual(
    [...replayCalls(untimed, { minDurationNs: 20n })].map(
      (c) => `${'.'.repeat(c.depth)}${fns[c.fn]}`,
    ),
    ['main', '.odd'],
  );
  assert.deepEqual(names({ tids: new Set([2]) }), ['2:t']);
  // A call of -F inside another counts its depth from the outer one; -N inside -F hides.
  const nested = build(records(1, '+main +a +x +a +b -b -a -x -a +b -b -main', fns));
  const of = (o: Parameters<typeof replayCalls>[1]) =>
    [...replayCalls(nested, o)].map((c) => `${'.'.repeat(c.depth)}${fns[c.fn]}`);
  assert.deepEqual(of({ only: new Set([fns.indexOf('a')]) }), ['a', '.x', '..a', '...b']);
  assert.deepEqual(of({ only: new Set([fns.indexOf('a')]), hide: new Set([fns.indexOf('x')]) }), [
    'a',
  ]);
  assert.deepEqual(of({ only: new Set([fns.indexOf('b')]), depth: 1 }), ['b', 'b']);
});

test('CallRecordDecoder reads records across chunk boundaries', () => {
  const recs: CallRecord[] = [
    { kind: 'entry', tid: 7, pid: 6, fn: 1, timeNs: 123456789012n },
    { kind: 'return', tid: 7, pid: 6, fn: 1, timeNs: 123456789999n },
    { kind: 'unwind', tid: 8, pid: 6, fn: 0, timeNs: 2n ** 63n },
  ];
  const bytes = new Uint8Array(recs.length * CALL_RECORD_BYTES);
  recs.forEach((r, i) => {
    encodeCallRecord(r, bytes, i * CALL_RECORD_BYTES);
  });
  const decoder = new CallRecordDecoder(2);
  const out = [...decoder.push(bytes.subarray(0, 30)), ...decoder.push(bytes.subarray(30))];
  assert.deepEqual(out, recs);
  assert.equal(decoder.partialBytes, 0);
  assert.equal(decoder.problem, undefined);
});

test('a record whose time is given as a number reads back as the same time as a bigint', () => {
  // Below 2^32, across it (the high word), and the largest a number holds exactly.
  const times = [123_456_789, 2 ** 32 + 5, 8_640_000_123_456_789, Number.MAX_SAFE_INTEGER];
  const bytes = new Uint8Array(times.length * CALL_RECORD_BYTES);
  const view = new DataView(bytes.buffer);
  times.forEach((time, i) => {
    encodeCallFields(view, i * CALL_RECORD_BYTES, 'entry', 7, 6, 0, time);
  });
  const decoded = new CallRecordDecoder(1).push(bytes).map((r) => r.timeNs);
  assert.deepEqual(
    decoded,
    times.map((time) => BigInt(time)),
  );
});

test('CallRecordDecoder keeps the valid part of a truncated or corrupt file and says where', () => {
  const bytes = new Uint8Array(3 * CALL_RECORD_BYTES);
  for (let i = 0; i < 3; i++) {
    encodeCallRecord({ kind: 'entry', tid: 1, pid: 1, fn: i, timeNs: BigInt(i) }, bytes, i * 24);
  }
  const truncated = new CallRecordDecoder(3);
  assert.equal(truncated.push(bytes.subarray(0, 60)).length, 2);
  assert.equal(truncated.partialBytes, 12);
  const corrupt = new CallRecordDecoder(3);
  bytes[24] = 9; // the second record's kind
  assert.equal(corrupt.push(bytes).length, 1);
  assert.match(corrupt.problem!, new RegExp(`record at byte ${CALLS_HEADER_BYTES + 24} .*kind 9`));
  assert.deepEqual(corrupt.push(bytes), []);
});

test('checkCallsHeader accepts its own header and says why another is not one', () => {
  assert.equal(checkCallsHeader(encodeCallsHeader()), undefined);
  assert.match(checkCallsHeader(new TextEncoder().encode('{"not":"calls"}!'))!, /UPSCALLS/);
  const other = encodeCallsHeader();
  other[8] = 9;
  assert.match(checkCallsHeader(other)!, /version 9/);
  // Recordings of the versions before (no kind 5, no kind 4) are read too.
  for (const version of [1, 2]) {
    other[8] = version;
    assert.equal(checkCallsHeader(other), undefined);
  }
  assert.match(checkCallsHeader(new Uint8Array(3))!, /shorter/);
});

test("CallTreeBuilder: a lone entry (no trampoline set: the kernel's 64 were) gets no return; a return pairs with its own call", () => {
  const depth = KERNEL_TRAMPOLINE_DEPTH + 6;
  const fns = ['rec'];
  // The kernel reports the returns of the 64 outermost calls only, innermost first.
  const script = [
    ...Array.from({ length: depth }, (_, i) => (i < KERNEL_TRAMPOLINE_DEPTH ? '+rec' : '*rec')),
    ...Array.from({ length: KERNEL_TRAMPOLINE_DEPTH }, () => '-rec'),
  ].join(' ');
  const [t] = build(records(1, script, fns));
  const chain: CallNode[] = [];
  for (let node = t!.roots[0]; node !== undefined; node = node.children[0]) chain.push(node);
  assert.equal(chain.length, depth);
  assert.deepEqual(
    chain.map((n) => n.end),
    [
      ...Array.from({ length: KERNEL_TRAMPOLINE_DEPTH }, () => 'return'),
      ...Array.from({ length: 6 }, () => 'unreported'),
    ],
  );
  // The outermost call ends with the last return; the 64th with the first.
  const at = (i: number) => BigInt(i * 10);
  assert.equal(chain[0]!.endNs, at(depth + KERNEL_TRAMPOLINE_DEPTH - 1));
  assert.equal(chain[KERNEL_TRAMPOLINE_DEPTH - 1]!.endNs, at(depth));
  const [row] = functionStats([t!]);
  assert.equal(row!.unreported, 6);
  assert.equal(row!.open, 0);
});

test('report and graph made as the records are read, without the tree, equal those of the tree', () => {
  // Four threads interleaved, with recursion, unwinds, lone entries, returns of calls made
  // before the recording and calls left open, from a fixed seed.
  let seed = 7;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const recs: CallRecord[] = [];
  const stacks: number[][] = [[], [], [], []];
  for (let i = 0; i < 20_000; i++) {
    const t = random(4);
    const stack = stacks[t]!;
    const tid = t === 3 ? 2 ** 31 + 5 : 10 + t;
    const at = { tid, pid: t < 2 ? 1 : 2, timeNs: BigInt(i * 7 + random(5)) };
    const roll = random(20);
    if (stack.length === 0 || (stack.length < 30 && roll < 9)) {
      const fn = random(12);
      stack.push(fn);
      recs.push({ ...at, kind: roll === 0 ? 'lone-entry' : 'entry', fn });
    } else if (roll < 11) {
      recs.push({ ...at, kind: 'return', fn: random(12) }); // perhaps none open: unmatched
    } else {
      const fn = stack.splice(Math.max(0, stack.length - 1 - random(3)))[0]!; // an unwind too
      recs.push({ ...at, kind: roll === 12 ? 'unwind' : 'return', fn });
    }
  }
  const tree = build(recs);
  const streamed = [new FunctionStatsBuilder(), new FunctionStatsBuilder({ perThread: true })];
  const graphs = [new CallGraphs(), new CallGraphs({ from: [3] })];
  // Graphs from every call of each of several functions, nested in each other.
  const several = new CallGraphs({ from: [5, 3, 9] });
  const timeline = new CallTimeline();
  const builder = new CallTreeBuilder({
    keep: false,
    observers: [...streamed, ...graphs, several, timeline],
  });
  for (const r of recs) builder.push(r);
  const threads = builder.finish();
  assert.ok(threads.every((t) => t.roots.length === 0));
  assert.deepEqual(
    threads.map((t) => [t.tid, t.firstNs, t.lastNs, t.unmatched]),
    tree.map((t) => [t.tid, t.firstNs, t.lastNs, t.unmatched]),
  );
  const stats = functionStats(tree);
  assert.ok(stats.some((r) => r.unwound > 0) && stats.some((r) => r.unreported > 0));
  assert.ok(stats.some((r) => r.open > 0) && tree.some((t) => t.unmatched > 0));
  assert.deepEqual(streamed[0]!.rows(), stats);
  assert.deepEqual(streamed[1]!.rows(), functionStats(tree, { perThread: true }));
  assert.deepEqual(graphs[0]!.graph(), callGraph(tree));
  assert.deepEqual(graphs[1]!.graph(), callGraph(tree, { from: 3 }));
  assert.deepEqual(graphs[0]!.graph(2), callGraph(tree.filter((t) => t.pid === 2)));
  assert.deepEqual(
    several.graph(),
    [5, 3, 9].flatMap((from) => callGraph(tree, { from })),
  );
  for (const filters of [
    {},
    { depth: 3 },
    { only: new Set([3]), hide: new Set([5]) },
    { minDurationNs: 40n, tids: new Set([11, 2 ** 31 + 5]) },
  ]) {
    assert.deepEqual([...replayCalls(timeline, filters)], [...replayCalls(tree, filters)]);
  }
  // The graph's counts are the calls: every call is on one path.
  const calls = (nodes: readonly { calls: number; children: readonly unknown[] }[]): number =>
    nodes.reduce((sum, n) => sum + n.calls + calls(n.children as typeof nodes), 0);
  assert.equal(
    calls(graphs[0]!.graph()),
    stats.reduce((sum, r) => sum + r.calls, 0),
  );
});

test("report's min, avg and max are of the calls that ended; of the open ones only where none did", () => {
  const fns: string[] = [];
  // f returns after 10 and 30 ns; the third f is entered as the thread's records end (0 ns).
  const [t] = build(records(1, '+main +f -f +f +g -g -f +f', fns));
  const by = new Map(functionStats([t!]).map((r) => [fns[r.fn], r]));
  const f = by.get('f')!;
  assert.deepEqual([f.calls, f.open, f.timed], [3, 1, 2]);
  assert.deepEqual([f.minNs, f.sumNs / BigInt(f.timed), f.maxNs], [10n, 20n, 30n]);
  // main never returned: its one call is timed until the end.
  const main = by.get('main')!;
  assert.deepEqual(
    [main.calls, main.open, main.timed, main.minNs, main.maxNs],
    [1, 1, 1, 70n, 70n],
  );
  // An open call first, then one that ends: the open one no longer counts.
  const later: string[] = [];
  const threads = build(records(2, '+h', later), records(3, '+h -h', later, 100));
  const [h] = functionStats(threads);
  assert.deepEqual([h!.calls, h!.open, h!.timed, h!.minNs, h!.maxNs], [2, 1, 1, 10n, 10n]);
});
