// Probes by name on functions only a separate debug file names: a program split into a
// stripped file and a debug file found by .gnu_debuglink (C, C++, Rust), and libc's own
// functions from libc6-dbg (found by build-id). Every engine counts exactly what the target
// counts itself (or gdb counts, for libc), and stack frames are named as gdb's `bt` names them.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { eventsPerProbe, runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { type Spawned, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { buildIdOf, splitDebug, withMiniDebugInfo } from '../helpers/split-debug.js';
import { tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

const ROUNDS = 7;
const running: Spawned[] = [];

afterEach(() => {
  for (const r of running.splice(0)) r.child.kill('SIGKILL');
  assert.deepEqual(leftovers(), [], 'no upscope probes left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no traced or zombie children');
});

/** The target's own counts, from its "name count" lines. */
function ownCounts(stdout: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    const m = /^(\S+) (\d+)$/.exec(line);
    if (m !== null) counts[m[1]!] = Number(m[2]);
  }
  return counts;
}

/** Events per probe of `trace --json`. */
function traced(engine: string, command: string, specs: string[]): Record<string, number> {
  const result = runCli([
    'trace',
    '--engine',
    engine,
    '--json',
    '--command-output',
    'inherit',
    '-c',
    command,
    ...specs,
  ]);
  assert.equal(result.status, 0, result.stderr);
  return eventsPerProbe(result.stdout);
}

/** Hits per probe of `count --json`. */
function counted(engine: string, command: string, specs: string[]): Record<string, number> {
  const result = runCli([
    'count',
    '--engine',
    engine,
    '--json',
    '--command-output',
    'inherit',
    '-c',
    command,
    ...specs,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const json = result.stdout.split('\n').filter((l) => l.startsWith('['));
  const rows: { probe: string; count: number }[] = JSON.parse(json.at(-1)!);
  return Object.fromEntries(rows.map((row) => [row.probe, row.count]));
}

const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;

describe('a program split by .gnu_debuglink: probes by the names only its debug file has', () => {
  for (const engine of ENGINES) {
    test(`C, trace --engine ${engine}: one event per call of each static function`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc', 'objcopy', 'strip'] }))
        return;
      const { app } = splitDebug(compileProgram('split-names', { flags: ['-O2'] }), 'debuglink');
      const own = ownCounts(execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }));
      assert.equal(own['leaf_work'], ROUNDS, 'the target counts its calls');
      const seen = traced(engine, `${app} ${ROUNDS}`, [`${app}:leaf_work`, `${app}:middle_*`]);
      assert.deepEqual(seen, { leaf_work: own['leaf_work'], middle_step: own['middle_step'] });
    });
  }

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`C++, count --engine ${engine}: demangled names from the debug file, exact counts`, (t) => {
      if (!requireHost(t, { root: engine === 'bpf', commands: ['g++', 'objcopy', 'strip'] }))
        return;
      const { app } = splitDebug(compileProgram('cxx-names', { flags: ['-O2'] }), 'debuglink');
      const own = ownCounts(execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }));
      const counts = counted(engine, `${app} ${ROUNDS}`, [
        `${app}:'(anonymous namespace)::helper'`,
        `${app}:'shapes::Box<*>::get'`,
        `${app}:shapes::inner::deeper::deep`,
      ]);
      assert.deepEqual(counts, {
        '(anonymous namespace)::helper(long)': own['helper'],
        'shapes::Box<int>::get() const': own['box_get_int'],
        'shapes::Box<long>::get() const': own['box_get_long'],
        'shapes::inner::deeper::deep(long, long)': own['deep'],
      });
    });
  }

  test('C++, trace --engine tracefs: demangled names from the debug file, exact counts', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++', 'objcopy', 'strip'] })) return;
    const { app } = splitDebug(compileProgram('cxx-names', { flags: ['-O2'] }), 'debuglink');
    const own = ownCounts(execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }));
    const seen = traced('tracefs', `${app} ${ROUNDS}`, [`${app}:shapes::Counter::method`]);
    assert.deepEqual(seen, {
      'shapes::Counter::method(int)': own['method_int'],
      'shapes::Counter::method(double)': own['method_double'],
      'shapes::Counter::method(char const*) const': own['method_ptr'],
    });
  });

  for (const engine of ENGINES) {
    test(`Rust, --engine ${engine}: functions named by their paths from the debug file`, (t) => {
      const rustc = findRustc();
      if (rustc === undefined) {
        if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['objcopy', 'strip'] })) return;
      const { app } = splitDebug(
        compileRust(rustc, 'rust-names', ['-C', 'opt-level=1']),
        'debuglink',
      );
      // probed and bump start with a lock-prefixed add, which only the ptrace engine can probe;
      // main runs once.
      if (engine === 'ptrace') {
        const counts = counted(engine, `${app} ${ROUNDS}`, [
          `${app}:rust_names::shapes::inner::probed`,
          `${app}:'*Counter<u64>::bump'`,
        ]);
        assert.deepEqual(counts, {
          'rust_names::shapes::inner::probed': ROUNDS,
          'rust_names::shapes::Counter<u64>::bump': ROUNDS,
        });
      } else {
        assert.deepEqual(traced(engine, `${app} ${ROUNDS}`, [`${app}:rust_names::main`]), {
          'rust_names::main': 1,
        });
      }
    });
  }

  test('count --by ustack -p: frames of the program and of libc named as gdb names them', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objcopy', 'strip', 'gdb'] })) return;
    const full = compileProgram('split-names', { flags: ['-O2', '-fno-omit-frame-pointer'] });
    const { app } = splitDebug(full, 'debuglink');
    const name = app.slice(app.lastIndexOf('/') + 1);
    // gdb, on the split program (it finds the debug file the same way), at leaf_work.
    const bt = tool('gdb', [
      '-batch',
      '-nx',
      '-ex',
      'set backtrace past-main on',
      '-ex',
      'break leaf_work',
      '-ex',
      `run ${ROUNDS} 0`,
      '-ex',
      'bt',
      app,
    ]);
    const gdbFrames = [...bt.matchAll(/^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(/gm)].map((m) => m[1]!);
    assert.deepEqual(gdbFrames.slice(0, 4), [
      'leaf_work',
      'middle_step',
      'main',
      '__libc_start_call_main',
    ]);
    const target = spawnCollected(app, [String(ROUNDS), '0', 'wait']);
    running.push(target);
    await waitFor(target, /^ready$/m, 'stdout');
    const cli = spawnUpscope([
      'count',
      '--json',
      '--by',
      'ustack',
      '-p',
      String(target.pid),
      `${app}:leaf_work`,
    ]);
    running.push(cli);
    await waitFor(cli, /^Counting /m);
    target.child.kill('SIGUSR1');
    const ended = await cli.exited;
    assert.equal(ended.code, 0, cli.stderr);
    const rows: { frames: string[]; count: number }[] = JSON.parse(
      cli.stdout.trim().split('\n').at(-1)!,
    );
    assert.equal(rows.length, 1, cli.stdout);
    assert.equal(rows[0]!.count, ROUNDS);
    const ours = rows[0]!.frames.slice(0, 4).map((f) => /^([^+ ]+)/.exec(f)![1]);
    assert.deepEqual(ours, gdbFrames.slice(0, 4));
    assert.equal(rows[0]!.frames[0], `leaf_work (${name})`);
    assert.match(rows[0]!.frames[3]!, /^__libc_start_call_main\+0x[0-9a-f]+ \(libc\.so\.6\)$/);
  });
});

