// How the bpf engine follows processes (-p, -c): handlers on the scheduler's raw tracepoints
// (fork, exec, exit), whose removal waits out no RCU grace period, where perf events on the
// same tracepoints waited 28-80 ms each at the end of every run. The truth: the links upscope
// holds, as the kernel lists them in /proc/PID/fdinfo, and the descriptors in /proc/PID/fd.
import assert from 'node:assert/strict';
import { readdirSync, readlinkSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { fdInfos } from '../helpers/fdinfo.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

/** The raw tracepoints process `pid` holds links on, by name, sorted. */
function rawTracepoints(pid: number): string[] {
  return fdInfos(pid)
    .filter((info) => /^link_type:\s+raw_tracepoint$/m.test(info))
    .map((info) => /^tp_name:\s+(\S+)$/m.exec(info)?.[1] ?? '(unnamed)')
    .sort();
}

/** How many perf events process `pid` holds (a tracepoint's or a uprobe's). */
function perfEvents(pid: number): number {
  let count = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:[perf_event]') count++;
    } catch {
      // closed meanwhile
    }
  }
  return count;
}

describe('following processes on the bpf engine', () => {
  test('count -c: the exit, exec and fork handlers are raw tracepoint links, no perf event; all gone with the run', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
    const counting = spawnUpscope([
      'count',
      '--engine',
      'bpf',
      '-c',
      `${app} loop 3`,
      `${app}:rec`,
    ]);
    await waitFor(counting, /^Counting 1 probe/m);
    assert.deepEqual(rawTracepoints(counting.pid), [
      'sched_process_exec',
      'sched_process_exit',
      'sched_process_fork',
    ]);
    assert.equal(perfEvents(counting.pid), 0);
    counting.child.kill('SIGINT');
    const exit = await ended(counting);
    assert.equal(exit.code, 0, counting.stderr);
    // Its table, printed after the run (the program may not have called rec yet when the run
    // ended: that the children are followed is the third test's).
    assert.match(counting.stdout, /^\d+\s+rec$/m, counting.stdout);
  });

  test('trace -p: the exit and fork handlers (no exec: the process runs already) are raw tracepoint links', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
    const program = spawnCollected(app, ['loop', '3', '200000']);
    try {
      const tracing = spawnUpscope([
        'trace',
        '--engine',
        'bpf',
        '-p',
        String(program.pid),
        `${app}:leaf`,
      ]);
      await waitFor(tracing, /^Tracing 1 probe/m);
      assert.deepEqual(rawTracepoints(tracing.pid), ['sched_process_exit', 'sched_process_fork']);
      assert.equal(perfEvents(tracing.pid), 0);
      tracing.child.kill('SIGINT');
      assert.equal((await ended(tracing)).code, 0, tracing.stderr);
      assert.equal(program.child.exitCode, null, 'the program runs on');
    } finally {
      program.child.kill('SIGKILL');
      await ended(program);
    }
  });

  test('count -c: a child that ends before its probes in libc (placed per process) is said, once; a file only the command maps covers every child, and nothing is said', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    // libc is mapped by upscope too: probed in each followed process alone, once its fork is
    // seen. Eight /bin/true children end in about a millisecond each, sooner than that.
    const shell = runCli([
      'count',
      '--engine',
      'bpf',
      '-c',
      "sh -c 'for i in 1 2 3 4 5 6 7 8; do /bin/true; done'",
      'libc:opendir',
    ]);
    assert.equal(shell.status, 0, shell.stderr);
    const said = shell.stderr
      .split('\n')
      .filter((l) => /^upscope: child process \d+ ended before its probes in /.test(l));
    assert.equal(said.length, 1, shell.stderr);
    assert.match(said[0]!, /in libc\.so\.6 were placed: its calls there are not seen/);
    // The program's own file is probed in every process, filtered in the kernel: each child
    // from its first instruction (rec(1) is 2 calls, rec(2) 3), and nothing to say.
    const app = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
    const own = runCli([
      'count',
      '--engine',
      'bpf',
      '-c',
      `sh -c '${app} deep 1; ${app} deep 2; ${app} deep 1'`,
      `${app}:rec`,
    ]);
    assert.equal(own.status, 0, own.stderr);
    assert.match(own.stdout, /^7\s+rec$/m, own.stdout);
    assert.doesNotMatch(own.stderr, /ended before its probes/);
  });

  test('count -c of a shell pipeline: the children getting their probes in libc late is said, so a count short of their calls says why; ptrace counts every one', (t) => {
    if (!requireHost(t, { root: true })) return;
    // Four children that each write once and end within a few milliseconds, about the time
    // the kernel takes to place one process's libc breakpoints; in the second, a first child
    // (sleep) that lives on.
    const pipeline = 'ls / | wc -l; cat /etc/hostname | tr a-z A-Z';
    const writes = (stdout: string) => Number(/^(\d+)\s+write$/m.exec(stdout)?.[1]);
    const late =
      /^upscope: child processes get their probes in libc\.so\.6 once their fork is seen \(child process \d+: \d+\.\d ms after its fork\): their calls there before that are not seen \(.*--engine ptrace sees every child from its start\)$/m;
    const ended = /^upscope: child process \d+ ended before its probes in libc\.so\.6 were placed/m;
    const truth = runCli([
      'count',
      '--engine',
      'ptrace',
      '-c',
      `sh -c '${pipeline}'`,
      'libc:write',
    ]);
    assert.equal(truth.status, 0, truth.stderr);
    assert.equal(writes(truth.stdout), 4, `${truth.stdout}${truth.stderr}`);
    for (let run = 0; run < 3; run++) {
      const bpf = runCli(['count', '--engine', 'bpf', '-c', `sh -c '${pipeline}'`, 'libc:write']);
      assert.equal(bpf.status, 0, bpf.stderr);
      const counted = writes(bpf.stdout);
      assert.ok(counted <= 4, bpf.stdout);
      // Fewer than the children made (2 of 4, without a word, before this was said).
      if (counted < 4) assert.ok(late.test(bpf.stderr) || ended.test(bpf.stderr), bpf.stderr);
      const sleeping = runCli([
        'count',
        '--engine',
        'bpf',
        '-c',
        `sh -c 'sleep 0.2; ${pipeline}'`,
        'libc:write',
      ]);
      assert.equal(sleeping.status, 0, sleeping.stderr);
      assert.match(sleeping.stderr, late);
      assert.equal(sleeping.stderr.match(new RegExp(late.source, 'gm'))?.length, 1, 'said once');
    }
  });
});
