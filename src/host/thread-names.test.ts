import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { ThreadNames } from './thread-names.js';

test('ThreadNames.name() follows a rename of the thread; a thread that is gone keeps its last name', () => {
  const own = readFileSync('/proc/self/comm', 'utf8').trim();
  const names = new ThreadNames();
  try {
    assert.equal(names.name(process.pid), own);
    writeFileSync('/proc/self/comm', 'renamed-now');
    assert.equal(names.name(process.pid), 'renamed-now');
    // No live thread has a tid above the kernel's limit of 2^22.
    assert.equal(names.name(4_000_001), '');
  } finally {
    writeFileSync('/proc/self/comm', own);
    names.close();
  }
  assert.equal(names.name(process.pid), own, 'opened again after close()');
  names.close();
});
