// upscope-tests: apart python3 (calls.int's return probes on every function of python3 would show in its python3 stacks).
/**
 * `count --by ustack` against gdb's `bt` at the same function: whole stacks of code built
 * without frame pointers (C through a shared library, /usr/bin/python3, C++ with inlined
 * functions, Go, Rust), on the bpf engine (walked in the kernel) and the ptrace engine
 * (walked in user space); JIT frames named from node's perf map; a command that lives a few
 * milliseconds, and a process whose program was replaced on disk, named as gdb names them.
 */
import assert from 'node:assert/strict';
import {
  copyFileSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { assertSameStack, gdbStack, parseFrame } from '../helpers/gdb-stack.js';
import { compileGo } from '../helpers/go-build.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { type Spawned, spawnCollected, spawnUpscope } from '../helpers/spawned.js';
import { tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

/** A string matched as it is in a regular expression. */
function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
const ENGINES = ['bpf', 'ptrace'] as const;
type Engine = (typeof ENGINES)[number];

const running: Spawned[] = [];

afterEach(() => {
  for (const one of running.splice(0)) one.child.kill('SIGKILL');
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

interface StackRow {
  probe: string;
  key: string;
  pid: number;
  frames: string[];
  count: number;
}

/** `count --json --by ustack` of a command: the command's own account, and the rows. */
function countStacks(
  engine: Engine,
  command: string,
  spec: string | readonly string[],
  extra: readonly string[] = [],
): { account: { calls: number }; rows: StackRow[] } {
  const result = runCli([
    'count',
    '--json',
    '--command-output',
    'inherit',
    '--by',
    'ustack',
    '--engine',
    engine,
    ...extra,
    '-c',
    command,
    ...(typeof spec === 'string' ? [spec] : spec),
  ]);
  assert.equal(result.status, 0, result.stderr);
  const lines = result.stdout.split('\n');
  const account = JSON.parse(lines.find((line) => line.startsWith('{'))!);
  const rows: StackRow[] = JSON.parse(lines.filter((line) => line.startsWith('[')).at(-1)!);
  return { account, rows };
}

/** The one stack a target's single call path gives, with every hit counted in it. */
function onlyStack(rows: readonly StackRow[], calls: number): string[] {
  assert.equal(rows.length, 1, `one stack:\n${JSON.stringify(rows, null, 2)}`);
  assert.equal(rows[0]!.count, calls);
  const frames = rows[0]!.frames;
  // The folded key is the frames' names, outermost first.
  assert.equal(rows[0]!.key.split(';').length, frames.length);
  return frames;
}

function cBuild(): { app: string; lib: string } {
  const flags = ['-O2', '-fomit-frame-pointer'];
  const lib = compileProgram('unwind-lib', {
    flags: [...flags, '-shared', '-fPIC'],
    suffix: '.so',
  });
  const app = compileProgram('unwind-app', {
    flags,
    link: [lib, `-Wl,-rpath,${lib.slice(0, lib.lastIndexOf('/'))}`],
  });
  return { app, lib };
}

describe('count --by ustack: whole stacks without frame pointers, equal to gdb bt', () => {
  for (const engine of ENGINES) {
    test(`${engine}: C built with -O2 -fomit-frame-pointer, 4 frames deep through a shared library`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'gdb', 'readelf'] })) return;
      const { app } = cBuild();
      const gdb = gdbStack([app, '3', '0'], 'unwind_leaf');
      const { account, rows } = countStacks(engine, `${app} 200 0`, `${app}:unwind_leaf`);
      const frames = onlyStack(rows, account.calls);
      assertSameStack(frames, gdb);
      // main -> unwind_top -> unwind_lib_mid (the library) -> unwind_leaf, named.
      assert.deepEqual(
        frames.slice(0, 4).map((f) => parseFrame(f).name),
        ['unwind_leaf', 'unwind_lib_mid', 'unwind_top', 'main'],
      );
    });

    test(`${engine}: /usr/bin/python3 running a script, every native frame gdb shows`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gdb', 'readelf', '/usr/bin/python3'] })) {
        return;
      }
      const script = join(PROGRAMS, 'unwind-python.py');
      const gdb = gdbStack(['/usr/bin/python3', script, '3'], 'getppid', {
        first: 'Py_BytesMain',
      });
      const { account, rows } = countStacks(
        engine,
        `/usr/bin/python3 ${script} 100`,
        'libc:getppid',
      );
      assertSameStack(onlyStack(rows, account.calls), gdb);
    });

    test(`${engine}: C++ with inlined functions (--inlines: a frame of their own each, as gdb shows them)`, (t) => {
      if (!requireHost(t, { root: true, commands: ['g++', 'gdb', 'readelf'] })) return;
      const app = compileProgram('unwind-inline', { flags: ['-O2'] });
      const gdb = gdbStack([app, '3'], "'calc::unwind_leaf'");
      assert.ok(gdb.filter((f) => f.inline).length >= 2, 'gdb shows the two inlined functions');
      const { account, rows } = countStacks(engine, `${app} 100`, `${app}:calc::unwind_leaf`, [
        '--inlines',
      ]);
      assertSameStack(onlyStack(rows, account.calls), gdb, { inlines: true });
    });

    test(`${engine}: Go, equal to gdb bt`, (t) => {
      if (!requireHost(t, { root: true, commands: ['go', 'gdb', 'readelf'] })) return;
      const app = compileGo('unwind-go');
      const gdb = gdbStack([app, '3'], "'main.leaf'");
      const { account, rows } = countStacks(engine, `${app} 100`, `${app}:main.leaf`);
      assertSameStack(onlyStack(rows, account.calls), gdb);
    });

    test(`${engine}: Rust built with -O, equal to gdb bt`, (t) => {
      const rustc = findRustc();
      if (!requireHost(t, { root: true, commands: ['gdb', 'readelf', rustc ?? 'rustc'] })) {
        return;
      }
      const app = compileRust(rustc!, 'unwind-rust', ['-O']);
      const mangled = tool('nm', [app])
        .split('\n')
        .map((line) => line.split(' ').at(-1)!)
        .find((name) => /^_ZN11unwind_rust4leaf17h[0-9a-f]{16}E$/.test(name));
      assert.ok(mangled !== undefined, 'nm shows unwind_rust::leaf');
      const gdb = gdbStack([app, '3'], mangled);
      const { account, rows } = countStacks(engine, `${app} 100`, `${app}:unwind_rust::leaf`);
      assertSameStack(onlyStack(rows, account.calls), gdb);
    });

    test(`${engine}: a command that lives a few milliseconds: every frame named`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'gdb', 'readelf'] })) return;
      const { app } = cBuild();
      const gdb = gdbStack([app, '3', '0'], 'unwind_leaf');
      // 5 ms, 20 calls, 5 ms: gone before a memory map read every 25 ms would see it.
      const { account, rows } = countStacks(engine, `${app} 20 5`, `${app}:unwind_leaf`);
      const frames = onlyStack(rows, account.calls);
      for (const frame of frames) {
        const shown = parseFrame(frame);
        assert.ok(shown.name !== undefined && shown.object !== undefined, `named: ${frame}`);
      }
      assertSameStack(frames, gdb);
    });

    test(`${engine}: a command that is a wrapper script, which execs env, which execs the program: every frame named, equal to gdb bt`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'gdb', 'readelf', 'sh', 'env'] })) {
        return;
      }
      const { app } = cBuild();
      const gdb = gdbStack([app, '3', '0'], 'unwind_leaf');
      const dir = mkdtempSync(join(tmpdir(), 'upscope-wrapper-'));
      try {
        // Three execs after the launcher's: the script's interpreter, env, the program (that
        // lives a few milliseconds: gone before the walker would meet its files by itself).
        const script = join(dir, 'run.sh');
        writeFileSync(script, `#!/bin/sh\nexec env WRAPPED=1 ${app} 20 5\n`, { mode: 0o755 });
        const { account, rows } = countStacks(engine, script, `${app}:unwind_leaf`);
        const frames = onlyStack(rows, account.calls);
        for (const frame of frames) {
          const shown = parseFrame(frame);
          assert.ok(shown.name !== undefined && shown.object !== undefined, `named: ${frame}`);
        }
        assertSameStack(frames, gdb);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test(`${engine}: -p on a program replaced on disk while it runs: the names gdb gives`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'gdb', 'readelf'] })) return;
      const { app } = cBuild();
      const dir = mkdtempSync(join(tmpdir(), 'upscope-replaced-'));
      try {
        const copy = join(dir, 'app');
        copyFileSync(app, copy);
        const target = spawnCollected(copy, ['-1', '0']);
        running.push(target);
        // Another program takes the path: its symbols are not the running one's.
        const other = compileProgram('bpf-stacks', { flags: ['-O2'] });
        copyFileSync(other, `${copy}.new`);
        renameSync(`${copy}.new`, copy);
        const gdb = gdbStack([], 'unwind_leaf', { pid: target.pid });
        const counting = spawnUpscope([
          'count',
          '--json',
          '--by',
          'ustack',
          '--engine',
          engine,
          '--duration',
          '1',
          '-p',
          String(target.pid),
          `${copy}:unwind_leaf`,
        ]);
        running.push(counting);
        const { code } = await counting.exited;
        assert.equal(code, 0, counting.stderr);
        const rows: StackRow[] = JSON.parse(counting.stdout.trim().split('\n').at(-1)!);
        assert.ok(rows.length >= 1, counting.stdout);
        for (const row of rows) assertSameStack(row.frames, gdb);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  for (const engine of ENGINES) {
    test(`${engine}: a stack deeper than the 62 frames kept ends with a depth-limit frame`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram('unwind-deep', { flags: ['-O2', '-fomit-frame-pointer'] });
      const { account, rows } = countStacks(engine, `${app} 5 100`, `${app}:unwind_deep_leaf`);
      const frames = onlyStack(rows, account.calls);
      assert.equal(frames.length, 63);
      assert.equal(frames.at(-1), '[stack cut: depth limit]');
      assert.equal(parseFrame(frames[0]!).name, 'unwind_deep_leaf');
      for (const frame of frames.slice(1, -1))
        assert.equal(parseFrame(frame).name, 'unwind_descend');
    });

    test(`${engine}: return addresses replaced by pending return probes are put back (whole stacks, as without them)`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'gdb', 'readelf'] })) return;
      const { app } = cBuild();
      const gdb = gdbStack([app, '3', '0'], 'unwind_leaf');
      // unwind_top's and main's return addresses are the trampoline's while unwind_leaf runs.
      const { account, rows } = countStacks(engine, `${app} 100 0`, [
        `r:${app}:unwind_top`,
        `r:${app}:main`,
        `${app}:unwind_leaf`,
      ]);
      const leaf = rows.filter((row) => row.probe === 'unwind_leaf');
      assert.equal(leaf.length, 1, JSON.stringify(rows, null, 2));
      assert.equal(leaf[0]!.count, account.calls);
      assertSameStack(leaf[0]!.frames, gdb);
      // The return probes' own stacks: the caller's, from the real return address on.
      const returns = rows.find((row) => row.probe === 'r:unwind_top');
      assert.equal(returns?.count, account.calls);
      assert.equal(parseFrame(returns!.frames[0]!).name, 'main');
    });
  }

  test('resolve -p PID ADDR names JIT code from the perf map as it grows', async (t) => {
    if (!requireHost(t, {})) return;
    const script = join(PROGRAMS, 'unwind-hot.js');
    const node = spawnCollected(process.execPath, ['--perf-basic-prof', script, '4000000']);
    running.push(node);
    const map = `/tmp/perf-${node.pid}.map`;
    // V8 writes the map as it compiles: wait for hot()'s optimised code (the truth here).
    let line: RegExpExecArray | null = null;
    for (let i = 0; i < 300 && line === null; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      try {
        line = /^([0-9a-f]+) ([0-9a-f]+) (JS:\*hot .*)$/m.exec(readFileSync(map, 'utf8'));
      } catch {
        // not written yet
      }
    }
    assert.ok(line !== null, `${map} names hot()'s optimised code`);
    const address = BigInt(`0x${line[1]}`) + 0x10n;
    const result = runCli(['resolve', '-p', String(node.pid), `0x${address.toString(16)}`]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, new RegExp(`-> {2}${escapeRegExp(line[3]!)}\\+0x10\\n`));
    assert.match(result.stdout, new RegExp(`JIT code, named by .*perf-${node.pid}\\.map`));
    node.child.kill('SIGKILL');
    rmSync(map, { force: true });
  });

  test('bpf: node --perf-basic-prof, the hot JavaScript function named from its perf map', (t) => {
    if (!requireHost(t, { root: true })) return;
    const script = join(PROGRAMS, 'unwind-hot.js');
    const { account, rows } = countStacks(
      'bpf',
      `${process.execPath} --perf-basic-prof ${script} 2000`,
      'libc:getppid',
    );
    // node wrote its perf map in /tmp: the test leaves nothing there.
    for (const pid of new Set(rows.map((row) => row.pid))) {
      rmSync(`/tmp/perf-${pid}.map`, { force: true });
    }
    const total = rows.reduce((sum, row) => sum + row.count, 0);
    assert.equal(total, account.calls, 'every call counted');
    // Once compiled, hot() is JIT code: named as V8 writes it (JS:*hot, JS:^hot ...).
    const hot = rows.filter((row) =>
      row.frames.some((f) => /^JS:[*^~+]?hot .*unwind-hot\.js:\d+:\d+/.test(f)),
    );
    const inHot = hot.reduce((sum, row) => sum + row.count, 0);
    assert.ok(
      inHot * 2 > total,
      `most calls are from JIT code of hot():\n${JSON.stringify(rows.slice(0, 3), null, 2)}`,
    );
    for (const row of hot) {
      assert.ok(!row.key.split(';').some((name) => /^0x[0-9a-f]+$/.test(name)), row.key);
    }
  });
});
