// `upscope trace` on the ptrace engine: the same specs and output as the kernel engine, for
// one command or process, and chosen by itself when the user is not root.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { compileProgram, compileTraceTarget } from '../helpers/compile.js';
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
    '--command-output',
    'inherit',
    '-c',
    `${app} 25`,
    `${app}:probed_add a=arg0 b=arg1:s32`,
    `r:${app}:probed_add ret=retval:s64`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const events: JsonEvent[] = result.stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
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
  // Two specs (an entry and a return) are two probes, as the kernel engines say.
  assert.match(result.stderr, /Tracing 2 probes \(ptrace, process \d+\)/);
  assert.match(result.stderr, /upscope: 200 events delivered, 0 lost, 0 missed/);
});

test('without root, trace picks the ptrace engine and traces the user’s own command', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const result = runCli(['trace', '-c', `${app} gate`, `r:${app}:check_gate ok=retval:s32`], {
    asNobody: true,
  });
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
      /Cannot use engine "kprobe": give tracefs, bpf, ptrace or inject/,
    ],
    [
      ['trace', '--engine', 'ptrace', '--buffer-size', '64', '-c', app, `${app}:probed_add`],
      /no ring buffer/,
    ],
    [
      ['trace', '--engine', 'ptrace', '-p', '999999', `${app}:probed_add`],
      /^error\[ERR_PROCESS_NOT_FOUND\]/,
    ],
    [
      ['trace', '--engine', 'ptrace', '-c', 'no-such-program-xyz 1', `${app}:probed_add`],
      /^error\[ERR_TARGET_NOT_FOUND\]: Cannot run "no-such-program-xyz": not found on PATH/,
    ],
  ];
  for (const [args, expected] of cases) {
    const result = runCli(args);
    assert.notEqual(result.status, 0, args.join(' '));
    assert.match(result.stderr, expected);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  }
});

test('-p: Ctrl-C and --duration end the trace and leave the process running, untraced', async (t) => {
  if (!requireHost(t, { commands: ['sleep'] })) return;
  for (const how of ['SIGINT', '--duration'] as const) {
    const sleeper = spawn('sleep', ['30'], { stdio: 'ignore' });
    try {
      const args = [
        BIN,
        'trace',
        '--engine',
        'ptrace',
        '-p',
        String(sleeper.pid),
        'libc:clock_nanosleep',
      ];
      if (how === '--duration') args.push('--duration', '1');
      const started = performance.now();
      const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      child.stderr.on('data', (chunk) => {
        err += chunk;
      });
      while (!err.includes('Tracing')) await new Promise((r) => setTimeout(r, 20));
      if (how === 'SIGINT') child.kill('SIGINT');
      const [code] = await once(child, 'exit');
      assert.equal(code, 0, err);
      assert.ok(performance.now() - started < 10_000, `${how} ended it`);
      assert.match(err, /upscope: 0 events delivered/);
      const status = readFileSync(`/proc/${sleeper.pid}/status`, 'utf8');
      assert.match(status, /^TracerPid:\s+0$/m);
      assert.equal(sleeper.exitCode, null, 'sleep still runs');
    } finally {
      sleeper.kill('SIGKILL');
    }
  }
});

test('trace --engine ptrace follows forked children and the command’s own re-exec, as tracefs would', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const { app } = compileTraceTarget();
  const result = runCli([
    'trace',
    '--engine',
    'ptrace',
    '--json',
    '--command-output',
    'inherit',
    '-c',
    `${app} 3`,
    `${app}:f_ints`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const events: JsonEvent[] = result.stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
    .map((l) => JSON.parse(l));
  // What the target counted, per pid: 4 threads x 3 calls in the command, 10 in its forked
  // child, and 5 more in that child once it has exec'd a copy of itself (its pid kept).
  const counted = new Map<number, number>();
  for (const m of result.stdout.matchAll(/^(?:main|fork|exec) pid=(\d+) f_ints=(\d+)/gm)) {
    counted.set(Number(m[1]), (counted.get(Number(m[1])) ?? 0) + Number(m[2]));
  }
  assert.equal(counted.size, 2, result.stdout);
  const byPid = new Map<number, number>();
  for (const e of events) byPid.set(e.pid, (byPid.get(e.pid) ?? 0) + 1);
  assert.deepEqual(Object.fromEntries(byPid), Object.fromEntries(counted));

  // `ptrace-target exec` makes 3 calls, then execs itself into 4 threads x 2 calls.
  const target = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const again = runCli([
    'trace',
    '--engine',
    'ptrace',
    '--json',
    '--command-output',
    'inherit',
    '-c',
    `${target} exec`,
    `${target}:probed_add`,
  ]);
  assert.equal(again.status, 0, again.stderr);
  assert.equal(
    again.stdout.split('\n').filter((l) => l.startsWith('{') && !l.startsWith('{"command"')).length,
    11,
  );
});
