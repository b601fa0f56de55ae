import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { compileProgram, compileTraceTarget } from '../helpers/compile.js';
import { leftovers, TRACEFS } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const CALLS = 50;

interface JsonEvent {
  timeNs: string;
  probe: string;
  kind: string;
  pid: number;
  tid: number;
  comm: string;
  fields: Record<string, number | string>;
  latencyNs?: string;
}

function specs(app: string, lib: string): string[] {
  return [
    `${app}:f_ints a=arg0:s8 b=arg1:u16 c=arg2:s32 d=arg3:s64 e=arg4:u64`,
    `r:${app}:f_ints ret=retval:s32`,
    `${app}:f_str s=+0(arg0):string`,
    `${app}:f_item id=+0(arg0):s32 len=+4(arg0):u32 name=+8(arg0):string`,
    `${lib}:lib_add x=arg0:s32`,
  ];
}

/** The call indices the target uses: 4 threads, then a forked child, then its exec. */
function expectedIndices(): number[] {
  const indices: number[] = [];
  for (let t = 0; t < 4; t++) for (let i = 0; i < CALLS; i++) indices.push(t * 100000 + i);
  for (let i = 0; i < 10; i++) indices.push(800000 + i);
  for (let i = 0; i < 5; i++) indices.push(900000 + i);
  return indices.sort((a, b) => a - b);
}

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
});

