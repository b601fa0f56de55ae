#!/usr/bin/env node
// `npm run reliability`: the long runs of issue 7, outside `npm test`, and their report.
//   fuzz    every parser's fuzzer (test/fuzz/) with FUZZ inputs each (scripts/fuzz.mjs)
//   faults  the fault tests (test/integration/faults-*.int.test.ts) with ROUNDS rounds per
//           case: targets and upscope killed at each phase, forks, execs, replaced binaries...
//   full    the suite's tests that run smaller in `npm test`, at the sizes their issues name
//           (UPSCOPE_FULL_SIZE=1, test/helpers/full-size.ts): the ptrace torture test's
//           1,000,000 calls, 20 runs of trace --json on a pipe, 10 bpf counts beside a ptrace one
//   flood   a target calls one function as fast as it can for FLOOD seconds while
//           `upscope trace -p` streams every hit (to a reader that only counts lines), on each
//           engine; delivered + lost + missed must equal the calls the target counted itself.
//           "small" runs with a 16 KiB buffer force losses. Peak memory (VmHWM) and descriptors,
//           with those of the ptrace engine's helper process.
//   soak    SOAK seconds per engine on a paced target (20,000 calls/s): memory and descriptors
//           must not grow from the run's first half to its second (peaks, after a warm-up).
// Prints each part's table, then a summary; exits 1 when anything failed.
//   node reliability/run.mjs [--only fuzz,faults,full,flood,soak] [--fuzz N] [--rounds R]
//                            [--flood SECONDS] [--soak SECONDS] [--engines tracefs,bpf,ptrace]
// Needs root (tracefs, BPF, ptrace of a process it did not start).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1] : fallback;
};
const PARTS = new Set(option('--only', 'fuzz,faults,full,flood,soak').split(','));
const FUZZ = Number(option('--fuzz', 100_000));
const ROUNDS = Number(option('--rounds', 5));
const FLOOD = Number(option('--flood', 60));
const SOAK = Number(option('--soak', 600));
const ENGINES = option('--engines', 'tracefs,bpf,ptrace').split(',');
for (const [name, value] of [
  ['--fuzz', FUZZ],
  ['--rounds', ROUNDS],
  ['--flood', FLOOD],
  ['--soak', SOAK],
]) {
  if (!Number.isInteger(value) || value < 0) {
    console.error(`Cannot run: ${name} takes a whole number, not ${option(name)}`);
    process.exit(2);
  }
}
for (const part of PARTS) {
  if (!['fuzz', 'faults', 'full', 'flood', 'soak'].includes(part)) {
    console.error(`Cannot run: --only takes fuzz, faults, full, flood and soak, not ${part}`);
    process.exit(2);
  }
}

/** The summary's lines, one per part run. */
const summary = [];
let failed = false;

