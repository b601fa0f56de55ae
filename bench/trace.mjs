#!/usr/bin/env node
// The tracing half of `npm run bench` (issue 3): on one C target, hot_function() called N times
// in a loop, measure side by side in one run
//   a. the cost per hit of an entry probe and of a return probe against the bare loop, for
//      `upscope trace`, perf (stat: the kernel counts, no event is written; record: every event
//      written) and bpftrace (a count kept in the kernel);
//   b. the rate at which each tool streams every event of the same probe, and how many it
//      delivers and loses against the program's own count of calls.
// Installs the peers it needs (perf, bpftrace) when missing; a peer that cannot be had, or an
// upscope without `trace`, gets its rows skipped with the reason. Every kernel object a peer
// creates is removed, and uprobe_events is checked at the end.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const N = Number(process.env.BENCH_TRACE_N ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_TRACE_RUNS ?? 3);
const UPROBE_EVENTS = '/sys/kernel/tracing/uprobe_events';
/** No single traced run may take longer than this (bpftrace printf runs about 11 µs a call). */
const RUN_TIMEOUT_MS = 120_000;

const fmt = (n, digits = 0) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const median = (samples) => [...samples].sort((a, b) => a - b)[Math.floor(samples.length / 2)];
const firstLine = (text) => text.trim().split('\n')[0] ?? '';
const lastLine = (text) => text.trim().split('\n').pop() ?? '';

/** Runs a command; stdout is ignored unless `stdout` is 'pipe' or a file descriptor. */
function run(command, args, { stdout = 'ignore', timeout = RUN_TIMEOUT_MS } = {}) {
  const start = process.hrtime.bigint();
  const result = spawnSync(command, args, {
    stdio: ['ignore', stdout, 'pipe'],
    timeout,
    maxBuffer: 512 * 1024 * 1024,
  });
  const wallMs = Number(process.hrtime.bigint() - start) / 1e6;
  return {
    status: result.status ?? (result.signal ? `signal ${result.signal}` : String(result.error)),
    stdout: result.stdout?.toString() ?? '',
    stderr: result.stderr?.toString() ?? '',
    wallMs,
  };
}

const sh = (script) => run('sh', ['-c', script], { stdout: 'pipe', timeout: 600_000 });

/** The target's own `calls=N ns_per_call=F` line (it prints it on stderr). */
function parseCalls(text) {
  const match = /calls=(\d+) ns_per_call=([\d.]+)/.exec(text);
  return match ? { calls: Number(match[1]), nsPerCall: Number(match[2]) } : undefined;
}

/**
 * Installs the peers that are missing (apt-get update once), and returns for each peer either
 * { ok: true } or { ok: false, why }.
 */
function ensurePeers() {
  const peers = [
    { name: 'perf', pkg: 'linux-perf', works: ['perf', ['version']] },
    { name: 'bpftrace', pkg: 'bpftrace', works: ['bpftrace', ['--version']] },
  ];
  const works = (peer) => run(...peer.works, { stdout: 'pipe' }).status === 0;
  const state = {};
  let updated;
  for (const peer of peers) {
    if (works(peer)) {
      state[peer.name] = { ok: true };
      continue;
    }
    if (process.getuid?.() !== 0) {
      state[peer.name] = { ok: false, why: `${peer.name} missing and not root to install it` };
      continue;
    }
    if (updated === undefined) {
      console.log('Installing missing peers (apt-get update once)...');
      const update = sh('apt-get update -qq 2>&1');
      updated = update.status === 0 ? '' : `apt-get update failed: ${lastLine(update.stdout)}`;
    }
    const policy = sh(`apt-cache policy ${peer.pkg}`);
    const candidate = /Candidate:\s*(\S+)/.exec(policy.stdout)?.[1];
    if (!candidate || candidate === '(none)') {
      state[peer.name] = {
        ok: false,
        why: `package ${peer.pkg} has no install candidate${updated ? ` (${updated})` : ''}`,
      };
      continue;
    }
    const install = sh(`DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${peer.pkg} 2>&1`);
    if (install.status !== 0) {
      state[peer.name] = {
        ok: false,
        why: `apt-get install ${peer.pkg} failed: ${lastLine(install.stdout)}`,
      };
    } else if (!works(peer)) {
      state[peer.name] = { ok: false, why: `${peer.name} installed from ${peer.pkg} but fails` };
    } else {
      console.log(`Installed ${peer.pkg} ${candidate}`);
      state[peer.name] = { ok: true };
    }
  }
  return state;
}

