// Which processes get a -p run's breakpoints (bpf engine): the followed process and the
// children it forks, never another process that maps the same file, nor upscope itself. The
// truth is each process's own memory (/proc/PID/mem): a kernel uprobe is an int3 (0xcc)
// written there, where the file (readelf, nm) has the function's first byte.
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, test } from 'node:test';
import { COEXIST_TARGETS } from '../helpers/coexist-targets.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { findRustc } from '../helpers/rustc.js';
import { ended, type Spawned, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

const STARTED = /^(Counting|Timing|Histogram of|Tracing) \d+ /m;

/** The file offset of function `name` (nm's value, readelf's segments). */
function fileOffsetOf(path: string, name: string, demangle = false): bigint {
  const nm = tool('nm', [...(demangle ? ['-C'] : []), '--defined-only', path]);
  const line = nm.split('\n').find((l) => l.split(' ').slice(2).join(' ') === name);
  if (line === undefined) throw new Error(`nm finds no ${name} in ${path}`);
  return readelfFileOffset(path, BigInt(`0x${line.split(' ')[0]}`));
}

function dynamicOffsetOf(path: string, name: string): bigint {
  const line = tool('nm', ['-D', '--defined-only', path])
    .split('\n')
    .find((l) => l.endsWith(` ${name}`));
  if (line === undefined) throw new Error(`nm -D finds no ${name} in ${path}`);
  return readelfFileOffset(path, BigInt(`0x${line.split(' ')[0]}`));
}

/**
 * The first bytes of a function (at file offset `offset` of `path`) in process `pid`'s
 * memory, as hex (undefined: not mapped). An entry probe sits on one of them (on Go, after
 * the stack check).
 */
function bytesIn(pid: number | 'self', path: string, offset: bigint): string | undefined {
  for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(\S.*)$/.exec(line);
    if (m === null || m[4] !== path) continue;
    const [start, end, mapped] = [BigInt(`0x${m[1]}`), BigInt(`0x${m[2]}`), BigInt(`0x${m[3]}`)];
    if (offset < mapped || offset >= mapped + (end - start)) continue;
    return read(`/proc/${pid}/mem`, start + offset - mapped);
  }
  return undefined;
}

const WINDOW = 24;

function read(path: string, at: bigint): string {
  const fd = openSync(path, 'r');
  try {
    const bytes = Buffer.alloc(WINDOW);
    readSync(fd, bytes, 0, WINDOW, Number(at));
    return bytes.toString('hex');
  } finally {
    closeSync(fd);
  }
}

/** Whether `bytes` (hex) differ from the file's `original` by int3s alone, one at least. */
function probedBytes(bytes: string | undefined, original: string): boolean {
  if (bytes === undefined || bytes === original) return false;
  for (let i = 0; i < bytes.length; i += 2) {
    const b = bytes.slice(i, i + 2);
    if (b !== original.slice(i, i + 2) && b !== 'cc') return false;
  }
  return true;
}

async function stopAll(...processes: (Spawned | undefined)[]) {
  for (const p of processes) p?.child.kill('SIGKILL');
  for (const p of processes) if (p !== undefined) await ended(p);
}

for (const target of COEXIST_TARGETS) {
  test(`count -p on ${target.language}: the process's breakpoints are its own; another process running the same file is left alone; the count is the program's own`, async (t) => {
    if (!requireHost(t, { root: true, commands: target.needs })) return;
    if (target.language === 'Rust' && findRustc() === undefined) {
      if (STRICT) assert.fail('Cannot run test under CI: needs rustc');
      t.skip('needs rustc');
      return;
    }
    const app = target.build();
    const offset = fileOffsetOf(app, target.language === 'C++' ? target.probe : target.fn, true);
    const original = read(app, offset);
    const dir = mkdtempSync(join(tmpdir(), 'upscope-scope-'));
    const [go, stop] = [join(dir, 'go'), join(dir, 'stop')];
    const probed = spawnCollected(app, [go, stop]);
    const other = spawnCollected(app, [go, stop]);
    let count: Spawned | undefined;
    try {
      await waitFor(probed, /^ready \d+$/m, 'stdout');
      await waitFor(other, /^ready \d+$/m, 'stdout');
      count = spawnUpscope(['count', '--json', '-p', String(probed.pid), `${app}:${target.fn}`]);
      await waitFor(count, STARTED, 'stderr', 60_000);
      const own = bytesIn(probed.pid, app, offset);
      assert.ok(probedBytes(own, original), `the probed process has the breakpoint: ${own}`);
      assert.equal(bytesIn(other.pid, app, offset), original, 'the other one has its own bytes');
      writeFileSync(go, '');
      await new Promise((r) => setTimeout(r, 500));
      writeFileSync(stop, '');
      const done = await waitFor(probed, /^calls (\d+)/m, 'stdout');
      assert.equal((await ended(probed)).code, 0, probed.stderr);
      assert.equal((await ended(other)).code, 0, other.stderr);
      assert.equal((await ended(count)).code, 0, count.stderr);
      const rows = JSON.parse(count.stdout.trim().split('\n').at(-1)!) as { count: number }[];
      assert.equal(
        rows.reduce((sum, r) => sum + r.count, 0),
        Number(done[1]),
        count.stdout,
      );
    } finally {
      await stopAll(probed, other, count);
    }
  });
}

