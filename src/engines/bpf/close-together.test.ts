import assert from 'node:assert/strict';
import { fstatSync, openSync } from 'node:fs';
import { test } from 'node:test';
import { closeTogether } from './close-together.js';

const isOpen = (fd: number) => {
  try {
    fstatSync(fd);
    return true;
  } catch (err) {
    assert.equal((err as NodeJS.ErrnoException).code, 'EBADF');
    return false;
  }
};

test('closeTogether closes every descriptor it is given, one or many, and no other', () => {
  for (const count of [0, 1, 2, 6]) {
    const fds = Array.from({ length: count }, () => openSync('/dev/null', 'r'));
    const kept = openSync('/dev/null', 'r');
    closeTogether(fds);
    assert.deepEqual(
      fds.filter((fd) => isOpen(fd)),
      [],
      `${count}: all closed`,
    );
    assert.ok(isOpen(kept), `${count}: another descriptor stays open`);
    closeTogether([kept]);
    assert.equal(isOpen(kept), false);
  }
});
