import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderCountsText } from './aggregate-text.js';

test('renderCountsText() by ustack: a stack under its count; a probe not hit is its count alone', () => {
  const text = renderCountsText(
    [
      { probe: 'f', stack: { pid: 42, frames: ['f+0x4 (app)', 'main+0x10 (app)'] }, count: 3n },
      { probe: 'g', stack: { pid: 42, frames: [] }, count: 1n },
      { probe: 'malloc', count: 0n },
    ],
    { by: 'ustack' },
  );
  assert.equal(
    text,
    [
      'f (pid 42): 3',
      '    f+0x4 (app)',
      '    main+0x10 (app)',
      '',
      'g (pid 42): 1',
      '    [no user stack]',
      '',
      'malloc: 0',
    ].join('\n'),
  );
});
