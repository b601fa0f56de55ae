// The strace reader against what a shell command is known to do to files.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { requireHost } from './require-host.js';
import { parseStrace, straceChanges } from './strace.js';

test('straceChanges() sees a shell make, write, rename, remove a file and a directory', (t) => {
  if (!requireHost(t, { commands: ['strace'] })) return;
  const dir = mkdtempSync(join(tmpdir(), 'upscope-strace-test-'));
  try {
    const script =
      'mkdir "$1/d" && printf \'a"b\\\\c\\n\\001\' > "$1/d/f" && mv "$1/d/f" "$1/d/g" && cat "$1/d/g" >/dev/null && rm "$1/d/g" && rmdir "$1/d"';
    const run = straceChanges(['sh', '-c', script, 'sh', dir]);
    assert.equal(run.status, 0, run.stderr);
    const seen = run.changes
      .filter((c) => c.path.startsWith(dir))
      .map((c) => [c.kind, c.path.slice(dir.length), c.to?.slice(dir.length), c.data]);
    const all = JSON.stringify(run.changes.slice(0, 40), null, 1);
    assert.deepEqual(
      seen,
      [
        ['mkdir', '/d', undefined, undefined],
        ['open', '/d/f', undefined, undefined],
        ['write', '/d/f', undefined, 'a"b\\c\n\x01'],
        ['rename', '/d/f', '/d/g', undefined],
        ['unlink', '/d/g', undefined, undefined],
        ['rmdir', '/d', undefined, undefined],
      ],
      `in ${dir}; all changes seen:\n${all}\n${run.stderr}\nstrace wrote:\n${run.trace.slice(0, 4000)}`,
    );
    // Reading (cat) is not a change.
    assert.ok(!run.changes.some((c) => c.path === `${dir}/d/g` && c.kind === 'open'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('parseStrace() joins a call strace split across threads', () => {
  const text = [
    '7 write(3</sys/kernel/tracing/uprobe_events>, "-:g/e\\n", 6 <unfinished ...>',
    '8 openat(AT_FDCWD</x>, "y", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 EACCES (Permission denied)',
    '7 <... write resumed>)                  = 6',
  ].join('\n');
  assert.deepEqual(
    parseStrace(text).map((c) => [c.tid, c.kind, c.path, c.data ?? c.result]),
    [
      [8, 'open', '/x/y', '-1 EACCES (Permission denied)'],
      [7, 'write', '/sys/kernel/tracing/uprobe_events', '-:g/e\n'],
    ],
  );
});

test('parseStrace() names a path through /proc/self/fd/N by what the open of N named', () => {
  const text = [
    '7 openat(AT_FDCWD</>, "/sys/kernel/tracing", O_RDONLY|O_DIRECTORY|O_CLOEXEC) = 17</sys/kernel/tracing>',
    '7 mkdir("/proc/self/fd/17/instances/upscope_7", 0755) = 0',
    '7 rmdir("/proc/7/fd/17/instances/upscope_7") = 0',
    '7 mkdir("/proc/self/fd/99/x", 0755) = -1 ENOENT (No such file or directory)',
  ].join('\n');
  assert.deepEqual(
    parseStrace(text).map((c) => [c.kind, c.path]),
    [
      ['mkdir', '/sys/kernel/tracing/instances/upscope_7'],
      ['rmdir', '/sys/kernel/tracing/instances/upscope_7'],
      ['mkdir', '/proc/self/fd/99/x'],
    ],
  );
});

test('parseStrace() reads lines of a pid shorter than five digits, which strace pads', () => {
  const text = [
    '812   mkdir("/tmp/a", 0777)        = 0',
    '812   write(3</tmp/a/f>, "x", 1)   = 1',
    '12345 rmdir("/tmp/a")              = 0',
  ].join('\n');
  assert.deepEqual(
    parseStrace(text).map((c) => [c.tid, c.kind, c.path]),
    [
      [812, 'mkdir', '/tmp/a'],
      [812, 'write', '/tmp/a/f'],
      [12345, 'rmdir', '/tmp/a'],
    ],
  );
});
