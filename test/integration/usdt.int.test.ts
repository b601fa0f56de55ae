// upscope-tests: apart python3 (its probes on python3's function__entry raise that file's semaphore in every python3 that calls.int and stacks.int run meanwhile).
// USDT probes on every engine: each hit of test/programs/usdt-target with the values the target
// prints as it passes them, its semaphore raised exactly while traced, nothing left behind.
// USDT semaphores are counted by the kernel per file: the target runs from a copy of its own
// (ownCopy), which no other test file probes.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { ownCopy } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileUsdtTarget, requireSdt } from '../helpers/usdt.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

const scratch = mkdtempSync(join(tmpdir(), 'upscope-usdt-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The USDT target, a copy of its own (see above). */
function usdtTarget(opt: '-O0' | '-O2'): string {
  return ownCopy(compileUsdtTarget(opt), scratch);
}
const CALLS = 5;
/** Calls of the target traced with -p for part of its run. */
const CALLS_P = 100;

interface JsonEvent {
  probe: string;
  pid: number;
  fields: Record<string, number | string>;
}

/** The target's own lines: probe name -> the values it passed at each call, in order. */
function truth(stdout: string): { values: Map<string, string[][]>; done: Record<string, number> } {
  const values = new Map<string, string[][]>();
  let done: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    const [word, ...rest] = line.split(' ');
    if (word === 'done') {
      done = Object.fromEntries(rest.map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]));
    } else if (word !== undefined && /^(ints|wide|idx|gated)$/.test(word)) {
      values.set(word, [...(values.get(word) ?? []), rest]);
    }
  }
  return { values, done };
}

function events(stdout: string): JsonEvent[] {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
    .map((l) => JSON.parse(l) as JsonEvent);
}

/** An event's fields arg0..argN as decimal strings (64-bit values come as strings). */
function args(event: JsonEvent): string[] {
  const out: string[] = [];
  for (let i = 0; `arg${i}` in event.fields; i++) out.push(String(event.fields[`arg${i}`]));
  return out;
}

const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;