describe('a program stripped with MiniDebugInfo (.gnu_debugdata, as Fedora and RHEL ship them): its static functions by name', () => {
  test("list names them where nm names them in the unstripped build, as gdb does in the stripped one; the names' source is said", (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objcopy', 'strip', 'xz', 'nm', 'gdb'] })) return;
    const full = compileProgram('split-names', { flags: ['-O2'] });
    const app = withMiniDebugInfo(full);
    assert.doesNotMatch(tool('readelf', ['-S', app]), /\.symtab/, 'no .symtab of its own');
    assert.match(tool('readelf', ['-S', app]), /\.gnu_debugdata/);
    const listed = runCli(['list', '--json', app]);
    assert.equal(listed.status, 0, listed.stderr);
    const functions = (
      JSON.parse(listed.stdout) as { functions: { name: string; vaddr: string }[] }
    ).functions;
    for (const name of ['leaf_work', 'middle_step']) {
      const nm = /^([0-9a-f]+) t /m.exec(
        tool('nm', [full])
          .split('\n')
          .filter((l) => l.endsWith(` ${name}`))
          .join('\n'),
      )?.[1];
      assert.ok(nm !== undefined, `nm names ${name} in the unstripped build`);
      const ours = functions.find((f) => f.name === name);
      assert.equal(BigInt(ours?.vaddr ?? -1), BigInt(`0x${nm}`), name);
      const gdb = execFileSync('gdb', ['-batch', '-nx', '-ex', `info address ${name}`, app], {
        encoding: 'utf8',
      });
      const at = new RegExp(`"${name}" is at (0x[0-9a-f]+) `).exec(gdb)?.[1];
      assert.equal(BigInt(at ?? -1), BigInt(`0x${nm}`), gdb);
    }
    const text = runCli(['list', app]);
    assert.match(
      text.stdout,
      /functions in .* \(\.symtab of its debug file .*:\.gnu_debugdata\)$/m,
    );
    // Without xz to inflate it: stripped, and the hint says what would name the rest.
    const noXz = runCli(['resolve', `${app}:leaf_work`], { env: { PATH: '/nonexistent' } });
    assert.equal(noXz.status, 3, noXz.stderr);
    assert.match(
      noXz.stderr,
      /^ {2}hint: Its MiniDebugInfo \(\.gnu_debugdata\), which names the rest, was not read: it needs xz /m,
    );
  });

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`count --engine ${engine}: its static functions counted as the program counts them`, (t) => {
      if (!requireHost(t, { root: engine === 'bpf', commands: ['gcc', 'objcopy', 'strip', 'xz'] }))
        return;
      const app = withMiniDebugInfo(compileProgram('split-names', { flags: ['-O2'] }));
      const own = ownCounts(execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }));
      assert.equal(own['leaf_work'], ROUNDS, 'the target counts its calls');
      const counts = counted(engine, `${app} ${ROUNDS}`, [`${app}:leaf_work`, `${app}:middle_*`]);
      assert.deepEqual(counts, { leaf_work: own['leaf_work'], middle_step: own['middle_step'] });
    });
  }
});

