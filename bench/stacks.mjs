#!/usr/bin/env node
// The stacks part of `npm run bench` (issue 24), all in one run on the same target: the cost
// per hit of a probe that takes the whole user stack, at several depths, of
//  - upscope count --by ustack (bpf): the stack unwound in the kernel from the CFI's tables,
//    on a build without frame pointers and on one with them;
//  - bpftrace `@[ustack] = count()` (frame pointers only: on the build that has them);
//  - perf record --call-graph dwarf (8 KiB of stack copied per sample, unwound afterwards);
//  - the same copy done by upscope (bench/stack-copy.mjs: a BPF ring buffer of 8 KiB copies,
//    each unwound in JavaScript as it is read), the design not chosen;
// next to a plain count (no stack) and the bare loop; and what each lost at that rate.
// Installs perf and bpftrace when missing; a peer that cannot be had is reported.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensure, nsPerCall } from './bpf.mjs';

const root = new URL('..', import.meta.url).pathname;
const N = Number(process.env.BENCH_STACK_N ?? 200_000);
const ROUNDS = Number(process.env.BENCH_STACK_RUNS ?? 3);
const DEPTHS = (process.env.BENCH_STACK_DEPTHS ?? '4,16,48').split(',').map(Number);
const UPSCOPE = join(root, 'bin/upscope.js');

const fmt = (n, digits = 1) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function run(command, args, { timeout = 1_800_000 } = {}) {
  const result = spawnSync(command, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout,
    maxBuffer: 256 * 1024 * 1024,
  });
  return {
    status: result.status ?? String(result.signal ?? result.error),
    stdout: result.stdout?.toString() ?? '',
    stderr: result.stderr?.toString() ?? '',
  };
}

/** Hits counted by upscope count --json (every stack's count added up). */
function upscopeCounted(result) {
  try {
    const rows = JSON.parse(result.stdout.trim().split('\n').at(-1));
    return { counted: rows.reduce((n, row) => n + row.count, 0), rows };
  } catch {
    return { counted: undefined, rows: [] };
  }
}

