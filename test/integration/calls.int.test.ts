// upscope-tests: apart python3 (its return probes on every function of python3 show in the stacks stacks.int takes of python3 at the same time).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import {
  type CallRecord,
  CallTreeBuilder,
  functionStats,
  record as recordLive,
} from '../../src/api/index.js';
import { descendantsOf, procState } from '../../src/host/index.js';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import {
  ended,
  endedUnaided,
  spawnCollected,
  spawnUpscope,
  trampolineRun,
  waitFor,
} from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

const work = mkdtempSync(join(tmpdir(), 'upscope-calls-test-'));
after(() => rmSync(work, { recursive: true, force: true }));

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

/** The engines that record: kernel uprobes (bpf, tracefs), or one process's (ptrace, inject). */
const ENGINES = ['bpf', 'tracefs', 'ptrace', 'inject'] as const;
type Engine = (typeof ENGINES)[number];

interface ReplayLine {
  tid: number;
  depth: number;
  function: string;
  end: 'return' | 'unwind' | 'open' | 'untimed';
}

/**
 * `upscope record` of `command` into a new directory of `work` (with `options` such as
 * --return-probes): the directory and stdout.
 */
function record(
  command: string,
  targets: string[] = [],
  engine: Engine = 'bpf',
  options: string[] = [],
): { dir: string; stdout: string } {
  const dir = join(work, `rec-${readdirSync(work).length}`);
  const result = runCli([
    'record',
    '--engine',
    engine,
    ...options,
    '-c',
    command,
    '-o',
    dir,
    ...targets,
  ]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stderr, /, 0 lost\n/);
  return { dir, stdout: result.stdout };
}

