import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ThreadTable } from './threads.js';

/** A tracefs stand-in with saved_cmdlines and saved_tgids as the kernel prints them. */
function fakeTracefs(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-threads-'));
  writeFileSync(join(dir, 'saved_cmdlines'), '4000001 gone-worker\n4000002 <...>\n');
  writeFileSync(join(dir, 'saved_tgids'), '4000001 4000000\n');
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

const CLONE_THREAD = 0x10000n;
/** A pid no live process has (above the kernel's pid_max limit of 2^22). */
const DEAD = 4_000_001;

test('a running thread is named and placed from /proc when first seen', () => {
  const { dir, remove } = fakeTracefs();
  try {
    const threads = new ThreadTable(dir);
    const comm = readFileSync('/proc/self/comm', 'utf8').trim();
    assert.equal(threads.comm(process.pid), comm);
    assert.equal(threads.tgid(process.pid), process.pid);
  } finally {
    remove();
  }
});

test('task events name new threads and processes, and renames follow', () => {
  const { dir, remove } = fakeTracefs();
  try {
    const threads = new ThreadTable(dir);
    threads.renamed(DEAD - 1, 'server');
    threads.created(DEAD - 1, DEAD + 10, 'server', CLONE_THREAD | 0x100n);
    threads.created(DEAD - 1, DEAD + 20, 'server', 0x1200000n);
    assert.equal(threads.tgid(DEAD + 10), threads.tgid(DEAD - 1), 'a thread joins its process');
    assert.equal(threads.tgid(DEAD + 20), DEAD + 20, 'a fork is its own process');
    assert.equal(threads.comm(DEAD + 10), 'server');
    threads.renamed(DEAD + 10, 'worker-1');
    threads.renamed(DEAD + 20, 'child-exec');
    assert.equal(threads.comm(DEAD + 10), 'worker-1');
    assert.equal(threads.comm(DEAD + 20), 'child-exec');
    assert.equal(threads.comm(DEAD - 1), 'server', 'a rename touches only its thread');
  } finally {
    remove();
  }
});

test('a thread gone before it was seen is found in saved_cmdlines and saved_tgids', () => {
  const { dir, remove } = fakeTracefs();
  try {
    const threads = new ThreadTable(dir);
    assert.equal(threads.comm(DEAD), 'gone-worker');
    assert.equal(threads.tgid(DEAD), DEAD - 1);
    assert.equal(threads.comm(DEAD + 1), '<...>', "the kernel's own mark for a name it lost");
    assert.equal(threads.tgid(DEAD + 1), DEAD + 1, 'no saved process: its own');
    assert.equal(threads.comm(DEAD + 5), '');
  } finally {
    remove();
  }
});

test('snapshot() keeps the names threads have at the start, whatever /proc says later', () => {
  const { dir, remove } = fakeTracefs();
  const ownComm = readFileSync('/proc/self/comm', 'utf8').trim();
  try {
    // Of the threads given, and of every thread of every process without a list.
    for (const tids of [[process.pid], undefined]) {
      const threads = new ThreadTable(dir);
      threads.snapshot(tids);
      writeFileSync('/proc/self/comm', 'later-name');
      assert.equal(threads.comm(process.pid), ownComm, `named at the snapshot (${tids})`);
      assert.equal(threads.tgid(process.pid), process.pid);
      writeFileSync('/proc/self/comm', ownComm);
      // A rename recorded after the snapshot wins, as it comes after the hits before it.
      threads.renamed(process.pid, 'renamed');
      assert.equal(threads.comm(process.pid), 'renamed');
    }
    // A thread that is gone is left to the lookup.
    const threads = new ThreadTable(dir);
    threads.snapshot([DEAD]);
    assert.equal(threads.comm(DEAD), 'gone-worker');
  } finally {
    writeFileSync('/proc/self/comm', ownComm);
    remove();
  }
});
