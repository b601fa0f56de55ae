// The bpf engine pairs a call's entry probe with its return through the kernel's trampoline in
// one uprobe session (kernel 6.13+): one uprobe, one link, the handler run at the entry and at
// that call's return. The truth: the links upscope holds, as the kernel lists them in
// /proc/PID/fdinfo (a uretprobe_multi link is a return link of its own), and the program's own
// arguments and results.
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { fdInfos } from '../helpers/fdinfo.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function target(): string {
  return compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
}

/** The kernel has uprobe sessions (6.13+): its BTF names bpf_session_is_return. */
function kernelHasSessions(): boolean {
  try {
    return readFileSync('/sys/kernel/btf/vmlinux').includes('\0bpf_session_is_return\0');
  } catch {
    return false;
  }
}

/** The uprobe links process `pid` holds on `path`, as the kernel describes them. */
function uprobeLinks(pid: number, path: string): { type: string; uprobes: number }[] {
  const links: { type: string; uprobes: number }[] = [];
  for (const info of fdInfos(pid)) {
    const type = /^link_type:\s+(\S+)$/m.exec(info)?.[1];
    if (type === undefined || /^path:\s+(.*)$/m.exec(info)?.[1] !== path) continue;
    links.push({ type, uprobes: Number(/^uprobe_cnt:\s+(\d+)$/m.exec(info)?.[1]) });
  }
  return links;
}

describe('uprobe sessions (bpf)', () => {
  test('record -p of a C program with return trampolines: each function one uprobe, its entry and return in one session link, the calls nested as made', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    if (!kernelHasSessions()) {
      assert.ok(process.env['CI'] !== 'true', 'the kernel has uprobe sessions (Linux 6.13+)');
      t.skip('the kernel has no uprobe sessions (Linux 6.13+)');
      return;
    }
    const app = target();
    // main -> rec(3) again and again; rec(0) spins, so calls are under way when it ends.
    const program = spawnCollected(app, ['loop', '3', '200000']);
    const dir = join(tmpdir(), `upscope-sessions-${process.pid}`);
    dirs.push(dir);
    const recording = spawnUpscope([
      'record',
      '-p',
      String(program.pid),
      '--return-probes',
      'trampoline',
      '--duration',
      '2',
      '-o',
      dir,
      `${app}:rec`,
      `${app}:leaf`,
      `${app}:deep`,
    ]);
    try {
      await waitFor(recording, /Recording 3 functions/);
      // Before sessions: a uprobe_multi link of the 3 entries and a uretprobe_multi of the 3
      // returns. Now one link: 3 uprobes, each serving an entry and its return.
      assert.deepEqual(uprobeLinks(recording.pid, app), [{ type: 'uprobe_multi', uprobes: 3 }]);
      const exit = await ended(recording);
      assert.equal(exit.code, 0, recording.stderr);
    } finally {
      program.child.kill('SIGKILL');
      await ended(program);
    }
    // Every call of rec the recording saw is nested as made: rec(3) > rec(2) > rec(1) > rec(0).
    const replay = runCli(['replay', '--json', dir]);
    assert.equal(replay.status, 0, replay.stderr);
    const calls = replay.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { depth: number; function: string; end: string });
    const recs = calls.filter((call) => call.function === 'rec');
    assert.ok(recs.length >= 8, `rec recorded: ${recs.length} calls`);
    assert.ok(
      recs.every((call) => call.depth <= 3),
      'rec no deeper than 4 calls (the recursion)',
    );
    const returned = recs.filter((call) => call.end === 'return');
    assert.ok(recs.length - returned.length <= 4, 'only the calls under way at the end are open');
    // A full recursion seen from its first call: four calls, depths 0 to 3, each returned.
    const first = recs.findIndex((call) => call.depth === 0 && call.end === 'return');
    assert.deepEqual(
      recs.slice(first, first + 4).map((call) => [call.depth, call.end]),
      [
        [0, 'return'],
        [1, 'return'],
        [2, 'return'],
        [3, 'return'],
      ],
    );
  });

  test("trace of a C function's entry and return, each fetching its own (arguments, the result): one session serves both, each record as the program passed it", (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = target();
    const result = runCli([
      'trace',
      '--engine',
      'bpf',
      '--return-probes',
      'trampoline',
      '-c',
      `${app} deep 3`,
      `${app}:rec n=arg0`,
      `r:${app}:rec retval`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    // rec(n) returns n: the entries 3 to 0, then the returns 0 to 3, innermost first.
    const events = [...result.stdout.matchAll(/ (r:rec retval|rec n)=(\d+)/g)].map(
      (m) => `${m[1]}=${m[2]}`,
    );
    assert.deepEqual(events, [
      'rec n=3',
      'rec n=2',
      'rec n=1',
      'rec n=0',
      'r:rec retval=0',
      'r:rec retval=1',
      'r:rec retval=2',
      'r:rec retval=3',
    ]);
    assert.match(result.stdout, /^\{"rec":4\}$/m, 'the program counted 4 calls');
  });
});
