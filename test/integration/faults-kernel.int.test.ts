// upscope-tests: alone (it SIGKILLs upscope, leaving groups of a dead owner until they are cleaned).
// Faults under the kernel engines (tracefs, bpf): the target killed mid-trace, forking and
// exec'ing while probed, its binary deleted or replaced on disk, upscope SIGKILLed at each
// phase and mid-flood, the tracefs instance removed and tracefs unmounted under a trace. After
// each, the target (where it lives) runs on unharmed, by its own count of calls, and the next
// run works and leaves nothing: no upscope group or instance in tracefs, no BPF program, map
// or link of a dead upscope (bpftool's list against the ids its descriptors held).
// Rounds: UPSCOPE_FAULT_ROUNDS (default 1); rounds after the first vary the kill's timing.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { descendantsOf, processEnded, procState } from '../../src/host/index.js';
import { compileProgram } from '../helpers/compile.js';
import { fdInfos } from '../helpers/fdinfo.js';
import { leftovers, TRACEFS } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import {
  ended,
  pausedAt,
  type Spawned,
  spawnCollected,
  spawnUpscope,
  waitFor,
} from '../helpers/spawned.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const ROUNDS = Math.max(1, Number(process.env['UPSCOPE_FAULT_ROUNDS'] ?? 1) || 1);
const ENGINES = ['tracefs', 'bpf'] as const;
type Engine = (typeof ENGINES)[number];
const PHASES = ['resolving', 'attaching', 'tracing', 'detaching'] as const;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The kfault-target (a copy at `path` when given), waiting for its GO file. */
async function startTarget(app: string, dir: string, mode: 'plain' | 'forkexec', calls: number) {
  const go = join(dir, `go-${Math.random().toString(36).slice(2)}`);
  const target = spawnCollected(app, [mode, String(calls), '1000', go]);
  await waitFor(target, /^ready$/m, 'stdout');
  return Object.assign(target, { go: () => writeFileSync(go, '') });
}

/** The target's own counts: how long it waited, the parent's, child's and images' calls. */
function ownCounts(stdout: string) {
  const parent = /^parent waiting=(\d+) calls=(\d+)$/m.exec(stdout);
  return {
    waiting: Number(parent?.[1]),
    parent: Number(parent?.[2]),
    child: [...stdout.matchAll(/^child calls=(\d+)$/gm)].map((m) => Number(m[1])),
    images: [...stdout.matchAll(/^image calls=(\d+)$/gm)].map((m) => Number(m[1])),
  };
}

/** Unharmed: it ran to its end, exit status 0, with the count it would make untraced. */
async function assertUnharmed(target: Spawned, calls: number, what: string) {
  const exit = await ended(target);
  assert.deepEqual(exit, { code: 0, signal: null }, `${what}: ${target.stdout}${target.stderr}`);
  assert.equal(ownCounts(target.stdout).parent, calls, `${what}: ${target.stdout}`);
}

/** The target is alive, neither stopped nor traced, and still calling. */
function assertSpawned(pid: number, what: string) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  assert.match(status, /^State:\s+[SR]/m, `${what}: the target's state`);
  assert.match(status, /^TracerPid:\s+0$/m, `${what}: the target is not traced`);
}

/** The BPF programs, maps and links whose descriptors a process holds (its fdinfo). */
function bpfIdsOf(pid: number): string[] {
  const ids: string[] = [];
  for (const info of fdInfos(pid)) {
    for (const kind of ['prog', 'map', 'link'] as const) {
      const id = new RegExp(`^${kind}_id:\\s+(\\d+)$`, 'm').exec(info)?.[1];
      // A link's fdinfo names its program too: both are held.
      if (id !== undefined) ids.push(`${kind} ${id}`);
    }
  }
  return [...new Set(ids)];
}

/** Which of these BPF objects the kernel still has, by bpftool's lists (polled: freeing lags). */
async function bpfStillThere(ids: readonly string[]): Promise<string[]> {
  let left: string[] = [...ids];
  for (let attempt = 0; attempt < 50 && left.length > 0; attempt++) {
    const listed = new Set<string>();
    for (const kind of ['prog', 'map', 'link'] as const) {
      const objects = JSON.parse(
        execFileSync('bpftool', ['-j', kind, 'show'], { encoding: 'utf8' }) || '[]',
      );
      for (const object of objects as { id: number }[]) listed.add(`${kind} ${object.id}`);
    }
    left = ids.filter((id) => listed.has(id));
    if (left.length > 0) await sleep(100);
  }
  return left;
}

