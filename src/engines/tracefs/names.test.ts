import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  EventNamer,
  groupOwnerPid,
  instanceOwnerPid,
  parseUprobeEvents,
  sessionGroupName,
  sessionInstanceName,
} from './names.js';

test('sessionGroupName() and sessionInstanceName() name both after the owner pid', () => {
  assert.equal(sessionGroupName(1234), 'upscope_1234');
  assert.equal(sessionInstanceName(1234), 'upscope_1234');
  assert.equal(sessionInstanceName(1234, 2), 'upscope_1234_2');
});

test('groupOwnerPid() reads only exact upscope_<pid> groups', () => {
  assert.equal(groupOwnerPid('upscope_1234'), 1234);
  for (const other of [
    'upscope_test_1234',
    'upscope_1234_2',
    'upscope_',
    'upscope_0',
    'upscope_01',
    'upscope_12x',
    'othertool_1234',
    'xupscope_1',
    'upscope_123456789012',
  ]) {
    assert.equal(groupOwnerPid(other), undefined, other);
  }
});

test('instanceOwnerPid() reads upscope_<pid> and upscope_<pid>_<n> instances only', () => {
  assert.equal(instanceOwnerPid('upscope_77'), 77);
  assert.equal(instanceOwnerPid('upscope_77_3'), 77);
  for (const other of ['upscope_test_77', 'upscope_77_', 'upscope_77_x', 'foo', 'upscope_77_0']) {
    assert.equal(instanceOwnerPid(other), undefined, other);
  }
});

test('EventNamer hands out each base name once, then with _2, _3, skipping names taken', () => {
  const namer = new EventNamer(['malloc_2']);
  assert.equal(namer.take('malloc'), 'malloc');
  assert.equal(namer.take('malloc'), 'malloc_3');
  assert.equal(namer.take('malloc'), 'malloc_4');
  assert.equal(namer.take('free'), 'free');
  namer.release('free');
  assert.equal(namer.take('free'), 'free');
});

test('EventNamer keeps names within the kernel limit of 63 characters with the suffix', () => {
  const namer = new EventNamer();
  const long = 'f'.repeat(70);
  assert.equal(namer.take(long), 'f'.repeat(63));
  const second = namer.take(long);
  assert.equal(second, `${'f'.repeat(61)}_2`);
  assert.equal(second.length, 63);
});

test('parseUprobeEvents() reads group and event of each p: and r: line', () => {
  const text = [
    'p:upscope_1/malloc /usr/lib/libc.so.6:0x00000000000a2f40 size=%di:u64',
    'r:othertool/ret /bin/true:0x0000000000001000 arg1=$retval:u64',
    '',
  ].join('\n');
  assert.deepEqual(
    parseUprobeEvents(text).map(({ group, event }) => ({ group, event })),
    [
      { group: 'upscope_1', event: 'malloc' },
      { group: 'othertool', event: 'ret' },
    ],
  );
});
