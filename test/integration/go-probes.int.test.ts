import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileGo, countOn, findGo, programCounts } from '../helpers/go.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;
type Engine = (typeof ENGINES)[number];

interface JsonEvent {
  probe: string;
  kind: string;
  pid: number;
  tid: number;
  fields: Record<string, number | string | null>;
  latencyNs?: string;
  exit?: string;
}

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function target(t: Parameters<typeof requireHost>[0]): string | undefined {
  const go = findGo();
  if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return undefined;
  return compileGo(go!, 'go-returns');
}

/** The program's own output, run without any probe. */
function unprobed(app: string, mode: string, n: number): string {
  return execFileSync(app, [mode, String(n)], { encoding: 'utf8' });
}

/** The program's lines (they start with its mode's word) and upscope's JSON lines. */
function split(stdout: string, mode: string): { program: string; events: JsonEvent[] } {
  const lines = stdout.split('\n');
  return {
    program: lines
      .filter((l) => l.startsWith(`${mode} `) || l.startsWith('classify '))
      .map((l) => `${l}\n`)
      .join(''),
    events: lines
      .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
      .map((l) => JSON.parse(l) as JsonEvent),
  };
}

/** `trace --json` of the command on one engine. */
function trace(engine: Engine, command: string, specs: string[]) {
  const result = runCli(
    ['trace', '--engine', engine, '--json', '--command-output', 'inherit', '-c', command, ...specs],
    {
      timeoutMs: 600_000,
    },
  );
  assert.equal(result.status, 0, result.stderr);
  return result;
}

