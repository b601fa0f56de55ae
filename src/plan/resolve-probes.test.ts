import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type PlanProgress, resolveProbes, resolveProbesSync } from './resolve-probes.js';

// The C library of this machine: thousands of functions, so its pattern is planned in steps.
test('resolveProbes() with onProgress lets the event loop run after each step of a large pattern, and plans what resolveProbesSync() plans', async () => {
  const steps: (PlanProgress & { ran: number })[] = [];
  let ran = 0;
  const plan = await resolveProbes(['libc:*'], {
    onProgress: (step) => {
      steps.push({ ...step, ran });
      // Runs only if the planning gives the event loop a turn before its next step.
      setImmediate(() => ran++);
    },
  });
  assert.ok(steps.length >= 2, JSON.stringify(steps));
  const total = steps[0]!.total;
  assert.ok(total > 1000, `libc has ${total} functions`);
  steps.forEach((step, i) => {
    assert.equal(step.ran, i, `the event loop ran before step ${i} (${step.done} of ${total})`);
    assert.equal(step.total, total);
    assert.ok(step.done <= total && (i === 0 || step.done > steps[i - 1]!.done));
  });
  assert.equal(steps.at(-1)!.done, total);
  const sync = resolveProbesSync(['libc:*']);
  assert.deepEqual(
    plan.sites.map((s) => [s.symbol, s.fileOffset]),
    sync.sites.map((s) => [s.symbol, s.fileOffset]),
  );
  assert.equal(plan.skipped.length, sync.skipped.length);
});
