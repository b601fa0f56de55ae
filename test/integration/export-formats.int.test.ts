// --format and -o from the command line, on a live C target that counts its own calls: each
// format of trace, count (by ustack), hist and latency is written, and its totals are the
// target's; a format a command does not write is one line naming those it does.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'upscope-formats-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function run(args: string[]): { own: RegExpExecArray; stdout: string } {
  const r = runCli(args);
  assert.equal(r.status, 0, r.stderr);
  return {
    own: /work0=(\d+) work1=(\d+) work2=(\d+) other=(\d+)/.exec(r.stdout)!,
    stdout: r.stdout,
  };
}

test('count --by ustack --format folded, flamegraph, pprof, speedscope -o FILE: the totals are the calls', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const cmd = `${app} 120 30 now`;
  const folded = join(dir, 'c.folded');
  run([
    'count',
    '--by',
    'ustack',
    '--format',
    'folded',
    '-o',
    folded,
    '-c',
    cmd,
    `${app}:work`,
    `${app}:other`,
  ]);
  const totals = new Map<string, number>();
  for (const line of readFileSync(folded, 'utf8').trim().split('\n')) {
    const [stack, n] = [
      line.slice(0, line.lastIndexOf(' ')),
      Number(line.slice(line.lastIndexOf(' ') + 1)),
    ];
    const leaf = stack.split(';').at(-1)!;
    assert.match(stack, /main;(work|other)$/);
    totals.set(leaf, (totals.get(leaf) ?? 0) + n);
  }
  assert.deepEqual(
    totals,
    new Map([
      ['work', 120],
      ['other', 30],
    ]),
  );
  const svg = join(dir, 'c.svg');
  run(['count', '--by', 'ustack', '--format', 'flamegraph', '-o', svg, '-c', cmd, `${app}:work`]);
  assert.match(readFileSync(svg, 'utf8'), /^<\?xml[\s\S]*<svg[\s\S]*work[\s\S]*<\/svg>\s*$/);
  const pprof = join(dir, 'c.pb.gz');
  run(['count', '--by', 'ustack', '--format', 'pprof', '-o', pprof, '-c', cmd, `${app}:work`]);
  const { Profile } = await import('pprof-format');
  const profile = Profile.decode(gunzipSync(readFileSync(pprof)));
  const sum = profile.sample.reduce((s, x) => s + Number(x.value[0]), 0);
  assert.equal(sum, 120);
  const ss = join(dir, 'c.speedscope.json');
  run(['count', '--by', 'ustack', '--format', 'speedscope', '-o', ss, '-c', cmd, `${app}:work`]);
  const doc = JSON.parse(readFileSync(ss, 'utf8'));
  assert.equal(
    doc.profiles[0].weights.reduce((s: number, w: number) => s + w, 0),
    120,
  );
  assert.deepEqual(leftovers(), []);
});

test('trace --format chrome and speedscope, hist and latency --format prometheus, on the live target', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const cmd = `${app} 60 0 now`;
  const chrome = join(dir, 't.json');
  run([
    'trace',
    '--format',
    'chrome',
    '-o',
    chrome,
    '-c',
    cmd,
    `${app}:work k=arg0`,
    `r:${app}:work`,
  ]);
  const events = JSON.parse(readFileSync(chrome, 'utf8')).traceEvents as {
    ph: string;
    name: string;
  }[];
  assert.equal(events.filter((e) => e.ph === 'X' && e.name === 'work').length, 60);
  const ss = join(dir, 't.speedscope.json');
  run(['trace', '--format', 'speedscope', '-o', ss, '-c', cmd, `${app}:work`, `r:${app}:work`]);
  const opened = JSON.parse(readFileSync(ss, 'utf8')).profiles[0].events.filter(
    (e: { type: string }) => e.type === 'O',
  );
  assert.equal(opened.length, 60);
  const hist = run(['hist', '--format', 'prometheus', '-c', cmd, `${app}:work`, 'arg0']);
  assert.match(hist.stdout, /^upscope_value_count\{probe="work",value="arg0"\} 60$/m);
  assert.match(hist.stdout, /^upscope_value_sum\{probe="work",value="arg0"\} 60$/m); // 20*(0+1+2)
  const latency = run(['latency', '--format', 'json', '-c', cmd, `${app}:work`]);
  assert.match(latency.stdout, /"count":"?60"?/);
  assert.deepEqual(leftovers(), []);
});

test('a format a command does not write: one line naming the formats it does', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('export-target');
  const cases: [string[], RegExp][] = [
    [
      ['count', '--format', 'folded', `${app}:work`],
      /^error\[ERR_USAGE\]: Cannot write counts as folded: give --format text, json or prometheus$/,
    ],
    [
      ['count', '--format', 'svg', `${app}:work`],
      /^error\[ERR_USAGE\]: Cannot use --format "svg": give text, json or prometheus, or with --by ustack folded, flamegraph, pprof or speedscope$/,
    ],
    [
      ['trace', '--format', 'pprof', `${app}:work`],
      /^error\[ERR_USAGE\]: Cannot write a trace as pprof: give --format text, json, chrome or speedscope$/,
    ],
    [
      ['latency', '--format', 'chrome', `${app}:work`],
      /^error\[ERR_USAGE\]: Cannot write latencies as chrome: give --format text, json or prometheus$/,
    ],
    [
      ['hist', '--json', '--format', 'text', `${app}:work`, 'arg0'],
      /^error\[ERR_USAGE\]: Cannot use --json with --format text/,
    ],
  ];
  for (const [args, line] of cases) {
    const r = runCli(args);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr.split('\n')[0]!, line);
    assert.doesNotMatch(r.stderr, / {4}at /);
  }
});
