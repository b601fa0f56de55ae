#!/usr/bin/env node
// The inject engine's cost per hit (issue 21), side by side in one run on one target
// (bench/programs/hot.c, whose hot_function() starts with `push %rbx`, an instruction the
// kernel emulates): on the inject engine (a jump patched over the function's entry to a
// trampoline in the process), `upscope count` (each entry counted inside the process with an
// atomic add), `upscope latency` (entry and return: the call timed inside the process, a
// histogram bucket added to) and `upscope count --by tid` (each hit recorded into the ring
// upscope reads: far fewer a second than the function is called, so the ring fills and the
// hits it has no room for are counted lost); the same count and latency on the bpf engine (a
// kernel uprobe, and a uretprobe) and count on the ptrace engine (an int3 and a stop of the
// thread per hit); `uftrace record` of the same program built with -pg (every function, entry
// and return). Each is its probed run's ns per call less its bare run's (the -pg one for
// uftrace), medians of runs taken in turns. Frida is tried from the npm registry.
// Installs uftrace when missing.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensure, nsPerCall } from './bpf.mjs';

const root = new URL('..', import.meta.url).pathname;
const UPSCOPE = join(root, 'bin/upscope.js');
const N = Number(process.env.BENCH_INJECT_N ?? 10_000_000);
/** Calls whose records (with a read's data: 2 slots each) fit the inject engine's ring. */
const N_RECORDED = Number(process.env.BENCH_INJECT_RECORDED_N ?? 20_000);
/** Calls for the ptrace engine (tens of microseconds a hit). */
const N_PTRACE = Number(process.env.BENCH_INJECT_PTRACE_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_INJECT_RUNS ?? 5);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n, digits = 1) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