describe('Go programs: entry probes', () => {
  for (const engine of ENGINES) {
    test(`${engine}: a call whose goroutine stack grows is seen once; arg0..arg2 are what it passed`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const rounds = engine === 'ptrace' ? 3 : 20;
      const result = trace(engine, `${app} deep ${rounds}`, [`${app}:main.deep n=arg0 seed=arg1`]);
      const { program, events } = split(result.stdout, 'deep');
      assert.equal(program, unprobed(app, 'deep', rounds), 'the output is unchanged');
      const calls = Number(/calls=(\d+)/.exec(program)?.[1]);
      assert.equal(events.length, calls, `one event per call; upscope said:\n${result.stderr}`);
      // Goroutine g calls deep(20 + g, i), which recurses down to deep(0, ...).
      const depths = new Map<number, number>();
      for (const e of events) {
        const n = Number(e.fields['n']);
        depths.set(n, (depths.get(n) ?? 0) + 1);
      }
      for (let n = 0; n <= 27; n++) {
        assert.equal(depths.get(n), rounds * Math.min(8, 28 - n), `calls with n=${n}`);
      }

      const paths = trace(engine, `${app} paths 40`, [`${app}:main.classify a=arg0 b=arg1 c=arg2`]);
      const out = split(paths.stdout, 'classify');
      assert.equal(out.program, unprobed(app, 'paths', 40));
      const passed = out.program
        .trim()
        .split('\n')
        .map((l) => l.split(' ').slice(1, 4).join(' '));
      assert.deepEqual(
        out.events.map((e) => `${e.fields['a']} ${e.fields['b']} ${e.fields['c']}`),
        passed,
      );
    });
  }

  test('bpf count: an entry probe counts every call of a function whose stack grows', (t) => {
    const app = target(t);
    if (app === undefined) return;
    const result = runCli([
      'count',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} deep 200`,
      `${app}:main.deep`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    const calls = Number(/deep calls=(\d+)/.exec(result.stdout)?.[1]);
    const rows: { probe: string; count: number }[] = JSON.parse(
      result.stdout.trim().split('\n').at(-1)!,
    );
    assert.deepEqual(rows, [{ probe: 'main.deep', count: calls }]);
  });
});

describe('Go programs: return probes, with return addresses left alone', () => {
  for (const engine of ENGINES) {
    test(`${engine}: returns from growing stacks, several return paths and a recovered panic are each seen, with the values returned; the program runs as without probes`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const rounds = engine === 'ptrace' ? 3 : 20;
      // Recursion with large frames in 8 goroutines: stacks grow and are copied mid-call.
      const deep = trace(engine, `${app} deep ${rounds}`, [
        `r:${app}:main.deep r=retval`,
        `${app}:main.deep`,
      ]);
      const own = split(deep.stdout, 'deep');
      assert.equal(own.program, unprobed(app, 'deep', rounds), 'the output is unchanged');
      const calls = programCounts(own.program)['calls']!;
      const returns = own.events.filter((e) => e.kind === 'return');
      const said = `upscope said:\n${deep.stderr}`;
      assert.equal(own.events.filter((e) => e.kind === 'entry').length, calls, said);
      assert.equal(returns.length, programCounts(own.program)['returns']!, said);
      assert.ok(returns.every((e) => e.exit === undefined && e.latencyNs !== undefined));

      // Four return paths: each call's result is what the program printed.
      const paths = trace(engine, `${app} paths 40`, [
        `r:${app}:main.classify r=retval`,
        `${app}:main.classify a=arg0 b=arg1 c=arg2`,
      ]);
      const out = split(paths.stdout, 'classify');
      assert.equal(out.program, unprobed(app, 'paths', 40));
      const printed = out.program
        .trim()
        .split('\n')
        .map((line) => line.split(' '));
      const seen = out.events.map((e) =>
        e.kind === 'entry'
          ? `${e.fields['a']} ${e.fields['b']} ${e.fields['c']}`
          : `-> ${e.fields['r']}`,
      );
      assert.deepEqual(
        seen,
        printed.flatMap((p) => [`${p[1]} ${p[2]} ${p[3]}`, `-> ${p[5]}`]),
      );

      // A panic in inner() goes up through mayPanic() to guard(), which recovers.
      const panic = trace(engine, `${app} panic 30`, [
        `r:${app}:main.mayPanic`,
        `r:${app}:main.inner`,
      ]);
      const p = split(panic.stdout, 'panic');
      assert.equal(p.program, unprobed(app, 'panic', 30));
      const own2 = programCounts(p.program);
      const of = (probe: string, unwound: boolean) =>
        p.events.filter((e) => e.probe === probe && (e.exit === 'unwind') === unwound).length;
      assert.equal(of('main.mayPanic', false), own2['returns']);
      assert.equal(of('main.inner', false), own2['inner_returns']);
      assert.equal(of('main.mayPanic', true), own2['calls']! - own2['returns']!);
      assert.equal(of('main.inner', true), own2['inner_calls']! - own2['inner_returns']!);
    });

    test(`${engine}: a call parked on a channel and resumed on another thread is paired by goroutine`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const n = engine === 'ptrace' ? 8 : 64;
      // Go's scheduler decides where a parked goroutine resumes: a run where none moved
      // (rare, on a loaded machine) proves nothing, so it is run again, up to four times.
      let result = trace(engine, `${app} chan ${n}`, [`r:${app}:main.wait r=retval`]);
      const movedIn = (r: typeof result) => Number(/moved=(\d+)/.exec(r.stderr)?.[1]);
      for (let attempt = 1; attempt < 4 && !(movedIn(result) > 0); attempt++) {
        result = trace(engine, `${app} chan ${n}`, [`r:${app}:main.wait r=retval`]);
      }
      const { program, events } = split(result.stdout, 'chan');
      assert.equal(program, unprobed(app, 'chan', n));
      assert.ok(movedIn(result) > 0, 'some goroutines resumed on another thread');
      assert.equal(events.length, n);
      // Every wait() was parked until all were, and then 20 ms more: every call, paired with
      // its own entry (not another goroutine's on the same thread), took longer than that.
      for (const e of events) {
        assert.ok(e.latencyNs !== undefined, 'paired with its entry');
        assert.ok(BigInt(e.latencyNs) > 20_000_000n, `latency ${e.latencyNs} ns`);
      }
      if (engine === 'tracefs') return;
      const timed = runCli(
        [
          'latency',
          '--engine',
          engine,
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${app} chan ${n}`,
          `${app}:main.wait`,
        ],
        { timeoutMs: 600_000 },
      );
      assert.equal(timed.status, 0, timed.stderr);
      const [h] = JSON.parse(timed.stdout.trim().split('\n').at(-1)!) as {
        count: number;
        minNs: number;
      }[];
      assert.equal(h!.count, n);
      assert.ok(h!.minNs > 20_000_000, `shortest call ${h!.minNs} ns`);
    });
  }

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`${engine}: count sees every return and every call a panic took away`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const rounds = engine === 'ptrace' ? 3 : 50;
      const deep = countOn(engine, `${app} deep ${rounds}`, [`r:${app}:main.deep`]);
      const own = programCounts(deep.result.stdout.split('\n').find((l) => l.startsWith('deep '))!);
      assert.deepEqual(deep.byProbe, { 'r:main.deep': own['returns'] });
      const panic = countOn(engine, `${app} panic 30`, [
        `r:${app}:main.mayPanic`,
        `r:${app}:main.inner`,
      ]);
      const line = panic.result.stdout.split('\n').find((l) => l.startsWith('panic '))!;
      assert.equal(`${line}\n`, unprobed(app, 'panic', 30));
      const p = programCounts(line);
      assert.deepEqual(panic.byProbe, {
        'r:main.mayPanic': p['returns'],
        'r:main.mayPanic (unwound)': p['calls']! - p['returns']!,
        'r:main.inner': p['inner_returns'],
        'r:main.inner (unwound)': p['inner_calls']! - p['inner_returns']!,
      });
    });
  }

  // runtime.mallocgc's first instructions hold two forward branches: its stack check's (to a
  // block that calls runtime.morestack) and `if gcphase == _GCmarktermination` (to a block
  // that calls runtime.throw, placed just before). The entry was probed after the second,
  // past the frame's `sub $0x70,%rsp`, and no return was paired with its call.
  for (const engine of ['bpf', 'ptrace'] as const)
    test(`${engine}: runtime.mallocgc (a branch to a throw beside its stack check): every return paired with its call`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const run = countOn(engine, `${app} deep 3`, [
        `${app}:runtime.mallocgc`,
        `r:${app}:runtime.mallocgc`,
      ]);
      const calls = run.byProbe['runtime.mallocgc'];
      assert.ok(calls !== undefined && calls > 0, JSON.stringify(run.byProbe));
      assert.deepEqual(run.byProbe, {
        'runtime.mallocgc': calls,
        'r:runtime.mallocgc': calls,
      });
      assert.doesNotMatch(run.result.stderr, /without their entry/);
    });

  test("every Go function's entry is probed right after its stack check, as objdump shows it", (t) => {
    const app = target(t);
    if (app === undefined) return;
    // objdump's functions: the instruction after the first conditional jump that follows a
    // `cmp 0x10(%r14),...` (the goroutine's stack guard) among its first 8 instructions.
    const expected = new Map<string, number>();
    let name: string | undefined;
    let insns: { at: number; text: string }[] = [];
    const done = () => {
      if (name === undefined) return;
      const cmp = insns.slice(0, 8).findIndex((i) => /^cmp\s+0x10\(%r14\),/.test(i.text));
      const jump =
        cmp < 0 ? -1 : insns.findIndex((i, k) => k > cmp && /^j(?!mp)[a-z]+\s/.test(i.text));
      if (jump >= 0 && jump < 8 && insns[jump + 1] !== undefined) {
        expected.set(name, insns[jump + 1]!.at);
      }
    };
    for (const line of execFileSync('objdump', ['-d', '--no-show-raw-insn', app], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    }).split('\n')) {
      const fn = /^([0-9a-f]+) <(.+)>:$/.exec(line);
      if (fn !== null) {
        done();
        name = fn[2];
        insns = [];
        continue;
      }
      const insn = /^\s+([0-9a-f]+):\s+(.*)$/.exec(line);
      if (insn !== null && name !== undefined) {
        insns.push({ at: Number.parseInt(insn[1]!, 16), text: insn[2]!.trim() });
      }
    }
    done();
    const resolved = runCli(['resolve', '--json', `${app}:*`], { timeoutMs: 600_000 });
    assert.equal(resolved.status, 0, resolved.stderr);
    const sites = (JSON.parse(resolved.stdout) as { sites: { symbol: string; vaddr: string }[] })
      .sites;
    let compared = 0;
    const wrong: string[] = [];
    for (const site of sites) {
      const want = expected.get(site.symbol);
      if (want === undefined) continue;
      compared++;
      if (Number(site.vaddr) !== want) {
        wrong.push(`${site.symbol}: ${site.vaddr}, objdump 0x${want.toString(16)}`);
      }
    }
    assert.ok(compared > 1000 && expected.has('runtime.mallocgc'), `${compared} compared`);
    assert.deepEqual(wrong, []);
  });

  test('--return-probes=trampoline on Go code is refused in one line, before anything runs', (t) => {
    const app = target(t);
    if (app === undefined) return;
    const result = runCli([
      'count',
      '--return-probes',
      'trampoline',
      '-c',
      `${app} deep 1`,
      `r:${app}:main.deep`,
    ]);
    assert.equal(result.status, 3);
    assert.match(
      result.stderr,
      /Cannot place a return trampoline in "main\.deep" in ".*": it is a Go program/,
    );
    assert.doesNotMatch(result.stdout, /deep calls/, 'the command was not started');
  });
});

describe('Go programs: arguments by name', () => {
  for (const engine of ENGINES) {
    test(`${engine}: a string's and a slice's members, passed in registers (pieces of the value), are what the program passed`, (t) => {
      const go = findGo();
      if (
        !requireHost(t, { root: engine !== 'ptrace', commands: go === undefined ? ['go'] : [] })
      ) {
        return;
      }
      const app = compileGo(go!, 'go-args');
      const { program, events } = split(
        trace(engine, `${app} 4`, [
          `${app}:main.describe n name.len vals.len vals.cap`,
        ]).stdout.replace(/^call /gm, 'classify '),
        'call',
      );
      const printed = program
        .trim()
        .split('\n')
        .map((l) => Object.fromEntries([...l.matchAll(/(\w+)=(\d+)/g)].map((m) => [m[1], m[2]])));
      assert.equal(printed.length, 4, program);
      assert.deepEqual(
        events.map((e) =>
          [e.fields['n'], e.fields['name_len'], e.fields['vals_len'], e.fields['vals_cap']].map(
            String,
          ),
        ),
        printed.map((p) => [p['n'], p['len'], p['vlen'], p['cap']]),
      );
    });
  }
});
