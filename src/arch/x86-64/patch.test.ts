import assert from 'node:assert/strict';
import { test } from 'node:test';
import { planEntryPatch } from './patch.js';

const AT = 0x555555555139n;

function hex(text: string): Uint8Array {
  const bytes = Uint8Array.from(Buffer.from(text.replace(/\s+/g, ''), 'hex'));
  // The planner reads up to 15 bytes past the patch: the code goes on with nops.
  const padded = new Uint8Array(bytes.length + 32).fill(0x90);
  padded.set(bytes);
  return padded;
}

//   push %rbp; mov %rsp,%rbp; sub $0x10,%rsp; ...
const PROLOGUE = hex('55  48 89 e5  48 83 ec 10  c9 c3');

test('planEntryPatch() covers whole instructions where no jump of the function lands', () => {
  const plan = planEntryPatch(PROLOGUE, AT, 0x7f0000000000n, []);
  assert.ok(plan.kind === 'patch', plan.kind === 'refuse' ? plan.reason : '');
  // push (1), mov (3), sub (4): the first 8 bytes, whole.
  assert.equal(plan.length, 8);
  // A jump to an address past the covered bytes is no obstacle.
  assert.equal(planEntryPatch(PROLOGUE, AT, 0x7f0000000000n, [AT + 8n]).kind, 'patch');
});

test('planEntryPatch() refuses where a jump lands in the covered bytes, or at the entry itself, or where jumps are not known', () => {
  const inside = planEntryPatch(PROLOGUE, AT, 0x7f0000000000n, [AT + 1n]);
  assert.ok(
    inside.kind === 'refuse' && /lands at 0x55555555513a, inside the 8 bytes/.test(inside.reason),
  );
  const loop = planEntryPatch(PROLOGUE, AT, 0x7f0000000000n, [AT]);
  assert.ok(loop.kind === 'refuse' && /goes back to its first instruction/.test(loop.reason));
  const unknown = planEntryPatch(PROLOGUE, AT, 0x7f0000000000n, undefined);
  assert.ok(
    unknown.kind === 'refuse' && /extent of its function is not known/.test(unknown.reason),
  );
});
