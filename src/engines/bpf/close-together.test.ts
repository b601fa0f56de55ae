import assert from 'node:assert/strict';
import { fstatSync, openSync } from 'node:fs';
import { test } from 'node:test';
import { ClosingLater, closeTogether } from './close-together.js';

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

test('ClosingLater closes what it is given meanwhile, and every one by the time wait() returns', () => {
  const closing = new ClosingLater();
  const batches = [0, 1, 3, 2].map((count) =>
    Array.from({ length: count }, () => openSync('/dev/null', 'r')),
  );
  const kept = openSync('/dev/null', 'r');
  for (const fds of batches) closing.close(fds);
  closing.wait();
  assert.deepEqual(
    batches.flat().filter((fd) => isOpen(fd)),
    [],
  );
  assert.ok(isOpen(kept));
  closeTogether([kept]);
  // Nothing given: wait() returns at once.
  closing.wait();
});
