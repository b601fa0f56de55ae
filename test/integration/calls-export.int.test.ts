// Exports of a recording through the output layer, checked against the C target's known call
// structure and its own counters: replay --format chrome (a track per thread, each call a
// nested complete slice), that trace opened in speedscope (headless Debian chromium: what it
// read, as its Export writes it), graph --format pprof read back by `go tool pprof -top`, and
// graph --format folded / flamegraph, whose frames weigh each call path's inclusive time.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { closeSpeedscope, exportFromSpeedscope, openInSpeedscope } from '../helpers/speedscope.js';
import { tracedChildren } from '../helpers/tracees.js';

const work = mkdtempSync(join(tmpdir(), 'upscope-calls-export-'));
after(async () => {
  await closeSpeedscope();
  rmSync(work, { recursive: true, force: true });
});
afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

/** The target's own counts: the parent's line and the fork's child's. */
interface Recorded {
  readonly dir: string;
  readonly parent: Record<string, number>;
  readonly child: Record<string, number>;
}

let recorded: Recorded | undefined;

/** `calls-target all` recorded once (bpf), for every test here. */
function recording(t: Parameters<typeof requireHost>[0]): Recorded | undefined {
  if (!requireHost(t, { root: true, commands: ['gcc'] })) return undefined;
  if (recorded !== undefined) return recorded;
  const app = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
  const dir = join(work, 'rec');
  const result = runCli(['record', '-c', `${app} all`, '-o', dir]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stderr, /, 0 lost\n/);
  const lines = result.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  recorded = {
    dir,
    parent: lines.find((l) => l['rec'] !== undefined)!,
    child: lines.find((l) => l['rec'] === undefined)!,
  };
  return recorded;
}

function cli(args: string[]): string {
  const result = runCli(args);
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stderr, '');
  return result.stdout;
}

interface ReportRow {
  function: string;
  calls: number;
  totalNs: number;
  selfNs: number;
  untimed: number;
}

/**
 * The report's rows of functions with times: not those whose returns are not probed (_start,
 * the program's entry point), whose calls are counted, not timed (instants in a trace).
 */
function report(dir: string): Map<string, ReportRow> {
  const rows = JSON.parse(cli(['report', dir, '--json'])) as ReportRow[];
  return new Map(rows.filter((r) => r.untimed < r.calls).map((r) => [r.function, r]));
}

interface Slice {
  name: string;
  tid: number;
  pid: number;
  startNs: number;
  endNs: number;
  ended: string | undefined;
  depth: number;
}

/** The complete slices of a Chrome trace per thread, each with its depth in its thread's nest. */
function slices(trace: { traceEvents: Record<string, unknown>[] }): Map<number, Slice[]> {
  const byTid = new Map<number, Slice[]>();
  for (const e of trace.traceEvents) {
    if (e['ph'] !== 'X') continue;
    const ts = e['ts'] as number;
    const list = byTid.get(e['tid'] as number) ?? [];
    list.push({
      name: e['name'] as string,
      tid: e['tid'] as number,
      pid: e['pid'] as number,
      startNs: Math.round(ts * 1000),
      endNs: Math.round((ts + (e['dur'] as number)) * 1000),
      ended: (e['args'] as { ended?: string }).ended,
      depth: 0,
    });
    byTid.set(e['tid'] as number, list);
  }
  for (const [tid, list] of byTid) {
    list.sort((a, b) => a.startNs - b.startNs || b.endNs - a.endNs);
    const open: Slice[] = [];
    for (const s of list) {
      while (open.length > 0 && open.at(-1)!.endNs <= s.startNs) open.pop();
      const parent = open.at(-1);
      assert.ok(
        parent === undefined || s.endNs <= parent.endNs,
        `thread ${tid}: ${s.name} starts inside ${parent?.name} and ends after it`,
      );
      s.depth = open.length;
      open.push(s);
    }
  }
  return byTid;
}

function count(list: readonly { name: string }[], name: string): number {
  return list.filter((s) => s.name === name).length;
}

