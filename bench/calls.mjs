// The cost of recording every call (issue 18), side by side in one run:
//  1. per call: `upscope record` of hot.c (every function of the program, entry and return)
//     against `uftrace record` of the same program built with -pg (uftrace's own overhead is
//     its recorded run less the bare -pg run), and bpftrace timing the same functions
//     (`@start[tid]` at entry, a sum of durations at return); each tracer's extra ns per call
//     over its own bare run, and what upscope lost;
//  2. at about 1 M calls/s on one thread (the bare loop's rate here is far above): the events
//     upscope lost at its default buffer; and `record --engine inject` (no trap a call): what
//     it lost with the program paced at 250,000 to 2,000,000 calls a second (hot.c's third
//     argument), and the rate the program kept;
//  3. attach time to functions of /usr/bin/node on a running node, from a few hundred to all
//     of them (tens of thousands): upscope record -p (entries and returns) and upscope
//     count -p (entries alone, as bpftrace) until their start lines, planned and with the
//     plans kept, against bpftrace's `uprobe:/usr/bin/node:PATTERN` until its BEGIN (run
//     once every probe is attached). A bpftrace that does not attach within
//     BENCH_ATTACH_LIMIT_S (300) takes many minutes to let go of its probes (each perf event
//     waits out an RCU grace period; everything on the machine is slower meanwhile, so the
//     next row waits for it) and is not run on larger patterns; BENCH_ATTACH_BPFTRACE=0 runs
//     none of it.
// Installs uftrace and bpftrace from Debian when missing; a peer that cannot be had is said.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensure, nsPerCall } from './bpf.mjs';

const root = new URL('..', import.meta.url).pathname;
const UPSCOPE = join(root, 'bin/upscope.js');
const N = Number(process.env.BENCH_CALLS_N ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_CALLS_RUNS ?? 3);
/** Seconds bpftrace may take to attach to every function of node before it is given up. */
const ATTACH_LIMIT_S = Number(process.env.BENCH_ATTACH_LIMIT_S ?? 300);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n, digits = 1) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

function run(command, args, env = {}, cwd = undefined) {
  const result = spawnSync(command, args, {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, ...env },
  });
  return {
    status: result.status ?? String(result.signal ?? result.error),
    stdout: result.stdout?.toString() ?? '',
    stderr: result.stderr?.toString() ?? '',
  };
}

function build(dir, name, extra) {
  const out = join(dir, name);
  const built = run('gcc', [
    '-O2',
    '-g',
    ...extra,
    '-pthread',
    '-o',
    out,
    join(root, 'bench/programs/hot.c'),
  ]);
  if (built.status !== 0) throw new Error(`gcc ${extra.join(' ')} failed: ${built.stderr}`);
  return out;
}

/** ns per call of one run, from the target's own line (on stderr, or stdout for bpftrace -c). */
function measured(result, what) {
  const ns = nsPerCall(result.stderr) ?? nsPerCall(result.stdout);
  if (ns === undefined || result.status !== 0) {
    throw new Error(`${what} failed (${result.status}):\n${result.stderr.slice(-2000)}`);
  }
  return ns;
}

