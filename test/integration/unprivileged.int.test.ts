// Every command run as an unprivileged user (nobody): what works works, and what cannot says
// in one line what is missing, with hints naming the privilege or the engine that would do.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

interface Case {
  readonly args: (app: string, pid: number) => string[];
  /** The exit status, and what the first line and the hints must say; ok: works. */
  readonly status: number;
  readonly line?: RegExp;
  readonly hints?: readonly RegExp[];
}

const PTRACE_INSTEAD = /--engine ptrace with -p PID or -c/;
const CASES: readonly Case[] = [
  { args: (app) => ['list', app], status: 0 },
  { args: (app) => ['resolve', `${app}:busy_tick`], status: 0 },
  {
    args: (_app, pid) => ['list', '-p', String(pid)],
    status: 5,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot read the memory map of process \d+ .*permission denied \(running as uid 65534\)$/,
    hints: [/Run as the process's owner or as root/, /ptrace_scope/],
  },
  {
    args: (app, pid) => ['resolve', '-p', String(pid), `${app}:busy_tick`],
    status: 3,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot read the memory map of process \d+/,
    hints: [/Run as the process's owner or as root/],
  },
  {
    args: (app) => ['trace', `${app}:busy_tick`],
    status: 2,
    line: /^error\[ERR_USAGE\]: Cannot trace with the ptrace engine without a process: give -p PID or -c COMMAND$/,
    hints: [/tracefs engine \(root\) traces every process/],
  },
  ...(['tracefs', 'bpf'] as const).map((engine) => ({
    args: (app: string) => ['trace', '--engine', engine, `${app}:busy_tick`],
    status: 5,
    line: /^error\[ERR_PRIVILEGES\]: Cannot read "\/sys\/kernel\/tracing\/uprobe_events": EACCES \(permission denied\)$/,
    hints: [/need root/, PTRACE_INSTEAD],
  })),
  ...(['trace', 'count'] as const).map((command) => ({
    args: (app: string, pid: number) => [command, '-p', String(pid), `${app}:busy_tick`],
    status: 5,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot trace process \d+ \(thread \d+\): ptrace: EPERM \(operation not permitted\)$/,
    hints: [/Trace your own processes, or run as root \(CAP_SYS_PTRACE\)/, /ptrace_scope/],
  })),
  ...(['count', 'hist', 'latency'] as const).map((command) => ({
    args: (app: string) => [command, `${app}:busy_tick`, ...(command === 'hist' ? ['arg0'] : [])],
    status: 5,
    line: /^error\[ERR_PRIVILEGES\]: Cannot create BPF map "\w+": EPERM \(operation not permitted\)$/,
    hints: [/root, or CAP_BPF and CAP_PERFMON/, /--engine ptrace with -p PID or -c COMMAND/],
  })),
  {
    args: () => ['clean'],
    status: 5,
    line: /^error\[ERR_PRIVILEGES\]: Cannot clean upscope's tracefs groups: .* is not writable by uid 65534$/,
    hints: [/Run as root/],
  },
];

test('as nobody, each command works or says what is missing and what would work', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  // A copy nobody can read, and a process of root's that nobody may not inspect.
  const dir = mkdtempSync(join(tmpdir(), 'upscope-nobody-'));
  chmodSync(dir, 0o755);
  const app = join(dir, 'busy');
  copyFileSync(compileProgram('busy-counter'), app);
  chmodSync(app, 0o755);
  const target = spawn(app, [], { stdio: 'ignore' });
  try {
    for (const one of CASES) {
      // A command that waits for hits ends after a second if it ever starts.
      const args = one.args(app, target.pid!);
      if (!['list', 'resolve', 'clean'].includes(args[0]!)) args.push('--duration', '1');
      const run = runCli(args, { asNobody: true });
      const what = `upscope ${args.join(' ')}`;
      assert.equal(run.status, one.status, `${what}\n${run.stderr}`);
      assert.doesNotMatch(run.stderr, /\n\s+at |ERR_INTERNAL/, `${what}: no stack trace`);
      if (one.line === undefined) continue;
      const lines = run.stderr.split('\n').filter((l) => !/^upscope: /.test(l));
      assert.match(lines[0]!, one.line, what);
      const hints = lines.filter((l) => l.startsWith('  hint: '));
      for (const hint of one.hints ?? []) {
        assert.ok(
          hints.some((h) => hint.test(h)),
          `${what}: a hint ${hint}\n${run.stderr}`,
        );
      }
    }
    assert.equal(target.exitCode, null, 'the target was not harmed');
    assert.deepEqual(leftovers(), []);
  } finally {
    target.kill('SIGKILL');
    await new Promise((r) => target.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
});
