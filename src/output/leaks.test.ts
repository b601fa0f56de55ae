import assert from 'node:assert/strict';
import { test } from 'node:test';
import { foldStacks } from './folded.js';
import { type LeakReport, leakStackCounts, renderLeaksJson, renderLeaksText } from './leaks.js';

const report: LeakReport = {
  final: true,
  elapsedMs: 1500,
  outstanding: { count: 5n, bytes: 1200n, stacks: 2 },
  stacks: [
    {
      pid: 42,
      frames: [
        { function: 'malloc', object: 'libc.so.6' },
        { function: 'parse', symbolOffset: 0x1an, object: 'app', file: 'app.c', line: 12 },
      ],
      count: 4n,
      bytes: 1000n,
      oldestAgeMs: 2500,
    },
    { pid: 42, frames: [], count: 1n, bytes: 200n, oldestAgeMs: 10 },
  ],
  counters: {
    allocations: 9n,
    frees: 4n,
    unknownFrees: 1n,
    failed: 0n,
    dropped: 0n,
    stacksFull: 0n,
    releasedByExec: 0n,
  },
  growth: [
    {
      pid: 42,
      folded: 'parse;malloc',
      series: [
        [500, 400n],
        [1500, 1000n],
      ],
    },
  ],
};

test('renderLeaksText() gives totals, then each stack with its frames and source lines', () => {
  assert.equal(
    renderLeaksText(report),
    [
      'Outstanding at the end: 1,200 bytes in 5 blocks from 2 stacks',
      '',
      '1,000 bytes in 4 blocks, oldest 2.500 s (pid 42):',
      '    malloc (libc.so.6)',
      '    parse+0x1a (app) at app.c:12',
      '',
      '200 bytes in 1 block, oldest 10.000 ms (pid 42):',
      '    [no user stack]',
      '',
    ].join('\n'),
  );
});

test('renderLeaksJson() writes numbers as numbers, and the growth series', () => {
  const json = JSON.parse(renderLeaksJson(report));
  assert.deepEqual(json.outstanding, { count: 5, bytes: 1200, stacks: 2 });
  assert.deepEqual(json.stacks[0].frames[1], {
    function: 'parse',
    symbolOffset: 26,
    object: 'app',
    file: 'app.c',
    line: 12,
  });
  assert.deepEqual(json.growth, [
    {
      pid: 42,
      stack: 'parse;malloc',
      series: [
        [500, 400],
        [1500, 1000],
      ],
    },
  ]);
});

test('leakStackCounts() weighs the stacks by bytes in the stack formats', () => {
  const folded = foldStacks(leakStackCounts(report), { weight: 'bytes' });
  assert.deepEqual(
    [...folded],
    [
      ['[no user stack]', 200n],
      ['parse;malloc', 1000n],
    ],
  );
});
