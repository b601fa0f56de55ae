// ofThisFile() against processes whose descent is known: started here, their children, a
// zombie of them, and one started without this file's variable.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ended, ofThisFile, spawnCollected, waitFor } from './spawned.js';

const state = (pid: number) =>
  /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];

test("ofThisFile() takes this file's processes and their children, zombies too, and no other", async () => {
  // A shell whose child ends unreaped (exec'd sleep never waits): a zombie of this file. The
  // child outlives the shell's exec: one that ended before it could be reaped by the shell
  // (`sleep 0` was, once in CI: its /proc entry was gone).
  const mine = spawnCollected('sh', ['-c', 'sleep 0.3 & echo child $!; exec sleep 5']);
  const other = spawnCollected('env', ['-u', 'UPSCOPE_TEST_FILE', 'sleep', '5']);
  try {
    const child = Number((await waitFor(mine, /^child (\d+)$/m, 'stdout'))[1]);
    const deadline = Date.now() + 5000;
    while (state(child) !== 'Z' && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    assert.equal(state(child), 'Z', 'the child is a zombie');
    assert.equal(ofThisFile(mine.pid), true, 'started here');
    assert.equal(ofThisFile(child), true, 'a zombie child of a process started here');
    // env has exec'd sleep without the variable by the time sleep runs.
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(ofThisFile(other.pid), false, 'started without the variable');
    assert.equal(ofThisFile(1), false, 'init');
    assert.equal(ofThisFile(2 ** 22 + 1), false, 'no such process');
  } finally {
    mine.child.kill('SIGKILL');
    other.child.kill('SIGKILL');
    await ended(mine);
    await ended(other);
  }
});
