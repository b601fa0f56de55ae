// upscope-tests: apart libc-allocator,python3 (its ptrace run probes libc's allocator in its target, where another file's kernel uprobe on the same functions would be first, and its bpf runs probe libc's allocator in every process: ui-leaks and processes.int probe it too, and ui-progress and progress.e2e, which run alone; calls.int's return probes on every function of python3 would show in its python3 stacks).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { leaks } from '../../src/api/index.js';
import { PAUSE_VARIABLE } from '../../src/host/index.js';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { pausedAt, type Spawned, spawnUpscope } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

interface JsonFrame {
  function?: string;
  object?: string;
  file?: string;
  line?: number;
}
interface JsonStack {
  pid: number;
  count: number;
  bytes: number;
  oldestAgeMs: number;
  frames: JsonFrame[];
}
interface JsonReport {
  final: boolean;
  elapsedMs: number;
  outstanding: { count: number; bytes: number; stacks: number };
  stacks: JsonStack[];
  counters: Record<string, number>;
  growth?: { pid: number; stack: string; series: [number, number][] }[];
}

const PATHS = ['leak_path_a', 'leak_path_b', 'leak_path_c'] as const;

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  assert.deepEqual(ownBpfFds(), [], 'no BPF object is left open in this process');
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-leaks-'));
  chmodSync(dir, 0o777);
  return dir;
}

function target(flags: string[] = ['-O1']): string {
  return compileProgram('leaks-target', { flags, link: ['-lpthread'] });
}

const CHURN_PATHS = Array.from({ length: 8 }, (_, n) => `churn_path_${n}`);

function churnTarget(): string {
  return compileProgram('leaks-churn', { flags: ['-O2'], link: ['-lpthread'] });
}

/** What the target says it leaked, per call path: blocks and bytes. */
function truthOf(file: string): Map<string, { count: number; bytes: number }> {
  const truth = new Map<string, { count: number; bytes: number }>();
  for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
    const [name, count, bytes] = line.split(' ');
    truth.set(name!, { count: Number(count), bytes: Number(bytes) });
  }
  return truth;
}

