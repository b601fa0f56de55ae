import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeError } from '../errors/index.js';
import { fakeHost, mountinfoLine, ROOT_STATUS } from './fake-host.test.js';
import { ensureTracefs, findTracefs, parseMountinfo, TRACEFS_MOUNT_COMMAND } from './tracefs.js';

test('parseMountinfo() reads mount points, types and sources, undoing octal escapes', () => {
  const text = [
    '22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw',
    '36 22 0:12 / /sys/kernel/tracing rw,relatime shared:15 - tracefs nodev rw',
    '40 28 0:40 / /mnt/with\\040space rw shared:20 master:3 - tmpfs my\\011tmp rw',
    'garbage line',
    '',
  ].join('\n');
  assert.deepEqual(parseMountinfo(text), [
    { mountPoint: '/sys', fsType: 'sysfs', source: 'sysfs' },
    { mountPoint: '/sys/kernel/tracing', fsType: 'tracefs', source: 'nodev' },
    { mountPoint: '/mnt/with space', fsType: 'tmpfs', source: 'my\ttmp' },
  ]);
});

test('findTracefs() prefers /sys/kernel/tracing to the debugfs place', () => {
  const both = [
    mountinfoLine('/sys/kernel/debug', 'debugfs'),
    mountinfoLine('/sys/kernel/debug/tracing', 'tracefs'),
    mountinfoLine('/sys/kernel/tracing', 'tracefs'),
  ].join('\n');
  assert.equal(
    findTracefs(fakeHost({ files: { '/proc/self/mountinfo': both } })),
    '/sys/kernel/tracing',
  );
  const debugOnly = mountinfoLine('/sys/kernel/debug/tracing', 'tracefs');
  assert.equal(
    findTracefs(fakeHost({ files: { '/proc/self/mountinfo': debugOnly } })),
    '/sys/kernel/debug/tracing',
  );
  const elsewhere = mountinfoLine('/tmp/t', 'tracefs');
  assert.equal(findTracefs(fakeHost({ files: { '/proc/self/mountinfo': elsewhere } })), '/tmp/t');
  // A debugfs mount alone is not tracefs.
  const debugfs = mountinfoLine('/sys/kernel/debug', 'debugfs');
  assert.equal(findTracefs(fakeHost({ files: { '/proc/self/mountinfo': debugfs } })), undefined);
});

test('findTracefs() looks again after it found nothing, and keeps what it found', () => {
  const host = fakeHost({ files: { '/proc/self/mountinfo': '' } });
  assert.equal(findTracefs(host), undefined);
  host.files['/proc/self/mountinfo'] = mountinfoLine('/sys/kernel/tracing', 'tracefs');
  assert.equal(findTracefs(host), '/sys/kernel/tracing');
  host.files['/proc/self/mountinfo'] = '';
  assert.equal(findTracefs(host), '/sys/kernel/tracing', 'a found place is cached');
});

test('ensureTracefs() mounts tracefs at /sys/kernel/tracing when root and it is missing', () => {
  const host = fakeHost({
    euid: 0,
    files: { '/proc/self/mountinfo': '', '/proc/self/status': ROOT_STATUS },
  });
  assert.equal(ensureTracefs(host), '/sys/kernel/tracing');
  assert.deepEqual(host.mounts, ['/sys/kernel/tracing']);
  assert.equal(ensureTracefs(host), '/sys/kernel/tracing');
  assert.equal(host.mounts.length, 1, 'mounted once');
});

test('ensureTracefs() tells a non-root user the command that mounts tracefs', () => {
  const host = fakeHost({ uid: 1000, files: { '/proc/self/mountinfo': '' } });
  assert.throws(
    () => ensureTracefs(host),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_TRACEFS_NOT_MOUNTED' &&
      err.message === 'Cannot find tracefs: no tracefs entry in /proc/self/mountinfo' &&
      err.hints.some((hint) => hint.includes(TRACEFS_MOUNT_COMMAND)),
  );
  assert.deepEqual(host.mounts, []);
});

test('ensureTracefs() reports a mount that does not show up in mountinfo', () => {
  const host = fakeHost({ euid: 0, files: { '/proc/self/mountinfo': '' }, mount: () => {} });
  assert.throws(
    () => ensureTracefs(host),
    (err: unknown) => err instanceof ProbeError && err.code === 'ERR_TRACEFS_NOT_MOUNTED',
  );
});