function perCall(dir) {
  const plain = build(dir, 'hot', []);
  const pg = build(dir, 'hot-pg', ['-pg']);
  const uftraceMissing = ensure('uftrace', 'uftrace', ['--version']);
  const bpftraceMissing = ensure('bpftrace', 'bpftrace', ['--version']);
  const recording = join(dir, 'rec');
  const rows = [
    { name: 'bare', measure: () => measured(run(plain, [String(N)]), 'bare') },
    { name: 'bare -pg', measure: () => measured(run(pg, [String(N)], {}, dir), 'bare -pg') },
    {
      name: 'upscope record',
      measure: () => {
        rmSync(recording, { recursive: true, force: true });
        const result = run(process.execPath, [
          UPSCOPE,
          'record',
          '-c',
          `${plain} ${N}`,
          '-o',
          recording,
        ]);
        const ns = measured(result, 'upscope record');
        const index = JSON.parse(readFileSync(join(recording, 'index.json'), 'utf8'));
        rows.lost.push(index.lost);
        rows.records.push(index.records);
        return ns;
      },
    },
    {
      name: 'uftrace record (-pg)',
      why: uftraceMissing,
      measure: () => {
        const data = join(dir, 'uftrace.data');
        rmSync(data, { recursive: true, force: true });
        return measured(
          run('uftrace', ['record', '-d', data, pg, String(N)], {}, dir),
          'uftrace record',
        );
      },
    },
    {
      name: 'bpftrace entry+return',
      why: bpftraceMissing,
      measure: () => {
        const fns = ['main', 'loop', 'hot_function'];
        const program = [
          `${fns.map((f) => `uprobe:${plain}:${f}`).join(',')} { @start[tid] = nsecs; }`,
          `${fns.map((f) => `uretprobe:${plain}:${f}`).join(',')} /@start[tid]/ { @ns = sum(nsecs - @start[tid]); delete(@start[tid]); }`,
        ].join('\n');
        return measured(run('bpftrace', ['-c', `${plain} ${N}`, '-e', program]), 'bpftrace');
      },
    },
  ];
  rows.lost = [];
  rows.records = [];
  const samples = new Map(rows.map((row) => [row.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const row of rows) if (row.why === undefined) samples.get(row.name).push(row.measure());
  }
  const ns = (name) => median(samples.get(name) ?? []);
  const extra = {
    'upscope record': ns('upscope record') - ns('bare'),
    'uftrace record (-pg)': ns('uftrace record (-pg)') - ns('bare -pg'),
    'bpftrace entry+return': ns('bpftrace entry+return') - ns('bare'),
  };
  console.log(
    `\nRecording every call (hot.c, ${fmt(N, 0)} calls, median of ${ROUNDS} runs in turns):`,
  );
  console.log("                           ns/call   extra ns/call   upscope's extra / this one's");
  for (const row of rows) {
    if (row.why !== undefined) {
      console.log(`  ${row.name.padEnd(24)} not run: ${row.why}`);
      continue;
    }
    const added = extra[row.name];
    console.log(
      `  ${row.name.padEnd(24)} ${fmt(ns(row.name)).padStart(7)}   ${added === undefined ? '' : fmt(added).padStart(13)}` +
        (added === undefined || row.name === 'upscope record'
          ? ''
          : `   ${fmt(extra['upscope record'] / added, 2)}x`),
    );
  }
  console.log(
    `  upscope lost ${rows.lost.join(', ')} events of ${rows.records.join(', ')} records (per run), recording ${fmt(1e3 / ns('upscope record'), 3)} M calls/s (the bare loop runs ${fmt(1e3 / ns('bare'), 0)} M/s: two uprobe traps a call bound the probed rate)`,
  );
}

/** Milliseconds from spawning `command` until `ready` matches its output; then it is ended. */
function timeUntil(command, args, ready, limitS, env = {}) {
  return new Promise((resolve) => {
    const began = process.hrtime.bigint();
    const child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let text = '';
    let done = false;
    let closed = false;
    const finish = (ms, why) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (closed) {
        resolve({ ms, why, text, pid: child.pid });
        return;
      }
      child.kill('SIGINT');
      const hard = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.once('close', () => {
        clearTimeout(hard);
        resolve({ ms, why, text, pid: child.pid });
      });
    };
    const timer = setTimeout(
      () => finish(undefined, `not attached after ${limitS} s`),
      limitS * 1000,
    );
    const seen = (chunk) => {
      text += chunk;
      if (ready.test(text)) finish(Number(process.hrtime.bigint() - began) / 1e6);
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.once('close', () => {
      closed = true;
      finish(undefined, `ended: ${text.slice(-300)}`);
    });
  });
}

/**
 * bpftrace leaves its uprobe event behind when an attach fails (a symbol the kernel refuses,
 * such as node's v8_code_start_for_profiler_): remove the events named with `mark`.
 */
function removeLeftUprobes(mark) {
  const events = '/sys/kernel/tracing/uprobe_events';
  let lines = [];
  try {
    lines = readFileSync(events, 'utf8').split('\n');
  } catch {
    return;
  }
  for (const line of lines) {
    const name = /^[pr]:(\S+)/.exec(line)?.[1];
    if (name?.includes(mark)) run('sh', ['-c', `echo '-:${name}' >> ${events}`]);
  }
}

/**
 * Patterns of /usr/bin/node's functions attached to: one function by its name (what most
 * runs probe), a few hundred, thousands, the goal's
 * 50,000 (`_ZN[1-9S]*`, functions of named namespaces and of std: 49,981 in node 20), every
 * one (BENCH_ATTACH_PATTERNS='uv_*,*' picks others). upscope's links are scoped to the recorded
 * process (node is the file upscope itself runs on), so no other node process traps.
 */
const ATTACH_PATTERNS = (
  process.env.BENCH_ATTACH_PATTERNS ?? 'uv_run,uv_*,_ZN2v88internal8compiler*,_ZN[1-9S]*,_ZN*,*'
).split(',');

/**
 * bpftrace's attach points for a glob of node's functions: its wildcards have `*` alone, so a
 * character class is spelt out as one point per character (`_ZN[1-9S]*` is `_ZN1*`, ...,
 * `_ZN9*`, `_ZNS*`), the same functions.
 */
function bpftraceProbes(pattern) {
  const m = /^(.*)\[([^\]]+)\](.*)$/.exec(pattern);
  if (m === null) return `uprobe:/usr/bin/node:${pattern}`;
  const chars = m[2].replace(/(.)-(.)/g, (_, a, b) =>
    Array.from({ length: b.charCodeAt(0) - a.charCodeAt(0) + 1 }, (_, i) =>
      String.fromCharCode(a.charCodeAt(0) + i),
    ).join(''),
  );
  return [...chars].map((c) => `uprobe:/usr/bin/node:${m[1]}${c}${m[3]}`).join(',');
}

