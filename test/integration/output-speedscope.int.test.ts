// What upscope writes for speedscope, opened in speedscope itself (the npm package's static
// build, served on a loopback port, in Debian's chromium): a folded file, a speedscope file of
// stacks, a Chrome trace and a speedscope file of a trace each load with no error, no alert and
// no page error, and speedscope's own sandwich table lists the recorded functions with their
// totals. The Chrome trace is also checked against the trace-event format's rules.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import {
  foldStacks,
  renderChromeTrace,
  renderFolded,
  renderSpeedscopeStacks,
  renderSpeedscopeTrace,
  type StackCount,
} from '../../src/output/index.js';
import { hexFieldsOf, stackCounts, traceEvents } from '../fixtures/output/load.js';
import { requireHost } from '../helpers/require-host.js';
import { closeSpeedscope, openInSpeedscope as load } from '../helpers/speedscope.js';

after(closeSpeedscope);

/** Each function's total hits (cumulative, counted once per stack) in the first probe's rows. */
function totals(rows: readonly StackCount[]) {
  const out = new Map<string, bigint>();
  for (const [stack, value] of foldStacks(rows)) {
    for (const name of new Set(stack.split(';'))) out.set(name, (out.get(name) ?? 0n) + value);
  }
  return out;
}

test('a folded file loads in speedscope with the recorded totals', async (t) => {
  if (!requireHost(t, { commands: ['chromium'] })) return;
  const { rows } = stackCounts();
  const loaded = await load('ustack.folded', renderFolded(rows));
  assert.deepEqual(loaded.problems, []);
  assert.equal(loaded.title, 'ustack.folded - speedscope');
  const expected = totals(rows);
  assert.deepEqual(
    loaded.sandwich,
    new Map([...expected].map(([name, value]) => [name, String(value)])),
  );
});

test('a speedscope file of stacks loads, a profile per probe, with the recorded totals', async (t) => {
  if (!requireHost(t, { commands: ['chromium'] })) return;
  const { rows } = stackCounts();
  const loaded = await load(
    'ustack.speedscope.json',
    renderSpeedscopeStacks(rows, { name: 'stacks' }),
  );
  assert.deepEqual(loaded.problems, []);
  assert.equal(loaded.title, 'stacks - speedscope');
  const probes = [...new Set(rows.map((r) => r.probe))];
  assert.equal(loaded.profile, `${probes[0]} (1/${probes.length})`);
  const first = rows.filter((r) => r.probe === probes[0]);
  assert.deepEqual(
    loaded.sandwich,
    new Map([...totals(first)].map(([name, value]) => [name, String(value)])),
  );
});

/** The trace-event format's rules, as its specification states them, for what upscope writes. */
function checkTraceEventFormat(trace: { traceEvents: Record<string, unknown>[] }) {
  assert.ok(Array.isArray(trace.traceEvents));
  const slices = new Map<string, [number, number][]>();
  for (const e of trace.traceEvents) {
    assert.equal(typeof e['name'], 'string');
    assert.ok(Number.isInteger(e['pid']) && Number.isInteger(e['tid']), JSON.stringify(e));
    switch (e['ph']) {
      case 'X': {
        assert.ok(typeof e['ts'] === 'number' && typeof e['dur'] === 'number' && e['dur'] >= 0);
        const key = `${e['pid']}/${e['tid']}`;
        slices.set(key, [
          ...(slices.get(key) ?? []),
          [e['ts'] as number, (e['ts'] as number) + (e['dur'] as number)],
        ]);
        break;
      }
      case 'i':
        assert.equal(typeof e['ts'], 'number');
        assert.ok(['g', 'p', 't'].includes(e['s'] as string));
        break;
      case 'M':
        assert.ok(['process_name', 'thread_name'].includes(e['name'] as string));
        assert.equal(typeof (e['args'] as { name: unknown }).name, 'string');
        break;
      default:
        assert.fail(`unexpected phase ${e['ph']}`);
    }
    if (e['args'] !== undefined) assert.equal(typeof e['args'], 'object');
  }
  // Complete events on one thread nest: none starts inside another and ends after it.
  for (const [thread, list] of slices) {
    list.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    const open: number[] = [];
    for (const [start, end] of list) {
      while (open.length > 0 && open.at(-1)! <= start) open.pop();
      assert.ok(open.length === 0 || end <= open.at(-1)!, `slices overlap on ${thread}`);
      open.push(end);
    }
  }
}

test('a Chrome trace follows the trace-event format and loads in speedscope, a profile per thread', async (t) => {
  if (!requireHost(t, { commands: ['chromium'] })) return;
  const { events, hexFields } = traceEvents();
  const text = renderChromeTrace(events, { hexFields: hexFieldsOf(hexFields) });
  const trace = JSON.parse(text);
  checkTraceEventFormat(trace);
  const loaded = await load('trace.json', text);
  assert.deepEqual(loaded.problems, []);
  assert.equal(loaded.title, 'trace.json - speedscope');
  // speedscope makes a profile of each thread with calls, named by the metadata events.
  const threads = [
    ...new Set(events.filter((e) => e.kind === 'return').map((e) => `${e.pid}/${e.tid}`)),
  ].sort();
  const [pid, tid] = threads[0]!.split('/').map(Number);
  const comm = events.find((e) => e.tid === tid)!.comm;
  const leader = events.find((e) => e.tid === pid)?.comm ?? comm;
  assert.equal(
    loaded.profile,
    `${leader} (pid ${pid}), ${comm} (tid ${tid}) (1/${threads.length})`,
  );
  // speedscope names a slice by its name and args: each call of that thread is there.
  const calls = events.filter((e) => e.kind === 'return' && e.tid === tid);
  assert.equal(loaded.sandwich.size, calls.length);
  for (const call of calls) {
    assert.ok([...loaded.sandwich.keys()].some((name) => name.startsWith(`${call.probe} {`)));
  }
});

test("a speedscope file of a trace loads, each thread's calls timed", async (t) => {
  if (!requireHost(t, { commands: ['chromium'] })) return;
  const { events } = traceEvents();
  const loaded = await load(
    'trace.speedscope.json',
    renderSpeedscopeTrace(events, { name: 'trace' }),
  );
  assert.deepEqual(loaded.problems, []);
  assert.equal(loaded.title, 'trace - speedscope');
  const tids = [...new Set(events.filter((e) => e.kind === 'return').map((e) => e.tid))];
  assert.match(loaded.profile, new RegExp(`\\(1/${tids.length}\\)$`));
  const probes = new Set(events.filter((e) => e.kind === 'return').map((e) => e.probe));
  assert.deepEqual(new Set(loaded.sandwich.keys()), probes);
});
