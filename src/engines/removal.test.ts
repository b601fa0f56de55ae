import assert from 'node:assert/strict';
import { fstatSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ClosingLater, closeTogether, setRemovalNotice, watchRemoval } from './removal.js';

/**
 * Whether `fd` still holds /dev/null (as every descriptor these tests open does): a number the
 * closer threads' own start-up takes again once closed (an eventfd, a pipe) is not ours.
 */
const DEV_NULL = statSync('/dev/null').rdev;
const isOpen = (fd: number) => {
  try {
    const stat = fstatSync(fd);
    return stat.isCharacterDevice() && stat.rdev === DEV_NULL;
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

test('ClosingLater gives a job to an idle thread, else to a new one, up to 8 threads: the closes of many processes wait out their grace periods together', () => {
  const closing = new ClosingLater();
  // One job, closed: the next one goes to the same thread.
  const first = openSync('/dev/null', 'r');
  closing.close([first]);
  const pause = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  for (let waited = 0; isOpen(first) && waited < 10_000; waited += 5) pause(5);
  assert.equal(isOpen(first), false, 'closed meanwhile');
  pause(50); // the thread marks its job done just after the close
  const second = openSync('/dev/null', 'r');
  closing.close([second]);
  assert.equal(closing.threads, 1);
  // Twelve at once: a new thread for each while all are busy (a thread that starts and
  // closes its job meanwhile takes another), eight at most.
  const many = Array.from({ length: 12 }, () => [openSync('/dev/null', 'r')]);
  for (const fds of many) closing.close(fds);
  assert.ok(closing.threads > 1 && closing.threads <= 8, `${closing.threads} threads`);
  closing.wait();
  assert.deepEqual(
    [second, ...many.flat()].filter((fd) => isOpen(fd)),
    [],
  );
  assert.equal(closing.threads, 0, 'wait() ends the threads');
});

test('watchRemoval says the notice once when a step of the removal takes longer than its time, and never when the steps go on or nothing may wait', () => {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-removal-'));
  const pause = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  const said = (run: (step: () => void) => void, mayWait = true) => {
    const file = join(dir, `said-${Math.random()}`);
    const fd = openSync(file, 'w');
    setRemovalNotice({ fd, afterMs: 500, text: 'still removing\n' });
    try {
      watchRemoval(mayWait, run);
      // The watch writes from a thread of its own: give it the time to.
      pause(300);
      return readFileSync(file, 'utf8');
    } finally {
      setRemovalNotice(undefined);
      closeTogether([fd]);
    }
  };
  try {
    assert.equal(
      said(() => pause(1500)),
      'still removing\n',
    );
    // Steps every 30 ms for 900 ms: each well within the time.
    assert.equal(
      said((step) => {
        for (let i = 0; i < 30; i++) {
          pause(30);
          step();
        }
      }),
      '',
    );
    assert.equal(
      said(() => pause(900), false),
      '',
    );
    // What the removal returns or throws comes through.
    assert.throws(
      () =>
        watchRemoval(true, () => {
          throw new Error('refused');
        }),
      /refused/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
