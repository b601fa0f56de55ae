import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stackCounts, traceEvents } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { renderSpeedscopeStacks, renderSpeedscopeTrace } from './speedscope.js';

test('renderSpeedscopeStacks() writes recorded stacks as sampled profiles, one per probe', () => {
  const { rows } = stackCounts();
  const text = renderSpeedscopeStacks(rows);
  assertGolden('ustack.speedscope.json', text);
  const file = JSON.parse(text);
  assert.deepEqual(
    file.profiles.map((p: { name: string; endValue: number }) => [p.name, p.endValue]),
    [...new Set(rows.map((r) => r.probe))].map((probe) => [
      probe,
      Number(rows.filter((r) => r.probe === probe).reduce((s, r) => s + r.count, 0n)),
    ]),
  );
});

test("renderSpeedscopeTrace() writes each thread's calls as an evented profile", () => {
  const { events } = traceEvents();
  const text = renderSpeedscopeTrace(events, { returning: new Set(['f_ints', 'f_str']) });
  assertGolden('trace.speedscope.json', text);
  const file = JSON.parse(text);
  const threads = new Set(events.filter((e) => e.kind === 'return').map((e) => e.tid));
  assert.equal(file.profiles.length, threads.size);
  for (const profile of file.profiles) {
    // Opened and closed in order, each close matching the last open, times never going back.
    const open: number[] = [];
    let at = 0;
    for (const e of profile.events) {
      assert.ok(e.at >= at);
      at = e.at;
      if (e.type === 'O') open.push(e.frame);
      else assert.equal(open.pop(), e.frame);
    }
    assert.deepEqual(open, []);
  }
  const opens = file.profiles.flatMap((p: { events: { type: string }[] }) =>
    p.events.filter((e) => e.type === 'O'),
  );
  assert.equal(opens.length, events.filter((e) => e.kind === 'return').length);
});
