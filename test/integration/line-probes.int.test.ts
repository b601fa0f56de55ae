import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

// Probes on source lines fire as often as the line runs: test/programs/lines.c counts how often
// its marked lines ran and prints it; `upscope trace -c` on each engine must see as many hits.

const SOURCE = new URL('../programs/lines.c', import.meta.url).pathname;
const RUNS = 37;
const scratch = mkdtempSync(join(tmpdir(), 'upscope-line-int-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function mark(name: string): number {
  const lines = readFileSync(SOURCE, 'utf8').split('\n');
  return lines.findIndex((l) => l.includes(`MARK:${name}`) && !l.startsWith(' *')) + 1;
}

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  const traced = execFileSync('ps', ['-eo', 'stat=,comm='], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => /^[tTZ]/.test(l.trim()) && /lines/.test(l));
  assert.deepEqual(traced, [], 'no stopped or zombie target is left');
});

interface Counts {
  readonly printed: Map<string, number>;
  readonly hits: Map<string, number>;
}

/** The probe name `trace` gives each site of the specs (from `upscope resolve --json`). */
function probeNames(specs: string[], extra: string[]): Map<string, string> {
  const result = runCli(['resolve', '--json', ...extra, ...specs]);
  assert.equal(result.status, 0, result.stderr);
  const names = new Map<string, string>();
  for (const site of JSON.parse(result.stdout).sites) {
    const name = site.symbolOffset === '0x0' ? site.symbol : `${site.symbol}+${site.symbolOffset}`;
    assert.ok(!names.has(name), `one spec per probe name: ${name}`);
    names.set(name, site.spec);
  }
  return names;
}

/** Trace the marked lines with `upscope trace --json -c`; the target's counts and ours. */
function traceLines(app: string, engine: string, extra: string[] = []): Counts {
  const lines = { body: mark('loop_body'), twice: mark('inline_body'), odd: mark('odd_branch') };
  const specs = Object.values(lines).map((line) => `${app}:lines.c:${line}`);
  const names = probeNames(specs, extra);
  const result = runCli([
    'trace',
    '--engine',
    engine,
    '--json',
    '--command-output',
    'inherit',
    ...extra,
    '-c',
    `${app} ${RUNS}`,
    ...specs,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const printed = new Map<string, number>();
  const hits = new Map<string, number>();
  for (const text of result.stdout.split('\n')) {
    const m = /^(body|twice|odd) (\d+)$/.exec(text);
    if (m !== null) printed.set(m[1]!, Number(m[2]));
    if (text.startsWith('{') && !text.startsWith('{"command"')) {
      const spec = names.get(JSON.parse(text).probe);
      assert.ok(spec !== undefined, text);
      const line = Number(spec.slice(spec.lastIndexOf(':') + 1));
      const name = Object.entries(lines).find(([, l]) => l === line)![0];
      hits.set(name, (hits.get(name) ?? 0) + 1);
    }
  }
  assert.equal(printed.size, 3, result.stdout.slice(0, 400));
  return { printed, hits };
}

describe('probes on source lines', () => {
  for (const engine of ['tracefs', 'bpf', 'ptrace'] as const) {
    for (const flags of [['-O0'], ['-O2'], ['-O2', '-gdwarf-4']]) {
      test(`${engine}, ${flags.join(' ')}: each marked line is hit as often as it ran`, (t) => {
        if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
        const app = compileProgram('lines', { flags });
        const { printed, hits } = traceLines(app, engine);
        assert.equal(printed.get('body'), RUNS);
        assert.equal(printed.get('twice'), 3 * RUNS);
        for (const name of ['body', 'twice', 'odd']) {
          assert.equal(hits.get(name) ?? 0, printed.get(name), `hits of MARK ${name}`);
        }
      });
    }
  }

  test('tracefs: a stripped binary with its debug file in --debug-dir (by build-id)', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objcopy', 'strip', 'readelf'] })) return;
    const full = compileProgram('lines', { flags: ['-O2'] });
    const app = join(scratch, 'stripped');
    execFileSync('strip', ['-o', app, full]);
    const id = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', app]))![1]!;
    const debugDir = join(scratch, 'debug');
    mkdirSync(join(debugDir, '.build-id', id.slice(0, 2)), { recursive: true });
    execFileSync('objcopy', [
      '--only-keep-debug',
      full,
      join(debugDir, '.build-id', id.slice(0, 2), `${id.slice(2)}.debug`),
    ]);
    const { printed, hits } = traceLines(app, 'tracefs', ['--debug-dir', debugDir]);
    for (const name of ['body', 'twice', 'odd']) {
      assert.equal(hits.get(name) ?? 0, printed.get(name), `hits of MARK ${name}`);
    }
  });

  test('the debug file installed where Debian puts it: /usr/lib/debug/.build-id', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objcopy', 'strip', 'readelf'] })) return;
    // A build-id of its own (a distinct -D) so nothing else can own the path.
    const full = join(scratch, 'real-path-full');
    execFileSync('gcc', ['-g', '-O2', `-DUPSCOPE_TEST_ID=${process.pid}`, '-o', full, SOURCE]);
    const app = join(scratch, 'real-path');
    execFileSync('strip', ['-o', app, full]);
    const id = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', app]))![1]!;
    const dir = `/usr/lib/debug/.build-id/${id.slice(0, 2)}`;
    const path = `${dir}/${id.slice(2)}.debug`;
    assert.ok(!existsSync(path), `${path} is not there before the test`);
    const made = !existsSync(dir);
    mkdirSync(dir, { recursive: true });
    try {
      execFileSync('objcopy', ['--only-keep-debug', full, path]);
      const result = runCli(['resolve', `${app}:lines.c:${mark('loop_body')}`]);
      assert.equal(result.status, 0, result.stderr);
      assert.ok(
        result.stdout.includes(`lines.c:${mark('loop_body')}`) &&
          result.stdout.includes(`(debug info: ${path}, by build-id)`),
        result.stdout,
      );
      const doctor = runCli(['doctor', app, '--json']);
      const check = JSON.parse(doctor.stdout).checks.find(
        (c: { id: string }) => c.id === 'debug-info',
      );
      assert.equal(check?.status, 'ok', doctor.stdout);
      assert.match(check.detail, new RegExp(`${path.replace(/\./g, '\\.')} \\(by build-id\\)`));
    } finally {
      rmSync(path, { force: true });
      if (made) rmSync(dir, { recursive: true, force: true });
    }
  });
});
