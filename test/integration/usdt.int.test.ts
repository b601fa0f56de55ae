// USDT probes on every engine: each hit of test/programs/usdt-target with the values the target
// prints as it passes them, its semaphore raised exactly while traced, nothing left behind.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileUsdtTarget, requireSdt } from '../helpers/usdt.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const CALLS = 5;

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
    .filter((l) => l.startsWith('{'))
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
        const app = compileUsdtTarget(opt);
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

  test('tracefs refuses a base+index*scale argument and names the engines that can', (t) => {
    if (!requireSdt(t) || !requireHost(t, { root: true })) return;
    const app = compileUsdtTarget('-O2');
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
    assert.match(some.stdout, /usdt:wide arg1=-5 arg2=42\n/);
  });

  test('argN beyond the note is a clear error pointing at it', (t) => {
    if (!requireSdt(t)) return;
    const app = compileUsdtTarget('-O2');
    const result = runCli(['resolve', `u:${app}:usdt:gated arg2`]);
    // resolve exits 3 when a spec does not resolve.
    assert.equal(result.status, 3);
    assert.match(
      result.stderr,
      /^error\[ERR_SPEC_INVALID\]: Cannot fetch arg2 at USDT probe "usdt:gated": it has 2 arguments, arg0 to arg1\n.*\n\s+\^{4}\n/,
    );
  });

  for (const engine of ENGINES) {
    test(`-p with --engine ${engine}: the semaphore is raised exactly while the probe is attached`, async (t) => {
      if (!requireSdt(t) || !requireHost(t, { root: engine !== 'ptrace' })) return;
      const app = compileUsdtTarget('-O2');
      // 40 calls 50 ms apart: about 0.5 s before the trace, 1 s traced, 0.5 s after.
      const target = spawn(app, ['40', '50'], { stdio: ['ignore', 'pipe', 'inherit'] });
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
        assert.equal(lines.length, 40);
        const enabled = lines.filter(([, e]) => e === '1').map(([i]) => i);
        const hits = events(traced).map((e) => String(e.fields['arg0']));
        assert.ok(hits.length >= 5, `hits while traced: ${hits.length}`);
        // Enabled at the calls the tracer saw, and at no other: before and after it, not.
        assert.deepEqual(enabled, hits);
        for (const e of events(traced)) assert.equal(String(e.fields['arg1']), '1');
        assert.equal(lines[0]![1], '0', 'not raised before the trace');
        assert.equal(lines.at(-1)![1], '0', 'lowered again after the trace');
      } finally {
        target.kill('SIGKILL');
      }
    });
  }

  test('count --engine bpf counts every hit of each USDT probe', (t) => {
    if (!requireSdt(t) || !requireHost(t, { root: true })) return;
    const app = compileUsdtTarget('-O2');
    const result = runCli([
      'count',
      '--engine',
      'bpf',
      '--json',
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
});
