// `upscope trace` on the ptrace engine: the same specs and output as the kernel engine, for
// one command or process, and chosen by itself when the user is not root.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

interface JsonEvent {
  probe: string;
  kind: string;
  pid: number;
  tid: number;
  fields: Record<string, number | string>;
  latencyNs?: string;
}

test('trace --engine ptrace -c: every call, its arguments, return values and latencies', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const result = runCli([
    'trace',
    '--engine',
    'ptrace',
    '--json',
    '-c',
    `${app} 25`,
    `${app}:probed_add a=arg0 b=arg1:s32`,
    `r:${app}:probed_add ret=retval:s64`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const events: JsonEvent[] = result.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
  const calls = Number(/calls=(\d+)/.exec(result.stdout)?.[1]);
  assert.equal(calls, 100, 'the target counted its calls');
  const entries = events.filter((e) => e.kind === 'entry');
  const returns = events.filter((e) => e.kind === 'return');
  assert.equal(entries.length, calls);
  assert.equal(returns.length, calls);
  assert.equal(new Set(entries.map((e) => e.tid)).size, 4, 'from all 4 threads');
  // probed_add(i, t) returns i + t: pair each return with the last entry of its thread.
  const last = new Map<number, JsonEvent>();
  for (const e of events) {
    if (e.kind === 'entry') {
      last.set(e.tid, e);
      continue;
    }
    const entry = last.get(e.tid)!;
    assert.equal(BigInt(e.fields['ret']!), BigInt(entry.fields['a']!) + BigInt(entry.fields['b']!));
    assert.ok(BigInt(e.latencyNs!) > 0n);
  }
  assert.match(result.stderr, /Tracing 1 probe \(ptrace, process \d+\)/);
  assert.match(result.stderr, /upscope: 200 events delivered, 0 lost, 0 missed/);
});

test('without root, trace picks the ptrace engine and traces the user’s own command', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const result = spawnSync(
    'setpriv',
    [
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      process.execPath,
      BIN,
      'trace',
      '-c',
      `${app} gate`,
      `r:${app}:check_gate ok=retval:s32`,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stderr, /\(ptrace, process \d+\)/);
  assert.match(result.stdout, / r:check_gate ok=0 \(/);
  assert.match(result.stdout, /^closed$/m);
});

test('the ptrace engine explains what it needs', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const cases: [string[], RegExp][] = [
    [['trace', '--engine', 'ptrace', `${app}:probed_add`], /give -p PID or -c COMMAND/],
    [
      ['trace', '--engine', 'kprobe', `${app}:probed_add`],
      /Cannot use engine "kprobe": give tracefs or ptrace/,
    ],
    [
      ['trace', '--engine', 'ptrace', '--buffer-size', '64', '-c', app, `${app}:probed_add`],
      /no ring buffer/,
    ],
    [
      ['trace', '--engine', 'ptrace', '-p', '999999', `${app}:probed_add`],
      /^error\[ERR_PROCESS_NOT_FOUND\]/,
    ],
  ];
  for (const [args, expected] of cases) {
    const result = runCli(args);
    assert.notEqual(result.status, 0, args.join(' '));
    assert.match(result.stderr, expected);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  }
});
