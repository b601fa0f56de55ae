import assert from 'node:assert/strict';
import { test } from 'node:test';
import { goroutineDepth, PendingCalls, threadDepth } from './call-frames.js';

test('PendingCalls pairs each return with its own call through recursion', () => {
  const calls = new PendingCalls<string>();
  // f(3) calls f(2) calls f(1): each a frame lower on the stack.
  for (const [name, sp] of [
    ['f3', 0x7000n],
    ['f2', 0x6f00n],
    ['f1', 0x6e00n],
  ] as const) {
    assert.deepEqual(calls.enter('t1', threadDepth(sp), name), []);
  }
  assert.deepEqual(calls.leave('t1', threadDepth(0x6e00n)), { call: 'f1', unwound: [] });
  assert.deepEqual(calls.leave('t1', threadDepth(0x6f00n)), { call: 'f2', unwound: [] });
  assert.deepEqual(calls.leave('t1', threadDepth(0x7000n)), { call: 'f3', unwound: [] });
  assert.equal(calls.size, 0);
});

test('PendingCalls closes the calls an unwind left: at the next call at their depth, or a return above them', () => {
  const calls = new PendingCalls<string>();
  calls.enter('t1', threadDepth(0x7000n), 'a');
  calls.enter('t1', threadDepth(0x6f00n), 'b');
  calls.enter('t1', threadDepth(0x6e00n), 'c');
  // An exception from c is caught in a's caller; the next call to a comes at a's depth.
  assert.deepEqual(calls.enter('t1', threadDepth(0x7000n), 'a2'), ['c', 'b', 'a']);
  calls.enter('t1', threadDepth(0x6f00n), 'b2');
  calls.enter('t1', threadDepth(0x6e00n), 'c2');
  // A longjmp from c2 back into a2, which then returns: b2 and c2 were left.
  assert.deepEqual(calls.leave('t1', threadDepth(0x7000n)), { call: 'a2', unwound: ['c2', 'b2'] });
  // Another thread's calls are its own.
  calls.enter('t2', threadDepth(0x9000n), 'x');
  assert.deepEqual(calls.leave('t1', threadDepth(0x9000n)), { call: undefined, unwound: [] });
  assert.deepEqual(
    calls.drop((owner) => owner === 't2'),
    ['x'],
  );
});

test('PendingCalls keys a goroutine by depth below its stack top, which a stack copy keeps', () => {
  const calls = new PendingCalls<string>();
  // The entry on a 8 KiB stack at 0xc000100000; the stack is copied to a 16 KiB one.
  calls.enter('g1', goroutineDepth(0xc000100000n, 0xc0000ffe00n), 'deep');
  assert.deepEqual(calls.leave('g1', goroutineDepth(0xc000210000n, 0xc00020fe00n)), {
    call: 'deep',
    unwound: [],
  });
});

test('PendingCalls keeps at most `limit` calls per owner', () => {
  const calls = new PendingCalls<number>(2);
  for (let i = 0; i < 4; i++) calls.enter('t', BigInt(i + 1), i);
  assert.equal(calls.size, 2);
  assert.deepEqual(calls.leave('t', 4n), { call: undefined, unwound: [] });
  assert.deepEqual(calls.leave('t', 2n), { call: 1, unwound: [] });
});

test('PendingCalls.goesOn: an entry at an open call’s depth goes on with it; deeper calls were left', () => {
  const calls = new PendingCalls<string>();
  assert.equal(calls.goesOn('t', threadDepth(0x7000n)), undefined, 'nothing open: a call');
  calls.enter('t', threadDepth(0x7000n), 'outer');
  calls.enter('t', threadDepth(0x6f00n), 'inner');
  // Back at the outer call's entry: the inner one was left; the outer goes on.
  assert.deepEqual(calls.goesOn('t', threadDepth(0x7000n)), ['inner']);
  assert.equal(calls.size, 1);
  assert.deepEqual(calls.leave('t', threadDepth(0x7000n)), { call: 'outer', unwound: [] });
  // At a depth no call is open at: a call (enter() it).
  calls.enter('t', threadDepth(0x7000n), 'a');
  assert.equal(calls.goesOn('t', threadDepth(0x6e00n)), undefined);
  assert.equal(calls.goesOn('other', threadDepth(0x7000n)), undefined);
  assert.equal(calls.size, 1);
});
