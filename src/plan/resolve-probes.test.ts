import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileProgram } from '../../test/helpers/compile.js';
import { requireHost } from '../../test/helpers/require-host.js';
import { tool } from '../../test/helpers/tools.js';
import { type PlanProgress, resolveProbes, resolveProbesSync } from './resolve-probes.js';

const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;

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

/** The bytes of each instruction objdump decodes from `vaddr` on, `count` of them. */
function objdumpInstructions(path: string, vaddr: bigint, count: number): string[] {
  const out = tool('objdump', [
    '-d',
    `--start-address=0x${vaddr.toString(16)}`,
    `--stop-address=0x${(vaddr + 64n).toString(16)}`,
    path,
  ]);
  const found: string[] = [];
  for (const line of out.split('\n')) {
    const m = /^\s*[0-9a-f]+:\t([0-9a-f ]+?)\s*(\t.*)?$/.exec(line);
    if (m === null) continue;
    const bytes = m[1]!.replace(/ /g, '');
    // A long instruction's bytes go on over lines with no text of their own.
    if (m[2] === undefined && found.length > 0) found[found.length - 1] += bytes;
    else found.push(bytes);
  }
  return found.slice(0, count);
}

test("A site's shown instructions are objdump's, read after the files are closed, for sites whose names are qualified too", (t) => {
  if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
  const O0 = compileProgram(SAMPLE, { flags: ['-O0'] });
  const O2 = compileProgram(SAMPLE, { flags: ['-O2'] });
  // Both files have a main: its sites get a qualifier (a copy of the site) to tell them apart.
  const plan = resolveProbesSync([`${O0}:main`, `${O2}:main`, `${O2}:checksum`]);
  assert.equal(plan.sites.length, 3);
  assert.deepEqual(
    plan.sites.map((site) => site.nameQualifier !== undefined),
    [true, true, false],
  );
  for (const site of plan.sites) {
    const shown = site.instructions;
    assert.equal(shown.length, 4, `${site.spec}: four instructions shown`);
    assert.equal(shown[0]!.vaddr, site.vaddr);
    assert.deepEqual(
      shown.map((insn) => Buffer.from(insn.bytes).toString('hex')),
      objdumpInstructions(site.target.path, site.vaddr, 4),
      site.spec,
    );
    assert.equal(site.instructions, shown, 'decoded once');
  }
});