function reports(stdout: string): JsonReport[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{"final"'))
    .map((line) => JSON.parse(line) as JsonReport);
}

/** Blocks and bytes of the stacks through `fn`, summed. */
function through(report: JsonReport, fn: string): { count: number; bytes: number } {
  let count = 0;
  let bytes = 0;
  for (const stack of report.stacks) {
    if (!stack.frames.some((frame) => frame.function === fn)) continue;
    count += stack.count;
    bytes += stack.bytes;
  }
  return { count, bytes };
}

function assertExact(report: JsonReport, truthFile: string, what: string): void {
  const truth = truthOf(truthFile);
  for (const path of PATHS) {
    assert.deepEqual(through(report, path), truth.get(path), `${what}: ${path}`);
  }
}

/** The fields of a /proc/PID/stat line from the third (the state) on. */
function statFields(text: string): string[] {
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

/** A process's state letter and thread count, from /proc/PID/stat. */
function procStat(pid: number): { state: string; threads: number } {
  const fields = statFields(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  return { state: fields[0]!, threads: Number(fields[17]) };
}

/** The processes whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const fields = statFields(readFileSync(`/proc/${name}/stat`, 'utf8'));
      if (Number(fields[1]) === pid) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

function noStackTrace(stderr: string): void {
  assert.doesNotMatch(stderr, /\n\s+at |ERR_INTERNAL/, stderr);
}

describe('upscope leaks', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`outstanding blocks and bytes per stack equal the target's own counts (${engine})`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const dir = tempDir();
      try {
        const truthFile = join(dir, 'truth');
        const run = runCli([
          'leaks',
          '--engine',
          engine,
          '--json',
          '--top',
          '50',
          '-c',
          `${target()} ${truthFile}`,
        ]);
        assert.equal(run.status, 0, run.stderr);
        noStackTrace(run.stderr);
        const final = reports(run.stdout).at(-1)!;
        assert.equal(final.final, true);
        assertExact(final, truthFile, engine);
        // Each path's frames are named, with the target's source lines (it has DWARF).
        const a = final.stacks.find((s) => s.frames.some((f) => f.function === 'leak_path_a'))!;
        assert.equal(a.frames[0]!.function, 'malloc');
        const own = a.frames.find((f) => f.function === 'leak_path_a')!;
        assert.match(`${own.file}:${own.line}`, /leaks-target\.c:\d+$/);
        assert.ok(
          a.frames.some((f) => f.function === 'worker'),
          JSON.stringify(a.frames),
        );
        const c = final.stacks.find((s) => s.frames.some((f) => f.function === 'leak_path_c'))!;
        assert.equal(c.frames[0]!.function, 'realloc', 'a realloc moves the block to its stack');
        // Nothing was left out: every block was recorded with its stack.
        assert.equal(final.counters['dropped'], 0);
        assert.equal(final.counters['stacksFull'], 0);
        assert.match(run.stderr, /^upscope: \d+ allocations and \d+ frees seen/m);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  // Another thread mapping, protecting and unmapping memory holds the memory map's lock for
  // writing: the kernel's walker cannot look a pc's mapping up then, and must still give the
  // whole stack (eight paths on eight code pages, so that a walk meets new pages while the
  // lock is taken).
  test('bpf: whole stacks and exact counts while other threads map and unmap memory', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = churnTarget();
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const run = runCli(['leaks', '--json', '--top', '50', '-c', `${app} ${truthFile}`]);
      assert.equal(run.status, 0, run.stderr);
      const final = reports(run.stdout).at(-1)!;
      const truth = truthOf(truthFile);
      assert.equal(truth.size, CHURN_PATHS.length);
      for (const path of CHURN_PATHS) {
        assert.deepEqual(through(final, path), truth.get(path), path);
      }
      for (const stack of final.stacks) {
        const names = stack.frames.map((f) => f.function ?? '?');
        assert.ok(!names.some((name) => /stack cut/.test(name)), names.join(' <- '));
        if (names.some((name) => name.startsWith('churn_path_'))) {
          assert.ok(names.includes('allocate'), names.join(' <- '));
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('bpf: count --by ustack gives whole stacks while other threads map and unmap memory', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = churnTarget();
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const run = runCli([
        'count',
        '--json',
        '--command-output',
        'inherit',
        '--by',
        'ustack',
        '--engine',
        'bpf',
        '-c',
        `${app} ${truthFile}`,
        `${app}:churn_leaf`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      const lines = run.stdout.split('\n');
      const rows: { frames: string[]; count: number }[] = JSON.parse(
        lines.filter((line) => line.startsWith('[')).at(-1)!,
      );
      const calls = new Map<string, number>();
      for (const row of rows) {
        assert.ok(!row.frames.some((f) => /stack cut/.test(f)), row.frames.join(' <- '));
        const names = row.frames.map((f) => f.split(/[+ ]/)[0]);
        assert.equal(names[0], 'churn_leaf');
        assert.ok(names.includes('allocate'), row.frames.join(' <- '));
        const path = names[1]!;
        calls.set(path, (calls.get(path) ?? 0) + row.count);
      }
      const truth = readFileSync(truthFile, 'utf8').trim().split('\n');
      assert.equal(truth.length, CHURN_PATHS.length);
      for (const line of truth) {
        const [path, , , count] = line.split(' ');
        assert.equal(calls.get(path!), Number(count), path);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // The walker knows a command's mappings before any of its code runs, however late upscope
  // gets to read them: here upscope stops itself (a fault-test pause point) right after it
  // let the command go, and the command must wait at its program's entry, with one thread
  // and its code not run, rather than run (and walk its stacks) with no mapping known.
  test('bpf: a command is held at its entry until its mappings are read, however late upscope looks', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = churnTarget();
    const dir = tempDir();
    let run: Spawned | undefined;
    let held: number | undefined;
    try {
      const truthFile = join(dir, 'truth');
      run = spawnUpscope(
        [
          'count',
          '--json',
          '--by',
          'ustack',
          '--engine',
          'bpf',
          '-c',
          `${app} ${truthFile} 500`,
          `${app}:churn_leaf`,
        ],
        { [PAUSE_VARIABLE]: 'tracing' },
      );
      const upscope = await pausedAt(run, 'tracing');
      // The command: upscope's child, once it runs the program (held), or its end (not held).
      const deadline = Date.now() + 60_000;
      for (; held === undefined && !existsSync(truthFile); ) {
        assert.ok(Date.now() < deadline, 'the command neither stopped at its entry nor ended');
        held = childrenOf(upscope).find((pid) => {
          try {
            return (
              readlinkSync(`/proc/${pid}/exe`) === realpathSync(app) && procStat(pid).state === 'T'
            );
          } catch {
            return false;
          }
        });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(existsSync(truthFile), false, 'the command ran while upscope was stopped');
      assert.equal(procStat(held!).threads, 1, 'held before it started a thread');
      process.kill(upscope, 'SIGCONT');
      const ended = await run.exited;
      assert.deepEqual(ended, { code: 0, signal: null }, run.stderr);
      const rows: { frames: string[]; count: number }[] = JSON.parse(
        run.stdout
          .split('\n')
          .filter((line) => line.startsWith('['))
          .at(-1)!,
      );
      const calls = new Map<string, number>();
      for (const row of rows) {
        assert.ok(!row.frames.some((f) => /stack cut/.test(f)), row.frames.join(' <- '));
        const path = row.frames[1]!.split(/[+ ]/)[0]!;
        calls.set(path, (calls.get(path) ?? 0) + row.count);
      }
      for (const line of readFileSync(truthFile, 'utf8').trim().split('\n')) {
        const [path, , , count] = line.split(' ');
        assert.equal(calls.get(path!), Number(count), path);
      }
    } finally {
      if (run !== undefined && run.child.exitCode === null) {
        try {
          process.kill(run.pid, 'SIGCONT');
        } catch {
          // ended
        }
        await run.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a full map of blocks is counted and said, never a silent undercount', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const run = runCli([
        'leaks',
        '--json',
        '--max-allocations',
        '64',
        '-c',
        `${target()} ${truthFile}`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      const final = reports(run.stdout).at(-1)!;
      assert.ok(final.counters['dropped']! > 0, JSON.stringify(final.counters));
      assert.ok(final.outstanding.count <= 64);
      assert.match(
        run.stderr,
        /, \d+ allocations NOT tracked: the map of blocks was full \(raise --max-allocations\)/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a statically linked program: its own malloc is found and probed', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target(['-O1', '-static']);
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const run = runCli(['leaks', '--json', '--top', '50', '-c', `${app} ${truthFile}`]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stderr, new RegExp(`^Finding leaks in ${app}: \\d+ functions`, 'm'));
      assertExact(reports(run.stdout).at(-1)!, truthFile, 'static');
      // Stripped, nothing names malloc: one line says so, with what to do.
      const stripped = join(dir, 'stripped');
      copyFileSync(app, stripped);
      spawnSync('strip', [stripped]);
      chmodSync(stripped, 0o755);
      const refused = runCli(['leaks', '-c', stripped]);
      assert.equal(refused.status, 3, refused.stderr);
      assert.match(
        refused.stderr,
        /^error\[ERR_SYMBOL_NOT_FOUND\]: Cannot find the allocator in ".*stripped": it has no malloc symbol \(the program is statically linked/m,
      );
      assert.match(refused.stderr, /hint: Name the allocator with --lib/);
      noStackTrace(refused.stderr);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`an exec releases the blocks of the program it replaces: only the new program's are outstanding, the released counted; a wrapper script that execs the program is a command like any (${engine})`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram('leaks-exec', { flags: ['-O1'] });
      const dir = tempDir();
      try {
        const final = (command: string) => {
          const run = runCli(['leaks', '--json', '--engine', engine, '-c', command]);
          assert.equal(run.status, 0, run.stderr);
          noStackTrace(run.stderr);
          assert.match(run.stderr, /\d+ blocks not shown: an exec released them/);
          return reports(run.stdout).at(-1)!;
        };
        // The program's own counts: 5 blocks of 4242 bytes before its exec, 3 of 1234 after.
        const direct = final(`${app} before`);
        assert.deepEqual(direct.outstanding, { count: 3, bytes: 3702, stacks: 3 });
        assert.deepEqual(through(direct, 'after_exec'), { count: 3, bytes: 3702 });
        assert.deepEqual(through(direct, 'before_exec'), { count: 0, bytes: 0 });
        assert.equal(direct.counters['releasedByExec'], 5);
        // The shell's blocks go with its exec too.
        const script = join(dir, 'run.sh');
        writeFileSync(script, `#!/bin/sh\nSETTING=up\nexport SETTING\nexec ${app} before\n`);
        chmodSync(script, 0o755);
        const wrapped = final(script);
        assert.equal(wrapped.outstanding.count, 3);
        assert.equal(wrapped.outstanding.bytes, 3702);
        // Its stacks whole, though the program was started by a later exec.
        assert.deepEqual(through(wrapped, 'after_exec'), { count: 3, bytes: 3702 });
        assert.ok(wrapped.counters['releasedByExec']! > 5, 'the shell left blocks too');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test('C++: blocks leaked through new show demangled frames', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++'] })) return;
    const app = compileProgram('leaks-new', { flags: ['-O1'] });
    const run = runCli(['leaks', '--json', '--top', '50', '--command-output', 'stderr', '-c', app]);
    assert.equal(run.status, 0, run.stderr);
    const [, count, bytes] = /^leaked (\d+) (\d+)$/m.exec(run.stderr)!;
    const final = reports(run.stdout).at(-1)!;
    const fill = 'shop::Basket<shop::Order>::fill(int)';
    assert.deepEqual(through(final, fill), { count: Number(count), bytes: Number(bytes) });
    const stack = final.stacks.find((s) => s.frames.some((f) => f.function === fill))!;
    const names = stack.frames.map((f) => f.function);
    // operator new[] jumps to operator new (a tail call: no frame of its own).
    assert.ok(
      names.some((n) => n?.startsWith('operator new')),
      names.join(' <- '),
    );
    assert.ok(names.includes('main'), names.join(' <- '));
  });

  // The script says, round by round, how many strings it keeps and their bytes, and waits
  // for a line on its stdin (upscope's) before the next round: each round's report is one
  // taken while the script waits, so what it shows is the script's own count, whatever the
  // machine's load.
  test('a python3 script growing a list: the growth of each round shows, exactly, in the interpreter frames that make the strings', async (t) => {
    if (!requireHost(t, { root: true, commands: ['/usr/bin/python3'] })) return;
    const ROUNDS = 4;
    const cli = spawn(
      process.execPath,
      [
        new URL('../../bin/upscope.js', import.meta.url).pathname,
        'leaks',
        '--json',
        '--interval',
        '0.5',
        '--top',
        '100000',
        '--command-output',
        'stderr',
        '-c',
        `/usr/bin/python3 ${join(PROGRAMS, 'leaks-grow.py')} ${ROUNDS}`,
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    cli.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    cli.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = once(cli, 'close');
    let ended = false;
    void exited.then(() => {
      ended = true;
    });
    // The reports printed whole so far (a long line comes in several chunks).
    const whole = () => reports(stdout.slice(0, stdout.lastIndexOf('\n') + 1));
    const until = async (what: string, check: () => boolean) => {
      while (!check()) {
        assert.ok(!ended, `upscope ended before ${what}:\n${stderr}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    try {
      const rounds: { kept: number; bytes: number; report: JsonReport }[] = [];
      for (let round = 1; round <= ROUNDS; round++) {
        const said = new RegExp(`^round ${round} kept (\\d+) bytes (\\d+)$`, 'm');
        await until(`round ${round}`, () => said.test(stderr));
        const [, kept, bytes] = said.exec(stderr)!;
        // The second report after the round's line: one taken after the round ended.
        const seen = whole().length;
        await until(`a report after round ${round}`, () => whole().length >= seen + 2);
        rounds.push({
          kept: Number(kept),
          bytes: Number(bytes),
          report: whole()[seen + 1]!,
        });
        cli.stdin!.write('next\n');
      }
      cli.stdin!.end();
      const [status] = await exited;
      assert.equal(status, 0, stderr);
      assert.match(stderr, new RegExp(`^kept ${ROUNDS * 2000}$`, 'm'), 'the script ran to its end');
      // The blocks made by the interpreter's string functions, from its bytecode loop.
      const strings = (report: JsonReport) => {
        let count = 0;
        let bytes = 0;
        for (const stack of report.stacks) {
          const names = stack.frames.map((f) => f.function ?? '');
          if (!names.some((n) => n.startsWith('PyUnicode_'))) continue;
          if (!names.includes('_PyEval_EvalFrameDefault')) continue;
          count += stack.count;
          bytes += stack.bytes;
        }
        return { count, bytes };
      };
      for (let k = 1; k < ROUNDS; k++) {
        const before = strings(rounds[k - 1]!.report);
        const after = strings(rounds[k]!.report);
        assert.deepEqual(
          { count: after.count - before.count, bytes: after.bytes - before.bytes },
          {
            count: rounds[k]!.kept - rounds[k - 1]!.kept,
            bytes: rounds[k]!.bytes - rounds[k - 1]!.bytes,
          },
          `round ${k + 1}: the strings the script kept`,
        );
      }
      // The top stack makes the strings: a malloc from the interpreter's string functions,
      // called by the bytecode loop, from the script's run; its growth series only climbs
      // while the list grows (the script frees the list as it exits).
      const last = rounds.at(-1)!.report;
      const top = last.stacks[0]!;
      const names = top.frames.map((f) => f.function ?? '?');
      assert.equal(names[0], 'malloc', names.join(' <- '));
      assert.ok(
        names.some((n) => n.startsWith('PyUnicode_')),
        names.join(' <- '),
      );
      assert.ok(names.includes('_PyEval_EvalFrameDefault'), names.join(' <- '));
      assert.ok(names.includes('Py_RunMain'), names.join(' <- '));
      const final = reports(stdout).at(-1)!;
      assert.equal(final.final, true);
      const growth = final.growth!.find(
        (g) => g.pid === top.pid && g.stack === names.toReversed().join(';'),
      );
      assert.ok(growth !== undefined, JSON.stringify(final.growth));
      const values = growth.series.map(([, b]) => b);
      const atRounds = rounds.map(({ report }) =>
        growth.series.find(([ms]) => ms === report.elapsedMs),
      );
      assert.ok(
        atRounds.every((point, k) => k === 0 || point![1] > atRounds[k - 1]![1]),
        values.join(' '),
      );
      const peak = values.indexOf(Math.max(...values));
      assert.ok(
        values.slice(0, peak + 1).every((v, i) => i === 0 || v >= values[i - 1]!),
        values.join(' '),
      );
    } finally {
      cli.stdin!.destroy();
      if (!ended) {
        cli.kill('SIGINT');
        await exited;
      }
    }
  });

  test('a pid that exits mid-run: the final report is what was seen', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const dir = tempDir();
    let child: ChildProcess | undefined;
    try {
      const truthFile = join(dir, 'truth');
      // The target waits (hold) for upscope's start line, runs, and exits when its stdin ends.
      // (Not a shell that execs it: a process that execs under -p has its new program's unwind
      // tables read at the next tick, 25 ms on, and its stacks cut before then.)
      child = spawn(target(), [truthFile, 'hold'], { stdio: ['pipe', 'pipe', 'inherit'] });
      await new Promise<void>((resolve) => {
        let out = '';
        child!.stdout!.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          if (out.includes('ready\n')) resolve();
        });
      });
      const cli = spawn(
        process.execPath,
        [
          new URL('../../bin/upscope.js', import.meta.url).pathname,
          'leaks',
          '--json',
          '--top',
          '50',
          '-p',
          String(child.pid),
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      cli.stdout!.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      cli.stderr!.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        if (/Ctrl-C to end/.test(stderr)) child!.stdin!.end('go\n');
      });
      const [status] = await once(cli, 'exit');
      assert.equal(status, 0, stderr);
      assert.match(stderr, new RegExp(`^upscope: process ${child.pid} exited$`, 'm'));
      assertExact(reports(stdout).at(-1)!, truthFile, '-p');
    } finally {
      child?.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('without privileges: the ptrace engine, said on stderr, with the same results', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
    const dir = tempDir();
    try {
      const app = join(dir, 'leaks-target');
      copyFileSync(target(), app);
      chmodSync(app, 0o755);
      const truthFile = join(dir, 'truth');
      const run = runCli(['leaks', '--json', '--top', '50', '-c', `${app} ${truthFile}`], {
        asNobody: true,
      });
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stderr, /BPF is not allowed here: using the ptrace engine/);
      assertExact(reports(run.stdout).at(-1)!, truthFile, 'nobody');
      const refused = runCli(['leaks', '--engine', 'bpf', '-c', `${app} ${truthFile}`], {
        asNobody: true,
      });
      assert.equal(refused.status, 5, refused.stderr);
      assert.match(refused.stderr, /^error\[ERR_PRIVILEGES\]/m);
      assert.match(refused.stderr, /hint: Without them, use --engine ptrace/);
      noStackTrace(refused.stderr);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a Go program (cgo) is unharmed: its output and exit status are its own', (t) => {
    const go = findGo();
    if (!requireHost(t, { root: true, commands: ['gcc', ...(go === undefined ? ['go'] : [])] })) {
      return;
    }
    const app = compileGo(go!, 'leaks-cgo', { cgo: true });
    const plain = spawnSync(app, { encoding: 'utf8' });
    assert.equal(plain.status, 3);
    const run = runCli(['leaks', '--json', '--top', '50', '--command-output', 'stderr', '-c', app]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /^upscope: the command exited with status 3$/m);
    assert.ok(run.stderr.includes(plain.stdout.trim()), run.stderr);
    // 10 of each goroutine's 500 blocks leak.
    assert.equal(through(reports(run.stdout).at(-1)!, 'c_block').count, 40);
  });

  test('a Rust program is unharmed: its output and exit status are its own', (t) => {
    const rustc = findRustc();
    if (!requireHost(t, { root: true, ...(rustc === undefined ? { commands: ['rustc'] } : {}) })) {
      return;
    }
    const app = compileRust(rustc!, 'leaks-rust', ['-C', 'opt-level=1']);
    const plain = spawnSync(app, { encoding: 'utf8' });
    assert.equal(plain.status, 0);
    const run = runCli(['leaks', '--top', '5', '--command-output', 'stderr', '-c', app]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stderr, /^upscope: the command exited with status 0$/m);
    assert.ok(run.stderr.includes(plain.stdout.trim()), run.stderr);
    assert.match(run.stdout, /^Outstanding at the end: /m);
  });

  test('leaks() in the library: snapshots as an async iterable, the last one final and exact', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const found = await leaks({ command: `${target()} ${truthFile}`, intervalMs: 200, top: 50 });
      const snapshots = [];
      for await (const snapshot of found) snapshots.push(snapshot);
      found.close();
      const final = snapshots.at(-1)!;
      assert.equal(final.final, true);
      const truth = truthOf(truthFile);
      for (const path of PATHS) {
        let count = 0n;
        let bytes = 0n;
        for (const stack of final.stacks) {
          if (!stack.frames.some((f) => f.function === path)) continue;
          count += stack.count;
          bytes += stack.bytes;
        }
        assert.deepEqual(
          { count: Number(count), bytes: Number(bytes) },
          truth.get(path),
          `library: ${path}`,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('flame graph, folded and pprof outputs weigh the stacks by bytes', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const dir = tempDir();
    try {
      const truthFile = join(dir, 'truth');
      const folded = runCli(['leaks', '--format', 'folded', '-c', `${target()} ${truthFile}`]);
      assert.equal(folded.status, 0, folded.stderr);
      const truth = truthOf(truthFile);
      for (const path of PATHS) {
        const bytes = folded.stdout
          .split('\n')
          .filter((line) => line.includes(`;${path};`))
          .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
        assert.equal(bytes, truth.get(path)!.bytes, `folded: ${path}`);
      }
      const pprof = join(dir, 'leaks.pb.gz');
      const run = runCli([
        'leaks',
        '--format',
        'pprof',
        '-o',
        pprof,
        '-c',
        `${target()} ${truthFile}`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      const go = findGo();
      if (go !== undefined) {
        const top = spawnSync(go, ['tool', 'pprof', '-raw', pprof], { encoding: 'utf8' });
        assert.match(
          top.stdout,
          /bytes\/bytes\[dflt\] allocations\/count/,
          top.stdout + top.stderr,
        );
      }
      const svg = runCli(['leaks', '--format', 'flamegraph', '-c', `${target()} ${truthFile}`]);
      assert.equal(svg.status, 0, svg.stderr);
      assert.match(svg.stdout, /^<\?xml|^<svg/);
      assert.ok(svg.stdout.includes('leak_path_c'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