/** Compiles bench/programs/hot.c with gcc -O2 into `dir`; the binary is named `hot`. */
function compileTarget(dir) {
  const bin = join(dir, 'hot');
  const result = run('gcc', ['-O2', '-pthread', '-o', bin, join(root, 'bench/programs/hot.c')], {
    stdout: 'pipe',
  });
  if (result.status !== 0) throw new Error(`gcc failed on bench/programs/hot.c: ${result.stderr}`);
  const dump = run('objdump', ['-d', '--no-show-raw-insn', bin], { stdout: 'pipe' }).stdout;
  const first = /<hot_function>:\n\s*[0-9a-f]+:\s*(.+)/.exec(dump)?.[1]?.trim() ?? 'unknown';
  return { bin, firstInstruction: first.replace(/\s+/g, ' ') };
}

/** The result of one measured run: ns/call, wall time, hits the tool counted, lost. */
function failed(tool, result) {
  const error = firstLine(result.stderr.replace(/^calls=.*\n/m, '')) || 'no output';
  return { error: `${tool} failed (exit ${result.status}: ${error})` };
}

function upscopeRun(bin, kind, threads = 1, engine = 'tracefs') {
  const spec = `${kind === 'return' ? 'r:' : ''}${bin}:hot_function`;
  const result = run(process.execPath, [
    join(root, 'bin/upscope.js'),
    'trace',
    '--engine',
    engine,
    spec,
    '-c',
    `${bin} ${N} ${threads}`,
  ]);
  const summary = /upscope: (\d+) events delivered, (\d+) lost, (\d+) missed/.exec(result.stderr);
  const calls = parseCalls(result.stderr);
  if (result.status !== 0 || !summary || !calls) {
    const error = firstLine(result.stderr) || 'no output';
    return { error: `skipped: upscope trace not available (exit ${result.status}: ${error})` };
  }
  return {
    ...calls,
    wallMs: result.wallMs,
    seen: Number(summary[1]),
    lost: Number(summary[2]),
    missed: Number(summary[3]),
    note: `its summary: ${fmt(Number(summary[1]))} delivered + ${fmt(Number(summary[2]))} lost ${Number(summary[1]) + Number(summary[2]) === calls.calls ? '=' : '!='} ${fmt(calls.calls)} calls; ${summary[3]} missed`,
  };
}

function perfStatRun(bin, event) {
  const result = run('perf', ['stat', '-x', ',', '-e', event, '--', bin, String(N)]);
  const calls = parseCalls(result.stderr);
  const count = new RegExp(`^(\\d+),[^,]*,${event},`, 'm').exec(result.stderr);
  if (result.status !== 0 || !calls) return failed('perf stat', result);
  return { ...calls, wallMs: result.wallMs, seen: count ? Number(count[1]) : undefined };
}

function bpftraceCountRun(bin, kind) {
  const probe = `${kind === 'return' ? 'uretprobe' : 'uprobe'}:${bin}:hot_function`;
  const result = run('bpftrace', ['-e', `${probe} { @c = count(); }`, '-c', `${bin} ${N}`], {
    stdout: 'pipe',
  });
  const calls = parseCalls(result.stderr);
  if (result.status !== 0 || !calls) return failed('bpftrace', result);
  const count = /@c: (\d+)/.exec(result.stdout);
  return { ...calls, wallMs: result.wallMs, seen: count ? Number(count[1]) : undefined };
}