test('replay --format chrome: a track per thread, each call a complete slice nested as the target made them', (t) => {
  const rec = recording(t);
  if (rec === undefined) return;
  const { dir, parent, child } = rec;
  const file = join(work, 'trace.json');
  cli(['replay', dir, '--format', 'chrome', '-o', file]);
  const trace = JSON.parse(readFileSync(file, 'utf8'));
  const threads = slices(trace);

  const main = threads.get(parent['pid']!)!;
  for (const fn of ['rec', 'is_even', 'is_odd', 'jumper', 'deep', 'tail_caller', 'tail_callee']) {
    assert.equal(count(main, fn), parent[fn], `slices of ${fn} on the main thread`);
  }
  // From main: rec 51 deep, is_even/is_odd alternating 21 deep, the 6 deep calls the longjmp
  // left (said unwound), and the tail call.
  const top = main.find((s) => s.name === 'main')!;
  const expected = ['0 main'];
  for (let d = 1; d <= 51; d++) expected.push(`${d} rec`);
  for (let d = 1; d <= 21; d++) expected.push(`${d} ${d % 2 === 1 ? 'is_even' : 'is_odd'}`);
  expected.push('1 jumper');
  for (let d = 2; d <= 7; d++) expected.push(`${d} deep unwound`);
  expected.push('1 tail_caller', '2 tail_callee');
  assert.deepEqual(
    main
      .filter((s) => s.startNs >= top.startNs && s.endNs <= top.endNs)
      .map((s) => `${s.depth - top.depth} ${s.name}${s.ended === undefined ? '' : ` ${s.ended}`}`),
    expected,
  );

  // The 4 threads: a track each, thread_body holding its 5 leaf calls.
  const bodies = [...threads.values()].filter((list) => list.some((s) => s.name === 'thread_body'));
  assert.equal(bodies.length, parent['thread_body']);
  for (const list of bodies) {
    assert.deepEqual(
      list.map((s) => `${s.depth} ${s.name}`),
      ['0 thread_body', ...Array(5).fill('1 leaf')],
    );
    assert.equal(list[0]!.pid, parent['pid'], 'a thread of the target');
  }
  // The fork's child: its own process and track.
  const forked = threads.get(child['pid']!)!;
  assert.deepEqual(
    forked.map((s) => `${s.depth} ${s.name} ${s.pid}`),
    Array(child['child_work']).fill(`0 child_work ${child['pid']}`),
  );
  assert.equal(threads.size, 1 + parent['thread_body']! + 1, 'a track per thread with calls');
  // _start, whose return is not probed (the program's entry point): an instant, not a slice.
  const instants = trace.traceEvents.filter(
    (e: { ph: string; tid: number }) => e.ph === 'i' && e.tid === parent['pid'],
  );
  assert.deepEqual(
    instants.map((e: { name: string; args: { ended: string } }) => `${e.name} ${e.args.ended}`),
    ['_start returns not probed'],
  );
  // Every track is named after its thread (metadata events).
  const named = trace.traceEvents
    .filter((e: { ph: string; name: string }) => e.ph === 'M' && e.name === 'thread_name')
    .map((e: { tid: number }) => e.tid);
  assert.deepEqual(new Set(named), new Set(threads.keys()));

  // The replay's filters choose the slices: from main, 2 levels.
  const filtered = slices(
    JSON.parse(cli(['replay', dir, '--format', 'chrome', '-F', 'main', '--depth', '2'])),
  );
  assert.deepEqual(
    filtered.get(parent['pid']!)!.map((s) => `${s.depth} ${s.name}`),
    ['0 main', '1 rec', '1 is_even', '1 jumper', '1 tail_caller'],
  );
  assert.equal(filtered.size, 1);
});

test("the recording's Chrome trace loads in speedscope: a profile per thread with its slices", async (t) => {
  const rec = recording(t);
  if (rec === undefined) return;
  if (!requireHost(t, { commands: ['chromium'] })) return;
  const text = cli(['replay', rec.dir, '--format', 'chrome']);
  const threads = slices(JSON.parse(text));
  const loaded = await openInSpeedscope('calls.json', text);
  assert.deepEqual(loaded.problems, [], 'no error or warning while importing');
  assert.equal(loaded.title, 'calls.json - speedscope');
  assert.match(loaded.profile, new RegExp(`\\(1/${threads.size}\\)$`));
  // What speedscope read, as it exports it: per thread, each slice a frame opened and closed.
  const exported = await exportFromSpeedscope(loaded.page);
  assert.equal(exported.profiles.length, threads.size);
  for (const profile of exported.profiles) {
    const tid = Number(/tid (\d+)\)$/.exec(profile.name)?.[1]);
    const mine = threads.get(tid);
    assert.ok(mine !== undefined, `a profile of thread ${tid}: ${profile.name}`);
    const opened = new Map<string, number>();
    let depth = 0;
    for (const e of profile.events ?? []) {
      depth += e.type === 'O' ? 1 : -1;
      assert.ok(depth >= 0, 'frames close in the order they opened');
      if (e.type !== 'O') continue;
      const name = exported.shared.frames[e.frame]!.name.replace(/ \{.*\}$/, '');
      opened.set(name, (opened.get(name) ?? 0) + 1);
    }
    assert.equal(depth, 0);
    const expected = new Map<string, number>();
    for (const s of mine) expected.set(s.name, (expected.get(s.name) ?? 0) + 1);
    assert.deepEqual(opened, expected, `the slices of thread ${tid}`);
  }
});

/** `go tool pprof ARGS FILE` with nowhere to find binaries. */
function pprof(file: string, args: readonly string[]): string {
  const run = spawnSync('go', ['tool', 'pprof', ...args, file], {
    encoding: 'utf8',
    env: { ...process.env, HOME: work, PPROF_TMPDIR: work, PPROF_BINARY_PATH: join(work, 'none') },
  });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout;
}

/** `-top` rows: function -> [flat, cum]. */
function top(stdout: string): Map<string, [number, number]> {
  const rows = new Map<string, [number, number]>();
  for (const line of stdout.split('\n')) {
    const m = /^\s*(\d+)(?:ns)?\s+[\d.]+%\s+[\d.]+%\s+(\d+)(?:ns)?\s+[\d.]+%\s+(.+)$/.exec(line);
    if (m !== null) rows.set(m[3]!, [Number(m[1]), Number(m[2])]);
  }
  return rows;
}

