import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stackCounts } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { foldStacks, renderFolded } from './folded.js';
import { frameLabel, frameOf, frameText, type StackCount } from './stacks.js';

test('renderFolded() writes recorded ustack counts as collapsed stacks, root first', () => {
  const { rows } = stackCounts();
  const text = renderFolded(rows);
  assertGolden('ustack.folded', text);
  // The two call sites in via_b fold into one line: the total of both rows.
  const viaB = rows.filter((row) => row.stack?.frames.some((f) => String(f).startsWith('via_b')));
  assert.equal(viaB.length, 2);
  const line = text.split('\n').find((l) => l.includes(';via_b;'));
  assert.equal(line?.split(' ').at(-1), String(viaB.reduce((sum, row) => sum + row.count, 0n)));
});

test('frameOf() reads the frames the stack symbolizer writes', () => {
  assert.deepEqual(frameOf('via_b+0x15 (bpf-stacks)'), {
    function: 'via_b',
    symbolOffset: 0x15n,
    object: 'bpf-stacks',
  });
  assert.deepEqual(frameOf('ns::Box<int>::get(int) const+0x8 (app)'), {
    function: 'ns::Box<int>::get(int) const',
    symbolOffset: 8n,
    object: 'app',
  });
  assert.deepEqual(frameOf('stack_leaf (app)'), {
    function: 'stack_leaf',
    symbolOffset: 0n,
    object: 'app',
  });
  assert.deepEqual(frameOf('0x2724a (libc.so.6)'), { fileOffset: 0x2724an, object: 'libc.so.6' });
  assert.deepEqual(frameOf('0x7f3a2c0a2f40'), { address: 0x7f3a2c0a2f40n });
});

test('frameLabel() names a frame by function, else object and offset, else address', () => {
  assert.equal(frameLabel({ function: 'usleep@@GLIBC_2.2.5', symbolOffset: 4n }), 'usleep');
  assert.equal(frameLabel({ function: 'parse', symbolOffset: 0x1an }, true), 'parse+0x1a');
  assert.equal(
    frameLabel({ object: '/usr/lib/libc.so.6', fileOffset: 0x2724an }),
    'libc.so.6+0x2724a',
  );
  assert.equal(frameLabel({ address: 0x7f00n }), '0x7f00');
});

test('foldStacks() adds up rows that fold alike, weighs bytes, and keeps the separator out', () => {
  const rows: StackCount[] = [
    {
      probe: 'malloc',
      stack: { pid: 1, frames: ['malloc (libc.so.6)', 'a;b+0x4 (app)'] },
      count: 2n,
      bytes: 64n,
    },
    {
      probe: 'malloc',
      stack: { pid: 2, frames: ['malloc+0x8 (libc.so.6)', 'a;b+0x9 (app)'] },
      count: 3n,
      bytes: 96n,
    },
    { probe: 'malloc', stack: { pid: 2, frames: [] }, count: 1n },
  ];
  assert.deepEqual(
    foldStacks(rows),
    new Map([
      ['[no user stack]', 1n],
      ['a:b;malloc', 5n],
    ]),
  );
  assert.deepEqual(foldStacks(rows, { weight: 'bytes' }), new Map([['a:b;malloc', 160n]]));
});

test('frameText() writes structured frames as the symbolizer does, and frameOf() reads them back', () => {
  for (const text of [
    'via_b+0x15 (bpf-stacks)',
    'stack_leaf (app)',
    '0x2724a (libc.so.6)',
    '0x7f3a2c0a2f40',
  ]) {
    assert.equal(frameText(frameOf(text)), text);
  }
  assert.equal(
    frameText({ function: 'main', symbolOffset: 0x3cn, object: '/usr/bin/app', buildId: 'ab' }),
    'main+0x3c (app)',
  );
});