describe("libc's own functions from libc6-dbg's debug file (by build-id)", () => {
  const LIBC = '/lib/x86_64-linux-gnu/libc.so.6';

  /** gdb's count of _int_malloc calls in one run of the command. */
  function gdbCount(app: string, args: string[]): number {
    const out = tool('gdb', [
      '-batch',
      '-nx',
      '-ex',
      'set startup-with-shell off',
      '-ex',
      'set breakpoint pending on',
      '-ex',
      'break _int_malloc',
      '-ex',
      'ignore 1 100000000',
      '-ex',
      `run ${args.join(' ')}`,
      '-ex',
      'info breakpoints',
      app,
    ]);
    const m = /breakpoint already hit (\d+) times?/.exec(out);
    assert.ok(m, out);
    return Number(m[1]);
  }

  for (const engine of ENGINES) {
    test(`trace --engine ${engine} libc:_int_malloc: as many calls as gdb counts`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc', 'gdb'] })) return;
      const id = buildIdOf(LIBC);
      if (!existsSync(`/usr/lib/debug/.build-id/${id.slice(0, 2)}/${id.slice(2)}.debug`)) {
        const reason = 'needs libc6-dbg: sudo bash scripts/setup-host.sh';
        if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
        t.skip(reason);
        return;
      }
      const app = compileProgram('split-names', { flags: ['-O2'] });
      // 40 blocks too large for malloc's caches: each malloc reaches _int_malloc.
      const want = gdbCount(app, ['0', '40']);
      assert.ok(want >= 40, `gdb counts ${want}`);
      const seen = traced(engine, `${app} 0 40`, ['libc:_int_malloc']);
      assert.deepEqual(seen, { _int_malloc: want });
    });
  }
});

describe('a stripped program whose code is in the libraries it links', () => {
  test('a pattern over it names those libraries, with their functions as nm counts them', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'strip', 'nm'] })) return;
    const lib = compileProgram('trace-lib', { flags: ['-shared', '-fPIC', '-O2'], suffix: '.so' });
    const app = compileProgram('trace-target', {
      flags: ['-O2'],
      link: [lib, `-Wl,-rpath,${lib.slice(0, lib.lastIndexOf('/'))}`, '-lpthread'],
      strip: true,
    });
    // The library is not stripped: its functions are those of its .symtab.
    const functions = execFileSync('nm', ['--defined-only', lib], { encoding: 'utf8' })
      .split('\n')
      .filter((line) => / [TtWwi] /.test(line)).length;
    assert.ok(functions > 0);
    const result = runCli(['resolve', `${app}:*`]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_NO_MATCH\]: Cannot expand "\*" in /m);
    assert.match(
      result.stderr,
      new RegExp(
        `^  hint: It names no function, but the libraries it links do: ${lib.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} \\(${functions} functions\\); probe those, e\\.g\\. `,
        'm',
      ),
    );
  });
});