export async function attachNode() {
  const node = spawn('/usr/bin/node', ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-attach-'));
  const bpftraceMissing = ensure('bpftrace', 'bpftrace', ['--version']);
  try {
    await new Promise((r) => setTimeout(r, 500));
    const functions = run('sh', ['-c', `nm /usr/bin/node | grep -c ' [tTwW] '`]).stdout.trim();
    console.log(
      `\nAttach to functions of /usr/bin/node (${functions} text symbols in all), on a running node; time until the probes are live, start-up and symbol reading included:`,
    );
    console.log(
      '  pattern                 upscope record -p (entry+return): planned / plan kept (median of 3)   upscope count -p (entry only): planned / kept   bpftrace (entry only)',
    );
    let bpftraceGaveUp;
    /**
     * The first run (planned), then the median of 3 with the plan kept (one run varies by a
     * tenth of a second here).
     */
    const plannedAndKept = async (once) => {
      const planned = await once();
      if (planned.ms === undefined) return { planned, kept: planned };
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await once());
      const failed = runs.find((r) => r.ms === undefined);
      return { planned, kept: failed ?? runs.sort((a, b) => a.ms - b.ms)[1] };
    };
    for (const pattern of ATTACH_PATTERNS) {
      // The first run plans every function (an empty plan cache), the second takes the plans
      // the first kept (see README: plans are kept by file, spec and options).
      const cache = join(dir, `cache-${ATTACH_PATTERNS.indexOf(pattern)}`);
      const recordOnce = () => {
        rmSync(join(dir, 'rec'), { recursive: true, force: true });
        return timeUntil(
          process.execPath,
          [
            UPSCOPE,
            'record',
            '-p',
            String(node.pid),
            `/usr/bin/node:${pattern}`,
            '-o',
            join(dir, 'rec'),
          ],
          /Recording \d+ functions?/,
          ATTACH_LIMIT_S,
          { UPSCOPE_CACHE_DIR: cache },
        );
      };
      const recorded = await plannedAndKept(recordOnce);
      const ours = recorded.planned;
      // Entries alone, counted in the kernel: what bpftrace's wildcard attach does. A cache of
      // its own: count's plan of the entries is record's, which its first run would take.
      const countCache = `${cache}-count`;
      const counted = await plannedAndKept(() =>
        timeUntil(
          process.execPath,
          [UPSCOPE, 'count', '-p', String(node.pid), `/usr/bin/node:${pattern}`],
          /Counting \d+ probes?/,
          ATTACH_LIMIT_S,
          { UPSCOPE_CACHE_DIR: countCache },
        ),
      );
      const count = /Recording (\d+) function/.exec(ours.text)?.[1];
      // bpftrace takes many minutes to let go of probes it could not finish attaching (each
      // of its perf events waits out an RCU grace period): once it failed, no more of it.
      const theirs =
        process.env.BENCH_ATTACH_BPFTRACE === '0'
          ? { why: 'not run (BENCH_ATTACH_BPFTRACE=0)' }
          : bpftraceGaveUp !== undefined
            ? { why: `not run: it did not attach ${bpftraceGaveUp}` }
            : bpftraceMissing === undefined
              ? await timeUntil(
                  'bpftrace',
                  [
                    '-p',
                    String(node.pid),
                    '-e',
                    `BEGIN { printf("ready\\n"); } ${bpftraceProbes(pattern)} { @n = count(); }`,
                  ],
                  // The line alone: an error quotes the program, whose printf says "ready".
                  /^ready$/m,
                  ATTACH_LIMIT_S,
                  // Its default limit is 512 probes.
                  { BPFTRACE_MAX_PROBES: '1000000' },
                )
              : { why: bpftraceMissing };
      if (theirs.pid !== undefined) removeLeftUprobes(`_bcc_${theirs.pid}`);
      if (theirs.ms === undefined && theirs.pid !== undefined) {
        bpftraceGaveUp = `${pattern} (${count} functions) within ${ATTACH_LIMIT_S} s`;
      }
      const probes = /Attaching (\d+) probes/.exec(theirs.text ?? '')?.[1];
      // What ended a run, in a line: its last error (bpftrace warns of RLIMIT_MEMLOCK as an
      // ERROR first, whatever the failure).
      const said = (r) => {
        const lines = (r.why ?? '')
          .split('\n')
          .filter((l) => /ERROR|error|ended|not run|not attached/.test(l))
          .filter((l) => !/RLIMIT_MEMLOCK/.test(l));
        return (lines.at(-1) ?? r.why ?? '').replace(/^ended: /, '').slice(0, 140);
      };
      const times = ({ planned, kept }) =>
        planned.ms === undefined || kept.ms === undefined
          ? `failed: ${said(planned.ms === undefined ? planned : kept)}`
          : `${fmt(planned.ms, 0)} ms / ${fmt(kept.ms, 0)} ms`;
      const ourText = `${times(recorded)}${ours.ms === undefined ? '' : `, ${count} functions`}`;
      const countText = times(counted);
      console.log(
        `  ${pattern.padEnd(22)}  ${ourText.padEnd(52)}   ${countText.padEnd(26)}   ${theirs.ms !== undefined ? `${fmt(theirs.ms, 0)} ms, ${probes} probes` : theirs.why?.startsWith('not run') ? theirs.why : `failed: ${said(theirs)}`}`,
      );
    }
  } finally {
    node.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `upscope record --engine inject` (hooks in the process, no trap): what it lost with hot.c
 * paced at 250,000 to 2,000,000 calls a second on one thread (1,000,000 calls each), and the
 * rate the program kept. (Its cost per call is not timed on a free-running loop: a run short
 * enough for its ring shares the 2 CPUs with upscope's start-up, which its time then shows.)
 */
export function injectRecord(dir) {
  const plain = build(dir, 'hot-inject', []);
  const recording = join(dir, 'rec-inject');
  const recordRun = (args) => {
    rmSync(recording, { recursive: true, force: true });
    const result = run(process.execPath, [
      UPSCOPE,
      'record',
      '--engine',
      'inject',
      '-c',
      `${plain} ${args}`,
      '-o',
      recording,
    ]);
    const ns = measured(result, `upscope record --engine inject (${args})`);
    const index = JSON.parse(readFileSync(join(recording, 'index.json'), 'utf8'));
    return { ns, lost: index.lost, records: index.records };
  };
  console.log('\nupscope record --engine inject (hot.c, 1,000,000 calls on one thread, paced):');
  for (const rate of [250_000, 500_000, 1_000_000, 2_000_000]) {
    const runs = [];
    for (let round = 0; round < ROUNDS; round++) runs.push(recordRun(`1000000 1 ${rate}`));
    console.log(
      `  at ${fmt(rate, 0)} calls/s offered (1,000,000 calls): lost ${runs.map((r) => r.lost).join(', ')} of ${runs.map((r) => r.records + r.lost).join(', ')} records; the program ran at ${runs.map((r) => fmt(1e3 / r.ns, 3)).join(', ')} M calls/s`,
    );
  }
}

export async function runCallsBench() {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-calls-'));
  try {
    perCall(dir);
    injectRecord(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  await attachNode();
}

if (process.argv[1] === new URL(import.meta.url).pathname) await runCallsBench();