/** perf record of every hit; samples counted once per timestamp (perf 6.1 doubles a few). */
function perfRecordRun(bin, dir, threads = 1) {
  const data = join(dir, 'perf.data');
  const result = run('perf', [
    'record',
    '-q',
    '-o',
    data,
    '-e',
    'probe_hot:hot_function',
    '--',
    bin,
    String(N),
    String(threads),
  ]);
  const calls = parseCalls(result.stderr);
  if (result.status !== 0 || !calls) return failed('perf record', result);
  const script = run('perf', ['script', '-i', data, '-F', 'time', '--ns'], { stdout: 'pipe' });
  const stats = run('perf', ['report', '-i', data, '--stats'], { stdout: 'pipe' });
  rmSync(data, { force: true });
  if (script.status !== 0) return failed('perf script', script);
  const stamps = script.stdout.split('\n').filter((line) => line.trim() !== '');
  const unique = new Set(stamps).size;
  const lostChunks = /lost (\d+) chunks/.exec(script.stderr);
  // perf's own count of lost samples, from the last (per-event) LOST_SAMPLES line.
  const lostSamples = [...stats.stdout.matchAll(/LOST_SAMPLES events:\s+(\d+)/g)].pop()?.[1];
  return {
    ...calls,
    wallMs: result.wallMs,
    seen: unique,
    lost: calls.calls - unique,
    note:
      `${fmt(stamps.length - unique)} samples recorded twice, counted once` +
      (lostChunks ? `; perf: lost ${lostChunks[1]} chunk(s)` : '') +
      (lostSamples ? `, ${fmt(Number(lostSamples))} LOST_SAMPLES` : ''),
  };
}

/** bpftrace printf of every hit into a file, whose lines are counted. */
function bpftracePrintfRun(bin, dir, threads = 1) {
  const out = join(dir, 'bpftrace.out');
  const script = `uprobe:${bin}:hot_function { printf("%d\\n", arg0); }`;
  const result = sh(`bpftrace -e '${script}' -c '${bin} ${N} ${threads}' > ${out} 2>${out}.err`);
  const stderr = readFileSync(`${out}.err`, 'utf8');
  const calls = parseCalls(stderr);
  if (result.status !== 0 || !calls) return failed('bpftrace', { ...result, stderr });
  const text = readFileSync(out, 'utf8');
  rmSync(out, { force: true });
  let seen = 0;
  for (const line of text.split('\n')) if (/^-?\d+$/.test(line)) seen++;
  const lostLines = [...`${text}\n${stderr}`.matchAll(/Lost (\d+) events/g)];
  const lostReported = lostLines.reduce((sum, m) => sum + Number(m[1]), 0);
  return {
    ...calls,
    wallMs: result.wallMs,
    seen,
    lost: calls.calls - seen,
    note: lostLines.length
      ? `bpftrace says "Lost ${fmt(lostReported)} events"`
      : 'no "Lost N events" message',
  };
}

/**
 * The uprobe_events lines this bench may have left: perf's group probe_hot, and any probe on
 * the bench's own target (upscope's); `others` counts other tools' and sessions' lines.
 */
function probesLeft(dir) {
  try {
    const lines = readFileSync(UPROBE_EVENTS, 'utf8').split('\n').filter(Boolean);
    const ours = lines.filter((line) => /probe_hot[/:]/.test(line) || line.includes(dir));
    return { ours, others: lines.length - ours.length };
  } catch (error) {
    return { ours: [`cannot read ${UPROBE_EVENTS}: ${error.message}`], others: 0 };
  }
}