/** The time of every thread's outermost calls: the whole of what was recorded. */
function rootTime(dir: string): number {
  return cli(['replay', dir, '--json', '--depth', '1'])
    .trim()
    .split('\n')
    .reduce((sum, l) => sum + (JSON.parse(l) as { durationNs: number }).durationNs, 0);
}

test('graph --format pprof: go tool pprof -top gives the target its calls, and each function its self and total time', (t) => {
  const rec = recording(t);
  if (rec === undefined) return;
  if (!requireHost(t, { commands: ['go'] })) return;
  const file = join(work, 'calls.pb.gz');
  cli(['graph', rec.dir, '--format', 'pprof', '-o', file]);
  const flags = ['-top', '-nodefraction=0', '-edgefraction=0', '-nodecount=10000'];

  const calls = top(pprof(file, [...flags, '-sample_index=calls']));
  for (const fn of ['rec', 'is_even', 'is_odd', 'thread_body', 'leaf', 'deep', 'tail_callee']) {
    assert.equal(calls.get(fn)?.[0], rec.parent[fn], `calls of ${fn}`);
  }
  assert.equal(calls.get('child_work')?.[0], rec.child['child_work']);

  const text = pprof(file, [...flags, '-unit=ns']);
  assert.match(text, /^Type: time$/m);
  const total = /of (\d+)ns total/.exec(text);
  assert.equal(Number(total?.[1]), rootTime(rec.dir), 'the total is every outermost call');
  // flat is a function's own time, cum its time counting a recursion once: the report's.
  const times = top(text);
  const rows = report(rec.dir);
  assert.equal(times.size, rows.size);
  for (const [fn, row] of rows) {
    assert.deepEqual(times.get(fn), [row.selfNs, row.totalNs], fn);
  }
});

test('graph --format folded and flamegraph weigh each call path by time: frames as wide as their inclusive time', (t) => {
  const rec = recording(t);
  if (rec === undefined) return;
  const folded = cli(['graph', rec.dir, '--format', 'folded']).trim().split('\n');
  const inclusive = new Map<string, number>();
  let total = 0;
  for (const line of folded) {
    const at = line.lastIndexOf(' ');
    const value = Number(line.slice(at + 1));
    total += value;
    for (const fn of new Set(line.slice(0, at).split(';'))) {
      inclusive.set(fn, (inclusive.get(fn) ?? 0) + value);
    }
  }
  assert.equal(total, rootTime(rec.dir));
  const rows = report(rec.dir);
  for (const [fn, row] of rows) assert.equal(inclusive.get(fn), row.totalNs, fn);
  const deepest = `main;${Array(51).fill('rec').join(';')} `;
  assert.equal(folded.filter((l) => l.startsWith(deepest)).length, 1, 'rec, 51 deep');

  // From a function: every thread_body, with its leaf calls.
  const from = cli(['graph', rec.dir, 'thread_body', '--format', 'folded']);
  assert.deepEqual(
    from
      .trim()
      .split('\n')
      .map((l) => l.slice(0, l.lastIndexOf(' '))),
    ['thread_body', 'thread_body;leaf'],
  );

  const svg = cli(['graph', rec.dir, '--format', 'flamegraph']);
  assert.match(svg, new RegExp(`data-total="${total}" data-unit="ns"`));
  const frames = [
    ...svg.matchAll(/<g class="f" data-s="\d+" data-v="(\d+)" data-d="(\d+)"><title>([^<]*) \(/g),
  ];
  const main = frames.filter((m) => m[3] === 'main');
  assert.equal(main.length, 1);
  assert.equal(Number(main[0]![1]), rows.get('main')!.totalNs, "main's frame: its total time");
  assert.match(svg, /<title>Calls of &quot;.*calls-target[-\w]* all&quot;<\/title>/);
});

test('a format a recording command does not write is one line naming those it does, and where the other is', (t) => {
  const rec = recording(t);
  if (rec === undefined) return;
  const graph = runCli(['graph', rec.dir, '--format', 'chrome']);
  assert.equal(graph.status, 2);
  assert.equal(
    graph.stderr,
    'error[ERR_USAGE]: Cannot write the call tree of a recording as chrome: give --format text, json, folded, flamegraph, pprof or speedscope\n' +
      '  hint: For the calls of a recording: upscope replay DIR --format chrome\n',
  );
  const reportFlame = runCli(['report', rec.dir, '--format', 'flamegraph']);
  assert.equal(reportFlame.status, 2);
  assert.match(
    reportFlame.stderr,
    /hint: For the call tree of a recording: upscope graph DIR --format flamegraph\n$/,
  );
  const both = runCli(['replay', rec.dir, '--json', '--format', 'chrome']);
  assert.equal(both.status, 2);
  assert.match(both.stderr, /^error\[ERR_USAGE\]: Cannot use --json with --format chrome/);
});