export function runStackBench() {
  console.log();
  if (process.getuid?.() !== 0) {
    console.log('stacks: skipped (needs root)');
    return;
  }
  const missing = {
    perf: ensure('perf', 'linux-perf', ['version']),
    bpftrace: ensure('bpftrace', 'bpftrace', ['--version']),
  };
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-stacks-'));
  try {
    const source = join(root, 'bench/programs/deep.c');
    const bins = {};
    for (const [name, flags] of [
      ['nofp', ['-O2', '-fomit-frame-pointer']],
      ['fp', ['-O2', '-fno-omit-frame-pointer']],
    ]) {
      bins[name] = join(dir, `deep-${name}`);
      const cc = run('gcc', [...flags, '-o', bins[name], source]);
      if (cc.status !== 0) throw new Error(`gcc failed: ${cc.stderr}`);
    }
    let perfWhy = missing.perf;
    if (perfWhy === undefined) {
      run('perf', ['probe', '-q', '-d', 'probe_deep*:*']);
      const added = run('perf', ['probe', '-q', '-x', bins.nofp, 'hot_leaf']);
      if (added.status !== 0) perfWhy = `perf probe failed: ${added.stderr.trim()}`;
    }
    const perfEvent =
      perfWhy === undefined
        ? (/probe_deep[\w-]*:hot_leaf/.exec(run('perf', ['probe', '-l']).stdout)?.[0] ??
          'probe_deep_nofp:hot_leaf')
        : undefined;

    const upscopeStack = (bin) => (depth) => {
      const result = run(process.execPath, [
        UPSCOPE,
        'count',
        '--json',
        '--by',
        'ustack',
        `${bin}:hot_leaf`,
        '-c',
        `${bin} ${N} ${depth}`,
      ]);
      const { counted, rows } = upscopeCounted(result);
      const frames = rows[0]?.frames.length;
      const cut = rows.some((row) => row.frames.at(-1)?.startsWith('[stack cut'));
      return {
        result,
        lost: counted === undefined ? undefined : N - counted,
        note: frames === undefined ? '' : `${frames} frames${cut ? ', cut' : ''}`,
      };
    };
    const rows = [
      { label: 'bare loop (no probe)', measure: (d) => ({ result: run(bins.nofp, [N, d]) }) },
      {
        label: 'upscope count (no stack)',
        measure: (d) => {
          const result = run(process.execPath, [
            UPSCOPE,
            'count',
            '--json',
            `${bins.nofp}:hot_leaf`,
            '-c',
            `${bins.nofp} ${N} ${d}`,
          ]);
          const { counted } = upscopeCounted(result);
          return { result, lost: counted === undefined ? undefined : N - counted };
        },
      },
      { label: 'upscope --by ustack, no frame ptrs', measure: upscopeStack(bins.nofp) },
      { label: 'upscope --by ustack, frame ptrs', measure: upscopeStack(bins.fp) },
      {
        label: 'bpftrace @[ustack], frame ptrs',
        why: missing.bpftrace,
        measure: (d) => {
          const result = run('bpftrace', [
            '-e',
            `uprobe:${bins.fp}:hot_leaf { @[ustack] = count(); }`,
            '-c',
            `${bins.fp} ${N} ${d}`,
          ]);
          const counted = [...result.stdout.matchAll(/\]: (\d+)$/gm)].reduce(
            (n, m) => n + Number(m[1]),
            0,
          );
          return { result, lost: N - counted };
        },
      },
      {
        label: 'perf record --call-graph dwarf',
        why: perfWhy,
        measure: (d) => {
          const data = join(dir, 'perf.data');
          const result = run('perf', [
            'record',
            '-q',
            '-o',
            data,
            '-e',
            perfEvent,
            '--call-graph',
            'dwarf',
            '--',
            bins.nofp,
            String(N),
            String(d),
          ]);
          // Samples written (perf 6.1 records a few twice here: count them, then cap at N).
          const report = run('perf', ['report', '-i', data, '--stats']);
          const samples = Number(/SAMPLE events:\s+(\d+)/.exec(report.stdout)?.[1] ?? Number.NaN);
          rmSync(data, { force: true });
          return { result, lost: Number.isNaN(samples) ? undefined : Math.max(0, N - samples) };
        },
      },
      {
        label: 'upscope-style copy: 8 KiB + JS unwind',
        measure: (d) => {
          const result = run(process.execPath, [
            join(root, 'bench/stack-copy.mjs'),
            bins.nofp,
            String(N),
            String(d),
            '8192',
          ]);
          const m = /copied=(\d+) lost=(\d+) short=(\d+) unwound=(\d+) us_per_stack=([\d.]+)/.exec(
            result.stderr,
          );
          return {
            result,
            lost: m === null ? undefined : N - Number(m[4]),
            note: m === null ? '' : `JS unwind ${m[5]} us/stack`,
          };
        },
      },
    ];
    console.log(
      `stacks: hot_leaf() called N=${N.toLocaleString('en-US')} times at the bottom of a recursion DEPTH deep; per hit = ns/call probed - bare, median of ${ROUNDS} runs taken in turns; lost = hits not counted (or samples not written)`,
    );
    console.log(
      `${'depth'.padStart(5)}  ${'tool'.padEnd(38)}${'ns/hit'.padStart(10)}${'hits/s'.padStart(12)}${'lost'.padStart(10)}${'vs FP (bpftrace)'.padStart(18)}  note`,
    );
    for (const depth of DEPTHS) {
      for (const row of rows) {
        row.samples = [];
        row.lost = [];
        row.note = '';
        row.failure = undefined;
      }
      for (let round = 0; round < ROUNDS; round++) {
        for (const row of rows) {
          if (row.why !== undefined || row.failure !== undefined) continue;
          const { result, lost, note } = row.measure(depth);
          const ns = nsPerCall(result.stderr + result.stdout);
          if (ns === undefined) {
            row.failure = `failed (exit ${result.status}): ${result.stderr.trim().split('\n').at(-1)?.slice(0, 100)}`;
            continue;
          }
          row.samples.push(ns);
          if (lost !== undefined) row.lost.push(lost);
          if (note) row.note = note;
        }
      }
      const bare = median(rows[0].samples);
      const cost = (row) => (row.samples.length === 0 ? undefined : median(row.samples) - bare);
      const fp = cost(rows[4]);
      for (const row of rows.slice(1)) {
        const head = `${String(depth).padStart(5)}  ${row.label.padEnd(38)}`;
        if (row.why !== undefined || row.failure !== undefined) {
          console.log(`${head}skipped: ${row.why ?? row.failure}`);
          continue;
        }
        const ns = cost(row);
        const lost = row.lost.length === 0 ? '-' : String(Math.max(...row.lost));
        const ratio = fp === undefined || row === rows[4] ? '' : `${fmt(ns / fp, 2)}x`;
        console.log(
          `${head}${fmt(ns).padStart(10)}${fmt(1e9 / median(row.samples), 0).padStart(12)}${lost.padStart(10)}${ratio.padStart(18)}  ${row.note}`,
        );
      }
    }
    if (perfWhy === undefined) run('perf', ['probe', '-q', '-d', 'probe_deep*:*']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) runStackBench();