describe('upscope trace', () => {
  for (const [engine, pie] of [
    ['tracefs', true],
    ['tracefs', false],
    ['bpf', true],
    ['bpf', false],
  ] as const) {
    test(`${engine}: sees every call once, with the values passed, in threads, a fork, an exec and a library (${pie ? 'PIE' : 'non-PIE'})`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { app, lib } = compileTraceTarget(pie);
      const result = runCli([
        'trace',
        '--engine',
        engine,
        '--json',
        '--command-output',
        'inherit',
        '-c',
        `${app} ${CALLS}`,
        ...specs(app, lib),
      ]);
      assert.equal(result.status, 0, result.stderr);
      const lines = result.stdout
        .split('\n')
        .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'));
      const printed = result.stdout.split('\n').filter((l) => /^(main|fork|exec) pid=/.test(l));
      assert.equal(printed.length, 3, result.stdout.slice(0, 500));
      const events: JsonEvent[] = lines.map((l) => JSON.parse(l));
      const of = (probe: string, kind = 'entry') =>
        events.filter((e) => e.probe === probe && e.kind === kind);
      // The target's own counts, per process.
      const counts = new Map(
        printed.map((l) => {
          const [, who, pid, ints] = /^(\w+) pid=(\d+) f_ints=(\d+)/.exec(l)!;
          return [who!, { pid: Number(pid), calls: Number(ints) }];
        }),
      );
      assert.equal(counts.get('main')!.calls, 4 * CALLS);
      // The forked child execs itself: one pid for both, so its calls add up.
      const forkPid = counts.get('fork')!.pid;
      assert.equal(counts.get('exec')!.pid, forkPid);
      for (const probe of ['f_ints', 'f_str', 'f_item', 'lib_add']) {
        const seen = (pid: number) => of(probe).filter((e) => e.pid === pid).length;
        assert.equal(
          seen(counts.get('main')!.pid),
          counts.get('main')!.calls,
          `${probe} in the main process`,
        );
        assert.equal(
          seen(forkPid),
          counts.get('fork')!.calls + counts.get('exec')!.calls,
          `${probe} after fork and exec`,
        );
        assert.equal(of(probe).length, expectedIndices().length, `${probe}: no other events`);
      }
      assert.equal(of('f_ints', 'return').length, of('f_ints').length, 'one return per call');
      // tracefs: events come in time order, whichever CPU each thread ran on. bpf: in the
      // order they were recorded, which is time order for each thread.
      const ordered = (list: JsonEvent[]) => {
        for (let k = 1; k < list.length; k++) {
          assert.ok(
            BigInt(list[k]!.timeNs) >= BigInt(list[k - 1]!.timeNs),
            `event ${k} at ${list[k]!.timeNs} follows one at ${list[k - 1]!.timeNs}`,
          );
        }
      };
      if (engine === 'tracefs') ordered(events);
      for (const tid of new Set(events.map((e) => e.tid))) {
        ordered(events.filter((e) => e.tid === tid));
      }
      // Four threads of the main process.
      const mainPid = counts.get('main')!.pid;
      assert.equal(
        new Set(
          of('f_ints')
            .filter((e) => e.pid === mainPid)
            .map((e) => e.tid),
        ).size,
        4,
      );
      // Values of every width and sign, as passed.
      const indices = of('f_ints').map((e) => {
        const i = Math.abs(Number(e.fields['c']) / 3);
        assert.equal(e.fields['a'], ((i - 100) << 24) >> 24, 'int8 a'); // wraps like (int8_t)
        assert.equal(e.fields['b'], (i * 7) & 0xffff);
        assert.equal(String(e.fields['d']), String(-BigInt(i) * 10000000000n));
        assert.equal(String(e.fields['e']), String(BigInt(i) * 0x1000000001n));
        return i;
      });
      assert.deepEqual(
        indices.sort((a, b) => a - b),
        expectedIndices(),
      );
      assert.deepEqual(
        of('f_str')
          .map((e) => e.fields['s'])
          .sort(),
        expectedIndices()
          .map((i) => `call-${i}`)
          .sort(),
      );
      for (const e of of('f_item')) {
        const i = Number(e.fields['id']);
        assert.equal(e.fields['len'], i * 2 + 1);
        assert.equal(e.fields['name'], `item${i}`);
      }
      assert.deepEqual(
        of('lib_add')
          .map((e) => Number(e.fields['x']))
          .sort((a, b) => a - b),
        expectedIndices(),
      );
      // Return values pair with their calls, thread by thread, and carry a latency.
      const byTid = new Map<number, JsonEvent[]>();
      for (const e of events.filter((x) => x.probe === 'f_ints')) {
        byTid.set(e.tid, [...(byTid.get(e.tid) ?? []), e]);
      }
      for (const sequence of byTid.values()) {
        for (let k = 0; k + 1 < sequence.length; k += 2) {
          assert.equal(sequence[k]!.kind, 'entry');
          assert.equal(sequence[k + 1]!.kind, 'return');
          assert.equal(sequence[k + 1]!.fields['ret'], Number(sequence[k]!.fields['c']) + 1);
          assert.ok(BigInt(sequence[k + 1]!.latencyNs!) > 0n);
        }
      }
      assert.match(result.stderr, new RegExp(`upscope: ${events.length} events delivered, 0 lost`));
    });
  }

  test('two sessions on one target each get exactly their own events', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const { app, lib } = compileTraceTarget();
    const run = (spec: string) => {
      const child = spawn(
        process.execPath,
        [BIN, 'trace', '--json', '--command-output', 'inherit', '-c', `${app} 20`, spec],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      child.stdout.on('data', (chunk) => {
        out += chunk;
      });
      return once(child, 'exit').then(([code]) => ({ code, out }));
    };
    const [a, b] = await Promise.all([
      run(`${app}:f_str s=+0(arg0):string`),
      run(`${lib}:lib_add x=arg0:s32`),
    ]);
    for (const [session, probe] of [
      [a, 'f_str'],
      [b, 'lib_add'],
    ] as const) {
      assert.equal(session.code, 0);
      const events: JsonEvent[] = session.out
        .split('\n')
        .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
        .map((l) => JSON.parse(l));
      const pids = session.out.match(/^main pid=(\d+)/m)!;
      assert.ok(
        events.every((e) => e.probe === probe),
        'only its own probe',
      );
      assert.equal(
        events.filter((e) => e.pid === Number(pids[1])).length,
        80,
        'only its own target, every call',
      );
    }
  });

  test('--buffer-size sizes the session ring buffer per CPU', async (t) => {
    if (!requireHost(t, { root: true })) return;
    const child = spawn(
      process.execPath,
      [BIN, 'trace', '--buffer-size', '8192', '-c', 'sleep 1', 'libc:nanosleep'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let err = '';
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    while (!err.includes('Tracing')) await new Promise((r) => setTimeout(r, 20));
    const instance = `${TRACEFS}/instances/upscope_${child.pid}`;
    const size = readFileSync(`${instance}/buffer_size_kb`, 'utf8').trim();
    const [code] = await once(child, 'exit');
    assert.equal(code, 0, err);
    // The kernel rounds up to whole pages of data (4080 bytes of each 4096).
    assert.ok(Number(size) >= 8192 && Number(size) < 8192 * 1.01, `buffer_size_kb ${size}`);
    assert.equal(existsSync(instance), false);
  });

  for (const engine of ['tracefs', 'bpf'] as const) {
    test(`${engine}: events lost are said as they happen, and add up to the summary's`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const calls = 300_000;
      const app = compileProgram('burst', { flags: ['-O2'] });
      const target = spawn(app, [String(calls)], { stdio: ['ignore', 'pipe', 'inherit'] });
      let printed = '';
      target.stdout.on('data', (chunk) => {
        printed += chunk;
      });
      try {
        while (!printed.includes('ready')) await new Promise((r) => setTimeout(r, 20));
        // A 16 KiB buffer cannot hold the burst: hits are lost while upscope reads.
        const upscope = spawn(
          process.execPath,
          [
            BIN,
            'trace',
            '--engine',
            engine,
            '--buffer-size',
            '16',
            '-p',
            String(target.pid),
            `${app}:burst_call`,
          ],
          { stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let err = '';
        upscope.stderr.on('data', (chunk) => {
          err += chunk;
        });
        const until = async (what: string, done: () => boolean) => {
          const deadline = Date.now() + 120_000;
          while (!done()) {
            if (Date.now() > deadline) assert.fail(`${what}: not within 2 minutes\n${err}`);
            await new Promise((r) => setTimeout(r, 20));
          }
        };
        await until('upscope attached', () => err.includes('Tracing'));
        // upscope stopped while the burst runs: the buffer fills whatever the machine's load
        // (a reader that kept up on a loaded machine lost nothing, and the test waited on).
        upscope.kill('SIGSTOP');
        target.kill('SIGUSR1');
        await until('the burst', () => printed.includes(`calls=${calls}`));
        upscope.kill('SIGCONT');
        // The once-a-second report comes while the trace runs, not only at its end.
        await until('a report of events lost', () => /events lost:/.test(err));
        upscope.kill('SIGINT');
        await once(upscope, 'exit');
        const live = [...err.matchAll(/^upscope: (\d+) events lost: /gm)].map((m) => Number(m[1]));
        const summary = /(\d+) events delivered, (\d+) lost, (\d+) missed/.exec(err);
        assert.ok(summary !== null, err);
        const [delivered, lost, missed] = summary.slice(1).map(Number) as [number, number, number];
        assert.equal(delivered + lost + missed, calls, 'every call accounted for');
        assert.ok(live.length > 0 && lost > 0, err);
        assert.equal(
          live.reduce((a, b) => a + b, 0),
          lost,
          'the losses said during the trace are all the losses',
        );
      } finally {
        target.kill('SIGKILL');
      }
    });
  }

  for (const engine of ['tracefs', 'bpf'] as const) {
    test(`${engine}: -c: what the buffer holds when the command ends is read, and delivered + lost is every hit`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const calls = 50_000;
      const app = compileProgram('stops-parent', { flags: ['-O2'] });
      // The target stops upscope while it makes its calls: a 64 KiB buffer overruns before
      // the first read, and the rest is read after the command has exited.
      const result = runCli([
        'trace',
        '--engine',
        engine,
        '--buffer-size',
        '64',
        '-c',
        `${app} ${calls}`,
        `${app}:stall_call`,
      ]);
      assert.equal(result.status, 0, result.stderr);
      assert.match(result.stdout, new RegExp(`^calls=${calls}$`, 'm'), 'the target counted');
      const summary = /(\d+) events delivered, (\d+) lost, (\d+) missed/.exec(result.stderr);
      assert.ok(summary !== null, result.stderr);
      const [delivered, lost, missed] = summary.slice(1).map(Number) as [number, number, number];
      assert.equal(delivered + lost + missed, calls, `every call accounted for: ${summary[0]}`);
      assert.ok(lost > 0, 'the buffer overran');
      assert.ok(delivered > 0, 'what the buffer held was delivered');
      const printed = result.stdout.split('\n').filter((l) => l.includes(' stall_call')).length;
      assert.equal(printed, delivered, 'each event delivered is printed');
    });
  }

  for (const engine of ['tracefs', 'bpf', 'ptrace'] as const) {
    test(`${engine}: -p: each hit is named as its thread was at the time, before a rename and an exec`, async (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
      const app = compileProgram('renames', { flags: ['-O2'] });
      const target = spawn(app, [], { stdio: ['ignore', 'pipe', 'inherit'] });
      let printed = '';
      target.stdout.on('data', (chunk) => {
        printed += chunk;
      });
      const wait = async (done: () => boolean) => {
        while (!done()) await new Promise((r) => setTimeout(r, 20));
      };
      try {
        await wait(() => printed.includes('ready'));
        const upscope = spawn(
          process.execPath,
          [
            BIN,
            'trace',
            '--engine',
            engine,
            '--json',
            '-p',
            String(target.pid),
            `${app}:name_call`,
            'libc:execve',
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let out = '';
        let err = '';
        upscope.stdout.on('data', (chunk) => {
          out += chunk;
        });
        upscope.stderr.on('data', (chunk) => {
          err += chunk;
        });
        const exited = once(upscope, 'exit');
        await wait(() => err.includes('Tracing'));
        // upscope reads nothing until the target has renamed itself and exec'd `sleep`: each
        // name must be the one its thread had when it hit, not the one it has when read.
        upscope.kill('SIGSTOP');
        try {
          target.kill('SIGUSR1');
          await wait(() => printed.includes('exec'));
          await wait(() => {
            try {
              return readFileSync(`/proc/${target.pid}/comm`, 'utf8') === 'sleep\n';
            } catch {
              return true; // already gone
            }
          });
        } finally {
          upscope.kill('SIGCONT');
        }
        const [code] = await exited;
        assert.equal(code, 0, err);
        // The target's own lines: `name NAME CALLS` for each name it ran under.
        const names = [...printed.matchAll(/^name (\S+) (\d+)$/gm)].flatMap((m) =>
          Array<string>(Number(m[2])).fill(m[1]!),
        );
        assert.equal(names.length, 5, printed);
        assert.notEqual(names[0], 'renamed');
        const events = out
          .split('\n')
          .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
          .map((l) => JSON.parse(l) as JsonEvent);
        assert.deepEqual(
          events.filter((e) => e.probe === 'name_call').map((e) => e.comm),
          names,
          'name_call under each name',
        );
        assert.deepEqual(
          events.filter((e) => e.probe === 'execve').map((e) => e.comm),
          ['renamed'],
          'execve called by "renamed", not by the "sleep" it became',
        );
      } finally {
        target.kill('SIGKILL');
      }
    });
  }

  for (const engine of ['tracefs', 'bpf', 'ptrace'] as const) {
    test(`${engine}: fetches given no name are shown as written (arg0=, arg1=), any other by its position`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { app } = compileTraceTarget();
      // 4 threads call f_ints 3 times each, the fork 10 times, its exec 5 times.
      const result = runCli([
        'trace',
        '--engine',
        engine,
        '-c',
        `${app} 3`,
        `${app}:f_ints arg0:s8 arg1:u16 +0(sp):x64`,
      ]);
      assert.equal(result.status, 0, result.stderr);
      const lines = result.stdout.split('\n').filter((l) => / f_ints /.test(l));
      assert.equal(lines.length, 27, result.stdout);
      for (const line of lines) {
        const m = / f_ints arg0=(-?\d+) arg1=(\d+) arg3=0x[0-9a-f]+$/.exec(line);
        assert.ok(m, line);
        // The target passes a = (int8_t)(i - 100) and b = (uint16_t)(i * 7) for its call i.
        const [a, b] = [Number(m[1]), Number(m[2])];
        assert.equal(((((a + 100) * 7 - b) % 256) + 256) % 256, 0, line);
      }
      assert.deepEqual(leftovers(), []);
    });
  }

  test('bad input gets one clear line', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
    const { app } = compileTraceTarget();
    const cases: [string[], RegExp][] = [
      [
        ['trace', `${app}:f_ints x=%r8:u64 y=+0(%r15):string`, '-p', '999999'],
        /^error\[ERR_PROCESS_NOT_FOUND\]/,
      ],
      [
        ['trace', `${app}:f_ints`, '-c', '/nonexistent/prog 1'],
        /^error\[ERR_TARGET_NOT_FOUND\]: Cannot run "\/nonexistent\/prog"/,
      ],
      [['trace', `${app}:f_ints`, '-c', 'nosuchprogram-xyz'], /not found on PATH/],
      [['trace', `${app}:f_ints x=+0(arg0):u128`], /^error\[ERR_SPEC_SYNTAX\]/],
    ];
    for (const [args, expected] of cases) {
      const result = runCli(args);
      assert.notEqual(result.status, 0);
      assert.match(result.stderr, expected);
      assert.doesNotMatch(result.stderr, /\n\s+at /);
    }
    const unprivileged = runCli(['trace', '--engine', 'tracefs', `${app}:f_ints`], {
      asNobody: true,
    });
    assert.notEqual(unprivileged.status, 0);
    // Refused by tracefs itself (EACCES), which says what to do instead.
    assert.match(unprivileged.stderr, /^error\[ERR_PRIVILEGES\]: Cannot .*permission denied/);
    assert.match(unprivileged.stderr, /--engine ptrace/);
    assert.doesNotMatch(unprivileged.stderr, /\n\s+at /);
  });

  // tracefs removes its probes one at a time, the kernel waiting out a grace period for each
  // (about 50 ms): a trace of thousands of functions took minutes to end, and of 48,000 about
  // 40 minutes. As root, trace runs 40 probes and more (2 s to remove) on the bpf engine,
  // unless told otherwise.
  describe('the engine for many probes', () => {
    const events = (stdout: string) =>
      stdout.split('\n').filter((l) => l.startsWith('{') && !l.startsWith('{"command"'));
    // many::f(1000 + i) is called i % 5 + 1 times a round.
    const callsOf = (i: number) => (i % 5) + 1;
    /** `trace --json` of `cxx-many ROUNDS` with the options and specs given: its stderr and events. */
    const traceMany = (app: string, rounds: number, ...args: string[]) => {
      const result = runCli(['trace', '--json', '-c', `${app} ${rounds}`, ...args]);
      assert.equal(result.status, 0, result.stderr);
      return { stderr: result.stderr, events: events(result.stdout).length };
    };

    test('2,500 functions without --engine: bpf, said, every call seen', (t) => {
      if (!requireHost(t, { root: true, commands: ['g++'] })) return;
      const app = compileProgram('cxx-many', { flags: ['-O2'] });
      const result = traceMany(app, 2, `${app}:many::f*`);
      assert.match(
        result.stderr,
        /^upscope: using the bpf engine: tracefs removes these 2,500 probes one at a time, about 2 minutes at the end; --engine tracefs to use it anyway$/m,
      );
      assert.match(result.stderr, /^Tracing 2500 probes \(bpf\)\./m);
      // The target's own count of its calls.
      const own = /functions=2500 calls=(\d+) /.exec(result.stderr);
      assert.ok(own, result.stderr);
      assert.equal(result.events, Number(own[1]));
      assert.deepEqual(tracedChildren(), []);
    });

    test('101 functions with --engine tracefs: tracefs, and what its end costs said', (t) => {
      if (!requireHost(t, { root: true, commands: ['g++'] })) return;
      const app = compileProgram('cxx-many', { flags: ['-O2'] });
      const result = traceMany(
        app,
        1,
        '--engine',
        'tracefs',
        `${app}:many::f10*`,
        `${app}:many::f3499`,
      );
      assert.match(
        result.stderr,
        /^upscope: tracefs removes these 101 probes one at a time, about 5 s at the end; the bpf engine \(--engine bpf\) removes them at once$/m,
      );
      assert.match(result.stderr, /^Tracing 101 probes \(tracefs\)\./m);
      // Said again as the removal starts (the trace seems to hang otherwise).
      assert.match(
        result.stderr,
        /^upscope: removing 101 probes: tracefs removes them one at a time, about 5 s$/m,
      );
      // f1000 to f1099 (i = 0 to 99) and f3499 (i = 2499).
      let calls = callsOf(2499);
      for (let i = 0; i < 100; i++) calls += callsOf(i);
      assert.equal(result.events, calls);
      assert.deepEqual(tracedChildren(), []);
    });

    test('39 functions without --engine stay on tracefs, nothing said; 40 go to bpf', (t) => {
      if (!requireHost(t, { root: true, commands: ['g++'] })) return;
      const app = compileProgram('cxx-many', { flags: ['-O2'] });
      // many::f1000 to many::f1038, then to many::f1039.
      const few = traceMany(app, 1, `${app}:many::f10[0-2]*`, `${app}:many::f103[0-8]`);
      assert.match(few.stderr, /^Tracing 39 probes \(tracefs\)\./m);
      assert.doesNotMatch(few.stderr, /bpf engine|removing/);
      const more = traceMany(app, 1, `${app}:many::f10[0-3]*`);
      assert.match(more.stderr, /^Tracing 40 probes \(bpf\)\./m);
      assert.match(
        more.stderr,
        /^upscope: using the bpf engine: tracefs removes these 40 probes one at a time, about 2 s at the end; --engine tracefs to use it anyway$/m,
      );
      // Strings are cut shorter on bpf: a trace that fetches one is told.
      const strings = traceMany(app, 1, `${app}:many::f10[0-3]* top=+0(%sp):string`);
      assert.match(
        strings.stderr,
        /^upscope: using the bpf engine \(strings are cut at 255 bytes there, and end with "\.\.\."; tracefs reads up to 4,095\): /m,
      );
    });

    // A string cut at 255 bytes on bpf read as a whole one: it now ends with "...", as
    // bpftrace marks one; one that fits (255 bytes and its NUL) does not. The program's own
    // string the truth: LENGTH x's, as tracefs reads it whole.
    test('bpf: a string longer than 255 bytes ends with "..."; one of 255 is whole, as on tracefs', (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const app = compileProgram(new URL('../programs/ifunc-calls.c', import.meta.url).pathname, {
        flags: ['-O2', '-fno-builtin'],
      });
      const fetched = (engine: string, length: number) => {
        const result = runCli([
          'trace',
          '--engine',
          engine,
          '--json',
          '-c',
          `${app} 1 ${length}`,
          `${app}:main`,
          'libc:strlen s=arg0:string',
        ]);
        assert.equal(result.status, 0, result.stderr);
        const events = result.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { probe: string; fields: { s?: string } });
        // The program's one call, after its main began (the C runtime's own come before).
        const main = events.findIndex((e) => e.probe === 'main');
        return events.slice(main).find((e) => e.fields.s !== undefined)?.fields.s;
      };
      for (const length of [254, 255, 256, 1000]) {
        const whole = 'x'.repeat(length);
        assert.equal(fetched('tracefs', length), whole, `tracefs, ${length} bytes`);
        assert.equal(
          fetched('bpf', length),
          length <= 255 ? whole : `${'x'.repeat(255)}...`,
          `bpf, ${length} bytes`,
        );
      }
    });
  });
});