function replay(dir: string, ...args: string[]): ReplayLine[] {
  const result = runCli(['replay', dir, '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return result.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as ReplayLine);
}

function callCounts(dir: string): Record<string, number> {
  const result = runCli(['report', dir, '--json']);
  assert.equal(result.status, 0, result.stderr);
  const rows = JSON.parse(result.stdout) as { function: string; calls: number }[];
  return Object.fromEntries(rows.map((r) => [r.function, r.calls]));
}

/** Lines of the form depth+name, for comparing a tree's shape. */
function shape(lines: readonly ReplayLine[]): string[] {
  return lines.map((l) => `${l.depth} ${l.function}${l.end === 'return' ? '' : ` ${l.end}`}`);
}

/**
 * busy-counter (busy_tick about 20,000 times a second, for ever) started, its own count of
 * calls written to `log` in the work directory, once it has counted 1,000.
 */
async function busyCounter(log: string) {
  const app = compileProgram('busy-counter', { flags: ['-O2'] });
  const path = join(work, log);
  const target = spawn(app, [], { stdio: ['ignore', openSync(path, 'w'), 'inherit'] });
  const lastCount = () => Number(/n=(\d+)\n$/.exec(readFileSync(path, 'utf8'))?.[1] ?? 0);
  while (lastCount() < 1000) await new Promise((r) => setTimeout(r, 20));
  return { app, target, lastCount };
}

/**
 * `record -p` of `app args` (started here, killed after; it runs rec(12) again and again) for
 * 0.5 s, `spec` recorded with `--return-probes returns`, checked: rec()'s calls each closed by
 * their own return, none taken for unwound (the program never unwinds), no more left open than
 * one tree's worth (the calls running when the recording ended). The recording and what
 * record said.
 */
async function recordBusy(
  app: string,
  args: readonly string[],
  returns: 'trampoline' | 'sites',
  spec: string,
): Promise<{ dir: string; stderr: string }> {
  const target = spawn(app, args, { stdio: 'ignore' });
  try {
    const dir = join(work, `rec-${readdirSync(work).length}`);
    const run = runCli([
      'record',
      '-p',
      String(target.pid),
      '--return-probes',
      returns,
      '--duration',
      '0.5',
      '-o',
      dir,
      spec,
    ]);
    assert.equal(run.status, 0, run.stderr);
    const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
      function: string;
      calls: number;
      unwound: number;
      notReturned: number;
    }[];
    const row = rows.find((r) => r.function === 'rec');
    assert.ok(row !== undefined && row.calls > 1000, `${row?.calls} calls of rec`);
    assert.equal(row.unwound, 0, 'none unwound: the program never unwinds');
    assert.ok(row.notReturned <= 13, `${row.notReturned} not returned`);
    return { dir, stderr: run.stderr };
  } finally {
    target.kill('SIGKILL');
    await once(target, 'exit');
  }
}

function cTarget(t: Parameters<typeof requireHost>[0]): string | undefined {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return undefined;
  // -O2: tail_caller reaches tail_callee by a jump (checked below with objdump).
  return compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
}

describe('upscope record, report, replay: the call tree of a whole command', () => {
  for (const engine of ENGINES)
    test(`${engine}: C: every call counted as the target counts it, each thread a known, closed tree`, (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      const disassembly = execFileSync('objdump', ['-d', '--no-show-raw-insn', app], {
        encoding: 'utf8',
      });
      const tailCaller = /<tail_caller>:\n([\s\S]*?)\n\n/.exec(disassembly)?.[1] ?? '';
      assert.match(tailCaller, /jmp\s+\w+ <tail_callee>/, 'tail_caller ends in a jump');

      const { dir, stdout } = record(`${app} all`, [], engine);
      const lines = stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, number>);
      const parent = lines.find((l) => l['rec'] !== undefined)!;
      const child = lines.find((l) => l['rec'] === undefined)!;
      // _start (probed, as every function) has no return address to replace: argc is intact.
      assert.equal(parent['argc'], 2, "the target's argc");
      const counts = callCounts(dir);
      for (const fn of [
        'rec',
        'is_even',
        'is_odd',
        'thread_body',
        'leaf',
        'jumper',
        'deep',
        'tail_caller',
        'tail_callee',
      ]) {
        assert.equal(counts[fn], parent[fn], `calls of ${fn}`);
      }
      assert.equal(counts['child_work'], child['child_work'], 'calls of child_work (in the fork)');

      const all = replay(dir);
      const mainTid = parent['pid']!;
      // The main thread, from main: rec 51 deep, is_even/is_odd alternating 21 deep, the 6 deep
      // calls a longjmp left (unwound), and the tail call.
      const expected = ['0 main'];
      for (let d = 1; d <= 51; d++) expected.push(`${d} rec`);
      for (let d = 1; d <= 21; d++) expected.push(`${d} ${d % 2 === 1 ? 'is_even' : 'is_odd'}`);
      expected.push('1 jumper');
      for (let d = 2; d <= 7; d++) expected.push(`${d} deep unwind`);
      expected.push('1 tail_caller', '2 tail_callee');
      const fromMain = replay(dir, '-F', 'main', '--tid', String(mainTid));
      assert.deepEqual(shape(fromMain), expected);
      // 4 threads, each thread_body with its 5 leaf calls.
      const bodies = all.filter((l) => l.function === 'thread_body');
      assert.equal(bodies.length, 4);
      for (const body of bodies) {
        assert.deepEqual(
          shape(all.filter((l) => l.tid === body.tid)),
          ['0 thread_body', ...Array(5).fill('1 leaf')],
          `thread ${body.tid}`,
        );
      }
      // The fork's child: its own thread, child_work 3 times.
      assert.deepEqual(
        shape(all.filter((l) => l.tid === child['pid'])),
        Array(child['child_work']).fill('0 child_work'),
      );
      // Closed: every call returned, except those the longjmp unwound and _start, the
      // program's entry point, whose return is not probed (it has none: exit() ends it).
      const notReturned = all
        .filter((l) => l.end !== 'return')
        .map((l) => `${l.function} ${l.end}`);
      assert.deepEqual(notReturned.sort(), ['_start untimed', ...Array(6).fill('deep unwind')]);
    });

  // A function whose returns cannot be found safely (it leaves by a conditional jump into
  // another function) has its entry probed alone: its calls are counted, not timed, and the
  // calls its caller makes next are not put inside it (nor its caller taken for unwound).
  // The other function of its name returns as any does: its entry and return are one name.
  for (const engine of ['bpf', 'ptrace'] as const)
    test(`${engine}: C++: calls of a function whose returns are not probed are counted, untimed, and what follows is its caller's`, (t) => {
      if (!requireHost(t, { root: true, commands: ['g++'] })) return;
      const twin = new URL('../programs/untimed-twin.c', import.meta.url).pathname;
      const app = compileProgram('untimed-calls', { flags: ['-O2'], link: [twin] });
      const { dir, stdout } = record(`${app} 4`, [`${app}:*`], engine, [
        '--return-probes',
        'sites',
      ]);
      const own = JSON.parse(stdout) as Record<string, number>;
      // The two twin(int)s by nm's addresses: the asm one's probe may sit past its first
      // instruction (the kernel would single-step it), so its name is said apart.
      const nm = execFileSync('nm', [app], { encoding: 'utf8' });
      const local = [...nm.matchAll(/^([0-9a-f]+) t _ZL4twini$/gm)].map((m) =>
        Number.parseInt(m[1]!, 16),
      );
      assert.equal(local.length, 2, nm);
      const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
        function: string;
        calls: number;
        untimed: number;
        unwound: number;
        notReturned: number;
        totalNs: number;
      }[];
      const row = (name: string) => rows.find((r) => r.function === name);
      const twins = rows.filter((r) => r.function.startsWith('twin(int) ('));
      assert.equal(twins.length, 2, JSON.stringify(rows));
      const [untimedTwin, cTwin] = twins.sort((a, b) => b.untimed - a.untimed);
      for (const r of [row('leaves_oddly'), untimedTwin]) {
        assert.deepEqual([r?.calls, r?.untimed, r?.totalNs], [own['outer'], own['outer'], 0]);
      }
      for (const r of [row('outer(int)'), row('after(int)'), cTwin]) {
        assert.deepEqual(
          [r?.calls, r?.untimed, r?.unwound, r?.notReturned],
          [own['outer'], 0, 0, 0],
        );
        assert.ok(r!.totalNs > 0, JSON.stringify(r));
      }
      // The C twin is the one at the higher address (untimed-twin.c links after the asm).
      assert.match(cTwin!.function, new RegExp(`\\(0x${Math.max(...local).toString(16)}\\)$`));
      // Each call of outer: its five callees at one depth below it, the C twin under its caller.
      const lines = replay(dir);
      const outers = lines.filter((l) => l.function === 'outer(int)');
      assert.equal(outers.length, own['outer']);
      const depth = outers[0]!.depth;
      const under = shape(
        lines.slice(lines.indexOf(outers[0]!), lines.indexOf(outers[1]!)).map((l) => ({
          ...l,
          depth: l.depth - depth,
          function: l.function.replace(/ \(0x[0-9a-f]+\)$/, ''),
        })),
      );
      assert.deepEqual(under, [
        '0 outer(int)',
        '1 leaves_oddly untimed',
        '1 after(int)',
        '1 call_asm_twin(int)',
        '1 twin(int) untimed',
        '1 call_c_twin(int)',
        '2 twin(int)',
      ]);
      const text = runCli(['replay', dir]).stdout;
      assert.match(text, /^\s+[\d.]+ [mun]?s\s+-\s+leaves_oddly \[returns not probed\]$/m);
      // graph: no times on its paths, said, its node's untimed calls in --json.
      assert.match(
        runCli(['graph', dir]).stdout,
        /^ {2}- {12}- {12}\s+4 {2}\s*├─ leaves_oddly \[returns not probed\]$/m,
      );
      const graphed = JSON.stringify(JSON.parse(runCli(['graph', dir, '--json']).stdout));
      assert.match(graphed, /"function":"leaves_oddly","calls":4,"untimed":4,"totalNs":0/);
      assert.match(
        runCli(['report', dir]).stdout,
        /^-\s+-\s+4\s+-\s+-\s+-\s+leaves_oddly \(returns not probed\)$/m,
      );
    });

  for (const engine of ['ptrace', 'inject'] as const)
    test(`trace --engine ${engine}: a tail call (a jmp) from one return-probed function to another returns both, the callee first, with its value`, (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      const result = runCli([
        'trace',
        '--engine',
        engine,
        '--json',
        '-c',
        app,
        `r:${app}:tail_caller v=retval:s64`,
        `r:${app}:tail_callee v=retval:s64`,
      ]);
      // Before the fix, the ptrace engine failed at the return (no return address saved for
      // it), and the program with it.
      assert.equal(result.status, 0, result.stderr);
      const events = result.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((e) => e['probe'] !== undefined);
      // The command's own lines go to stderr beside --json output.
      const counts = JSON.parse(
        /^\{"pid".*"tail_caller".*$/m.exec(result.stderr)?.[0] ?? '{}',
      ) as Record<string, number>;
      assert.equal(counts['tail_caller'], 1);
      // tail_caller(4) jumps to tail_callee(5), which returns 15 for both.
      assert.deepEqual(
        events.map((e) => [e['probe'], (e['fields'] as Record<string, string>)['v']]),
        [
          ['tail_callee', '15'],
          ['tail_caller', '15'],
        ],
      );
    });

  /**
   * `upscope record` of hot.c's `calls` calls of hot_function with these options (a buffer too
   * small for them): its stderr and index.
   */
  function recordTooFast(
    t: Parameters<typeof requireHost>[0],
    calls: number,
    options: string[],
  ): { dir: string; stderr: string; index: { records: number; lost: number } } | undefined {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return undefined;
    const hot = compileProgram(new URL('../../bench/programs/hot.c', import.meta.url).pathname, {
      flags: ['-O2'],
      link: ['-lpthread'],
    });
    const dir = join(work, `rec-${readdirSync(work).length}`);
    const result = runCli([
      'record',
      ...options,
      '-c',
      `${hot} ${calls}`,
      '-o',
      dir,
      `${hot}:hot_function`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stderr, new RegExp(`calls=${calls} `), 'the program ran to its end');
    const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as {
      records: number;
      lost: number;
    };
    assert.ok(index.lost > 0, `records were lost: ${result.stderr}`);
    assert.match(result.stderr, new RegExp(`, ${index.lost} lost\n`));
    return { dir, stderr: result.stderr, index };
  }

  test('record --engine inject: a ring too small for the calls (--buffer-size) loses records and says how many, the index too; records + lost make every call', (t) => {
    const calls = 300_000;
    // 256 KiB: a ring of 1,024 records, for 600,000 made as fast as the program goes.
    const made = recordTooFast(t, calls, ['--engine', 'inject', '--buffer-size', '256']);
    if (made === undefined) return;
    const { dir, stderr, index } = made;
    assert.match(stderr, /events lost: the ring buffer filled faster than it was read/);
    // Each call's entry is recorded or lost (a lost entry's return is never swapped); a
    // recorded entry's return may be lost too.
    const recorded = callCounts(dir)['hot_function']!;
    assert.ok(recorded < calls, `${recorded} calls recorded`);
    assert.ok(recorded + index.lost >= calls, `${recorded} recorded + ${index.lost} lost`);
    assert.ok(recorded + index.lost <= 2 * calls, `${recorded} recorded + ${index.lost} lost`);
  });

  test('record (bpf): a buffer too small for the calls loses events and says how many, counted in all; records + lost make every entry and return', (t) => {
    const calls = 100_000;
    // 1 KiB per CPU: one page of ring buffer, for 200,000 events.
    const made = recordTooFast(t, calls, ['--buffer-size', '1']);
    if (made === undefined) return;
    const { index } = made;
    assert.equal(index.records + index.lost, 2 * calls, 'each entry and return recorded or lost');
  });

  for (const engine of ENGINES)
    test(`${engine}: C: a callee that calls exit() leaves its callers without a return, said in the replay`, (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      const { dir, stdout } = record(`${app} exit`, [`${app}:*er`, `${app}:main`], engine);
      const counts = JSON.parse(stdout) as Record<string, number>;
      assert.deepEqual(callCounts(dir), {
        main: 1,
        quitter: counts['quitter'],
        ender: counts['ender'],
      });
      assert.deepEqual(shape(replay(dir)), ['0 main open', '1 quitter open', '2 ender open']);
      const text = runCli(['replay', dir]);
      assert.match(text.stdout, /ender \[no return: thread ended\]/);
    });

  // A process's exit ends its other threads in the calls they wait in: not returned, not
  // unwound (no unwind left them), on every engine, with returns caught at exits (as C++,
  // Rust and Go functions' are).
  for (const engine of ENGINES)
    test(`${engine}: a thread the process's exit ends in a call: that call not returned, not unwound`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram('thread-at-exit', { flags: ['-O2'], link: ['-lpthread'] });
      const { dir, stdout } = record(app, [`${app}:wait_here`, `${app}:work`], engine, [
        '--return-probes',
        'sites',
      ]);
      const own = JSON.parse(stdout) as Record<string, number>;
      const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
        function: string;
        calls: number;
        unwound: number;
        notReturned: number;
      }[];
      const row = (name: string) => {
        const r = rows.find((r) => r.function === name);
        return [r?.calls, r?.notReturned, r?.unwound];
      };
      assert.deepEqual(row('wait_here'), [own['wait_here'], 1, 0]);
      assert.deepEqual(row('work'), [own['work'], 0, 0]);
      const waits = replay(dir).filter((l) => l.function === 'wait_here');
      assert.deepEqual(
        waits.map((l) => `${l.depth} ${l.end}`),
        ['0 open'],
      );
    });

  // --return-probes, as trace and count take it: at a tail call (a jmp, objdump the truth), a
  // return caught at the function's exits closes the caller as it jumps (the callee its
  // sibling); one caught by the trampoline when the callee returns for it (the callee nested).
  for (const engine of ['bpf', 'ptrace'] as const)
    test(`record --return-probes (${engine}): sites close a tail caller at its jump, the trampoline when its callee returns`, (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      const disassembly = execFileSync('objdump', ['-d', app], { encoding: 'utf8' });
      const tailCaller = /<tail_caller>:\n([\s\S]*?)\n\n/.exec(disassembly)?.[1] ?? '';
      assert.match(tailCaller, /jmp\s+\w+ <tail_callee>/, 'tail_caller ends in a jump');
      const depths = (mode: string) =>
        shape(replay(record(app, [`${app}:tail_c*`], engine, ['--return-probes', mode]).dir));
      assert.deepEqual(depths('sites'), ['0 tail_caller', '0 tail_callee']);
      assert.deepEqual(depths('trampoline'), ['0 tail_caller', '1 tail_callee']);
    });

  // A function whose probe the kernel single-steps (a trap more a call, 13 µs and more in a VM)
  // showed it only in its times. objdump the truth: a first `push` the kernel emulates, a
  // first `sub`, `mov`, `cmp`... it steps, and so every `ret` it is asked to probe.
  for (const [engine, returns] of [
    ['bpf', 'sites'],
    ['tracefs', 'trampoline'],
    ['ptrace', 'sites'],
  ] as const) {
    test(`report (${engine}, --return-probes ${returns}) marks the functions whose probes the kernel single-steps`, (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      const { dir } = record(`${app} 3`, [], engine, ['--return-probes', returns]);
      const text = execFileSync('objdump', ['-d', '--no-show-raw-insn', app], { encoding: 'utf8' });
      const code = new Map<string, { first: string; ret: boolean }>();
      for (const m of text.matchAll(/^[0-9a-f]+ <([\w.]+)>:\n((?:\s+[0-9a-f]+:.*\n)+)/gm)) {
        const lines = m[2]!.trim().split('\n');
        const first = /:\s+(\S+)/.exec(lines[0]!)![1]!;
        code.set(m[1]!, { first, ret: lines.some((l) => /:\s+ret/.test(l)) });
      }
      const report = runCli(['report', dir, '--json']);
      assert.equal(report.status, 0, report.stderr);
      const rows = JSON.parse(report.stdout) as { function: string; kernelStepped?: string }[];
      let checked = 0;
      for (const row of rows) {
        // The program's own functions (the C runtime's _init, _start, frame_dummy... have no
        // return probe where their exits cannot be found).
        const fn = code.get(row.function);
        if (fn === undefined || /^_|_tm_clones$|^frame_dummy$/.test(row.function)) continue;
        const stepped = row.kernelStepped ?? '';
        const what = `${engine}: ${row.function} (${fn.first}, ${fn.ret ? 'a ret' : 'no ret'}): ${stepped}`;
        if (engine === 'ptrace') {
          assert.equal(stepped, '', what);
          continue;
        }
        if (fn.first === 'push') assert.doesNotMatch(stepped, /entry/, what);
        if (/^(sub|mov|cmp|test|xor|lea|add)/.test(fn.first)) {
          assert.match(stepped, /^entry/, what);
          checked++;
        }
        if (returns === 'sites' && fn.ret) {
          assert.match(stepped, /return$/, what);
          checked++;
        }
        if (returns === 'trampoline') assert.doesNotMatch(stepped, /return/, what);
      }
      if (engine !== 'ptrace') assert.ok(checked > 0, report.stdout);
      const textReport = runCli(['report', dir]);
      assert.equal(
        /^kernel-stepped: /m.test(textReport.stdout),
        rows.some((r) => r.kernelStepped !== undefined),
        textReport.stdout,
      );
    });
  }

  test('record --return-probes trampoline on Go code is refused in one line, before anything runs', (t) => {
    const go = findGo();
    if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
    const app = compileGo(go!, 'go-returns');
    const dir = join(work, `rec-${readdirSync(work).length}`);
    const result = runCli([
      'record',
      '--return-probes',
      'trampoline',
      '-c',
      `${app} panic 3`,
      '-o',
      dir,
      `${app}:main.mayPanic`,
    ]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_RETURN_ADDRESS_UNSAFE\]: .*it is a Go program/m);
    assert.doesNotMatch(result.stderr, /Recording|\n\s+at /);
  });

  for (const engine of ENGINES)
    test(`${engine}: C++: an exception thrown through 3 frames closes them as unwound, the rest returned`, (t) => {
      if (!requireHost(t, { root: true, commands: ['g++'] })) return;
      const app = compileProgram('cxx-unwind', { flags: ['-O2'], link: ['-lpthread'] });
      const { dir, stdout } = record(`${app} throw 30`, [`${app}:level*`, `${app}:leaf`], engine);
      const said = /calls=(\d+),(\d+),(\d+) returns=(\d+),(\d+),(\d+)/.exec(stdout);
      assert.ok(said, stdout);
      const [c1, c2, c3, r1, r2, r3] = said.slice(1).map(Number);
      assert.deepEqual(callCounts(dir), {
        'level1(long)': c1,
        'level2(long)': c2,
        'level3(long)': c3,
        'leaf(long)': c3,
      });
      const lines = replay(dir);
      const unwound = (fn: string) =>
        lines.filter((l) => l.function === `${fn}(long)` && l.end === 'unwind').length;
      assert.deepEqual(
        [unwound('level1'), unwound('level2'), unwound('level3')],
        [c1! - r1!, c2! - r2!, c3! - r3!],
      );
      assert.ok(unwound('level1') > 0, 'some calls were unwound');
      // Each level1 holds level2 holds level3 holds leaf; all ended (returned or unwound).
      assert.deepEqual([...new Set(shape(lines).map((l) => l.replace(/ unwind$/, '')))].sort(), [
        '0 level1(long)',
        '1 level2(long)',
        '2 level3(long)',
        '3 leaf(long)',
      ]);
      assert.equal(lines.filter((l) => l.end === 'open').length, 0);
    });

  // inject: a program not built as PIE, whose 1,473 functions took every page near its code
  // for trampolines (no page was left for an int3's copy: the record failed at its start).
  for (const engine of ['bpf', 'inject'] as const)
    test(`${engine}: python3 (Debian): every function of the interpreter recorded, 0 lost, the script runs`, (t) => {
      if (!requireHost(t, { root: true })) return;
      const python = '/usr/bin/python3';
      assert.ok(existsSync(python), `${python} is installed`);
      const { dir, stdout } = record(`${python} -c "print(sum(range(1000)))"`, [], engine);
      assert.equal(stdout, '499500\n');
      const counts = callCounts(dir);
      assert.equal(counts['Py_BytesMain'], 1, 'the interpreter main, once');
      assert.ok((counts['PyObject_Vectorcall'] ?? 0) > 100, 'calls between Python objects');
      const main = replay(dir, '-F', 'Py_BytesMain', '--depth', '1');
      assert.deepEqual(shape(main), ['0 Py_BytesMain'], 'the interpreter returns from its main');
    });

  test('calls -c: record and report in one step, its temporary directory removed', (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const tmp = mkdtempSync(join(work, 'tmp-'));
    const saved = process.env['TMPDIR'];
    process.env['TMPDIR'] = tmp;
    let result: ReturnType<typeof runCli>;
    try {
      result = runCli(['calls', '-c', `${app} all`, '--sort', 'calls']);
    } finally {
      if (saved === undefined) delete process.env['TMPDIR'];
      else process.env['TMPDIR'] = saved;
    }
    assert.equal(result.status, 0, result.stderr);
    const first = result.stdout
      .split('\n')
      .find((l) => /^\S+ \S+\s/.test(l) && / (rec|leaf)( \(.*\))?$/.test(l));
    assert.match(first ?? '', /\s51\s.* rec( \(.*\))?$/, 'rec (51 calls) sorts first by calls');
    assert.deepEqual(readdirSync(tmp), [], 'the temporary recording is removed');
  });

  test('no probe fired because the command runs another program (a copy, a version manager shim on PATH): record, trace (kernel and ptrace), count and latency say so', (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    // Another copy of the program of its name (another inode), and a shim of another name in
    // a directory first on PATH that runs the copy, as pyenv's shims run the python it picks.
    const copy = join(mkdtempSync(join(work, 'copies-')), basename(app));
    copyFileSync(app, copy);
    chmodSync(copy, 0o755);
    assert.notEqual(statSync(copy).ino, statSync(app).ino);
    const bin = mkdtempSync(join(work, 'shims-'));
    const shim = join(bin, 'calls-target');
    writeFileSync(shim, `#!/bin/sh\n# made by pyenv, as its shims are\nexec ${copy} "$@"\n`);
    chmodSync(shim, 0o755);
    assert.notEqual(basename(shim), basename(app));
    const note = (program: string) =>
      new RegExp(
        `^upscope: no probe fired: the command runs ${program}, not ${app}, where the probes are; probe the program that runs, or name the probed one in -c$`,
        'm',
      );

    const recorded = runCli([
      'record',
      '-c',
      `${copy} all`,
      '-o',
      join(work, 'rec-copy'),
      `${app}:rec`,
    ]);
    assert.equal(recorded.status, 0, recorded.stderr);
    assert.match(recorded.stderr, /^upscope: recorded 0 calls and returns/m);
    assert.match(recorded.stderr, note(copy));

    const saved = process.env['PATH'];
    process.env['PATH'] = `${bin}:${saved ?? ''}`;
    let traced: ReturnType<typeof runCli>;
    try {
      traced = runCli(['trace', '-c', 'calls-target all', `${app}:rec`]);
    } finally {
      process.env['PATH'] = saved;
    }
    assert.equal(traced.status, 0, traced.stderr);
    assert.match(traced.stderr, /^upscope: 0 events delivered/m);
    assert.match(
      traced.stderr,
      note(
        `${shim} \\(a pyenv shim, which starts the calls-target pyenv picks: "pyenv which calls-target" names it\\)`,
      ),
    );

    for (const command of [['count'], ['latency'], ['trace', '--engine', 'ptrace']]) {
      const run = runCli([...command, '-c', `${copy} all`, `${app}:rec`]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stderr, note(copy), command.join(' '));
    }

    // A command of another name that runs none of them (a wrapper that might run the probed
    // program but for no hit did not call it): nothing said of it.
    const other = runCli(['count', '-c', 'true', `${app}:rec`]);
    assert.equal(other.status, 0, other.stderr);
    assert.doesNotMatch(other.stderr, /no probe fired/);

    // The program probed, run: its calls, and nothing said.
    const own = runCli(['trace', '-c', `${app} all`, `${app}:rec`, '--max-events', '5']);
    assert.equal(own.status, 0, own.stderr);
    assert.doesNotMatch(own.stderr, /no probe fired/);
  });

  test("no probe fired because the command's program does not link the probed library (perl and libperl.so): said; not when it links it or the command runs other programs", (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    // A library calls-target does not link (late-target dlopen()s it).
    const lib = compileProgram('late-lib', { flags: ['-shared', '-fPIC', '-O2'], suffix: '.so' });
    const linked = execFileSync('ldd', [app], { encoding: 'utf8' });
    assert.doesNotMatch(linked, new RegExp(basename(lib)), 'ldd: not linked');
    const note = new RegExp(
      `^upscope: no probe fired: ${app} does not link ${lib} \\(it is not among the libraries the program loads at its start\\), so its probes fire only if the program loads it later \\(dlopen\\(\\)\\); probe the program's own functions \\(upscope list ${app}\\) or a library it links \\(ldd ${app}\\)$`,
      'm',
    );
    for (const command of [['count'], ['record', '-o', join(work, 'rec-unlinked')]]) {
      const run = runCli([...command, '-c', `${app} all`, `${lib}:late_add`]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stderr, note, command[0]);
    }
    // A library it links (libc), whose probed function it never calls: nothing said.
    const libc = runCli(['count', '-c', `${app} all`, 'libc:mkfifo']);
    assert.equal(libc.status, 0, libc.stderr);
    assert.match(libc.stdout, /^0\s+mkfifo$/m);
    assert.doesNotMatch(libc.stderr, /no probe fired/);
    // A command that runs another program (which might link it): nothing said.
    for (const command of [`sh -c '${app} all'`, `timeout 60 sh -c '${app} all'`]) {
      const shell = runCli(['count', '-c', command, `${lib}:late_add`]);
      assert.equal(shell.status, 0, shell.stderr);
      assert.doesNotMatch(shell.stderr, /no probe fired/, command);
    }
    // Quoted words of a program that is no shell are its data, not programs it runs (as
    // `perl -e 'print scalar(keys %h)'`, where git's scalar is on PATH): said.
    const data = runCli(['count', '-c', `${app} all 'ls; sh'`, `${lib}:late_add`]);
    assert.equal(data.status, 0, data.stderr);
    assert.match(data.stderr, note);
  });

  test('a library probed in a statically linked program: said after a bpf run without hits; refused at once by ptrace and inject, with where to probe instead', (t) => {
    if (cTarget(t) === undefined) return;
    const app = compileProgram('calls-target', { flags: ['-O2', '-static'], link: ['-lpthread'] });
    const headers = execFileSync('readelf', ['--program-headers', app], { encoding: 'utf8' });
    assert.doesNotMatch(headers, /INTERP/, 'readelf: no dynamic loader');
    const counted = runCli(['count', '-c', `${app} all`, 'libc:malloc']);
    assert.equal(counted.status, 0, counted.stderr);
    assert.match(
      counted.stderr,
      new RegExp(
        `^upscope: no probe fired: ${app} is statically linked: it loads no library, \\S*libc\\.so\\.6 included; the library functions it uses are in it: probe them there \\(upscope list ${app}\\)$`,
        'm',
      ),
    );
    for (const engine of ['ptrace', 'inject']) {
      const run = runCli(['trace', '--engine', engine, '-c', `${app} all`, 'libc:malloc']);
      assert.notEqual(run.status, 0, engine);
      assert.match(
        run.stderr,
        new RegExp(
          `^error\\[ERR_NOT_MAPPED\\]: Cannot probe "libc:malloc" in process \\d+: "${app}" is statically linked \\(no dynamic loader\\), so it loads no library and "\\S*libc\\.so\\.6" is never mapped in it\\n  hint: The library functions it uses are in it: probe them there \\(upscope list ${app}\\)\\n$`,
        ),
        engine,
      );
    }
    // Its own copy of the C library is what to probe: the count is the program's.
    const own = runCli(['count', '-c', `${app} all`, `${app}:malloc`]);
    assert.equal(own.status, 0, own.stderr);
    assert.ok(Number(/^(\d+)\s+malloc$/m.exec(own.stdout)?.[1]) > 0, own.stdout);
    assert.doesNotMatch(own.stderr, /no probe fired/);
  });

  test('a recording read while upscope still makes it says so (not that it was killed); once its upscope is killed, that it did not end cleanly', async (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const dir = join(work, 'rec-live');
    const target = spawnCollected(app, ['loop', '12']);
    try {
      const run = spawnUpscope(['record', '-p', String(target.pid), `${app}:rec`, '-o', dir]);
      try {
        await waitFor(run, /^Recording 1 function /m);
        // Wait for some records (the file is made once the probes are live).
        const file = join(dir, 'calls.bin');
        const size = () => (existsSync(file) ? statSync(file).size : 0);
        const deadline = Date.now() + 20_000;
        while (size() < 100_000 && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        const live = runCli(['report', dir, '--json']);
        assert.equal(live.status, 0, live.stderr);
        assert.match(
          live.stderr,
          new RegExp(
            `^upscope: warning: the recording is still being made \\(by upscope, process ${run.pid}\\): the calls written so far are shown, those that have not returned yet as not returned$`,
            'm',
          ),
        );
        assert.doesNotMatch(live.stderr, /did not end cleanly/);
        const rows = JSON.parse(live.stdout) as { function: string; calls: number }[];
        assert.ok((rows.find((r) => r.function === 'rec')?.calls ?? 0) > 1000, live.stdout);
      } finally {
        run.child.kill('SIGKILL');
        await ended(run);
      }
      const killed = runCli(['report', dir]);
      assert.equal(killed.status, 0, killed.stderr);
      assert.match(
        killed.stderr,
        /^upscope: warning: the recording did not end cleanly \(upscope was killed\?\)/m,
      );
      assert.doesNotMatch(killed.stderr, /still being made/);
    } finally {
      target.child.kill('SIGKILL');
      await ended(target);
    }
  });

  test('bad input gets one clear line: a pattern matching nothing, not a recording, a truncated one', (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const none = runCli([
      'record',
      '-c',
      `${app} exit`,
      '-o',
      join(work, 'none'),
      `${app}:nomatch*`,
    ]);
    assert.notEqual(none.status, 0);
    assert.match(none.stderr, /^error\[ERR_NO_MATCH\]: .*nomatch/m);
    assert.doesNotMatch(none.stderr, /\n\s+at /, 'no stack trace');

    // --children without -p: one line on every engine, before anything is planned.
    for (const engine of ENGINES) {
      const args = ['record', '--engine', engine, '--children', '-c', `${app} exit`];
      const bad = runCli([...args, '-o', join(work, `children-${engine}`), `${app}:nomatch*`]);
      assert.equal(bad.status, 2, `${engine}: ${bad.stderr}`);
      assert.match(
        bad.stderr,
        /^error\[ERR_USAGE\]: Cannot take the children of a process without one/,
      );
    }

    // -o a file, or a directory of other files: said before anything is attached (no
    // "Recording" line first), the command not run.
    const file = join(work, 'a-file');
    writeFileSync(file, 'not a recording\n');
    const others = mkdtempSync(join(work, 'others-'));
    writeFileSync(join(others, 'notes.txt'), 'mine\n');
    for (const [out, why] of [
      [file, 'it is not a directory'],
      [others, 'it holds other files, not an upscope recording'],
    ] as const) {
      const bad = runCli(['record', '-c', `${app} all`, '-o', out]);
      assert.equal(bad.status, 2, bad.stderr);
      assert.equal(bad.stdout, '', 'the command did not run');
      assert.equal(
        bad.stderr.split('\n')[0],
        `error[ERR_USAGE]: Cannot record into "${out}": ${why}`,
      );
      assert.deepEqual(leftovers(), []);
    }
    assert.deepEqual(readdirSync(others), ['notes.txt']);
    // -o where no directory can be made: under /proc (Node.js's recursive mkdirSync loops
    // for ever there), through a file; said before anything is attached, the command not run.
    for (const [out, why] of [
      ['/proc/upscope-no-such/rec', 'it cannot be made there (.*) \\(ENOENT\\)'],
      [join(file, 'rec'), 'a part of its path is a file \\(ENOTDIR\\)'],
    ] as const) {
      const bad = runCli(['record', '-c', `${app} all`, '-o', out], { timeoutMs: 60_000 });
      assert.equal(bad.status, 5, bad.stderr);
      assert.equal(bad.stdout, '', 'the command did not run');
      assert.match(
        bad.stderr,
        new RegExp(
          `^error\\[ERR_RECORDING_WRITE\\]: Cannot record into "${out}": ${why}\n  hint: Give -o a directory that can be made and written`,
        ),
      );
      assert.deepEqual(leftovers(), []);
    }
    // A directory made for a run that fails before it records is removed again; the
    // directories above it, made with it, stay.
    const made = join(work, 'made', 'rec');
    const failed = runCli(['record', '-c', `${app} all`, '-o', made, `${app}:nomatch*`]);
    assert.equal(failed.status, 3, failed.stderr);
    assert.deepEqual(readdirSync(join(work, 'made')), []);
    // A cache directory that cannot be made: nothing kept, the count made all the same.
    const counted = runCli(['count', '-c', `${app} all`, `${app}:rec`], {
      timeoutMs: 60_000,
      env: { UPSCOPE_CACHE_DIR: '/proc/upscope-no-such/cache' },
    });
    assert.equal(counted.status, 0, counted.stderr);

    const start = runCli(['trace', '--engine', 'bpf', '-c', `${app} exit`, `r:${app}:_start`]);
    assert.equal(start.status, 3);
    assert.match(
      start.stderr,
      /^error\[ERR_RETURN_ADDRESS_UNSAFE\]: Cannot place a return probe on "_start" in ".*": it is the program's entry point/,
    );

    const empty = mkdtempSync(join(work, 'empty-'));
    const notOne = runCli(['report', empty]);
    assert.equal(notOne.status, 4);
    assert.match(
      notOne.stderr,
      /^error\[ERR_NOT_A_RECORDING\]: Cannot read the recording ".*": it has no index.json\n/,
    );

    const { dir } = record(`${app} all`);
    const whole = callCounts(dir);
    const size = readFileSync(join(dir, 'calls.bin')).length;
    // Files that are not regular ones (a FIFO's open waits for a writer, for ever): said.
    for (const name of ['index.json', 'calls.bin']) {
      const odd = mkdtempSync(join(work, 'odd-'));
      if (name === 'calls.bin') copyFileSync(join(dir, 'index.json'), join(odd, 'index.json'));
      execFileSync('mkfifo', [join(odd, name)]);
      const fifo = runCli(['report', odd], { timeoutMs: 30_000 });
      assert.equal(fifo.status, 4, fifo.stderr);
      assert.equal(
        fifo.stderr.split('\n')[0],
        `error[ERR_NOT_A_RECORDING]: Cannot read the recording "${odd}": its ${name} is not a regular file`,
      );
    }

    truncateSync(join(dir, 'calls.bin'), size - 30);
    const cut = runCli(['report', dir, '--json']);
    assert.equal(cut.status, 0, cut.stderr);
    const partial = (size - 30 - 16) % 24;
    assert.match(
      cut.stderr,
      new RegExp(
        `^upscope: warning: calls.bin is truncated: it ends ${partial} bytes into a record`,
        'm',
      ),
    );
    const rows = JSON.parse(cut.stdout) as { function: string; calls: number }[];
    assert.ok(rows.length > 0 && rows.every((r) => r.calls <= (whole[r.function] ?? 0)));
  });

  test('library: record() gives the call records as they come, and a CallTreeBuilder fed them gives the calls the target counts', async (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const out = join(work, 'library.out');
    const fd = openSync(out, 'w');
    const records: CallRecord[] = [];
    const trees = new CallTreeBuilder();
    let name: (fn: number) => string;
    try {
      await using calls = await recordLive({ command: `${app} all`, commandStdout: fd });
      name = (fn) => calls.name(fn);
      for await (const r of calls) {
        records.push(r);
        trees.push(r);
      }
      assert.equal(calls.attachment.stats().lost, 0);
      assert.equal(calls.attachment.exit?.code, 0);
    } finally {
      closeSync(fd);
    }
    const own = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    const parent = own.find((l) => l['rec'] !== undefined)!;
    const child = own.find((l) => l['rec'] === undefined)!;
    // Each thread's records come in the order it made them.
    const last = new Map<number, bigint>();
    for (const r of records) {
      assert.ok(r.timeNs >= (last.get(r.tid) ?? 0n), `thread ${r.tid} in order`);
      last.set(r.tid, r.timeNs);
    }
    const threads = trees.finish();
    const calls = new Map(functionStats(threads).map((row) => [name(row.fn), row.calls]));
    for (const fn of ['rec', 'is_even', 'is_odd', 'thread_body', 'leaf', 'jumper', 'deep']) {
      assert.equal(calls.get(fn), parent[fn], `calls of ${fn}`);
    }
    assert.equal(calls.get('child_work'), child['child_work']);
    assert.deepEqual(
      threads.map((th) => th.pid === parent['pid'] || th.pid === child['pid']),
      threads.map(() => true),
    );
  });

  test('a stripped program: its exported functions are recorded and that is said; with none, one line says how to get debug info', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const none = compileProgram('calls-target', {
      flags: ['-O2'],
      link: ['-lpthread'],
      strip: true,
    });
    const failed = runCli(['record', '-c', `${none} exit`, '-o', join(work, 'stripped-none')]);
    assert.equal(failed.status, 3);
    const errors = failed.stderr.split('\n').filter((l) => l.startsWith('error'));
    assert.equal(errors.length, 1, failed.stderr);
    assert.match(errors[0]!, /^error\[ERR_NO_MATCH\]: .*no function name matches/);
    assert.match(failed.stderr, /hint: The file is stripped: only .dynsym \(exported functions\)/);
    assert.match(
      failed.stderr,
      /hint: Rebuild it with -g, or point to its debug file directory with --debug-dir DIR/,
    );
    assert.doesNotMatch(failed.stderr, /\n\s+at /, 'no stack trace');
    assert.equal(failed.stdout, '', 'the command was not started');

    // Built with -rdynamic, its functions are exported: recorded, and said to be all there is.
    const exported = compileProgram('calls-target', {
      flags: ['-O2', '-rdynamic'],
      link: ['-lpthread'],
      strip: true,
    });
    const { dir, stdout } = record(`${exported} exit`);
    const own = JSON.parse(stdout) as Record<string, number>;
    const counts = callCounts(dir);
    assert.deepEqual(
      [counts['main'], counts['quitter'], counts['ender']],
      [1, own['quitter'], own['ender']],
    );
    const said = runCli(['record', '-c', `${exported} exit`, '-o', join(work, 'stripped-said')]);
    assert.match(
      said.stderr,
      /^upscope: ".*" is stripped: only its \d+ exported functions \(\.dynsym\) are recorded; rebuild it with -g, or give the directory of its debug file with --debug-dir DIR/m,
    );
  });

  test('a corrupt recording: one warning says where, the records before it are reported', (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const { dir } = record(`${app} all`);
    const whole = callCounts(dir);
    // The 11th record's kind (its first byte) made one no version writes.
    const fd = openSync(join(dir, 'calls.bin'), 'r+');
    writeSync(fd, Buffer.from([0xff]), 0, 1, 16 + 10 * 24);
    closeSync(fd);
    const bad = runCli(['report', dir, '--json']);
    assert.equal(bad.status, 0, bad.stderr);
    assert.equal(
      bad.stderr,
      'upscope: warning: calls.bin is corrupt: the record at byte 256 is corrupt (kind 255); the 10 records before it are shown\n',
    );
    const rows = JSON.parse(bad.stdout) as { function: string; calls: number }[];
    assert.ok(rows.length > 0 && rows.every((r) => r.calls <= (whole[r.function] ?? 0)));
    // A header that is not one: the directory is not a recording.
    const header = openSync(join(dir, 'calls.bin'), 'r+');
    writeSync(header, Buffer.from('NOTCALLS'), 0, 8, 0);
    closeSync(header);
    const notOne = runCli(['replay', dir]);
    assert.equal(notOne.status, 4);
    assert.match(
      notOne.stderr,
      /^error\[ERR_NOT_A_RECORDING\]: Cannot read the recording ".*": calls.bin is not a calls file: it does not start with "UPSCALLS"\n/,
    );
    assert.doesNotMatch(notOne.stderr, /\n\s+at /);
  });

  /** mark-on-signal started (it calls marker() at each SIGUSR1), and `record -p` of it to `dir`. */
  async function recordMarker(engine: string, dir: string) {
    const app = compileProgram('mark-on-signal', { flags: ['-O2'] });
    const target = spawnCollected(app, []);
    await waitFor(target, /^ready$/m, 'stdout');
    const run = spawnUpscope([
      'record',
      '--engine',
      engine,
      '-p',
      String(target.pid),
      '-o',
      dir,
      `${app}:marker`,
    ]);
    return { target, run };
  }

  for (const engine of ['bpf', 'tracefs'] as const) {
    test(`record -p (${engine}): a call made the moment "Recording" is said is recorded (the line comes once the probes are live)`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const dir = join(work, `live-${engine}`);
      const { target, run } = await recordMarker(engine, dir);
      try {
        await waitFor(run, /^Recording 1 function /m);
        // At once, then as soon as the target has made that call: each is recorded.
        target.child.kill('SIGUSR1');
        await waitFor(target, /^marked 1$/m, 'stdout');
        target.child.kill('SIGUSR1');
        await waitFor(target, /^marked 2$/m, 'stdout');
        await new Promise((r) => setTimeout(r, 200));
        run.child.kill('SIGINT');
        const { code } = await ended(run);
        assert.equal(code, 0, run.stderr);
      } finally {
        target.child.kill('SIGTERM');
        await ended(target);
      }
      const report = runCli(['report', dir, '--json']);
      assert.equal(report.status, 0, report.stderr);
      const rows = JSON.parse(report.stdout) as { function: string; calls: number }[];
      assert.deepEqual(
        rows.map((r) => [r.function, r.calls]),
        [['marker', 2]],
        'both calls, as the target counted them',
      );
      assert.deepEqual(leftovers(), []);
    });
  }

  for (const engine of ['bpf', 'inject'] as const) {
    test(`record (${engine}): the process exiting ends the recording, which says so, as trace and count do; with -c, how the command ended is said`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { target, run } = await recordMarker(engine, join(work, `exits-${engine}`));
      try {
        await waitFor(run, /^Recording 1 function /m);
        target.child.kill('SIGUSR1');
        await waitFor(target, /^marked 1$/m, 'stdout');
      } finally {
        target.child.kill('SIGTERM');
        await ended(target);
      }
      assert.equal((await ended(run)).code, 0, run.stderr);
      assert.match(
        run.stderr,
        new RegExp(`^upscope: process ${target.pid} exited, ending the recording$`, 'm'),
      );
      const calls = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
      const command = runCli([
        'record',
        '--engine',
        engine,
        '-c',
        `${calls} exit`,
        '-o',
        join(work, `exits-${engine}-c`),
        `${calls}:ender`,
      ]);
      assert.equal(command.status, 0, command.stderr);
      assert.match(command.stderr, /^upscope: the command exited with status 0$/m);
      assert.doesNotMatch(command.stderr, /process \d+ exited/);
      assert.deepEqual(leftovers(), []);
      assert.deepEqual(tracedChildren(), []);
    });
  }

  for (const engine of ['bpf', 'inject'] as const) {
    test(`record --duration (${engine}): -p ends after the time given, the process running on; -c ends the command too`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { app, target, lastCount } = await busyCounter(`busy-duration-${engine}.log`);
      /** A recording of busy_tick for a second, into a new directory. */
      const recordSecond = (dir: string, ...what: string[]) =>
        runCli([
          'record',
          '--engine',
          engine,
          '--duration',
          '1',
          ...what,
          '-o',
          dir,
          `${app}:busy_tick`,
        ]);
      try {
        const dir = join(work, `duration-p-${engine}`);
        const began = Date.now();
        const run = recordSecond(dir, '-p', String(target.pid));
        const tookMs = Date.now() - began;
        assert.equal(run.status, 0, run.stderr);
        assert.match(run.stderr, /--duration 1 s reached, ending the recording/);
        assert.ok(tookMs < 15_000, `ended after ${tookMs} ms`);
        // The calls of about a second were recorded, and the target counts on.
        const calls = callCounts(dir)['busy_tick'] ?? 0;
        assert.ok(calls > 100, `${calls} calls recorded`);
        const before = lastCount();
        await new Promise((r) => setTimeout(r, 300));
        assert.ok(lastCount() > before, 'the target keeps counting');
        assert.equal(target.exitCode, null);
      } finally {
        target.kill('SIGKILL');
        await new Promise((r) => target.once('exit', r));
      }
      // -c: the command, which would run for ever, is ended with the recording.
      const dir = join(work, `duration-c-${engine}`);
      const run = recordSecond(dir, '-c', app);
      assert.equal(run.status, 0, run.stderr);
      assert.ok((callCounts(dir)['busy_tick'] ?? 0) > 100);
      assert.equal(
        execFileSync('sh', ['-c', `pgrep -f '^${app}$' || true`], { encoding: 'utf8' }),
        '',
        'the command is gone',
      );
    });
  }

  test('record -p onto a full disk: one line, probes removed, the process runs on, the part written is read', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'mount', 'umount'] })) return;
    const disk = mkdtempSync(join(work, 'disk-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', disk]);
    const { app, target, lastCount } = await busyCounter('busy.log');
    try {
      const run = runCli([
        'record',
        '-p',
        String(target.pid),
        '-o',
        join(disk, 'rec'),
        `${app}:busy_tick`,
      ]);
      assert.equal(run.status, 5, run.stderr);
      const errors = run.stderr.split('\n').filter((l) => l.startsWith('error'));
      assert.deepEqual(errors, [
        `error[ERR_RECORDING_WRITE]: Cannot write the recording "${join(disk, 'rec')}": no space left on the device (ENOSPC)`,
      ]);
      assert.match(
        run.stderr,
        /hint: Free space there, or give -o a directory on another file system/,
      );
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
      // The target is alive, not traced, and its own count goes on.
      assert.equal(target.exitCode, null);
      assert.match(readFileSync(`/proc/${target.pid}/status`, 'utf8'), /^TracerPid:\s+0$/m);
      const before = lastCount();
      await new Promise((r) => setTimeout(r, 400));
      assert.ok(lastCount() > before, 'the target keeps counting');
      assert.deepEqual(leftovers(), []);
      // What reached the disk is read, and said to be incomplete.
      const read = runCli(['report', join(disk, 'rec'), '--json']);
      assert.equal(read.status, 0, read.stderr);
      assert.match(read.stderr, /warning: the recording did not end cleanly/);
      const rows = JSON.parse(read.stdout) as { function: string; calls: number }[];
      assert.equal(rows[0]?.function, 'busy_tick');
      assert.ok(rows[0]!.calls > 1000);
    } finally {
      target.kill('SIGKILL');
      await new Promise((r) => target.once('exit', r));
      execFileSync('umount', [disk]);
    }
  });

  /** Each function's calls and unwound calls, from report --json. */
  function unwoundCounts(dir: string): Record<string, [number, number]> {
    const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
      function: string;
      calls: number;
      unwound: number;
    }[];
    return Object.fromEntries(rows.map((r) => [r.function, [r.calls, r.unwound]]));
  }

  test('Go: a recovered panic through recorded functions: output unchanged, calls and unwinds as the program counts them', (t) => {
    const go = findGo();
    if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
    const app = compileGo(go!, 'go-returns');
    const untraced = execFileSync(app, ['panic', '300'], { encoding: 'utf8' });
    const { dir, stdout } = record(`${app} panic 300`, [`${app}:main.*`]);
    assert.equal(stdout, untraced, "the program's own account is unharmed");
    const own = /calls=(\d+) returns=(\d+) inner_calls=(\d+) inner_returns=(\d+)/.exec(stdout)!;
    const [calls, returns, innerCalls, innerReturns] = own.slice(1).map(Number);
    const counts = unwoundCounts(dir);
    assert.deepEqual(counts['main.main'], [1, 0]);
    assert.deepEqual(counts['main.guard']?.[0], 300);
    assert.deepEqual(counts['main.mayPanic'], [calls, calls! - returns!]);
    assert.deepEqual(counts['main.inner'], [innerCalls, innerCalls! - innerReturns!]);
  });

  test('latency -p of a process busy in a recursion (--return-probes sites): the returns of the calls begun before the probes were placed are said as such', async (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    // The calls of rec under way while its probes are placed (13 deep nearly always: rec(0)
    // spins a millisecond or so) return without their entry. Without the spin, a run saw none
    // now and then: the probes of one file are placed microseconds apart, and a recursion
    // that is over in a microsecond may fall between them. Once it runs: probes placed before
    // its exec (its file not mapped yet) are all live before its first call.
    const target = spawn(app, ['loop', '12', '1000000'], { stdio: 'ignore' });
    try {
      while (!readFileSync(`/proc/${target.pid}/maps`, 'utf8').includes(app)) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
      const run = runCli([
        'latency',
        '-p',
        String(target.pid),
        '--engine',
        'bpf',
        '--return-probes',
        'sites',
        '--duration',
        '0.5',
        `${app}:rec`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stdout, /rec\b[\s\S]*?count\s+[1-9]/);
      assert.match(
        run.stderr,
        /upscope: [1-9]\d* returns without their entry \(calls begun before the probes were placed\)/,
      );
    } finally {
      target.kill('SIGKILL');
      await once(target, 'exit');
    }
  });

  for (const returns of ['trampoline', 'sites'] as const) {
    test(`record -p of a process busy in a recursion (--return-probes ${returns}): every call is closed by its own return, none taken for unwound or left open, from the first probe placed to the last removed`, async (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      // rec(12) again and again: trees 13 calls deep, entered and left while the kernel
      // places the probes and while it removes them.
      const { dir } = await recordBusy(app, ['loop', '12'], returns, `${app}:rec`);
      const calls = replay(dir);
      assert.ok(Math.max(...calls.map((c) => c.depth)) <= 12, 'no tree deeper than rec(12)');
      assert.ok(calls.filter((c) => c.depth === 0).length > 10, 'tree after tree');
    });
  }

  test('record -p (bpf, --return-probes sites) of a busy recursion among 4,096 other functions of its file: its exits are placed before its entry in their one link, so no call is taken for unwound', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'nm'] })) return;
    // -O0: gcc makes rec() a loop otherwise.
    const app = compileProgram('many-functions', { flags: ['-O0'] });
    const functions = execFileSync('nm', [app], { encoding: 'utf8' })
      .split('\n')
      .filter((line) => / T f[0-3]{6}$/.test(line)).length;
    assert.equal(functions, 4096, 'nm: the functions besides rec()');
    // Placing one probe after another takes the kernel tens of milliseconds here: entries
    // before exits would see rec()'s calls of that time enter without their return.
    const { stderr } = await recordBusy(app, ['12'], 'sites', `${app}:*`);
    assert.match(stderr, /Recording 4\d{3} functions/);
  });

  // bpf alone: on tracefs the same run ends at once here too, but once in CI it waited until
  // the program was killed (cause not found).
  for (const engine of ['bpf'] as const) {
    test(`record -c of a program whose main never returns, calling probed functions all the time (${engine}, --return-probes trampoline): ends at --duration, not when the program stops, and its trees stay whole`, async (t) => {
      const app = cTarget(t);
      if (app === undefined) return;
      // main -> rec(12) again and again until killed: main's return trampoline is set (it is
      // entered after the probes), and a trampoline is set at every call of rec.
      const dir = join(work, `rec-endless-${engine}`);
      const run = spawnUpscope([
        'record',
        '--engine',
        engine,
        '-c',
        `${app} loop 12`,
        '--return-probes',
        'trampoline',
        '--duration',
        '1',
        '-o',
        dir,
        `${app}:main`,
        `${app}:rec`,
      ]);
      // Removing the probes waited on the program (for ever, as it never ends by itself): it
      // is killed after 30 s so that the test ends, and that says the run waited.
      const { exit, waited } = await endedUnaided(run, () => {
        for (const pid of descendantsOf(run.pid)) process.kill(pid, 'SIGKILL');
      });
      assert.equal(waited, false, 'upscope ended only once the program was killed');
      assert.equal(exit.code, 0, run.stderr);
      assert.match(run.stderr, /--duration 1 s reached/);
      const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
        function: string;
        calls: number;
        unwound: number;
        notReturned: number;
      }[];
      const rec = rows.find((r) => r.function === 'rec')!;
      assert.ok(rec.calls > 1000, `${rec.calls} calls`);
      assert.equal(rec.unwound, 0);
      // The calls running when the recording ended (main's, and at most a tree of rec).
      assert.ok(rec.notReturned <= 13, `${rec.notReturned} not returned`);
      assert.deepEqual(
        rows.filter((r) => r.function === 'main').map((r) => [r.calls, r.notReturned]),
        [[1, 1]],
      );
    });
  }

  /**
   * Programs with a thread, started on a word from the test, that runs a function that never
   * returns (`spinner`), calling `callee` (of the program) and `library` (of libc) again and
   * again until killed: `library` is called once for every `ratio` calls of `callee`.
   */
  const spinners = {
    C: {
      // spinner -> rec(2) and leaf -> pthread_mutex_lock, on SIGUSR1.
      build: (t: Parameters<typeof requireHost>[0]) => cTarget(t),
      args: ['spin'],
      stdin: 'ignore',
      go: (target: ReturnType<typeof spawnCollected>) => target.child.kill('SIGUSR1'),
      spinner: 'spinner',
      callee: 'rec',
      library: 'pthread_mutex_lock',
      ratio: 3,
    },
    Rust: {
      // spin -> step -> getpid, on a line of stdin.
      build: (t: Parameters<typeof requireHost>[0]) => {
        const rustc = findRustc();
        if (!requireHost(t, { root: true, commands: rustc === undefined ? ['rustc'] : [] })) {
          return undefined;
        }
        return compileRust(rustc!, 'rust-spin', ['-C', 'opt-level=2']);
      },
      args: [],
      stdin: 'pipe',
      go: (target: ReturnType<typeof spawnCollected>) => target.child.stdin!.write('go\n'),
      spinner: 'spin',
      callee: 'step',
      library: 'getpid',
      ratio: 1,
    },
  } as const;

  for (const [language, command] of [
    ['C', 'record'],
    ['C', 'latency'],
    ['Rust', 'record'],
  ] as const) {
    test(`${language}: ${command} -p of a process whose thread, started after the probes, never returns and calls probed functions of two files (bpf, --return-probes trampoline): ends at --duration, not when the program stops`, async (t) => {
      const program = spinners[language];
      const app = program.build(t);
      if (app === undefined) return;
      // The spinner's trampoline is set (it starts once the probes are live) and never
      // taken, and every call of the other two sets one, in two links (a file each).
      const target = spawnCollected(app, program.args, {}, program.stdin);
      const functions = [
        `${app}:${program.spinner}`,
        `${app}:${program.callee}`,
        `libc:${program.library}`,
      ];
      const dir = join(work, `rec-spin-${language}-${command}`);
      let run: Awaited<ReturnType<typeof trampolineRun>>;
      try {
        await waitFor(target, /^ready$/m, 'stdout');
        run = await trampolineRun(command, target.pid, 'bpf', 1, [
          ...(command === 'record' ? ['-o', dir] : []),
          ...functions,
        ]);
        program.go(target);
        // Removing the probes waited on the program, for ever: it is killed after 30 s so
        // that the test ends, and that says the run waited.
        const { exit, waited } = await endedUnaided(run, () => target.child.kill('SIGKILL'));
        assert.equal(waited, false, 'upscope ended only once the program was killed');
        assert.equal(exit.code, 0, run.stderr);
        assert.doesNotMatch(run.stderr, /still removing the probes/);
        assert.ok(!['Z', undefined].includes(procState(target.pid)), 'the program runs on');
      } finally {
        target.child.kill('SIGKILL');
        await target.exited;
      }
      if (command === 'latency') {
        // No call is left out or unwound (none nests 64 deep, nothing longjmps): the entries
        // seen while the returns are removed (first) are not taken for such.
        assert.doesNotMatch(run.stderr, /did not report|unwound|nested/);
        // Each function timed, the spinner never (its call has not returned).
        for (const fn of [program.callee, program.library]) {
          assert.match(run.stdout, new RegExp(`${fn}\\b[\\s\\S]*?count\\s+[1-9]`));
        }
        return;
      }
      const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
        function: string;
        calls: number;
        notReturned: number;
      }[];
      const row = (fn: string) => rows.find((r) => r.function === fn);
      assert.deepEqual([row(program.spinner)?.calls, row(program.spinner)?.notReturned], [1, 1]);
      const calls = row(program.callee)!.calls;
      assert.ok(calls > 1000, `${calls} calls of ${program.callee}`);
      // As many calls of the library's function as the program makes for its own, give or
      // take the one running at each end.
      const library = row(program.library)!.calls;
      assert.ok(
        Math.abs(library - calls / program.ratio) <= 2,
        `${library} calls of ${program.library}`,
      );
    });
  }

  test('record -p of a process whose child stays in a function that never returns, calling functions of two files, while another child ends (bpf, --return-probes trampoline): the run goes on and ends at --duration, the child that ended recorded whole', async (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    // Once the probes are live: a child in spinner for ever, then one in brief, which ends.
    // Removing the links of the one that ended waited on the other child's trampolines, and
    // stopped the run (nothing read, the end never came) as long as that child ran.
    const target = spawnCollected(app, ['spin-fork']);
    const dir = join(work, 'rec-spin-fork');
    try {
      await waitFor(target, /^ready$/m, 'stdout');
      const run = await trampolineRun('record', target.pid, 'bpf', 2, [
        '-o',
        dir,
        `${app}:spinner`,
        `${app}:brief`,
        `${app}:rec`,
        'libc:pthread_mutex_lock',
      ]);
      target.child.kill('SIGUSR1');
      await waitFor(target, /^brief ended$/m, 'stdout');
      const { exit, waited } = await endedUnaided(run, () => {
        for (const pid of descendantsOf(target.pid)) process.kill(pid, 'SIGKILL');
      });
      assert.equal(waited, false, 'upscope ended only once the child was killed');
      assert.equal(exit.code, 0, run.stderr);
      assert.match(run.stderr, /--duration 2 s reached/);
    } finally {
      for (const pid of descendantsOf(target.pid)) process.kill(pid, 'SIGKILL');
      target.child.kill('SIGKILL');
      await target.exited;
    }
    const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
      function: string;
      calls: number;
      notReturned: number;
    }[];
    const row = (fn: string) => rows.find((r) => r.function === fn);
    assert.deepEqual([row('spinner')?.calls, row('spinner')?.notReturned], [1, 1]);
    // brief's child was followed from its fork to its end: its call whole, with its locks.
    assert.deepEqual([row('brief')?.calls, row('brief')?.notReturned], [1, 0]);
    assert.ok(row('pthread_mutex_lock')!.calls > 1000, `${row('pthread_mutex_lock')!.calls}`);
  });

  test('a recursion 20,000 calls deep: report, graph and replay read it whole, in every format, and say the depth past 64 levels', (t) => {
    const app = cTarget(t);
    if (app === undefined) return;
    const { dir, stdout } = record(`${app} deep 20000`, [`${app}:rec`], 'bpf', [
      '--return-probes',
      'sites',
    ]);
    const calls = (JSON.parse(stdout.trim()) as { rec: number }).rec;
    assert.equal(calls, 20001);
    const cli = (...args: string[]) => {
      const result = runCli(args);
      assert.equal(result.status, 0, `${args.join(' ')}\n${result.stderr}`);
      return result.stdout;
    };
    const [row] = JSON.parse(cli('report', dir, '--json')) as {
      function: string;
      calls: number;
      unwound: number;
      notReturned: number;
    }[];
    assert.deepEqual(row && [row.function, row.calls, row.unwound, row.notReturned], [
      'rec',
      calls,
      0,
      0,
    ]);
    // The merged tree: one path per level, as deep as the recursion.
    let node = (JSON.parse(cli('graph', dir, '--json')) as { children: unknown[] }[])[0];
    let levels = 0;
    while (node !== undefined) {
      levels++;
      assert.ok(node.children.length <= 1);
      node = node.children[0] as typeof node;
    }
    assert.equal(levels, calls);
    const graph = cli('graph', dir).trimEnd().split('\n');
    assert.equal(graph.length, calls + 1, 'a line per level and the heading');
    assert.match(graph.at(-1)!, /^ {2}\S.* {2}\s*1 {2}(?:[│ ] {2}){63}└─ \[depth 20000\] rec$/);
    const replayed = replay(dir);
    assert.equal(replayed.length, calls);
    assert.equal(Math.max(...replayed.map((l) => l.depth)), calls - 1);
    // Times in two columns of 12, then 64 levels of indent.
    assert.match(cli('replay', dir), /^.{28}(?: {2}){64}\[depth 20000\] rec$/m);
    // The stack formats keep 1,024 levels.
    const folded = cli('graph', dir, '--format', 'folded').trimEnd().split('\n');
    assert.equal(folded.length, 1024);
    assert.equal(folded.at(-1)!.split(' ')[0]!.split(';').length, 1024);
    assert.match(cli('replay', dir, '--format', 'chrome'), /"traceEvents"/);
  });

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`Go (${engine}): each goroutine's calls are one tree of their own, closed, though it parks on one thread and runs on another`, (t) => {
      const go = findGo();
      if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
      const app = compileGo(go!, 'go-returns');
      const goroutines = 12;
      const untraced = execFileSync(app, ['chan', String(goroutines)], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      const { dir, stdout } = record(`${app} chan ${goroutines}`, [`${app}:main.*`], engine);
      assert.equal(stdout, untraced, "the program's own account is unharmed");
      const [calls, returns] = /chan calls=(\d+) returns=(\d+)/.exec(stdout)!.slice(1).map(Number);
      assert.equal(calls, goroutines);
      const rows = JSON.parse(runCli(['report', dir, '--json']).stdout) as {
        function: string;
        calls: number;
        unwound: number;
        notReturned: number;
      }[];
      // Every call of wait() returned, unwound by nothing: one that parked on one thread and
      // returned on another is one call of its goroutine. (A goroutine's closure calls
      // wg.Done() in a defer before it returns, so the program may exit first: a closure's
      // call may be left open by the end of the process, as many as there are goroutines.)
      const wait = rows.find((r) => r.function === 'main.wait');
      assert.deepEqual(wait && [wait.calls, wait.unwound, wait.notReturned], [returns, 0, 0]);
      const mainRow = rows.find((r) => r.function === 'main.main');
      assert.deepEqual(mainRow && [mainRow.calls, mainRow.unwound, mainRow.notReturned], [1, 0, 0]);
      for (const row of rows) {
        assert.ok(
          row.unwound + row.notReturned <= goroutines,
          `${row.function}: ${row.unwound} unwound, ${row.notReturned} open`,
        );
      }
      // Each goroutine that waited is its own thread of the recording, its tree rooted at the
      // closure it was started with; main.main's tree holds none of their calls.
      const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as {
        threads: { tid: number; goroutine?: string }[];
      };
      const lines = replay(dir);
      const rootsOf = new Map<number, string[]>();
      for (const line of lines) {
        if (line.depth === 0)
          rootsOf.set(line.tid, [...(rootsOf.get(line.tid) ?? []), line.function]);
      }
      const waiting = index.threads.filter((thread) =>
        lines.some((l) => l.tid === thread.tid && l.function === 'main.wait'),
      );
      assert.equal(waiting.length, goroutines, 'one thread of the recording per goroutine');
      for (const thread of waiting) {
        assert.match(thread.goroutine ?? '', /^0x[0-9a-f]+$/, 'named by its goroutine');
        // One root: the closure runChan started it with (the compiler numbers them).
        const roots = rootsOf.get(thread.tid) ?? [];
        assert.equal(roots.length, 1, roots.join(', '));
        assert.match(roots[0]!, /^main\.runChan\.func\d+$/);
      }
      const main = index.threads.find((thread) => rootsOf.get(thread.tid)?.includes('main.main'));
      assert.ok(main !== undefined);
      assert.ok(!lines.some((l) => l.tid === main.tid && l.function === 'main.wait'));
      const text = runCli(['replay', dir]).stdout;
      assert.match(text, /^# goroutine 0x[0-9a-f]+$/m);
    });
  }

  test('Rust: a panic caught by catch_unwind through a recorded function: output unchanged, calls and unwinds as the program counts them', (t) => {
    const rustc = findRustc();
    if (!requireHost(t, { root: true, commands: rustc === undefined ? ['rustc'] : [] })) return;
    const app = compileRust(rustc!, 'rust-unwind', ['-C', 'opt-level=1']);
    const untraced = execFileSync(app, ['300'], { encoding: 'utf8' });
    const { dir, stdout } = record(`${app} 300`, [`${app}:rust_unwind*`]);
    assert.equal(stdout, untraced, "the program's own account is unharmed");
    const own = /calls=(\d+) returns=(\d+)/.exec(stdout)!;
    const [calls, returns] = own.slice(1).map(Number);
    const counts = unwoundCounts(dir);
    assert.deepEqual(counts['rust_unwind_probed'], [calls, calls! - returns!]);
    assert.deepEqual(counts['rust_unwind::main'], [1, 0]);
  });
});
