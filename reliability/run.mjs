#!/usr/bin/env node
// `npm run reliability`: the long fault, flood and soak runs of issue 7, outside `npm test`.
// This part floods: a target calls one function as fast as it can for FLOOD seconds while
// `upscope trace -p` streams every hit (to a reader that only counts lines), on each streaming
// engine. It checks that delivered + lost equals the number of calls the target counted
// itself, and records upscope's peak memory (VmHWM) and open descriptors (with those of its
// ptrace helper process); then a SOAK run on a paced target (20,000 calls/s) samples memory
// and descriptors over time to show they do not grow. Prints a table; exits 1 when any accounting is off.
//   node reliability/run.mjs [--flood SECONDS] [--soak SECONDS] [--engines tracefs,bpf,ptrace]
// Needs root (tracefs, BPF, ptrace of a process it did not start).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : fallback;
};
const FLOOD = Number(option('--flood', 60));
const SOAK = Number(option('--soak', 600));
const ENGINES = option('--engines', 'tracefs,bpf,ptrace').split(',');

const work = join(tmpdir(), `upscope-reliability-${process.pid}`);
mkdirSync(work, { recursive: true });
const target = join(work, 'flood');
execFileSync('gcc', ['-O1', '-o', target, join(root, 'reliability/programs/flood.c')]);

/** VmRSS and VmHWM of one process in KiB, and how many descriptors it has open. */
function sampleOne(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (field) => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
    return { rss: kib('VmRSS'), hwm: kib('VmHWM'), fds: readdirSync(`/proc/${pid}/fd`).length };
  } catch {
    return undefined;
  }
}

/** The processes under `pid` (children, their children...) running the same program as it. */
function sameProgramTree(pid) {
  let exe;
  try {
    exe = readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return [];
  }
  const parents = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) {
    for (const [child, parent] of parents) {
      if (parent !== tree[i]) continue;
      try {
        if (readlinkSync(`/proc/${child}/exe`) === exe) tree.push(child);
      } catch {
        // gone meanwhile
      }
    }
  }
  return tree;
}

/**
 * upscope's memory and descriptors: summed over the upscope process and its helper (the
 * ptrace engine's tracer runs in a child process of upscope's own program), not the target
 * a -c run starts. VmHWM is the sum of each one's peak.
 */
function sample(pid) {
  const parts = sameProgramTree(pid)
    .map(sampleOne)
    .filter((s) => s !== undefined);
  if (parts.length === 0) return undefined;
  return parts.reduce((a, b) => ({ rss: a.rss + b.rss, hwm: a.hwm + b.hwm, fds: a.fds + b.fds }));
}

/**
 * One traced run: start the target (blocked until SIGUSR1), trace it with -p, start it once
 * upscope says it is tracing, sample upscope until the target has ended and upscope with it.
 */
