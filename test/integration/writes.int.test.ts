// upscope-tests: alone (it compares the global tracing state before and after).
// upscope never writes outside its own tracefs group and instance: every command that touches
// tracefs is run under strace, and each file it opened for writing, wrote, made or removed is
// checked against what it may change. A snapshot of the global tracing state, another tool's
// instance and event group, before and after, checks the same from the kernel's side.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, TRACEFS } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { type FileChange, type StraceRun, straceChanges } from '../helpers/strace.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
/** upscope's cache for these runs (empty at first): it may write there, and only there. */
const CACHE = mkdtempSync(join(tmpdir(), 'upscope-writes-cache-'));

/** Append one line to uprobe_events by hand (not through our code). */
function uprobeEvents(line: string): void {
  const run = spawnSync('sh', ['-c', `echo '${line}' >> ${TRACEFS}/uprobe_events`]);
  assert.equal(run.status, 0, `${line}: ${run.stderr}`);
}

function alive(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync('true');
  assert.ok(child.pid !== undefined && !alive(child.pid));
  return child.pid;
}

/** The file offset of a function, from nm and readelf. */
function offsetOf(program: string, symbol: string): string {
  const row = tool('nm', [program])
    .split('\n')
    .find((line) => line.endsWith(` ${symbol}`));
  assert.ok(row, `nm lists ${symbol}`);
  return `0x${readelfFileOffset(program, BigInt(`0x${row.split(' ')[0]}`)).toString(16)}`;
}

interface Allowed {
  /** The upscope process (the pid its group and instances are named after). */
  readonly pid: number;
  /** May remove the groups and instances of upscope processes that are gone (clean, trace). */
  readonly cleansDead: boolean;
  /** Files outside tracefs it may write: the -o file, a traced process's memory. */
  readonly files: readonly string[];
  /** Its own cache ($UPSCOPE_CACHE_DIR: kept plans, what it read in the kernel's BTF). */
  readonly cache: string;
}

/** What is wrong with one change, or undefined when upscope may make it. */
function violation(change: FileChange, allowed: Allowed): string | undefined {
  const own = `upscope_${allowed.pid}`;
  const deadUpscope = (name: string | undefined) => {
    const owner = Number(/^upscope_(\d+)(?:_\d+)?$/.exec(name ?? '')?.[1]);
    return allowed.cleansDead && owner > 0 && owner !== allowed.pid && !alive(owner);
  };
  const what = `${change.call} ${change.path}`;
  if (change.path === allowed.cache || change.path.startsWith(`${allowed.cache}/`))
    return undefined;
  if (!change.path.startsWith('/')) {
    // A pipe, socket, eventfd or memfd: not a file anyone else sees.
    return /^(pipe|socket|anon_inode):/.test(change.path) ? undefined : what;
  }
  if (change.path === TRACEFS || !change.path.startsWith(`${TRACEFS}/`)) {
    if (change.path === '/dev/null' && change.kind !== 'unlink') return undefined;
    return allowed.files.includes(change.path) && !['rmdir', 'rename', 'link'].includes(change.kind)
      ? undefined
      : what;
  }
  const inside = change.path.slice(TRACEFS.length + 1).split('/');
  if (inside[0] === 'uprobe_events' && inside.length === 1) {
    if (change.kind === 'open')
      return /O_APPEND/.test(change.flags ?? '') ? undefined : `${what} without O_APPEND`;
    if (change.kind !== 'write') return what;
    for (const line of (change.data ?? '').split('\n').filter((l) => l !== '')) {
      const define = /^[pr]:([^/ ]+)\/\w+ /.exec(line);
      const remove = /^-:([^/ ]+)\/\w+$/.exec(line);
      if (define?.[1] === own || remove?.[1] === own) continue;
      if (remove !== null && deadUpscope(remove[1])) continue;
      return `wrote "${line}" to uprobe_events`;
    }
    return undefined;
  }
  if (inside[0] === 'instances' && inside[1] !== undefined) {
    const name = inside[1];
    const ours = name === own || new RegExp(`^${own}_\\d+$`).test(name);
    if (ours && !['rename', 'link'].includes(change.kind)) return undefined;
    if (change.kind === 'rmdir' && inside.length === 2 && deadUpscope(name)) return undefined;
    return what;
  }
  if (inside[0] === 'events' && inside[1] === own && ['open', 'write'].includes(change.kind)) {
    return undefined;
  }
  return what;
}