export function runTraceBench() {
  console.log();
  const peers = ensurePeers();
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-'));
  const perfOk = peers.perf.ok;
  try {
    const { bin, firstInstruction } = compileTarget(dir);
    console.log(
      `upscope trace vs perf and bpftrace: hot_function() called N=${fmt(N)} times in a loop ` +
        `(gcc -O2; its first instruction "${firstInstruction}" is emulated by the kernel, no single-step)`,
    );
    for (const [name, peer] of Object.entries(peers)) {
      if (!peer.ok) console.log(`  ${name}: skipped: ${peer.why}`);
    }

    // perf's probes live in uprobe_events (group probe_hot); they are removed in the finally.
    let perfWhy = peers.perf.why;
    if (perfOk) {
      run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
      for (const spec of ['hot_function', 'hot_function%return']) {
        const added = run('perf', ['probe', '-q', '-x', bin, spec], { stdout: 'pipe' });
        if (added.status !== 0) perfWhy = `perf probe ${spec} failed: ${firstLine(added.stderr)}`;
      }
    }
    const perfCan = perfOk && perfWhy === undefined;
    const skip = (why) => () => ({ error: `skipped: ${why}` });

    // a. Cost per hit, runs taken in turns so that a slow spell weighs on all alike.
    const costRows = [
      { label: 'bare loop', kind: '-', measure: () => run(bin, [String(N)]) },
      {
        label: 'perf stat (kernel counts)',
        kind: 'entry',
        measure: perfCan ? () => perfStatRun(bin, 'probe_hot:hot_function') : skip(perfWhy),
      },
      {
        label: 'perf stat (kernel counts)',
        kind: 'return',
        measure: perfCan ? () => perfStatRun(bin, 'probe_hot:hot_function__return') : skip(perfWhy),
      },
      {
        label: 'bpftrace count()',
        kind: 'entry',
        measure: peers.bpftrace.ok
          ? () => bpftraceCountRun(bin, 'entry')
          : skip(peers.bpftrace.why),
      },
      {
        label: 'bpftrace count()',
        kind: 'return',
        measure: peers.bpftrace.ok
          ? () => bpftraceCountRun(bin, 'return')
          : skip(peers.bpftrace.why),
      },
      ...['tracefs', 'bpf'].flatMap((engine) =>
        ['entry', 'return'].map((kind) => ({
          label: `upscope trace --engine ${engine}`,
          kind,
          measure: () => upscopeRun(bin, kind, 1, engine),
        })),
      ),
    ];
    for (const row of costRows) row.samples = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of costRows) {
        if (row.error) continue; // a tool that failed once is not run again
        let sample = row.measure();
        if (row.kind === '-') sample = parseCalls(sample.stderr) ?? { error: 'no calls= line' };
        if (sample.error) row.error = sample.error;
        else row.samples.push(sample);
      }
    }
    const nsOf = (row) => (row.error ? undefined : median(row.samples.map((s) => s.nsPerCall)));
    const bareNs = nsOf(costRows[0]);
    const kernelOnly = {
      entry: nsOf(costRows[1]) - bareNs,
      return: nsOf(costRows[2]) - bareNs,
    };
    console.log();
    console.log(
      `a. Cost per hit: median of ${ROUNDS} runs taken in turns; per hit = ns/call probed - ns/call bare`,
    );
    console.log(
      `${'tool'.padEnd(32)}${'probe'.padEnd(8)}${'ns/call'.padStart(10)}${'per hit ns'.padStart(12)}` +
        `${'events seen'.padStart(13)}${'lost'.padStart(11)}${'vs kernel-only'.padStart(16)}`,
    );
    for (const row of costRows) {
      const head = `${row.label.padEnd(32)}${row.kind.padEnd(8)}`;
      if (row.error) {
        console.log(`${head}${row.error}`);
        continue;
      }
      // The run with the median ns/call speaks for the row.
      const mid = [...row.samples].sort((a, b) => a.nsPerCall - b.nsPerCall)[
        Math.floor(row.samples.length / 2)
      ];
      const ns = mid.nsPerCall;
      const perHit = row.kind === '-' ? undefined : ns - bareNs;
      const ratio =
        perHit === undefined || !(kernelOnly[row.kind] > 0)
          ? '-'
          : `${(perHit / kernelOnly[row.kind]).toFixed(2)}x`;
      console.log(
        `${head}${fmt(ns, 1).padStart(10)}${fmt(perHit, 1).padStart(12)}` +
          `${fmt(mid.seen).padStart(13)}${fmt(mid.lost).padStart(11)}${ratio.padStart(16)}`,
      );
    }
    console.log('(vs kernel-only: per-hit cost over that of perf stat on the same probe)');
    if (
      costRows.some((row) => row.kind === 'return' && row.label.startsWith('upscope') && !row.error)
    ) {
      console.log(
        "(upscope's return probe comes with a hidden entry probe, to time each call: two probes " +
          'hit per call; events seen counts the returns, lost counts both)',
      );
    }

    // b. Event rate, every event streamed, one run each, from one thread and from as many
    // threads as there are CPUs (the tool then competes with the program for CPU time).
    const cpus = Math.min(availableParallelism(), 64);
    const rateRows = [];
    for (const threads of cpus > 1 ? [1, cpus] : [1]) {
      rateRows.push(
        ...['tracefs', 'bpf'].map((engine) => ({
          label: `upscope trace --engine ${engine}`,
          threads,
          measure: () => upscopeRun(bin, 'entry', threads, engine),
        })),
        {
          label: 'perf record',
          threads,
          measure: perfCan ? () => perfRecordRun(bin, dir, threads) : skip(perfWhy),
        },
        {
          label: 'bpftrace printf',
          threads,
          measure: peers.bpftrace.ok
            ? () => bpftracePrintfRun(bin, dir, threads)
            : skip(peers.bpftrace.why),
        },
      );
    }
    console.log();
    console.log(
      'b. Event rate, every hit of the entry probe streamed (one run each); events/s = delivered / ' +
        "the program's loop time; wall includes the tool's start and end",
    );
    console.log(
      `${'tool'.padEnd(32)}${'threads'.padStart(7)}${'delivered'.padStart(12)}${'lost'.padStart(11)}` +
        `${'of N'.padStart(8)}${'events/s'.padStart(12)}${'vs perf'.padStart(9)}${'ns/call'.padStart(9)}` +
        `${'loop ms'.padStart(9)}${'wall ms'.padStart(9)}`,
    );
    const perfRate = new Map();
    const results = rateRows.map((row) => ({ row, r: row.measure() }));
    for (const { row, r } of results) {
      if (!r.error && row.label === 'perf record')
        perfRate.set(row.threads, r.seen / ((r.nsPerCall * r.calls) / 1e9));
    }
    for (const { row, r } of results) {
      const head = `${row.label.padEnd(32)}${String(row.threads).padStart(7)}`;
      if (r.error) {
        console.log(`${head}  ${r.error}`);
        continue;
      }
      const loopMs = (r.nsPerCall * r.calls) / 1e6;
      const rate = r.seen / (loopMs / 1e3);
      const versus = perfRate.has(row.threads)
        ? `${(rate / perfRate.get(row.threads)).toFixed(2)}x`
        : '-';
      console.log(
        `${head}${fmt(r.seen).padStart(12)}${fmt(r.lost).padStart(11)}` +
          `${`${((100 * r.seen) / r.calls).toFixed(1)}%`.padStart(8)}` +
          `${fmt(rate).padStart(12)}${versus.padStart(9)}${fmt(r.nsPerCall, 1).padStart(9)}` +
          `${fmt(loopMs).padStart(9)}${fmt(r.wallMs).padStart(9)}`,
      );
      if (r.note) console.log(`${''.padEnd(33)}(${r.note})`);
    }
  } finally {
    if (perfOk) run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
    rmSync(dir, { recursive: true, force: true });
  }
  const left = probesLeft(dir);
  const others = left.others ? ` (${left.others} other line(s) from other sessions)` : '';
  console.log();
  console.log(
    left.ours.length === 0
      ? `${UPROBE_EVENTS}: no probe_hot entry and no probe on the bench target left${others}`
      : `${UPROBE_EVENTS}: LEFT BEHIND:\n  ${left.ours.join('\n  ')}`,
  );
  if (left.ours.length) process.exitCode = 1;
}

if (import.meta.url === `file://${process.argv[1]}`) runTraceBench();
