// Every command run as an unprivileged user (nobody): what works works, and what cannot says
// in one line what is missing, with hints naming the privilege or the engine that would do.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

interface Case {
  /** The command line, given the readable program, a process of root's and the scratch dir. */
  readonly args: (app: string, pid: number, dir: string) => string[];
  /** The exit status, and what the first line and the hints must say; ok: works. */
  readonly status: number;
  readonly line?: RegExp;
  readonly hints?: readonly RegExp[];
}

/** Yama's ptrace_scope, 0 without Yama. */
function yamaScope(): number {
  try {
    return Number(readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8'));
  } catch {
    return 0;
  }
}

const PTRACE_INSTEAD = /--engine ptrace with -p PID or -c/;
const PROCESS_HINTS = [
  /Run as the process's owner, or as root \(CAP_SYS_PTRACE/,
  /give the program's file instead of -p/,
];
const FILE_HINTS = [
  /Run as a user who may read ".*": its owner, or root \(CAP_DAC_READ_SEARCH/,
  /a copy you may read/,
];
/** The program in a directory nobody may not search, and a copy nobody may not read. */
const HIDDEN = (dir: string) => `${dir}/private/busy`;
const UNREADABLE = (dir: string) => `${dir}/unreadable`;
const CASES: readonly Case[] = [
  { args: (app) => ['list', app], status: 0 },
  { args: (app) => ['resolve', `${app}:busy_tick`], status: 0 },
  ...(['list', 'resolve'] as const).map((command) => ({
    args: (app: string, pid: number) => [
      command,
      '-p',
      String(pid),
      ...(command === 'resolve' ? [`${app}:busy_tick`] : []),
    ],
    status: 5,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot read the memory map of process \d+ .*permission denied \(running as uid 65534\)$/,
    hints: PROCESS_HINTS,
  })),
  ...(['list', 'resolve', 'trace'] as const).flatMap((command) =>
    [
      { file: HIDDEN, missing: 'may not search directory ".*/private"' },
      { file: UNREADABLE, missing: 'may not read the file' },
    ].map(({ file, missing }) => ({
      args: (_app: string, _pid: number, dir: string) => {
        const spec = command === 'list' ? file(dir) : `${file(dir)}:busy_tick`;
        return command === 'trace' ? [command, '-c', '/bin/true', spec] : [command, spec];
      },
      status: 5,
      line: new RegExp(
        `^error\\[ERR_FILE_ACCESS\\]: Cannot (read target|open ELF file) ".*": permission denied: uid 65534 ${missing}$`,
      ),
      hints: FILE_HINTS,
    })),
  ),
  {
    args: (app) => ['trace', `${app}:busy_tick`],
    status: 2,
    line: /^error\[ERR_USAGE\]: Cannot trace with the ptrace engine without a process: give -p PID or -c COMMAND$/,
    hints: [/tracefs engine \(root\) traces every process/],
  },
  {
    args: (app) => ['trace', '--engine', 'inject', `${app}:busy_tick`],
    status: 2,
    line: /^error\[ERR_USAGE\]: Cannot trace with the inject engine without a process: give -p PID or -c COMMAND$/,
    hints: [/The inject engine probes one process/],
  },
  {
    args: (app: string) => ['trace', '--engine', 'tracefs', `${app}:busy_tick`],
    status: 5,
    line: /^error\[ERR_PRIVILEGES\]: Cannot read "\/sys\/kernel\/tracing\/uprobe_events": EACCES \(permission denied\)$/,
    hints: [/need root/, PTRACE_INSTEAD],
  },
  {
    // Tracing every process needs BPF, not tracefs.
    args: (app: string) => ['trace', '--engine', 'bpf', `${app}:busy_tick`],
    status: 5,
    line: /^error\[ERR_PRIVILEGES\]: Cannot create BPF map "upscope_events": EPERM \(operation not permitted\)$/,
    hints: [/The bpf engine needs root, or CAP_BPF and CAP_PERFMON/, PTRACE_INSTEAD],
  },
  ...(['trace', 'count'] as const).map((command) => ({
    args: (app: string, pid: number) => [command, '-p', String(pid), `${app}:busy_tick`],
    status: 5,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot trace process \d+ \(thread \d+\): ptrace: EPERM \(operation not permitted\)$/,
    // The Yama hint only where Yama restricts ptrace: elsewhere it would send the user astray.
    hints: [
      /Trace your own processes, or run as root \(CAP_SYS_PTRACE\)/,
      ...(yamaScope() > 0 ? [/ptrace_scope/] : []),
    ],
  })),
  {
    // Which allocator a process uses is read from its memory map: root's is not nobody's to
    // read (it was said to be "not running").
    args: (_app: string, pid: number) => ['leaks', '-p', String(pid)],
    status: 5,
    line: /^error\[ERR_PROCESS_ACCESS\]: Cannot read the memory map of process \d+ \("busy"\): permission denied \(running as uid 65534\)$/,
    hints: [/Run as the process's owner, or as root/],
  },
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
  mkdirSync(dirname(HIDDEN(dir)), { mode: 0o700 });
  copyFileSync(app, HIDDEN(dir));
  copyFileSync(app, UNREADABLE(dir));
  chmodSync(UNREADABLE(dir), 0o600);
  const target = spawn(app, [], { stdio: 'ignore' });
  // The same error must give the same exit status whichever command meets it.
  const statusOf = new Map<string, number>();
  try {
    for (const one of CASES) {
      // A command that waits for hits ends after a second if it ever starts.
      const args = one.args(app, target.pid!, dir);
      if (!['list', 'resolve', 'clean'].includes(args[0]!)) args.push('--duration', '1');
      const run = runCli(args, { asNobody: true });
      const what = `upscope ${args.join(' ')}`;
      assert.equal(run.status, one.status, `${what}\n${run.stderr}`);
      assert.doesNotMatch(run.stderr, /\n\s+at |ERR_INTERNAL/, `${what}: no stack trace`);
      const code = /^error\[(\w+)\]/m.exec(run.stderr)?.[1];
      if (code !== undefined) {
        const earlier = statusOf.get(code);
        assert.ok(
          earlier === undefined || earlier === run.status,
          `${what}: ${code} exits ${run.status} here, ${earlier} elsewhere`,
        );
        statusOf.set(code, run.status);
      }
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

test('as nobody with some capabilities: CAP_BPF and CAP_PERFMON run the bpf engine; one of them alone is refused by name, and count falls back to ptrace', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  const app = compileProgram('tfs-counter');
  const args = (...engine: string[]) => ['count', ...engine, '-c', `${app} 10`, `${app}:tfs_add`];
  /** The program's own count of tfs_add calls, and upscope's. */
  const counts = (stdout: string) => ({
    program: Number(/tfs_add (\d+) /.exec(stdout)?.[1]),
    counted: Number(/^(\d+)\s+tfs_add$/m.exec(stdout)?.[1]),
  });

  const both = runCli(args(), { asNobody: true, caps: ['bpf', 'perfmon'] });
  assert.equal(both.status, 0, both.stderr);
  assert.match(both.stderr, /^Counting 1 probe \(bpf/m);
  const { program, counted } = counts(both.stdout);
  assert.ok(program > 0, both.stdout);
  assert.equal(counted, program, both.stdout);
  // Following a command's children needs no tracefs (raw tracepoints): a shell's child and
  // the program it then runs in its own place are both counted, as they count themselves.
  const shell = runCli(
    ['count', '--engine', 'bpf', '-c', `sh -c '${app} 10; ${app} 7'`, `${app}:tfs_add`],
    { asNobody: true, caps: ['bpf', 'perfmon'] },
  );
  assert.equal(shell.status, 0, shell.stderr);
  assert.doesNotMatch(shell.stderr, /only the command's own process is counted/);
  const made = [...shell.stdout.matchAll(/tfs_add (\d+) /g)].map((m) => Number(m[1]));
  assert.equal(made.length, 2, shell.stdout);
  assert.equal(counts(shell.stdout).counted, made[0]! + made[1]!, shell.stdout);

  for (const caps of [['bpf'], ['perfmon'], []]) {
    const what = `count with CAP_${caps.join('+').toUpperCase() || 'none'}`;
    const refused = runCli(args('--engine', 'bpf'), { asNobody: true, caps });
    assert.equal(refused.status, 5, `${what}\n${refused.stderr}`);
    assert.match(
      refused.stderr,
      /^error\[ERR_PRIVILEGES\]: Cannot (create BPF map|load the BPF program)/,
    );
    assert.match(refused.stderr, /hint: The bpf engine needs root, or CAP_BPF and CAP_PERFMON/);
    assert.match(
      refused.stderr,
      /hint: Without them, use --engine ptrace with -p PID or -c COMMAND/,
    );
    // Without --engine, the same count runs on ptrace and says so.
    const fallback = runCli(args(), { asNobody: true, caps });
    assert.equal(fallback.status, 0, `${what}\n${fallback.stderr}`);
    assert.match(fallback.stderr, /BPF is not allowed here: using the ptrace engine/);
    const c = counts(fallback.stdout);
    assert.equal(c.counted, c.program, fallback.stdout);
  }

  // BPF capabilities do not open tracefs: its engine says what it needs and what would work.
  const tracefs = runCli(['trace', '--engine', 'tracefs', '-c', `${app} 10`, `${app}:tfs_add`], {
    asNobody: true,
    caps: ['bpf', 'perfmon'],
  });
  assert.equal(tracefs.status, 5, tracefs.stderr);
  assert.match(
    tracefs.stderr,
    /^error\[ERR_PRIVILEGES\]: Cannot read "\/sys\/kernel\/tracing\/uprobe_events": EACCES/,
  );
  assert.match(tracefs.stderr, /hint: .*need root \(or write access to tracefs\)/);
  assert.match(tracefs.stderr, /hint: .*--engine ptrace with -p PID or -c/);
  assert.deepEqual(leftovers(), []);
});

test('as nobody with CAP_BPF and CAP_PERFMON: trace --engine bpf streams every process, and follows -p without tracefs', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  const app = compileProgram('busy-counter', { flags: ['-O2'] });
  // The user's own process, so that -p is theirs to read.
  const target = spawn('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', app], {
    stdio: 'ignore',
  });
  try {
    const traced = runCli(
      [
        'trace',
        '--engine',
        'bpf',
        '--json',
        '--command-output',
        'inherit',
        '--max-events',
        '3',
        `${app}:busy_tick n=arg0:s64`,
      ],
      { asNobody: true, caps: ['bpf', 'perfmon'] },
    );
    assert.equal(traced.status, 0, traced.stderr);
    const events = traced.stdout
      .split('\n')
      .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
      .map((l) => JSON.parse(l) as { pid: number; fields: { n: number } });
    assert.equal(events.length, 3, traced.stdout);
    assert.ok(
      events.every((e) => e.pid === target.pid && e.fields.n > 0),
      traced.stdout,
    );

    // Following -p needs no tracefs either (the scheduler's raw tracepoints).
    const followed = runCli(
      [
        'trace',
        '--engine',
        'bpf',
        '--json',
        '--max-events',
        '3',
        '-p',
        String(target.pid),
        `${app}:busy_tick n=arg0:s64`,
      ],
      { asNobody: true, caps: ['bpf', 'perfmon'] },
    );
    assert.equal(followed.status, 0, followed.stderr);
    const ofTarget = followed.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { pid: number; fields: { n: number } });
    assert.equal(ofTarget.length, 3, followed.stdout);
    assert.ok(
      ofTarget.every((e) => e.pid === target.pid && e.fields.n > 0),
      followed.stdout,
    );
    assert.equal(target.exitCode, null, 'the target was not harmed');
    assert.deepEqual(leftovers(), []);
  } finally {
    target.kill('SIGKILL');
    await new Promise((r) => target.once('exit', r));
  }
});

test("as nobody, a process of nobody's with a seccomp filter of its own: refused before any call (its filter cannot be read without CAP_SYS_ADMIN), the process unharmed", async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'setpriv'] })) return;
  if (yamaScope() > 0) {
    const why = 'Yama ptrace_scope keeps nobody from tracing a process it did not start';
    assert.notEqual(process.env['CI'], 'true', why);
    t.skip(why);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'upscope-nobody-'));
  chmodSync(dir, 0o755);
  const app = join(dir, 'seccomp-target');
  copyFileSync(compileProgram('seccomp-target', { flags: ['-O1'] }), app);
  chmodSync(app, 0o755);
  // A filter that would let upscope's calls run: what is refused is not knowing it.
  const target = spawn(
    'setpriv',
    ['--reuid=65534', '--regid=65534', '--clear-groups', app, 'other'],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  try {
    await new Promise<void>((resolve) => target.stdout!.once('data', () => resolve()));
    for (const engine of ['ptrace', 'inject']) {
      const run = runCli(
        ['count', '--engine', engine, '-p', String(target.pid), '--duration', '1', `${app}:tick`],
        { asNobody: true },
      );
      assert.notEqual(run.status, 0, run.stderr);
      assert.match(
        run.stderr,
        new RegExp(
          `^error\\[ERR_SECCOMP\\]: Cannot place probes in process ${target.pid} with this engine: it needs to run \\w+\\(\\) there, and the process has seccomp filters of its own, which upscope cannot read without CAP_SYS_ADMIN \\(root\\)$`,
          'm',
        ),
        engine,
      );
      assert.match(run.stderr, /^ {2}hint: Run as root: upscope then reads the filters/m);
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
      assert.equal(target.exitCode, null, `${engine}: the target was not harmed`);
      assert.match(readFileSync(`/proc/${target.pid}/status`, 'utf8'), /^TracerPid:\s+0$/m);
    }
  } finally {
    target.kill('SIGKILL');
    await new Promise((r) => target.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
});