/** What a dead upscope (pid) left in tracefs: its group's events and its instances. */
function tracefsOf(pid: number): string[] {
  const events = readFileSync(`${TRACEFS}/uprobe_events`, 'utf8')
    .split('\n')
    .filter((line) => line.includes(`upscope_${pid}/`));
  const instances = readdirSync(`${TRACEFS}/instances`).filter(
    (name) => name === `upscope_${pid}` || name.startsWith(`upscope_${pid}_`),
  );
  return [...events, ...instances];
}

/**
 * leftovers() (groups and instances of dead upscopes) on these files, the test's own: other
 * tests on this machine plant stale groups of their own on purpose at any time.
 */
function leftoversOn(...paths: string[]): string[] {
  return leftovers().filter((entry) => paths.some((path) => entry.includes(path)));
}

/** Every phase of a run, as `[args, events]` of kf_tick entries by phase, from trace lines. */
function phasesSeen(stdout: string): Map<string, number> {
  const seen = new Map<string, number>();
  for (const match of stdout.matchAll(/ (\d+)\/\d+ kf_tick p=(\d+)$/gm)) {
    const key = `${match[2]}@${match[1]}`;
    seen.set(key, (seen.get(key) ?? 0) + 1);
  }
  return seen;
}

/** Events of phase `phase` in trace output, from any process. */
function eventsOf(stdout: string, phase: number): number {
  let n = 0;
  for (const [key, count] of phasesSeen(stdout)) if (key.startsWith(`${phase}@`)) n += count;
  return n;
}

/** A next run on the target works (events of it come) and leaves nothing. */
function assertNextRunClean(engine: Engine, app: string, pid: number, what: string) {
  const next = runCli([
    'trace',
    '--engine',
    engine,
    '-p',
    String(pid),
    '--max-events',
    '20',
    `${app}:kf_tick p=arg0`,
  ]);
  assert.equal(next.status, 0, `${what}: next run: ${next.stderr}`);
  assert.equal(eventsOf(next.stdout, 1), 20, `${what}: next run's events: ${next.stdout}`);
  assert.deepEqual(leftoversOn(app), [], `${what}: left in tracefs after the next run`);
}

function setup(t: TestContext, commands: string[] = []) {
  if (!requireHost(t, { root: true, commands: ['gcc', 'bpftool', ...commands] })) return undefined;
  const app = compileProgram('kfault-target', { flags: ['-O2'] });
  const dir = mkdtempSync(join(tmpdir(), 'upscope-kfault-'));
  return { app, dir, done: () => rmSync(dir, { recursive: true, force: true }) };
}

const trace = (engine: Engine, pid: number, specs: string[]) => [
  'trace',
  '--engine',
  engine,
  '-p',
  String(pid),
  ...specs,
];