function check(run: StraceRun, what: string, allowed: Omit<Allowed, 'pid' | 'cache'>): void {
  assert.ok(run.pid > 0, `${what}: strace traced it`);
  const bad = run.changes
    .map((change) => violation(change, { ...allowed, pid: run.pid, cache: CACHE }))
    .filter((v) => v !== undefined);
  assert.deepEqual(bad, [], `${what} wrote outside its own group and instance`);
}

/** The global tracing state upscope must leave alone, and another tool's instance and group. */
function snapshot(sentinel: string): Record<string, string> {
  const files = [
    'tracing_on',
    'current_tracer',
    'buffer_size_kb',
    'trace_clock',
    'trace_options',
    'set_event',
    'set_event_pid',
    'tracing_cpumask',
    'options/event-fork',
    'events/enable',
    'kprobe_events',
    `events/${sentinel}/tick/enable`,
    `events/${sentinel}/tick/filter`,
    `instances/${sentinel}/tracing_on`,
    `instances/${sentinel}/trace_clock`,
    `instances/${sentinel}/buffer_size_kb`,
    `instances/${sentinel}/set_event`,
    `instances/${sentinel}/set_event_pid`,
    `instances/${sentinel}/options/event-fork`,
    `instances/${sentinel}/events/${sentinel}/tick/enable`,
  ];
  const state: Record<string, string> = {};
  for (const file of files) {
    const path = `${TRACEFS}/${file}`;
    state[file] = existsSync(path) ? readFileSync(path, 'utf8') : '(absent)';
  }
  // Events of other tools (upscope sessions of other processes come and go meanwhile).
  state['uprobe_events'] = readFileSync(`${TRACEFS}/uprobe_events`, 'utf8')
    .split('\n')
    .filter((line) => !/^[pr]:upscope_\d+\//.test(line))
    .join('\n');
  return state;
}

interface Case {
  readonly args: string[];
  /** Whether it starts a command (-c): strace lets the launched program go at its exec. */
  readonly launches?: boolean;
  readonly cleansDead?: boolean;
  readonly files?: readonly string[];
  /** What it must have done in tracefs, so that the check is not passed by doing nothing. */
  readonly did?: (changes: FileChange[], pid: number) => void;
}

/** It defined and removed events of its own group, in an instance of its own. */
function usedTracefs(changes: FileChange[], pid: number): void {
  const lines = changes
    .filter((c) => c.path === `${TRACEFS}/uprobe_events` && c.kind === 'write')
    .flatMap((c) => (c.data ?? '').split('\n'));
  const seen = () =>
    `(upscope pid ${pid}; uprobe_events lines written: ${JSON.stringify(lines.filter((l) => l !== ''))}; ` +
    `instance changes: ${JSON.stringify(changes.filter((c) => c.path.startsWith(`${TRACEFS}/instances/`)).map((c) => `${c.tid} ${c.kind} ${c.path}`))})`;
  assert.ok(
    lines.some((l) => l.startsWith(`p:upscope_${pid}/`)),
    `defined its events ${seen()}`,
  );
  assert.ok(
    lines.some((l) => l.startsWith(`-:upscope_${pid}/`)),
    'removed its events',
  );
  for (const kind of ['mkdir', 'rmdir'] as const) {
    assert.ok(
      changes.some((c) => c.kind === kind && c.path === `${TRACEFS}/instances/upscope_${pid}`),
      `${kind} of its instance`,
    );
  }
}

test('every command writes only its own tracefs group and instance (strace), and leaves the global state as it was', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf', 'strace'] })) return;
  if (!existsSync(`${TRACEFS}/uprobe_events`)) assert.fail(`no tracefs at ${TRACEFS}`);
  const busy = compileProgram('busy-counter');
  const counter = compileProgram('tfs-counter');
  const dir = mkdtempSync(join(tmpdir(), 'upscope-writes-'));
  const output = join(dir, 'out.txt');
  // Another tool's instance (set away from the defaults) and event group, not enabled.
  const sentinel = `sentinel_${process.pid}`;
  const instance = `${TRACEFS}/instances/${sentinel}`;
  const target = spawn(busy, [], { stdio: 'ignore' });
  const pid = String(target.pid);
  // A group named like a live upscope session's (its owner is the target, alive): not stale.
  const liveLookalike = `upscope_${target.pid}`;
  try {
    mkdirSync(instance);
    for (const [file, value] of [
      ['trace_clock', 'global'],
      ['buffer_size_kb', '100'],
      ['set_event_pid', String(process.pid)],
    ]) {
      assert.equal(spawnSync('sh', ['-c', `echo ${value} > ${instance}/${file}`]).status, 0);
    }
    uprobeEvents(`p:${sentinel}/tick ${busy}:${offsetOf(busy, 'busy_tick')}`);
    uprobeEvents(`p:${liveLookalike}/tick ${busy}:${offsetOf(busy, 'busy_tick')}`);
    const before = snapshot(sentinel);

    const add = `${counter}:tfs_add a=arg0`;
    const tick = `${busy}:busy_tick`;
    const cases: Case[] = [
      {
        args: ['trace', '--engine', 'tracefs', '--duration', '0.3', tick],
        cleansDead: true,
        did: usedTracefs,
      },
      {
        args: ['trace', '--engine', 'tracefs', '-p', pid, '--duration', '0.3', '-o', output, tick],
        cleansDead: true,
        files: [output],
        did: usedTracefs,
      },
      {
        args: ['trace', '--engine', 'tracefs', '-c', `${counter} 10`, add],
        launches: true,
        cleansDead: true,
        did: usedTracefs,
      },
      { args: ['trace', '--engine', 'bpf', '-p', pid, '--duration', '0.3', tick] },
      { args: ['trace', '--engine', 'bpf', '-c', `${counter} 10`, add], launches: true },
      { args: ['count', '-p', pid, '--duration', '0.3', tick] },
      { args: ['count', '-c', `${counter} 10`, add], launches: true },
      { args: ['hist', '-p', pid, '--duration', '0.3', tick, 'arg0'] },
      { args: ['hist', '-c', `${counter} 10`, `${counter}:tfs_add`, 'arg1'], launches: true },
      { args: ['latency', '-p', pid, '--duration', '0.3', tick] },
      { args: ['latency', '-c', `${counter} 10`, `${counter}:tfs_add`], launches: true },
      // The ptrace engine writes the traced process's memory and nothing else.
      {
        args: ['trace', '--engine', 'ptrace', '-p', pid, '--duration', '0.3', tick],
        files: [`/proc/${pid}/mem`],
      },
      { args: ['doctor'] },
      { args: ['list', busy] },
      { args: ['list', '-p', pid, busy] },
      { args: ['resolve', tick] },
      { args: ['resolve', '-p', pid, tick] },
      { args: ['clean'], cleansDead: true },
    ];
    for (const one of cases) {
      const what = `upscope ${one.args.join(' ')}`;
      // Before clean: a group and an instance of an upscope that is gone, for it to remove.
      const stale = one.args[0] === 'clean' ? `upscope_${deadPid()}` : undefined;
      if (stale !== undefined) {
        uprobeEvents(`p:${stale}/stale ${busy}:${offsetOf(busy, 'busy_tick')}`);
        mkdirSync(`${TRACEFS}/instances/${stale}`);
      }
      const started = Date.now();
      const run = straceChanges([process.execPath, BIN, ...one.args], {
        detachOnExec: one.launches === true,
        env: { UPSCOPE_CACHE_DIR: CACHE },
      });
      t.diagnostic(`${what}: ${Date.now() - started} ms`);
      assert.equal(run.status, 0, `${what}\n${run.stderr}`);
      check(run, what, { cleansDead: one.cleansDead === true, files: one.files ?? [] });
      one.did?.(run.changes, run.pid);
      if (stale !== undefined) {
        // Removed by this clean (checked above) or by another upscope's meanwhile.
        assert.ok(!existsSync(`${TRACEFS}/instances/${stale}`), 'the stale instance is gone');
        assert.doesNotMatch(
          readFileSync(`${TRACEFS}/uprobe_events`, 'utf8'),
          new RegExp(`^p:${stale}/`, 'm'),
        );
      }
    }
    assert.ok(readFileSync(output, 'utf8').includes('busy_tick'), 'the -o file has the events');

    assert.deepEqual(snapshot(sentinel), before, 'the global tracing state is unchanged');
    assert.match(
      readFileSync(`${TRACEFS}/uprobe_events`, 'utf8'),
      new RegExp(`^p:${liveLookalike}/tick `, 'm'),
    );
    assert.equal(target.exitCode, null, 'the target runs on');
    assert.match(readFileSync(`/proc/${pid}/status`, 'utf8'), /^TracerPid:\s+0$/m, 'not traced');
    assert.deepEqual(leftovers(), []);
  } finally {
    target.kill('SIGKILL');
    await new Promise((r) => target.once('exit', r));
    for (const group of [sentinel, liveLookalike]) {
      spawnSync('sh', ['-c', `echo '-:${group}/tick' >> ${TRACEFS}/uprobe_events`]);
    }
    if (existsSync(instance)) rmdirSync(instance);
    rmSync(dir, { recursive: true, force: true });
    rmSync(CACHE, { recursive: true, force: true });
  }
});
