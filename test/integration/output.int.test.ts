// `-o FILE`: the output goes to a file made with the user's umask; a planted symbolic link is
// refused and its target left alone; a full disk ends the trace with one line, the probes
// removed and the traced process running on (no uprobe is left on the target: a copy of its
// own, which no other test file probes).
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  lstatSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram, ownCopy } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

/** The CLI run by a shell that sets the umask first, as a user's login shell would. */
function runWithUmask(umask: string, args: readonly string[]) {
  const quoted = [process.execPath, BIN, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`);
  return spawnSync('sh', ['-c', `umask ${umask}; exec ${quoted.join(' ')}`], {
    encoding: 'utf8',
    env: { ...process.env, NO_COLOR: '1' },
    timeout: 60_000,
  });
}

test('-o FILE: trace and count write there (nothing on stdout), mode 0666 less the umask', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('tfs-counter');
  const dir = mkdtempSync(join(tmpdir(), 'upscope-out-'));
  try {
    for (const [umask, mode] of [
      ['077', 0o600],
      ['027', 0o640],
      ['002', 0o664],
    ] as const) {
      const file = join(dir, `trace-${umask}.txt`);
      const run = runWithUmask(umask, [
        'trace',
        '--engine',
        'ptrace',
        '-c',
        `${app} 10`,
        '-o',
        file,
        `${app}:tfs_add a=arg0`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      assert.equal(statSync(file).mode & 0o7777, mode, `umask ${umask}`);
      // The program's own count of calls, against the lines in the file.
      const calls = Number(/tfs_add (\d+)/.exec(run.stdout)?.[1]);
      assert.equal(calls, 15);
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      assert.equal(lines.length, calls);
      assert.ok(
        lines.every((l) => / tfs_add a=\d+$/.test(l)),
        lines[0],
      );
      assert.doesNotMatch(run.stdout, /tfs_add a=/, 'no event on stdout');
      assert.match(run.stderr, /events delivered/, 'the summary stays on stderr');
    }
    // An existing file is truncated (as perf record -o), not appended to.
    const file = join(dir, 'count.json');
    writeFileSync(file, 'x'.repeat(100_000));
    const count = runCli([
      'count',
      '--engine',
      'ptrace',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} 10`,
      '-o',
      file,
      `${app}:tfs_twice`,
    ]);
    assert.equal(count.status, 0, count.stderr);
    assert.deepEqual(JSON.parse(readFileSync(file, 'utf8')), [{ probe: 'tfs_twice', count: 5 }]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('-o refuses a planted symbolic link, a FIFO and a device, and touches none of them', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'mkfifo'] })) return;
  const app = compileProgram('tfs-counter');
  const dir = mkdtempSync(join(tmpdir(), 'upscope-out-'));
  try {
    const victim = join(dir, 'victim');
    writeFileSync(victim, 'keep me\n');
    const link = join(dir, 'planted');
    symlinkSync(victim, link);
    // A dangling link too: following it would create the file it names.
    const dangling = join(dir, 'dangling');
    symlinkSync(join(dir, 'created'), dangling);
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    for (const [command, path, why] of [
      ['trace', link, /it is a symbolic link/],
      ['count', link, /it is a symbolic link/],
      ['hist', dangling, /it is a symbolic link/],
      ['latency', fifo, /it is a FIFO/],
      ['trace', '/dev/null', /it is a device/],
    ] as const) {
      const args = [command, '--engine', 'ptrace', '-c', `${app} 3`, '-o', path];
      args.push(`${app}:tfs_add`, ...(command === 'hist' ? ['arg0'] : []));
      const run = runCli(args);
      assert.notEqual(run.status, 0, `${command} -o ${path}`);
      const lines = run.stderr.trim().split('\n');
      assert.match(lines[0]!, /^error\[ERR_OUTPUT_FILE\]: Cannot write the output to "/);
      assert.match(lines[0]!, why);
      assert.ok(
        lines.slice(1).every((l) => l.startsWith('  hint: ')),
        run.stderr,
      );
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
      assert.doesNotMatch(run.stdout, /tfs_add/, 'the command was not started');
    }
    assert.equal(readFileSync(victim, 'utf8'), 'keep me\n');
    assert.ok(lstatSync(link).isSymbolicLink());
    assert.throws(() => statSync(join(dir, 'created')), /ENOENT/);
    assert.ok(lstatSync(fifo).isFIFO());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** The last count the target wrote to its log. */
function lastCount(log: string): number {
  const all = [...readFileSync(log, 'utf8').matchAll(/^n=(\d+)$/gm)];
  return Number(all.at(-1)?.[1] ?? 0);
}

const TRACE = (engine: string) => ['trace', '--engine', engine, '--duration', '60'];
// count prints every --interval: a disk filled beforehand fails its first print.
const COUNT = (engine: string) => [
  'count',
  '--engine',
  engine,
  '--duration',
  '60',
  '--interval',
  '0.2',
];
for (const [engine, command, prefill] of [
  ['tracefs', TRACE, false],
  ['ptrace', TRACE, false],
  ['bpf', TRACE, false],
  ['bpf', COUNT, true],
  ['ptrace', COUNT, true],
] as const) {
  const name = command('').at(0);
  test(`${name} -o on a full disk (${engine}, -p): one line, probes removed, the process runs on`, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'mount', 'umount'] })) return;
    const dir = mkdtempSync(join(tmpdir(), 'upscope-full-'));
    const app = ownCopy(compileProgram('busy-counter', { flags: ['-O2'] }), dir);
    const disk = join(dir, 'disk');
    execFileSync('mkdir', [disk]);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16k', 'tmpfs', disk]);
    if (prefill) {
      assert.throws(() => writeFileSync(join(disk, 'filler'), Buffer.alloc(32768)), /ENOSPC/);
    }
    const log = join(dir, 'target.log');
    const target = spawn(app, [], { stdio: ['ignore', openSync(log, 'w'), 'inherit'] });
    try {
      while (lastCount(log) < 1000) await new Promise((r) => setTimeout(r, 20));
      const run = runCli([
        ...command(engine),
        '-p',
        String(target.pid),
        '-o',
        join(disk, 'out.txt'),
        `${app}:busy_tick${name === 'trace' ? ' i=arg0' : ''}`,
      ]);
      assert.equal(run.status, 5, run.stderr);
      const errors = run.stderr.split('\n').filter((l) => l.startsWith('error'));
      assert.equal(errors.length, 1, run.stderr);
      assert.match(
        errors[0]!,
        /^error\[ERR_OUTPUT_FILE\]: Cannot write the output to ".*out\.txt": no space left on the device \(ENOSPC\)$/,
      );
      assert.doesNotMatch(run.stderr, /\n\s+at /, 'no stack trace');
      // The disk did fill: what was written is whole lines of events up to the limit.
      if (!prefill) assert.ok(statSync(join(disk, 'out.txt')).size > 8192);
      // The target is alive, not traced, not stopped, and its own count goes on.
      assert.equal(target.exitCode, null);
      const status = readFileSync(`/proc/${target.pid}/status`, 'utf8');
      assert.match(status, /^TracerPid:\s+0$/m);
      assert.match(status, /^State:\s+[SR]/m);
      // Up to 10 s: a loaded machine (CI, three files at a time) may not run it within 400 ms.
      const before = lastCount(log);
      for (let waited = 0; waited < 10_000 && lastCount(log) <= before; waited += 200) {
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.ok(lastCount(log) > before, 'the target keeps counting');
      assert.deepEqual(leftovers(), []);
      const events = readFileSync('/sys/kernel/tracing/uprobe_events', 'utf8');
      assert.ok(!events.includes(app), 'no uprobe on the target left in tracefs');
      assert.deepEqual(tracedChildren([target.pid!]), []);
    } finally {
      target.kill('SIGKILL');
      await new Promise((r) => target.once('exit', r));
      execFileSync('umount', [disk]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