if (PARTS.has('fuzz') && FUZZ > 0) {
  console.log(`fuzz: ${FUZZ} inputs per parser (scripts/fuzz.mjs)`);
  const run = spawnSync(process.execPath, [join(root, 'scripts/fuzz.mjs'), String(FUZZ)], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const table = run.stdout.slice(run.stdout.lastIndexOf('Fuzzing,'));
  console.log(table.trimEnd());
  const total = Number(/total\s+(\d+) inputs/.exec(table)?.[1] ?? 0);
  const parsers = table.split('\n').filter((l) => /^\s+\S+\s+\d+ inputs .* slowest/.test(l));
  if (run.status !== 0) failed = true;
  summary.push(
    `fuzzing      ${total.toLocaleString('en')} inputs over ${parsers.length} parsers: ${run.status === 0 ? 'no failure' : 'FAILED (see above)'}`,
  );
}

/**
 * Run test files through node:test (TAP) and return each top-level test's name and result;
 * tests skipped by the name pattern are left out. With `nested`, the tests inside suites too,
 * those whose name matches the pattern.
 */
function runTests(files, env, pattern, nested = false) {
  const run = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '--test',
      '--test-timeout=0',
      '--test-reporter=tap',
      ...(pattern === undefined ? [] : ['--test-name-pattern', pattern]),
      ...files,
    ],
    {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 1 << 28,
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, CI: 'true', ...env },
    },
  );
  const cases = [];
  const line = nested
    ? /^\s*(not ok|ok) \d+ - (.*?)( # SKIP.*)?$/gm
    : /^(not ok|ok) \d+ - (.*?)( # SKIP.*)?$/gm;
  for (const m of run.stdout.matchAll(line)) {
    if (m[3] !== undefined) continue;
    if (nested && !new RegExp(pattern).test(m[2])) continue;
    cases.push({ ok: m[1] === 'ok', name: m[2] });
  }
  if (run.status !== 0) {
    console.log(
      run.stdout
        .split('\n')
        .filter((l) => /not ok|error:|Error|expected|actual/.test(l))
        .slice(0, 40)
        .join('\n'),
    );
  }
  return { status: run.status, cases };
}

if (PARTS.has('faults') && ROUNDS > 0) {
  const files = readdirSync(join(root, 'test/integration'))
    .filter((f) => /^faults.*\.int\.test\.ts$/.test(f))
    .map((f) => join('test/integration', f))
    .sort();
  console.log(
    `\nfaults: ${ROUNDS} rounds per case (${files.join(', ')}; the full-disk cases of test/integration/output.int.test.ts)`,
  );
  // Each fault test is one case on one engine and runs ROUNDS rounds itself (a failing round
  // fails it); the full-disk tests have no rounds of their own and run ROUNDS times.
  const main = runTests(files, { UPSCOPE_FAULT_ROUNDS: String(ROUNDS) });
  const cases = main.cases.map((c) => ({ ...c }));
  let ran = main.status === 0 || main.cases.length > 0;
  const disk = new Map();
  for (let round = 0; round < ROUNDS; round++) {
    const run = runTests(['test/integration/output.int.test.ts'], {}, 'full disk');
    if (run.cases.length === 0) ran = false;
    for (const c of run.cases) disk.set(c.name, (disk.get(c.name) ?? true) && c.ok);
  }
  for (const [name, ok] of disk) cases.push({ ok, name });
  console.log(
    'case                                                                      rounds  survived',
  );
  for (const c of cases) {
    console.log(
      `${c.name.slice(0, 72).padEnd(72)}  ${String(ROUNDS).padStart(6)}  ${c.ok ? 'yes' : 'NO'}`,
    );
  }
  const survived = cases.filter((c) => c.ok).length;
  if (!ran || survived < cases.length || cases.length === 0) failed = true;
  summary.push(
    `faults       ${cases.length * ROUNDS} tried (${cases.length} cases x ${ROUNDS} rounds), ${survived * ROUNDS} survived${survived < cases.length ? `; ${cases.length - survived} cases FAILED` : ''}`,
  );
}

if (PARTS.has('full')) {
  // Each test named here is sized by UPSCOPE_FULL_SIZE: smaller in `npm test`, as its issue
  // says here.
  const FULL = [
    ['test/integration/process-tracer.int.test.ts', '^torture: '],
    ['test/integration/scripts.int.test.ts', '^trace --json -c on a pipe'],
    ['test/integration/scripts.int.test.ts', '^no --by, --filter or hist value reaches'],
    ['test/integration/other-tracers.int.test.ts', 'a bpf count (starts and stops|comes and goes)'],
  ];
  console.log(`\nfull: the suite's tests at the sizes their issues name (UPSCOPE_FULL_SIZE=1)`);
  const cases = [];
  for (const [file, pattern] of FULL) {
    const run = runTests([file], { UPSCOPE_FULL_SIZE: '1' }, pattern, true);
    if (run.cases.length === 0)
      cases.push({ ok: false, name: `${file}: no test matched ${pattern}` });
    cases.push(...run.cases);
    if (run.status !== 0 && run.cases.every((c) => c.ok)) {
      cases.push({ ok: false, name: `${file}: exit ${run.status}` });
    }
  }
  console.log('case                                                                      passed');
  for (const c of cases) console.log(`${c.name.slice(0, 72).padEnd(72)}  ${c.ok ? 'yes' : 'NO'}`);
  const passed = cases.filter((c) => c.ok).length;
  if (passed < cases.length) failed = true;
  summary.push(
    `full size    ${passed} of ${cases.length} tests passed at their issues' sizes${passed < cases.length ? ' (FAILED)' : ''}`,
  );
}

const needsTarget = PARTS.has('flood') || PARTS.has('soak');
const work = join(tmpdir(), `upscope-reliability-${process.pid}`);
const target = join(work, 'flood');
if (needsTarget) {
  mkdirSync(work, { recursive: true });
  execFileSync('gcc', ['-O1', '-o', target, join(root, 'reliability/programs/flood.c')]);
}

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
/** Peak memory per run label, for the summary. */
const peaks = [];

if (PARTS.has('flood') && FLOOD > 0) {
  console.log(
    `\nflood: ${FLOOD} s per engine, every hit streamed (upscope trace -p); "small" runs with a 16 KiB buffer, to lose hits`,
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
  const rows = [];
  for (const { engine, label, extra } of floods) {
    const r = await tracedRun(engine, FLOOD, false, extra);
    const accounted = r.delivered + r.lost + r.missed === r.calls && r.printed === r.delivered;
    if (!accounted || r.code !== 0) failed = true;
    const peak = Math.max(0, ...r.samples.map((s) => s.hwm));
    peaks.push(`${label} ${mib(peak)}`);
    rows.push({ label, ...r, accounted });
    const fds = r.samples.length === 0 ? '-' : `${r.samples[0].fds}/${r.samples.at(-1).fds}`;
    console.log(
      `${label.padEnd(14)}  ${String(r.calls).padStart(14)}  ${String(r.delivered).padStart(10)}  ${String(r.lost).padStart(10)}  ${(accounted ? 'yes' : 'NO').padStart(9)}  ${String(r.printed).padStart(10)}  ${mib(peak).padStart(8)}  ${fds.padStart(13)}`,
    );
    if (!accounted || r.code !== 0) console.log(`  exit ${r.code}: ${r.stderr}`);
  }
  const sum = (key) => rows.reduce((n, r) => n + (Number.isNaN(r[key]) ? 0 : r[key]), 0);
  summary.push(
    `flood        ${sum('delivered').toLocaleString('en')} events delivered, ${sum('lost').toLocaleString('en')} lost (counted), ${sum('missed').toLocaleString('en')} missed, of ${sum('calls').toLocaleString('en')} calls: ${rows.filter((r) => r.accounted).length}/${rows.length} runs accounted exactly`,
  );
}

if (PARTS.has('soak') && SOAK > 0) {
  console.log(`\nsoak: ${SOAK} s per engine on a target making 20,000 calls/s`);
  console.log(
    'engine    calls (target)  accounted  peak RSS MiB 1st/2nd half  min fds 1st/2nd  growth',
  );
  let grown = 0;
  for (const engine of ENGINES) {
    const r = await tracedRun(engine, SOAK, true);
    const accounted = r.delivered + r.lost + r.missed === r.calls;
    // Growth: the highest RSS of the run's second half against its first half's (after a
    // 10 s warm-up). V8's heap grows in steps and a major collection brings it back down, so
    // a minute alone may sit at a high or a low of that saw-tooth; a leak raises the peaks.
    const t0 = r.samples[0]?.at ?? 0;
    const window = (from, to) => r.samples.filter((s) => s.at - t0 >= from && s.at - t0 < to);
    const half = (SOAK * 1000) / 2;
    const first = window(10_000, half);
    const last = window(half, SOAK * 1000 + 60_000);
    const max = (xs, key) => Math.max(0, ...xs.map((s) => s[key]));
    // Descriptors: the fewest held in each half, since a sample can catch a file open for a
    // moment (a /proc read); a leaked descriptor raises the fewest too.
    const min = (xs, key) => Math.min(...xs.map((s) => s[key]));
    const grew = max(last, 'rss') > max(first, 'rss') * 1.1 || min(last, 'fds') > min(first, 'fds');
    if (grew) grown++;
    if (!accounted || grew || r.code !== 0) failed = true;
    peaks.push(`${engine} soak ${mib(max(r.samples, 'hwm'))}`);
    console.log(
      `${engine.padEnd(8)}  ${String(r.calls).padStart(14)}  ${(accounted ? 'yes' : 'NO').padStart(9)}  ${`${mib(max(first, 'rss'))}/${mib(max(last, 'rss'))}`.padStart(26)}  ${`${min(first, 'fds')}/${min(last, 'fds')}`.padStart(16)}  ${grew ? 'YES' : 'none'}`,
    );
    if (!accounted || r.code !== 0) {
      console.log(
        `  exit ${r.code}, delivered ${r.delivered} + lost ${r.lost} + missed ${r.missed}: ${r.stderr}`,
      );
    }
    // The curve: a leak climbs minute after minute, a cache filling up levels off.
    const minutes = [];
    for (let m = 0; m * 60_000 < SOAK * 1000; m++) {
      minutes.push(mib(max(window(m * 60_000, (m + 1) * 60_000), 'rss')));
    }
    console.log(`          RSS MiB by minute: ${minutes.join(' ')}`);
  }
  summary.push(
    `soak         ${ENGINES.length} engines x ${SOAK} s: ${grown === 0 ? 'no growth in memory or descriptors' : `${grown} GREW`}`,
  );
}
if (peaks.length > 0) summary.push(`peak memory  MiB (VmHWM): ${peaks.join(', ')}`);

if (needsTarget) rmSync(work, { recursive: true, force: true });
console.log(`\nreliability report${failed ? ' (FAILED)' : ''}`);
for (const line of summary) console.log(`  ${line}`);
process.exit(failed ? 1 : 0);