function tracedRun(engine, seconds, paced, extra = []) {
  return new Promise((resolve, reject) => {
    const countFile = join(work, `count-${engine}-${paced ? 'soak' : 'flood'}`);
    rmSync(countFile, { force: true });
    const child = spawn(target, [String(seconds), countFile, ...(paced ? ['paced'] : [])], {
      stdio: 'ignore',
    });
    const upscope = spawn(
      process.execPath,
      [
        join(root, 'bin/upscope.js'),
        'trace',
        '--engine',
        engine,
        ...extra,
        '-p',
        String(child.pid),
        `${target}:flood_call`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let lines = 0;
    upscope.stdout.on('data', (chunk) => {
      for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) lines++;
    });
    let stderr = '';
    const samples = [];
    const timer = setInterval(() => {
      const s = sample(upscope.pid);
      if (s !== undefined) samples.push({ at: Date.now(), ...s });
    }, 250);
    upscope.stderr.on('data', (chunk) => {
      const before = stderr;
      stderr += chunk;
      if (!/Ctrl-C to end/.test(before) && /Ctrl-C to end/.test(stderr)) child.kill('SIGUSR1');
    });
    child.on('exit', () => {
      // upscope ends with the process it follows; make sure it does.
      setTimeout(() => upscope.kill('SIGINT'), 10_000).unref();
    });
    upscope.on('error', reject);
    upscope.on('exit', (code) => {
      clearInterval(timer);
      const m = /(\d+) events delivered, (\d+) lost, (\d+) missed/.exec(stderr);
      const calls = existsSync(countFile) ? Number(readFileSync(countFile, 'utf8')) : Number.NaN;
      resolve({
        engine,
        code,
        calls,
        delivered: m === null ? Number.NaN : Number(m[1]),
        lost: m === null ? Number.NaN : Number(m[2]),
        missed: m === null ? Number.NaN : Number(m[3]),
        printed: lines,
        samples,
        stderr: stderr.trim().split('\n').slice(-3).join(' | '),
      });
    });
  });
}

const mib = (kib) => (kib / 1024).toFixed(1);
let failed = false;

console.log(
  `flood: ${FLOOD} s per engine, every hit streamed (upscope trace -p); "small" runs with a 16 KiB buffer, to lose hits`,
);
console.log(
  'engine          calls (target)   delivered        lost  accounted  lines read  peak MiB  fds start/end',
);
const floods = ENGINES.flatMap((engine) =>
  engine === 'ptrace'
    ? [{ engine, label: engine, extra: [] }]
    : [
        { engine, label: engine, extra: [] },
        { engine, label: `${engine} small`, extra: ['--buffer-size', '16'] },
      ],
);
for (const { engine, label, extra } of floods) {
  const r = await tracedRun(engine, FLOOD, false, extra);
  const accounted = r.delivered + r.lost + r.missed === r.calls && r.printed === r.delivered;
  if (!accounted || r.code !== 0) failed = true;
  const peak = Math.max(0, ...r.samples.map((s) => s.hwm));
  const fds = r.samples.length === 0 ? '-' : `${r.samples[0].fds}/${r.samples.at(-1).fds}`;
  console.log(
    `${label.padEnd(14)}  ${String(r.calls).padStart(14)}  ${String(r.delivered).padStart(10)}  ${String(r.lost).padStart(10)}  ${(accounted ? 'yes' : 'NO').padStart(9)}  ${String(r.printed).padStart(10)}  ${mib(peak).padStart(8)}  ${fds.padStart(13)}`,
  );
  if (!accounted || r.code !== 0) console.log(`  exit ${r.code}: ${r.stderr}`);
}

if (SOAK > 0) {
  console.log(`\nsoak: ${SOAK} s per engine on a target making 20,000 calls/s`);
  console.log(
    'engine    calls (target)  accounted  RSS MiB first/last min  fds first/last min  growth',
  );
  for (const engine of ENGINES) {
    const r = await tracedRun(engine, SOAK, true);
    const accounted = r.delivered + r.lost + r.missed === r.calls;
    // Growth: the last minute's highest against the first minute's (after a 10 s warm-up).
    const t0 = r.samples[0]?.at ?? 0;
    const window = (from, to) => r.samples.filter((s) => s.at - t0 >= from && s.at - t0 < to);
    const span = Math.min(60_000, (SOAK * 1000) / 3);
    const first = window(10_000, 10_000 + span);
    const last = window(SOAK * 1000 - span, SOAK * 1000);
    const max = (xs, key) => Math.max(0, ...xs.map((s) => s[key]));
    const grew = max(last, 'rss') > max(first, 'rss') * 1.1 || max(last, 'fds') > max(first, 'fds');
    if (!accounted || grew || r.code !== 0) failed = true;
    console.log(
      `${engine.padEnd(8)}  ${String(r.calls).padStart(14)}  ${(accounted ? 'yes' : 'NO').padStart(9)}  ${`${mib(max(first, 'rss'))}/${mib(max(last, 'rss'))}`.padStart(22)}  ${`${max(first, 'fds')}/${max(last, 'fds')}`.padStart(18)}  ${grew ? 'YES' : 'none'}`,
    );
  }
}

rmSync(work, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