function run(command, args, cwd) {
  const result = spawnSync(command, args, {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    maxBuffer: 64 * 1024 * 1024,
    timeout: 600_000,
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

/**
 * `upscope COMMAND --engine ENGINE [EXTRA] -c "PROGRAM CALLS" PROGRAM:hot_function`: ns/call,
 * hits counted (count: the rows' sum; latency: the calls timed), lost.
 */
function upscope(command, engine, program, calls, extra = []) {
  const result = run(process.execPath, [
    UPSCOPE,
    command,
    '--engine',
    engine,
    ...extra,
    '-c',
    `${program} ${calls}`,
    `${program}:hot_function`,
  ]);
  const ns = nsPerCall(result.stderr);
  if (ns === undefined || result.status !== 0) {
    throw new Error(`${command} --engine ${engine} failed (${result.status}):\n${result.stderr}`);
  }
  const counted =
    command === 'latency'
      ? Number(/^hot_function: count (\d+),/m.exec(result.stdout)?.[1] ?? 0)
      : [...result.stdout.matchAll(/^(\d+)\s+hot_function\b/gm)].reduce(
          (sum, m) => sum + Number(m[1]),
          0,
        );
  const lost = Number(
    /(\d+) hits not counted/.exec(result.stderr)?.[1] ??
      /(\d+) (?:events )?lost/.exec(result.stderr)?.[1] ??
      0,
  );
  return { ns, counted, lost };
}

/** Why Frida cannot be measured here, or undefined when its npm package loads. */
function fridaMissing() {
  const probe = run(process.execPath, ['-e', "require('frida')"], root);
  if (probe.status === 0) return undefined;
  return 'frida is not installed: its npm package fetches a prebuilt binding from GitHub when installed, which this machine cannot reach (npm install frida fails)';
}

export function runInjectBench() {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-inject-'));
  try {
    const plain = build(dir, 'hot', []);
    const pg = build(dir, 'hot-pg', ['-pg']);
    const uftraceMissing = ensure('uftrace', 'uftrace', ['--version']);
    const bare = (program, calls) => {
      const result = run(program, [String(calls)], dir);
      return nsPerCall(result.stderr);
    };
    const rows = [
      { name: 'bare', calls: N, measure: () => ({ ns: bare(plain, N) }) },
      { name: 'bare -pg', calls: N, measure: () => ({ ns: bare(pg, N) }) },
      {
        name: 'inject count',
        calls: N,
        base: 'bare',
        measure: () => upscope('count', 'inject', plain, N),
      },
      {
        name: 'inject latency (e+r)',
        calls: N,
        base: 'bare',
        measure: () => upscope('latency', 'inject', plain, N),
      },
      {
        name: 'inject, each hit recorded',
        calls: N,
        base: 'bare',
        measure: () => upscope('count', 'inject', plain, N, ['--by', 'tid']),
      },
      // Hits that fit the ring (no hit lost, each one written): recorded, and recorded with
      // a read of memory (the return address at %rsp, copied with process_vm_readv(2)).
      {
        name: 'inject recorded, fits ring',
        calls: N_RECORDED,
        base: 'bare',
        measure: () => upscope('count', 'inject', plain, N_RECORDED, ['--by', 'tid']),
      },
      {
        name: 'inject + a memory read',
        calls: N_RECORDED,
        base: 'bare',
        measure: () => upscope('count', 'inject', plain, N_RECORDED, ['--by', '+0(%sp):x64']),
      },
      {
        name: 'ptrace + a memory read',
        calls: N_PTRACE,
        base: 'bare',
        measure: () => upscope('count', 'ptrace', plain, N_PTRACE, ['--by', '+0(%sp):x64']),
      },
      {
        name: 'bpf count (uprobe)',
        calls: N / 10,
        base: 'bare',
        measure: () => upscope('count', 'bpf', plain, N / 10),
      },
      {
        name: 'bpf latency (e+r)',
        calls: N / 10,
        base: 'bare',
        measure: () => upscope('latency', 'bpf', plain, N / 10),
      },
      {
        name: 'ptrace count (int3)',
        calls: N_PTRACE,
        base: 'bare',
        measure: () => upscope('count', 'ptrace', plain, N_PTRACE),
      },
      {
        name: 'uftrace record (-pg)',
        calls: N,
        base: 'bare -pg',
        why: uftraceMissing,
        measure: () => {
          const data = join(dir, 'uftrace.data');
          rmSync(data, { recursive: true, force: true });
          const result = run('uftrace', ['record', '-d', data, pg, String(N)], dir);
          return { ns: nsPerCall(result.stderr) ?? nsPerCall(result.stdout) };
        },
      },
      { name: 'frida', calls: N, why: fridaMissing(), measure: () => ({}) },
    ];
    for (const row of rows) row.samples = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of rows) {
        if (row.why !== undefined) continue;
        try {
          row.samples.push(row.measure());
        } catch (err) {
          row.why = String(err.message ?? err)
            .split('\n')
            .slice(0, 2)
            .join(' ')
            .slice(0, 160);
        }
      }
    }
    const ns = (name) => median(rows.find((r) => r.name === name).samples.map((s) => s.ns));
    console.log(
      `\nCost per hit on hot_function (bench/programs/hot.c; median of ${ROUNDS} runs in turns):`,
    );
    console.log(
      '                              calls        ns/call   extra ns/hit   counted / lost',
    );
    for (const row of rows) {
      if (row.why !== undefined) {
        console.log(`  ${row.name.padEnd(27)} not run: ${row.why}`);
        continue;
      }
      const own = median(row.samples.map((s) => s.ns));
      const extra = row.base === undefined ? undefined : own - ns(row.base);
      const last = row.samples.at(-1);
      const tally = last.counted === undefined ? '' : `${last.counted} / ${last.lost}`;
      console.log(
        `  ${row.name.padEnd(27)} ${fmt(row.calls, 0).padStart(10)}   ${fmt(own).padStart(9)}   ${extra === undefined ? ''.padStart(12) : fmt(extra).padStart(12)}   ${tally}`,
      );
    }
    console.log(
      '  (count rows: an entry of hot_function; latency rows (e+r): its entry and its return; uftrace: entry and return of main, loop and hot_function)',
    );
    const per = (name) => {
      const row = rows.find((r) => r.name === name);
      return row.why === undefined ? ns(name) - ns('bare') : undefined;
    };
    const ratio = (a, b) =>
      a === undefined || b === undefined || a <= 0 ? '-' : `${fmt(b / a, 0)}x`;
    console.log(
      `  inject against bpf: entry ${ratio(per('inject count'), per('bpf count (uprobe)'))} cheaper, entry+return ${ratio(per('inject latency (e+r)'), per('bpf latency (e+r)'))} cheaper`,
    );
    const readCost =
      per('inject + a memory read') === undefined || per('inject recorded, fits ring') === undefined
        ? undefined
        : per('inject + a memory read') - per('inject recorded, fits ring');
    console.log(
      `  a read of memory in the trampoline (process_vm_readv(2)): ${fmt(readCost)} ns more a hit; inject with it ${ratio(per('inject + a memory read'), per('ptrace + a memory read'))} cheaper than ptrace with it`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === new URL(import.meta.url).pathname) runInjectBench();