test("count -p on a node process, of node's own functions: upscope's node and every other node keep their bytes", async (t) => {
  if (!requireHost(t, { root: true })) return;
  const node = process.execPath;
  const path = tool('readlink', ['-f', node]).trim();
  const offset = dynamicOffsetOf(path, 'uv_now');
  const original = read(path, offset);
  const probed = spawnCollected(node, ['-e', 'console.log("ready"); setInterval(() => {}, 1)']);
  let count: Spawned | undefined;
  try {
    await waitFor(probed, /^ready$/m, 'stdout');
    count = spawnUpscope(['count', '-p', String(probed.pid), `${path}:uv_now`]);
    await waitFor(count, STARTED, 'stderr', 60_000);
    const own = bytesIn(probed.pid, path, offset);
    assert.ok(probedBytes(own, original), `the probed node has the breakpoint: ${own}`);
    assert.equal(bytesIn(count.pid, path, offset), original, "upscope's own node does not");
    assert.equal(bytesIn('self', path, offset), original, 'nor does this test’s node');
    count.child.kill('SIGINT');
    const end = await ended(count);
    assert.deepEqual(end, { code: 0, signal: null }, count.stderr);
    assert.match(count.stdout, /\d+\s+uv_now/);
    assert.equal(bytesIn(probed.pid, path, offset), original, 'detached: the bytes are back');
  } finally {
    await stopAll(probed, count);
  }
});

test('count -p --by pid: children forked after the start are counted, each under its own pid, where another process runs the same program', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('scope-forks', { flags: ['-O2'] });
  const offset = fileOffsetOf(app, 'scope_work');
  const dir = mkdtempSync(join(tmpdir(), 'upscope-scope-'));
  const go = join(dir, 'go');
  const parent = spawnCollected(app, [go, '3', '1000']);
  // Another process of the same program: the file is shared, so the links are per process.
  const other = spawnCollected(app, [join(dir, 'never'), '0', '0']);
  let count: Spawned | undefined;
  try {
    await waitFor(parent, /^ready \d+$/m, 'stdout');
    await waitFor(other, /^ready \d+$/m, 'stdout');
    count = spawnUpscope([
      'count',
      '--by',
      'pid',
      '--json',
      '-p',
      String(parent.pid),
      `${app}:scope_work`,
    ]);
    await waitFor(count, STARTED, 'stderr', 60_000);
    writeFileSync(go, '');
    await waitFor(parent, /^done$/m, 'stdout');
    assert.equal(bytesIn(other.pid, app, offset), read(app, offset), 'the other is left alone');
    count.child.kill('SIGINT');
    assert.equal((await ended(count)).code, 0, count.stderr);
    const said = [...parent.stdout.matchAll(/^pid=(\d+) calls=(\d+)$/gm)].map((m) => ({
      key: Number(m[1]),
      count: Number(m[2]),
    }));
    assert.equal(said.length, 3, parent.stdout);
    const rows = JSON.parse(count.stdout.trim().split('\n').at(-1)!) as {
      key: number;
      count: number;
    }[];
    assert.deepEqual(
      rows.map(({ key, count }) => ({ key, count })).sort((a, b) => a.key - b.key),
      said.sort((a, b) => a.key - b.key),
      count.stdout,
    );
  } finally {
    await stopAll(parent, other, count);
  }
});

test("count -c on libc: the command's libc has the breakpoint; every other process's libc (this test's node) keeps its bytes", async (t) => {
  if (!requireHost(t, { root: true, commands: ['sleep'] })) return;
  const libc = readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .map((line) => /\s(\/\S*libc\.so\.6)$/.exec(line)?.[1])
    .find((path) => path !== undefined);
  assert.ok(libc, 'this node maps libc');
  const offset = dynamicOffsetOf(libc, 'clock_nanosleep@@GLIBC_2.17');
  const original = read(libc, offset);
  const count = spawnUpscope(['count', '-c', 'sleep 3', `${libc}:clock_nanosleep`]);
  try {
    await waitFor(count, STARTED, 'stderr', 60_000);
    assert.equal(bytesIn('self', libc, offset), original, 'this node keeps its bytes');
    assert.equal(bytesIn(count.pid, libc, offset), original, 'so does upscope');
    const end = await ended(count);
    assert.equal(end.code, 0, count.stderr);
    assert.match(count.stdout, /^1\s+clock_nanosleep$/m, 'sleep 3 sleeps once');
  } finally {
    await stopAll(count);
  }
});
