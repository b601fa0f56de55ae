// A function whose first instruction is its own loop's head has its entry probe hit at every
// iteration (node has 63 such functions, libc's pthread_spin_lock is one). Each hit was taken
// for a call: a recording of 3 calls of such a function said 15, with 12 "unwound" where its
// returns are caught at its exits, or 15 nested calls through the kernel's trampoline;
// latency timed the last iteration alone and said 12 returns were left out. An entry at the
// stack pointer of the function's own call still open now goes on with that call: where the
// returns are caught at the exits, for a function whose code jumps back to its entry (the plan
// says so); through the trampoline, where the return address found there is the trampoline
// (no call was made), on the kernel engines and on ptrace and inject (whose own trampoline
// it is). A function called again at the stack pointer of a call a longjmp left is still a
// call. The program counts its calls; nothing else here is a number to trust.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const CALLS = 7;
const work = mkdtempSync(join(tmpdir(), 'upscope-entry-loops-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** Each function's disassembly, by objdump. */
function runObjdump(app: string): Record<string, string> {
  const text = execFileSync('objdump', ['-d', '--no-show-raw-insn', app], { encoding: 'utf8' });
  const out: Record<string, string> = {};
  for (const block of text.split('\n\n')) {
    const name = /^[0-9a-f]+ <([^>]+)>:/m.exec(block)?.[1];
    if (name !== undefined) out[name] = block;
  }
  return out;
}

/** The program's own counts, from what it prints (upscope's stderr, where its output is JSON). */
function said(result: { stdout: string; stderr: string }): {
  spin: number;
  leave: number;
  returned: number;
  inner: number;
} {
  const text = `${result.stdout}\n${result.stderr}`;
  const m = /spin=(\d+) leave=(\d+) leave_returned=(\d+) inner=(\d+)/.exec(text);
  assert.ok(m, text);
  return { spin: Number(m[1]), leave: Number(m[2]), returned: Number(m[3]), inner: Number(m[4]) };
}

interface ReportRow {
  readonly function: string;
  readonly calls: number;
  readonly unwound: number;
  readonly notReturned: number;
  readonly unreported: number;
}

const MODES = ['trampoline', 'sites'] as const;

describe('a function that loops at its entry', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  for (const engine of ['bpf', 'tracefs', 'ptrace', 'inject'] as const) {
    for (const mode of MODES) {
      test(`record (${engine}, returns ${mode === 'sites' ? 'at exits' : 'through the trampoline'}): its calls are the program's, none unwound; a call after a longjmp at one stack pointer is a call`, (t) => {
        if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
        const app = compileProgram('entry-loop', { flags: ['-O1'] });
        const dir = join(work, `rec-${engine}-${mode}`);
        const recorded = runCli(
          [
            'record',
            '--engine',
            engine,
            '--return-probes',
            mode,
            '-c',
            `${app} ${CALLS}`,
            '-o',
            dir,
            `${app}:spin`,
            `${app}:count_spin`,
            `${app}:leave`,
          ],
          { timeoutMs: 60_000 },
        );
        assert.equal(recorded.status, 0, recorded.stderr);
        assert.match(recorded.stderr, /, 0 lost\n/);
        const truth = said(recorded);
        assert.equal(truth.spin, CALLS);
        const report = runCli(['report', dir, '--json']);
        assert.equal(report.status, 0, report.stderr);
        const rows = new Map(
          (JSON.parse(report.stdout) as ReportRow[]).map((r) => [r.function, r]),
        );
        const spin = rows.get('spin')!;
        assert.equal(spin.calls, truth.spin, 'spin: one call per call, not per iteration');
        assert.deepEqual([spin.unwound, spin.notReturned, spin.unreported], [0, 0, 0]);
        assert.equal(rows.get('count_spin')!.calls, truth.spin);
        const leave = rows.get('leave')!;
        assert.equal(leave.calls, truth.leave, 'leave: each call after a longjmp counted');
        // The tree: spin once under each count_spin.
        const graph = runCli(['graph', dir, 'count_spin', '--json']);
        assert.equal(graph.status, 0, graph.stderr);
        const [root] = JSON.parse(graph.stdout) as {
          calls: number;
          children: { function: string; calls: number; children: unknown[] }[];
        }[];
        assert.equal(root!.calls, truth.spin);
        assert.deepEqual(
          root!.children.map((c) => [c.function, c.calls, c.children.length]),
          [['spin', truth.spin, 0]],
        );
      });
    }
  }

  for (const mode of MODES) {
    test(`latency in the kernel (bpf, returns ${mode === 'sites' ? 'at exits' : 'through the trampoline'}): one time a call, as long as the call; calls after a longjmp timed`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
      const app = compileProgram('entry-loop', { flags: ['-O1'] });
      const result = runCli(
        [
          'latency',
          '--json',
          '--return-probes',
          mode,
          '-c',
          `${app} ${CALLS}`,
          `${app}:spin`,
          `${app}:count_spin`,
          `${app}:leave`,
        ],
        { timeoutMs: 60_000 },
      );
      assert.equal(result.status, 0, result.stderr);
      const truth = said(result);
      const timed = new Map(
        (
          JSON.parse(result.stdout) as {
            probe: string;
            count: number;
            minNs: number;
            maxNs: number;
          }[]
        ).map((r) => [r.probe, r]),
      );
      assert.equal(timed.get('spin')!.count, truth.spin);
      assert.equal(timed.get('leave')!.count, truth.returned);
      // A call of spin is inside its count_spin's: timed whole, not its last iteration.
      assert.ok(timed.get('spin')!.maxNs <= timed.get('count_spin')!.maxNs);
      // What was left untimed is leave's calls a longjmp left, no more.
      assert.doesNotMatch(result.stderr, /without their entry/);
      const left = (
        mode === 'sites'
          ? /(\d+) calls? ended by an unwind/
          : /(\d+) calls? whose return the kernel did not report/
      ).exec(result.stderr);
      assert.equal(Number(left?.[1]), truth.leave - truth.returned, result.stderr);
    });
  }

  test('resolve says which function jumps back to its entry', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram('entry-loop', { flags: ['-O1'] });
    // objdump's truth: spin's jne goes to spin's own first address; leave's code does not.
    const code = runObjdump(app);
    assert.match(code.spin ?? '', /jne\s+([0-9a-f]+) <spin>/);
    assert.doesNotMatch(code.leave ?? '', /j\w+\s+[0-9a-f]+ <leave>\n/);
    const says = (name: string) => {
      const result = runCli(['resolve', '--return-probes', 'sites', `r:${app}:${name}`]);
      assert.equal(result.status, 0, result.stderr);
      return /jumps back to its entry/.test(result.stdout);
    };
    assert.equal(says('spin'), true);
    assert.equal(says('leave'), false);
  });

  test('inject: no hook is patched over bytes a jump of the function lands in, in a PIE (the program ran on, counted)', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram('entry-loop', { flags: ['-O1'] });
    // objdump's truth: inner_loop's jne goes 1 byte in, and the file is a PIE (DYN).
    const code = runObjdump(app);
    const start = /^([0-9a-f]+) <inner_loop>:/m.exec(code.inner_loop ?? '');
    const back = /jne\s+([0-9a-f]+) <inner_loop\+0x1>/.exec(code.inner_loop ?? '');
    assert.ok(start !== null && back !== null, code.inner_loop);
    assert.match(execFileSync('readelf', ['-h', app], { encoding: 'utf8' }), /Type:\s+DYN/);
    const result = runCli(
      [
        'count',
        '--json',
        '--engine',
        'inject',
        '-c',
        `${app} ${CALLS}`,
        `${app}:inner_loop`,
        `${app}:spin`,
      ],
      { timeoutMs: 60_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    assert.doesNotMatch(result.stderr, /SIGSEGV|killed/);
    const truth = said(result);
    const rows = JSON.parse(result.stdout) as { probe: string; count: number }[];
    assert.equal(rows.find((r) => r.probe === 'inner_loop')?.count, truth.inner);
    assert.equal(rows.find((r) => r.probe === 'spin')?.count, truth.spin * 5);
    // Both served by int3s, and why.
    assert.match(result.stderr, /inner_loop .*int3.*lands at 0x[0-9a-f]+, inside the \d+ bytes/);
    assert.match(result.stderr, /spin .*served by an int3/);
  });

  test('count at the exits: each return once, and the entry probe each time it is hit', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram('entry-loop', { flags: ['-O1'] });
    const result = runCli(
      [
        'count',
        '--json',
        '--return-probes',
        'sites',
        '-c',
        `${app} ${CALLS}`,
        `${app}:spin`,
        `r:${app}:spin`,
      ],
      { timeoutMs: 60_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    const truth = said(result);
    const rows = JSON.parse(result.stdout) as { probe: string; exit?: string; count: number }[];
    const count = (probe: string, exit?: string) =>
      rows.find((r) => r.probe === probe && r.exit === exit)?.count;
    // spin(5) runs its first instruction five times a call: a breakpoint's hits, as bpftrace counts.
    assert.equal(count('spin'), truth.spin * 5);
    assert.equal(count('r:spin'), truth.spin);
    // No return said unwound: none was.
    assert.equal(count('r:spin', 'unwind'), undefined);
    assert.doesNotMatch(result.stderr, /unwound|unwind/);
  });
});
