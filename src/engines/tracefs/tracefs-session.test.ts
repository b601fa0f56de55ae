import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, test } from 'node:test';
import { isProbeError } from '../../errors/index.js';
import { TracefsSession, type TracefsSite } from './tracefs-session.js';

// A plain directory standing in for tracefs: the session only opens, appends, reads and
// makes directories, so the files it writes and the kernel texts it reads can be checked
// without root. The kernel texts below were recorded from tracefs on Linux 6.18.

let dir = '';

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'upscope-fake-tracefs-'));
  mkdirSync(join(dir, 'instances'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function site(symbol: string, fileOffset: bigint, kind: 'entry' | 'return' = 'entry'): TracefsSite {
  return {
    kind,
    target: { path: '/bin/app' },
    fileOffset,
    usdt: undefined,
    fetches: [],
    symbol,
    symbolOffset: 0n,
    vaddr: fileOffset,
  };
}

test('define() appends one line per site and keeps what uprobe_events already held', () => {
  const foreign = 'p:othertool/x /bin/true:0x0000000000001000\n';
  const ours = 'p:upscope_42/malloc /bin/app:0x0000000000000100\n';
  writeFileSync(join(dir, 'uprobe_events'), foreign + ours);
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  const defined = session.define([
    site('malloc', 0x1139n),
    site('malloc', 0x1139n, 'return'),
    site('free', 0x1200n),
  ]);
  assert.deepEqual(
    defined.map((e) => `${e.group}/${e.event}`),
    ['upscope_42/malloc_2', 'upscope_42/malloc_3', 'upscope_42/free'],
  );
  assert.equal(
    readFileSync(join(dir, 'uprobe_events'), 'utf8'),
    `${foreign}${ours}${[
      'p:upscope_42/malloc_2 /bin/app:0x1139',
      'r:upscope_42/malloc_3 /bin/app:0x1139',
      'p:upscope_42/free /bin/app:0x1200',
    ].join('\n')}\n`,
  );
  session.close();
  const tail = readFileSync(join(dir, 'uprobe_events'), 'utf8').split('\n').slice(-4);
  assert.deepEqual(tail, [
    '-:upscope_42/malloc_2',
    '-:upscope_42/malloc_3',
    '-:upscope_42/free',
    '',
  ]);
  // A second close() has nothing left to remove.
  const before = readFileSync(join(dir, 'uprobe_events'), 'utf8');
  session.close();
  assert.equal(readFileSync(join(dir, 'uprobe_events'), 'utf8'), before);
});

test('define() turns a refusal into ERR_KERNEL_REFUSED_PROBE with error_log message and caret', () => {
  // A kernel file that refuses every write stands in for a refusing uprobe_events.
  symlinkSync('/proc/version', join(dir, 'uprobe_events'));
  const line = 'p:upscope_42/tfs_twice /bin/app:0x1139';
  writeFileSync(
    join(dir, 'error_log'),
    [
      '[ 2724.777204] trace_uprobe: error: Invalid register name',
      '  Command: p:zz_probe_test/x /bin/true:0x1000 x=%nosuchreg',
      '                                                ^',
      '[ 2725.000001] trace_uprobe: error: Failed to find the given file',
      `  Command: ${line}`,
      `${' '.repeat(34)}^`,
      '',
    ].join('\n'),
  );
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  assert.throws(
    () => session.define([site('tfs_twice', 0x1139n)]),
    (err: unknown) => {
      assert.ok(isProbeError(err));
      assert.equal(err.code, 'ERR_KERNEL_REFUSED_PROBE');
      assert.equal(
        err.message,
        'Cannot define uprobe event "upscope_42/tfs_twice": Failed to find the given file',
      );
      // The kernel's caret is 34 - 11 = 23 characters into the command: under "/bin/app".
      assert.equal(line.slice(23, 31), '/bin/app');
      assert.deepEqual(err.hints, [`Line written: ${line}`, `${' '.repeat(14 + 23)}^`]);
      assert.equal(err.details['line'], line);
      return true;
    },
  );
  assert.deepEqual(session.events, []);
});

test('define() says so when error_log has no entry for the refused line', () => {
  symlinkSync('/proc/version', join(dir, 'uprobe_events'));
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  assert.throws(
    () => session.define([site('f', 0x10n)]),
    (err: unknown) => {
      assert.ok(isProbeError(err));
      assert.equal(err.code, 'ERR_KERNEL_REFUSED_PROBE');
      assert.match(
        err.message,
        /^Cannot define uprobe event "upscope_42\/f": the kernel answered E\w+ and error_log has no entry for it$/,
      );
      assert.equal(err.hints.length, 1);
      return true;
    },
  );
});

test('define() refuses a path with a line break before writing anything', () => {
  writeFileSync(join(dir, 'uprobe_events'), '');
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  const bad = { ...site('f', 0x10n), target: { path: '/tmp/x\n-:othertool/x' } };
  assert.throws(() => session.define([site('g', 0x20n), bad]), /line break/);
  // The good event of the same call was removed again.
  assert.equal(
    readFileSync(join(dir, 'uprobe_events'), 'utf8'),
    'p:upscope_42/g /bin/app:0x20\n-:upscope_42/g\n',
  );
});

test('stats() sums per-CPU ring-buffer counters and reads hits in uprobe_events order', () => {
  writeFileSync(join(dir, 'uprobe_events'), '');
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  session.define([site('tfs_add', 0x1139n), site('tfs_add', 0x1139n, 'return')]);
  const instance = session.createInstance();
  assert.equal(instance, join(dir, 'instances', 'upscope_42'));
  assert.equal(readFileSync(join(instance, 'trace_clock'), 'utf8'), 'mono');
  const stats = (entries: number, overrun: number, dropped: number, read: number) =>
    [
      `entries: ${entries}`,
      `overrun: ${overrun}`,
      'commit overrun: 0',
      'bytes: 0',
      'oldest event ts:  2625.378170',
      'now ts:  2724.812552',
      `dropped events: ${dropped}`,
      `read events: ${read}`,
      '',
    ].join('\n');
  for (const [cpu, text] of [
    [0, stats(3, 1, 0, 10)],
    [1, stats(4, 0, 2, 5)],
  ] as const) {
    mkdirSync(join(instance, 'per_cpu', `cpu${cpu}`), { recursive: true });
    writeFileSync(join(instance, 'per_cpu', `cpu${cpu}`, 'stats'), text);
  }
  // The kernel pads offsets in uprobe_events; uprobe_profile names events without the group.
  writeFileSync(
    join(dir, 'uprobe_events'),
    [
      'p:othertool/tfs_add /bin/other:0x0000000000001000',
      'p:upscope_42/tfs_add /bin/app:0x0000000000001139',
      'r:upscope_42/tfs_add_2 /bin/app:0x0000000000001139',
      '',
    ].join('\n'),
  );
  writeFileSync(
    join(dir, 'uprobe_profile'),
    [
      `  /bin/other tfs_add${' '.repeat(40)}${'7'.padStart(15)}`,
      `  /bin/app tfs_add${' '.repeat(40)}${'75'.padStart(15)}`,
      `  /bin/app tfs_add_2${' '.repeat(40)}${'74'.padStart(15)}`,
      '',
    ].join('\n'),
  );
  const result = session.stats();
  assert.deepEqual(
    result.cpus.map((c) => [c.cpu, c.entries, c.overrun, c.dropped, c.read]),
    [
      [0, 3, 1, 0, 10],
      [1, 4, 0, 2, 5],
    ],
  );
  assert.deepEqual([result.entries, result.overrun, result.dropped, result.read], [7, 1, 2, 15]);
  assert.deepEqual(result.events, [
    { event: 'tfs_add', hits: 75, misses: undefined },
    { event: 'tfs_add_2', hits: 74, misses: undefined },
  ]);
});

// Tests side by side define and remove events all the time: between the reads of the two
// files another tool's events came and went, and the stats matched as a whole failed a run.
test("stats() matches events by name: another tool's events that came or went between the reads do not matter", () => {
  writeFileSync(join(dir, 'uprobe_events'), '');
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  session.define([site('tfs_add', 0x1139n), site('tfs_sub', 0x1200n)]);
  /** uprobe_profile as the kernel writes it: path, event, hits. */
  const profile = (...rows: [string, string, number][]) =>
    writeFileSync(
      join(dir, 'uprobe_profile'),
      [
        ...rows.map(
          ([path, event, hits]) =>
            `  ${path} ${event}${' '.repeat(40)}${String(hits).padStart(15)}`,
        ),
        '',
      ].join('\n'),
    );
  writeFileSync(
    join(dir, 'uprobe_events'),
    [
      'p:othertool/gone /bin/other:0x0000000000001000',
      'p:othertool/tfs_add /bin/other:0x0000000000001000',
      'p:upscope_42/tfs_add /bin/app:0x0000000000001139',
      'p:upscope_42/tfs_sub /bin/app:0x0000000000001200',
      '',
    ].join('\n'),
  );
  // `gone` was removed and `new` added before uprobe_profile was read.
  profile(
    ['/bin/other', 'tfs_add', 7],
    ['/bin/app', 'tfs_add', 75],
    ['/bin/app', 'tfs_sub', 3],
    ['/bin/other', 'new', 1],
  );
  assert.deepEqual(session.stats().events, [
    { event: 'tfs_add', hits: 75, misses: undefined },
    { event: 'tfs_sub', hits: 3, misses: undefined },
  ]);
  // An event of one of this session's names came between the reads every time: which is
  // which cannot be told, and the hits are unknown (none), not another's, and not a failure.
  profile(
    ['/bin/other', 'tfs_add', 7],
    ['/bin/app', 'tfs_add', 75],
    ['/bin/app', 'tfs_sub', 3],
    ['/bin/third', 'tfs_add', 1],
  );
  assert.deepEqual(session.stats().events, []);
});

test('filterPids() writes the pid list and event-fork, and rejects what is not a pid', () => {
  writeFileSync(join(dir, 'uprobe_events'), '');
  const session = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  const instance = session.createInstance();
  mkdirSync(join(instance, 'options'));
  session.filterPids([10, 11], { followForks: true });
  assert.equal(readFileSync(join(instance, 'set_event_pid'), 'utf8'), '10 11');
  assert.equal(readFileSync(join(instance, 'options', 'event-fork'), 'utf8'), '1');
  session.filterPids([], { followForks: false });
  assert.equal(readFileSync(join(instance, 'set_event_pid'), 'utf8'), '');
  assert.equal(readFileSync(join(instance, 'options', 'event-fork'), 'utf8'), '0');
  assert.throws(() => session.filterPids([-1], { followForks: false }), /"-1" is not a pid/);
});

test('a second session of the same owner gets the instance upscope_<pid>_2', () => {
  const first = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  const second = new TracefsSession({ tracefs: dir, ownerPid: 42 });
  assert.equal(first.createInstance(), join(dir, 'instances', 'upscope_42'));
  assert.equal(second.createInstance(), join(dir, 'instances', 'upscope_42_2'));
  assert.equal(second.createInstance(), join(dir, 'instances', 'upscope_42_2'));
});