for (const engine of ENGINES) {
  test(`${engine}: the target SIGKILLed mid-trace ends the trace with a note, nothing left`, async (t) => {
    const host = setup(t);
    if (host === undefined) return;
    const commands = engine === 'bpf' ? ['trace', 'count'] : ['trace'];
    try {
      for (let round = 0; round < ROUNDS; round++) {
        for (const command of commands) {
          const target = await startTarget(host.app, host.dir, 'plain', 100);
          const args =
            command === 'trace'
              ? trace(engine, target.pid, [`${host.app}:kf_tick p=arg0`])
              : ['count', '--engine', 'bpf', '-p', String(target.pid), `${host.app}:kf_tick`];
          const run = spawnUpscope(args);
          await waitFor(run, command === 'trace' ? /^Tracing 1 probe/m : /^Counting 1 probe/m);
          await sleep(100 + (round === 0 ? 100 : Math.random() * 500));
          const ids = engine === 'bpf' ? bpfIdsOf(run.pid) : [];
          target.child.kill('SIGKILL');
          const exit = await ended(run, 15_000);
          const what = `${command} round ${round}`;
          assert.deepEqual(exit, { code: 0, signal: null }, `${what}: ${run.stderr}`);
          const notes = run.stderr.split('\n').filter((l) => l.startsWith('upscope: process'));
          assert.deepEqual(
            notes,
            [
              `upscope: process ${target.pid} exited${command === 'trace' ? ', ending the trace' : ''}`,
            ],
            run.stderr,
          );
          assert.doesNotMatch(run.stderr, /error|\n\s+at /, what);
          if (command === 'trace') assert.ok(eventsOf(run.stdout, 1) > 0, `${what}: events came`);
          else assert.match(run.stdout, /^\d+\s+kf_tick$/m, what);
          assert.deepEqual(tracefsOf(run.pid), [], `${what}: left in tracefs`);
          assert.deepEqual(await bpfStillThere(ids), [], `${what}: BPF objects left`);
        }
      }
    } finally {
      host.done();
    }
  });

  test(`${engine}: a traced process forks and execs: parent, child and images unharmed, all seen`, async (t) => {
    const host = setup(t);
    if (host === undefined) return;
    const calls = 200;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const target = await startTarget(host.app, host.dir, 'forkexec', calls);
        const run = spawnUpscope(trace(engine, target.pid, [`${host.app}:kf_tick p=arg0`]));
        await waitFor(run, /^Tracing 1 probe/m);
        target.go();
        const exit = await ended(target);
        assert.deepEqual(exit, { code: 0, signal: null }, target.stdout);
        const own = ownCounts(target.stdout);
        assert.equal(own.parent, calls);
        assert.deepEqual(own.child, [calls]);
        assert.deepEqual(own.images, [calls, calls]);
        // The trace ends with the process; -p follows its children and its exec'd images.
        assert.deepEqual(await ended(run), { code: 0, signal: null }, run.stderr);
        const seen = phasesSeen(run.stdout);
        const byPhase = (phase: number) =>
          [...seen]
            .filter(([key]) => key.startsWith(`${phase}@`))
            .map(([key, n]) => [Number(key.split('@')[1]), n]);
        assert.deepEqual(byPhase(2), [[target.pid, calls]], "the parent's calls");
        const child = byPhase(3);
        assert.equal(child.length, 1, 'one child');
        assert.notEqual(child[0]![0], target.pid);
        assert.equal(child[0]![1], calls, "the child's calls");
        assert.deepEqual(
          byPhase(4).sort((a, b) => a[0]! - b[0]!),
          [
            [target.pid, calls],
            [child[0]![0], calls],
          ].sort((a, b) => a[0]! - b[0]!),
          "both exec'd images' calls",
        );
        assert.match(run.stderr, / 0 lost/);
        assert.deepEqual(tracefsOf(run.pid), [], 'left in tracefs');
      }
    } finally {
      host.done();
    }
  });

  test(`${engine}: the probed binary deleted, then replaced, on disk while probed`, async (t) => {
    const host = setup(t);
    if (host === undefined) return;
    const calls = 300;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        for (const fault of ['delete', 'replace'] as const) {
          const path = join(host.dir, `app-${fault}-${round}`);
          copyFileSync(host.app, path);
          execFileSync('chmod', ['+x', path]);
          const target = await startTarget(path, host.dir, 'plain', calls);
          const run = spawnUpscope(trace(engine, target.pid, [`${path}:kf_tick p=arg0`]));
          await waitFor(run, /^Tracing 1 probe/m);
          await sleep(100);
          if (fault === 'delete') {
            unlinkSync(path);
          } else {
            // A new build written beside it and renamed over the path, as installers do.
            copyFileSync(host.app, `${path}.new`);
            renameSync(`${path}.new`, path);
          }
          target.go();
          await assertUnharmed(target, calls, fault);
          assert.deepEqual(await ended(run), { code: 0, signal: null }, run.stderr);
          assert.equal(eventsOf(run.stdout, 2), calls, `${fault}: every call after the fault seen`);
          assert.deepEqual(tracefsOf(run.pid), [], `${fault}: left in tracefs`);
          assert.deepEqual(leftoversOn(path), [], `${fault}: left in tracefs`);
          // The next run, on what is at the path now.
          if (fault === 'delete') copyFileSync(host.app, path);
          const next = runCli([
            'trace',
            '--engine',
            engine,
            '-c',
            `${path} plain 25 0 /`,
            `${path}:kf_tick p=arg0`,
          ]);
          assert.equal(next.status, 0, next.stderr);
          assert.equal(eventsOf(next.stdout, 2), 25, `${fault}: next run ${next.stdout}`);
          assert.deepEqual(leftoversOn(path), [], `${fault}: left after the next run`);
        }
      }
    } finally {
      host.done();
    }
  });

  test(`${engine}: Ctrl-C or SIGTERM while a command is held for its probes to be placed ends the command too (none left stopped); the next run is clean`, async (t) => {
    const host = setup(t);
    if (host === undefined) return;
    try {
      for (const signal of ['SIGINT', 'SIGTERM'] as const) {
        const run = spawnUpscope(
          ['trace', '--engine', engine, '-c', 'sleep 37', `${host.app}:kf_tick p=arg0`],
          { UPSCOPE_PAUSE_AT: 'attaching' },
        );
        await pausedAt(run, 'attaching');
        const held = descendantsOf(run.pid);
        assert.equal(held.length, 1, `${signal}: the command is launched`);
        assert.equal(procState(held[0]!), 'T', `${signal}: the command is held stopped`);
        // The signal comes while upscope is placing probes (here: stopped there).
        run.child.kill(signal);
        process.kill(run.pid, 'SIGCONT');
        // Its exit, not the end of its output: a command left stopped would hold that open.
        const exit = await new Promise<{ code: number | null; signal: string | null }>((resolve) =>
          run.child.once('exit', (code, by) => resolve({ code, signal: by })),
        );
        const running = (pid: number) => !processEnded(pid);
        let left = held.filter(running);
        for (let i = 0; i < 50 && left.length > 0; i++) {
          await sleep(20);
          left = left.filter(running);
        }
        for (const pid of left) process.kill(pid, 'SIGKILL');
        await ended(run);
        assert.deepEqual(left, [], `${signal}: the held command is ended`);
        // Handled while the command was held, the signal ends upscope; handled once it runs,
        // upscope ends it as at any Ctrl-C, and ends.
        assert.ok(exit.signal === signal || exit.code === 0, `${signal}: ${JSON.stringify(exit)}`);
        const next = runCli([
          'trace',
          '--engine',
          engine,
          '-c',
          `${host.app} plain 25 0 /`,
          `${host.app}:kf_tick p=arg0`,
        ]);
        assert.equal(next.status, 0, next.stderr);
        assert.equal(eventsOf(next.stdout, 2), 25, `${signal}: the next run: ${next.stdout}`);
        assert.deepEqual(
          tracefsOf(run.pid),
          [],
          `${signal}: the dead upscope's group and instance`,
        );
        assert.deepEqual(leftoversOn(host.app), [], `${signal}: left after the next run`);
      }
    } finally {
      host.done();
    }
  });

  for (const command of engine === 'bpf' ? (['trace', 'count'] as const) : (['trace'] as const)) {
    test(`${engine}: ${command} SIGKILLed at each phase; the target runs on, the next run is clean`, async (t) => {
      const host = setup(t);
      if (host === undefined) return;
      const calls = 50;
      try {
        for (let round = 0; round < ROUNDS; round++) {
          const target = await startTarget(host.app, host.dir, 'plain', calls);
          for (const phase of PHASES) {
            const what = `round ${round} ${phase}`;
            // Two probes (entry and return: two events; two links, or one uprobe session with
            // trace), so that attaching and detaching stop half way or at their one link.
            const specs = [`${host.app}:kf_tick p=arg0`, `r:${host.app}:kf_tick`];
            const args =
              command === 'trace'
                ? trace(engine, target.pid, specs)
                : ['count', '--engine', 'bpf', '-p', String(target.pid), ...specs];
            // Detaching comes at the end: a duration ends the run by itself.
            if (phase === 'detaching') args.splice(1, 0, '--duration', '0.5');
            const run = spawnUpscope(args, { UPSCOPE_PAUSE_AT: phase });
            await waitFor(
              run,
              new RegExp(`^upscope: paused at ${phase} \\(pid ${run.pid}\\)$`, 'm'),
            );
            const ids = engine === 'bpf' ? bpfIdsOf(run.pid) : [];
            if (engine === 'bpf' && phase !== 'resolving')
              assert.ok(ids.length > 0, `${what}: BPF objects held at the pause`);
            run.child.kill('SIGKILL');
            assert.equal((await ended(run)).signal, 'SIGKILL');
            assertSpawned(target.pid, what);
            assert.deepEqual(
              await bpfStillThere(ids),
              [],
              `${what}: BPF objects left after the kill`,
            );
            assertNextRunClean(engine, host.app, target.pid, what);
            assert.deepEqual(
              tracefsOf(run.pid),
              [],
              `${what}: the dead upscope's group and instance`,
            );
          }
          target.go();
          await assertUnharmed(target, calls, `round ${round}`);
        }
      } finally {
        host.done();
      }
    });
  }

  test(`${engine}: upscope SIGKILLed mid-flood; the busy target runs on, the next run is clean`, async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'bpftool'] })) return;
    const app = compileProgram('busy-counter', { flags: ['-O2'] });
    const target = spawnCollected(app, []);
    const lastCount = () => Number([...target.stdout.matchAll(/^n=(\d+)$/gm)].at(-1)?.[1] ?? 0);
    try {
      while (lastCount() < 1000) await sleep(20);
      for (let round = 0; round < ROUNDS; round++) {
        const what = `round ${round}`;
        const run = spawnUpscope(trace(engine, target.pid, [`${app}:busy_tick i=arg0`]));
        await waitFor(run, /^Tracing 1 probe/m);
        await waitFor(run, /busy_tick i=\d+/, 'stdout');
        await sleep(round === 0 ? 200 : Math.random() * 500);
        const ids = engine === 'bpf' ? bpfIdsOf(run.pid) : [];
        run.child.kill('SIGKILL');
        await ended(run);
        assertSpawned(target.pid, what);
        const before = lastCount();
        await sleep(300);
        assert.ok(lastCount() > before, `${what}: the target keeps counting`);
        assert.deepEqual(await bpfStillThere(ids), [], `${what}: BPF objects left`);
        const next = runCli([
          'trace',
          '--engine',
          engine,
          '-p',
          String(target.pid),
          '--max-events',
          '100',
          `${app}:busy_tick i=arg0`,
        ]);
        assert.equal(next.status, 0, next.stderr);
        assert.equal(next.stdout.trim().split('\n').length, 100, `${what}: next run`);
        assert.deepEqual(leftoversOn(app), [], `${what}: left after the next run`);
        assert.deepEqual(tracefsOf(run.pid), [], `${what}: the dead upscope's group and instance`);
      }
      assert.equal(target.child.exitCode, null, 'the target is still running');
    } finally {
      target.child.kill('SIGKILL');
      await target.exited;
    }
  });

  test(`${engine}: tracefs unmounted under a trace: it goes on, ends and removes its events`, async (t) => {
    const host = setup(t, ['unshare', 'nsenter', 'umount']);
    if (host === undefined) return;
    const calls = 300;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const target = await startTarget(host.app, host.dir, 'plain', calls);
        // upscope in a mount namespace of its own, so that the unmount is seen by it alone
        // (other tests on this machine keep tracefs) and undone when it ends.
        const run = spawnCollected('unshare', [
          '--mount',
          '--propagation',
          'private',
          process.execPath,
          BIN,
          ...trace(engine, target.pid, [`${host.app}:kf_tick p=arg0`]),
        ]);
        await waitFor(run, /^Tracing 1 probe/m);
        execFileSync('nsenter', ['-t', String(run.pid), '-m', 'umount', '-l', TRACEFS]);
        const mounts = readFileSync(`/proc/${run.pid}/mountinfo`, 'utf8');
        assert.doesNotMatch(mounts, / tracefs /, 'tracefs is unmounted for upscope');
        target.go();
        await assertUnharmed(target, calls, `round ${round}`);
        assert.deepEqual(await ended(run), { code: 0, signal: null }, run.stderr);
        assert.equal(eventsOf(run.stdout, 2), calls, 'every call after the unmount seen');
        assert.deepEqual(tracefsOf(run.pid), [], 'its events and instance removed');
        assert.deepEqual(leftoversOn(host.app), []);
      }
    } finally {
      host.done();
    }
  });
}

test('tracefs: the instance removed under a trace: the kernel refuses while it is read, the trace goes on', async (t) => {
  const host = setup(t);
  if (host === undefined) return;
  const calls = 300;
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const target = await startTarget(host.app, host.dir, 'plain', calls);
      const run = spawnUpscope(trace('tracefs', target.pid, [`${host.app}:kf_tick p=arg0`]));
      await waitFor(run, /^Tracing 1 probe/m);
      await sleep(round === 0 ? 0 : Math.random() * 300);
      // The kernel keeps an instance whose buffers are open: rmdir answers EBUSY.
      assert.throws(
        () => execFileSync('rmdir', [`${TRACEFS}/instances/upscope_${run.pid}`], { stdio: 'pipe' }),
        /busy/i,
      );
      target.go();
      await assertUnharmed(target, calls, `round ${round}`);
      assert.deepEqual(await ended(run), { code: 0, signal: null }, run.stderr);
      assert.equal(eventsOf(run.stdout, 2), calls, 'every call seen');
      assert.deepEqual(tracefsOf(run.pid), []);
      assert.deepEqual(leftoversOn(host.app), []);
    }
  } finally {
    host.done();
  }
});