describe('USDT probes', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  });

  for (const engine of ENGINES) {
    for (const opt of ['-O0', '-O2'] as const) {
      test(`trace --engine ${engine} (${opt}): every hit with the arguments the target passed`, (t) => {
        if (!requireSdt(t) || !requireHost(t, { root: engine !== 'ptrace' })) return;
        const app = usdtTarget(opt);
        // tracefs cannot add two registers: -O2's base+index*scale arguments are left to
        // the other engines (a test below checks the refusal).
        const probes =
          engine === 'tracefs' && opt === '-O2'
            ? ['none', 'ints', 'wide', 'gated']
            : ['none', 'ints', 'wide', 'idx', 'gated'];
        const result = runCli([
          'trace',
          '--engine',
          engine,
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${app} ${CALLS}`,
          ...probes.map((p) => `u:${app}:usdt:${p}`),
        ]);
        assert.equal(result.status, 0, result.stderr);
        const { values, done } = truth(result.stdout);
        assert.equal(done['calls'], CALLS);
        const seen = events(result.stdout);
        for (const probe of probes) {
          const hits = seen.filter((e) => e.probe === `usdt:${probe}`);
          assert.equal(hits.length, CALLS, `hits of usdt:${probe}`);
          if (probe === 'none') {
            assert.deepEqual(args(hits[0]!), []);
            continue;
          }
          assert.deepEqual(hits.map(args), values.get(probe), `arguments of usdt:${probe}`);
        }
        // The semaphore was raised at every call made while traced (from the first on).
        assert.equal(done['gated_enabled'], CALLS, 'the target saw its semaphore raised');
        assert.match(
          result.stderr,
          new RegExp(`${CALLS * probes.length} events delivered, 0 lost`),
        );
      });
    }
  }

  for (const engine of ENGINES) {
    for (const opt of ['-O0', '-O2'] as const) {
      test(`trace --engine ${engine} (${opt}): argN:string is the string the argument points at`, (t) => {
        if (!requireSdt(t) || !requireHost(t, { root: engine !== 'ptrace' })) return;
        const app = usdtTarget(opt);
        const notes = execFileSync('readelf', ['-n', app], { encoding: 'utf8' });
        // gcc passes the pointer in a stack slot at -O0 and in a register at -O2.
        assert.match(
          notes,
          opt === '-O0'
            ? /Name: text\n.*\n\s+Arguments: 8@-\d+\(%rbp\)/
            : /Name: text\n.*\n\s+Arguments: 8@%r\w+ /,
        );
        const result = runCli([
          'trace',
          '--engine',
          engine,
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${app} ${CALLS}`,
          `u:${app}:usdt:text word=arg0:string same=+0(arg0):string i=arg1`,
        ]);
        assert.equal(result.status, 0, result.stderr);
        // The target's own lines: "text WORD I" (WORD may hold a space or be empty).
        const expected = result.stdout
          .split('\n')
          .filter((l) => l.startsWith('text '))
          .map((l) => `${l.slice(5, l.lastIndexOf(' '))}|${l.slice(l.lastIndexOf(' ') + 1)}`);
        assert.equal(expected.length, CALLS);
        const seen = events(result.stdout).filter((e) => e.probe === 'usdt:text');
        assert.deepEqual(
          seen.map((e) => `${e.fields['word']}|${e.fields['i']}`),
          expected,
          'each word as the target printed it',
        );
        for (const e of seen) assert.equal(e.fields['same'], e.fields['word']);
      });
    }
  }

  test('tracefs refuses a base+index*scale argument and names the engines that can', (t) => {
    if (!requireSdt(t) || !requireHost(t, { root: true })) return;
    const app = usdtTarget('-O2');
    const notes = execFileSync('readelf', ['-n', app], { encoding: 'utf8' });
    assert.match(notes, /Name: idx\n.*\n\s+Arguments: -4@\(%r\w+,%r\w+,4\)/, 'gcc indexed it');
    const result = runCli(['trace', '--engine', 'tracefs', '-c', app, `u:${app}:usdt:idx`]);
    assert.equal(result.status, 6, result.stderr);
    assert.match(
      result.stderr,
      /^error\[ERR_NOT_SUPPORTED\]: Cannot fetch %r\w+\+%r\w+\*4 with the tracefs engine: the kernel's fetch-args cannot add two registers\n\s+hint: Use --engine bpf or --engine ptrace/,
    );
    // Fetching only what tracefs can read works.
    const some = runCli([
      'trace',
      '--engine',
      'tracefs',
      '-c',
      `${app} 2`,
      `u:${app}:usdt:wide arg5 arg3`,
    ]);
    assert.equal(some.status, 0, some.stderr);
    assert.match(some.stdout, /usdt:wide arg5=-5 arg3=42\n/);
  });

  test('argN beyond the note is a clear error pointing at it', (t) => {
    if (!requireSdt(t)) return;
    const app = usdtTarget('-O2');
    const result = runCli(['resolve', `u:${app}:usdt:gated arg2`]);
    // A spec asking the impossible is a usage error (2), in resolve as in trace.
    assert.equal(result.status, 2);
    assert.equal(
      runCli(['trace', '--engine', 'ptrace', '-c', app, `u:${app}:usdt:gated arg2`]).status,
      2,
    );
    assert.match(
      result.stderr,
      /^error\[ERR_SPEC_INVALID\]: Cannot fetch arg2 at USDT probe "usdt:gated": it has 2 arguments, arg0 to arg1\n.*\n\s+\^{4}\n/,
    );
  });

  for (const engine of ENGINES) {
    test(`-p with --engine ${engine}: the semaphore is raised exactly while the probe is attached`, async (t) => {
      if (!requireSdt(t) || !requireHost(t, { root: engine !== 'ptrace' })) return;
      const app = usdtTarget('-O2');
      // 100 calls 50 ms apart (5 s): 0.4 s before the trace, 1 s traced, the rest after (a
      // loaded machine may take seconds to start the trace).
      const target = spawn(app, [String(CALLS_P), '50'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let stdout = '';
      target.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      const exited = once(target, 'exit');
      try {
        await new Promise((r) => setTimeout(r, 400));
        const tracer = spawn(
          process.execPath,
          [
            BIN,
            'trace',
            '--engine',
            engine,
            '--json',
            '--duration',
            '1',
            '-p',
            String(target.pid),
            `u:${app}:usdt:gated`,
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let traced = '';
        let errors = '';
        tracer.stdout.on('data', (chunk: Buffer) => {
          traced += chunk.toString();
        });
        tracer.stderr.on('data', (chunk: Buffer) => {
          errors += chunk.toString();
        });
        const [code] = await once(tracer, 'exit');
        assert.equal(code, 0, errors);
        if (existsSync(`/proc/${target.pid}/status`)) {
          const status = readFileSync(`/proc/${target.pid}/status`, 'utf8');
          assert.match(status, /^TracerPid:\s+0$/m, 'the target is not traced any more');
        }
        await exited;
        const lines = truth(stdout).values.get('gated') ?? [];
        assert.equal(lines.length, CALLS_P);
        const enabled = lines.filter(([, e]) => e === '1').map(([i]) => Number(i));
        const hits = events(traced).map((e) => Number(e.fields['arg0']));
        assert.ok(hits.length >= 5, `hits while traced: ${hits.length}`);
        // Every hit saw the semaphore raised; it was raised in one stretch around them (a call
        // may fall between the semaphore's change and the probe's at each end), not before
        // the trace, and lowered again after it.
        for (const e of events(traced)) assert.equal(String(e.fields['arg1']), '1');
        for (const i of hits) assert.ok(enabled.includes(i), `call ${i} enabled`);
        assert.deepEqual(
          enabled,
          Array.from({ length: enabled.length }, (_, k) => enabled[0]! + k),
          'raised in one stretch',
        );
        assert.ok(enabled.length - hits.length <= 2, `enabled ${enabled} hits ${hits}`);
        assert.equal(lines[0]![1], '0', 'not raised before the trace');
        assert.equal(lines.at(-1)![1], '0', 'lowered again after the trace');
      } finally {
        target.kill('SIGKILL');
      }
    });
  }

  test('count --engine bpf counts every hit of each USDT probe', (t) => {
    if (!requireSdt(t) || !requireHost(t, { root: true })) return;
    const app = usdtTarget('-O2');
    const result = runCli([
      'count',
      '--engine',
      'bpf',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} ${CALLS}`,
      `u:${app}:usdt:ints`,
      `u:${app}:usdt:gated`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.equal(truth(result.stdout).done['gated_enabled'], CALLS);
    const counts = JSON.parse(result.stdout.split('\n').find((l) => l.startsWith('['))!) as {
      probe: string;
      count: number;
    }[];
    assert.deepEqual(counts.map((c) => [c.probe, c.count]).sort(), [
      ['usdt:gated', CALLS],
      ['usdt:ints', CALLS],
    ]);
  });

  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`count --engine ${engine} --by/--filter read argN as the note's arguments`, (t) => {
      if (!requireSdt(t) || !requireHost(t, { root: engine === 'bpf' })) return;
      const app = usdtTarget('-O2');
      const result = runCli([
        'count',
        '--engine',
        engine,
        '--json',
        '--command-output',
        'inherit',
        '-c',
        `${app} ${CALLS}`,
        `u:${app}:usdt:ints`,
        '--by',
        'arg0',
        '--filter',
        'arg3 > 1000',
      ]);
      assert.equal(result.status, 0, result.stderr);
      // ints S8 U8 S16 U16 ...: arg0 is the s8, arg3 the u16.
      const expected = (truth(result.stdout).values.get('ints') ?? [])
        .filter((v) => Number(v[3]) > 1000)
        .map((v) => Number(v[0]))
        .sort();
      assert.ok(expected.length > 0);
      const rows = JSON.parse(result.stdout.split('\n').find((l) => l.startsWith('['))!) as {
        key: number | string;
        count: number;
      }[];
      assert.deepEqual(rows.flatMap((r) => Array(r.count).fill(Number(r.key))).sort(), expected);
    });
  }

  // Debian's python3 is built with --with-dtrace: its USDT probes, with semaphores. (pyenv or
  // other builds usually are not: the test then says so and skips.)
  const PYTHON_SCRIPT = [
    'import sys',
    '',
    '',
    'def alpha(n):',
    '    return n + 1',
    '',
    '',
    'def beta(n):',
    '    return alpha(n) * 2',
    '',
    '',
    '# CPython 3.11 fires function__entry only on its tracing path: a profile function takes it.',
    'sys.setprofile(lambda *args: None)',
    'print(sum(beta(i) for i in range(3)))',
    '',
  ].join('\n');

  function pythonWithProbes(t: import('node:test').TestContext): string | undefined {
    const python = existsSync('/usr/bin/python3') ? realpathSync('/usr/bin/python3') : undefined;
    const notes =
      python === undefined ? '' : execFileSync('readelf', ['-n', python], { encoding: 'utf8' });
    if (python !== undefined && /Provider: python\n\s+Name: function__entry\n/.test(notes)) {
      return python;
    }
    const reason = `${python ?? '/usr/bin/python3'} has no python:function__entry USDT probe (built without --with-dtrace)`;
    console.log(`# skipped "${t.name}": ${reason}`);
    t.skip(reason);
    return undefined;
  }

  for (const engine of ENGINES) {
    test(`python:function__entry with --engine ${engine}: the functions a script calls`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['readelf'] })) return;
      const python = pythonWithProbes(t);
      if (python === undefined) return;
      const dir = mkdtempSync(join(tmpdir(), 'upscope-usdt-py-'));
      try {
        const script = join(dir, 'calls.py');
        writeFileSync(script, PYTHON_SCRIPT);
        // The script's output to a file of its own: its print() writes "12" and "\n" apart,
        // and an event line of upscope's landed between them once.
        const scriptOut = join(dir, 'out.txt');
        const result = runCli([
          'trace',
          '--engine',
          engine,
          '--json',
          '--command-output',
          scriptOut,
          '-c',
          `${python} ${script}`,
          // The function's file and name are held in registers: `arg1:string` is the string
          // arg1 points at, as `+0(arg1):string` (tracefs writes both as +0(%reg) for the kernel).
          `u:${python}:python:function__entry file=arg0:string func=arg1:string line=arg2 same=+0(arg1):string`,
        ]);
        assert.equal(result.status, 0, result.stderr);
        assert.match(readFileSync(scriptOut, 'utf8'), /^12$/m, 'the script ran');
        const calls = events(result.stdout)
          .filter((e) => e.fields['file'] === script)
          .map((e) => `${e.fields['func']}:${e.fields['line']}`);
        const lines = PYTHON_SCRIPT.split('\n');
        const defLine = (name: string) => lines.indexOf(`def ${name}(n):`) + 1;
        const count = (name: string) =>
          calls.filter((c) => c === `${name}:${defLine(name)}`).length;
        assert.equal(count('beta'), 3, calls.join(' '));
        assert.equal(count('alpha'), 3, calls.join(' '));
        for (const e of events(result.stdout)) assert.equal(e.fields['same'], e.fields['func']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test('list --usdt shows python:function__entry as readelf -n does', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const python = pythonWithProbes(t);
    if (python === undefined) return;
    const notes = execFileSync('readelf', ['-n', python], { encoding: 'utf8' });
    const m =
      /Name: function__entry\n\s+Location: 0x0*([0-9a-f]+), Base: 0x[0-9a-f]+, Semaphore: 0x0*([0-9a-f]+)\n\s+Arguments: (.*)/.exec(
        notes,
      )!;
    const result = runCli(['list', '--usdt', python, 'python:function__entry']);
    assert.equal(result.status, 0, result.stderr);
    assert.match(
      result.stdout,
      new RegExp(
        `^python +function__entry +0x${m[1]} +0x${m[2]} +${m[3]!.replace(/[$()%]/g, '\\$&')}$`,
        'm',
      ),
    );
  });
});
