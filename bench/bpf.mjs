#!/usr/bin/env node
// The bpf half of `npm run bench` (issue 5), all in one run on the same targets:
//  1. the cost per hit of a counting probe: upscope count (bpf), bpftrace `@c = count()`, the
//     kernel's bare uprobe (perf stat of a perf probe: no handler at all) and the bare loop;
//  2. the same for a latency histogram: upscope latency, bpftrace's `@start[tid]` idiom, and
//     bcc's funclatency when it can be installed and run;
//  3. a return probe through the kernel's trampoline against one at each exit of the function
//     (--return-probes trampoline|sites), on the same function;
//  4. the time to attach 1,000 and 10,000 probes (and to be done with them), upscope against
//     bpftrace.
// Installs perf, bpftrace and bpfcc-tools when missing; a peer that cannot be had is reported.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const N = Number(process.env.BENCH_BPF_N ?? 2_000_000);
const ROUNDS = Number(process.env.BENCH_BPF_RUNS ?? 3);
const UPSCOPE = join(root, 'bin/upscope.js');
/** Which parts to run: count, latency, attach (all by default). */
const PARTS = new Set((process.env.BENCH_BPF_PARTS ?? 'count,latency,returns,attach').split(','));
/** Calls of the return-probe comparison (a probe on `ret` costs a single step per call). */
const RETURNS_N = Number(process.env.BENCH_RETURNS_N ?? 200_000);
/** Throws of the C++ part. */
const THROWS_N = Number(process.env.BENCH_THROWS_N ?? 50_000);

const fmt = (n, digits = 1) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export function run(command, args, { env, timeout = 1_800_000 } = {}) {
  const began = process.hrtime.bigint();
  const result = spawnSync(command, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout,
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, ...env },
  });
  return {
    status: result.status ?? String(result.signal ?? result.error),
    stdout: result.stdout?.toString() ?? '',
    stderr: result.stderr?.toString() ?? '',
    wallMs: Number(process.hrtime.bigint() - began) / 1e6,
    // Wall-clock time at the start, to compare with the target's own start time.
    startedMs: Date.now() - Number(process.hrtime.bigint() - began) / 1e6,
  };
}

/** Install a peer tool from Debian when it is missing (as root): undefined, or why not. */
export function ensure(tool, pkg, versionArgs) {
  if (run(tool, versionArgs).status === 0) return undefined;
  if (process.getuid?.() !== 0) return `${tool} missing and not root to install it`;
  run('sh', ['-c', 'apt-get update -qq']);
  const install = run('sh', [
    '-c',
    `DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${pkg} 2>&1`,
  ]);
  if (install.status !== 0 || run(tool, versionArgs).status !== 0) {
    return `apt-get install ${pkg} failed or ${tool} does not run`;
  }
  return undefined;
}

/** `calls=N ns_per_call=F` from hot.c. */
export function nsPerCall(text) {
  const m = /calls=(\d+) ns_per_call=([\d.]+)/.exec(text);
  return m ? Number(m[2]) : undefined;
}

function perHitTable(title, rows, compare) {
  for (const row of rows) row.samples = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (const row of rows) {
      if (row.why !== undefined) continue;
      const result = row.measure();
      const ns = nsPerCall(result.stderr + result.stdout);
      if (ns === undefined || (row.check !== undefined && !row.check(result))) {
        row.why = `failed (exit ${result.status}): ${(
          result.stderr
            .trim()
            .split('\n')
            .find((l) => !l.startsWith('calls=')) ?? ''
        ).slice(0, 120)}`;
      } else {
        row.samples.push(ns);
      }
    }
  }
  const bare = median(rows[0].samples);
  const cost = (row) => (row.samples.length === 0 ? undefined : median(row.samples) - bare);
  console.log(title);
  console.log(`${'tool'.padEnd(36)}${'ns/hit'.padStart(10)}${'compared'.padStart(36)}`);
  for (const row of rows.slice(1)) {
    if (row.why !== undefined) {
      console.log(`${row.label.padEnd(36)}skipped: ${row.why}`);
      continue;
    }
    console.log(
      `${row.label.padEnd(36)}${fmt(cost(row)).padStart(10)}${(compare(row, cost) ?? '').padStart(36)}`,
    );
  }
  return cost;
}

function generated(dir, count) {
  const lines = ['#include <stdio.h>', '#include <time.h>'];
  for (let i = 0; i < count; i++) {
    lines.push(
      `__attribute__((noinline)) int gen_f${i}(int x) { __asm__ volatile(""); return x + ${i}; }`,
    );
  }
  lines.push(
    'int main(void) {',
    '  struct timespec now; clock_gettime(CLOCK_REALTIME, &now);',
    '  fprintf(stderr, "started_ms=%.3f\\n", now.tv_sec * 1e3 + now.tv_nsec / 1e6);',
    '  long total = 0;',
  );
  for (let i = 0; i < count; i++) lines.push(`  total += gen_f${i}(1);`);
  lines.push('  printf("%ld\\n", total);', '  return 0;', '}');
  const source = join(dir, `many-${count}.c`);
  writeFileSync(source, `${lines.join('\n')}\n`);
  const bin = join(dir, `many-${count}`);
  const cc = run('gcc', ['-O1', '-o', bin, source]);
  if (cc.status !== 0) throw new Error(`gcc failed: ${cc.stderr}`);
  return bin;
}

/** Attach time (until the target starts), total time, and hits counted, of one run. */
function attachRun(label, result, counted) {
  const started = Number(/started_ms=([\d.]+)/.exec(result.stderr)?.[1]);
  return {
    label,
    status: result.status,
    attachMs: Number.isFinite(started) ? started - result.startedMs : undefined,
    totalMs: result.wallMs,
    counted,
  };
}

/**
 * Kernel headers for bcc, which compiles its programs against them and finds none for this
 * kernel: Debian's, merged from their -common and -amd64 halves (as the distribution's build
 * tree) under `dir`, for BCC_KERNEL_SOURCE. Installs linux-headers-amd64 when missing.
 */
export function bccKernelHeaders(dir) {
  const find = () =>
    run('sh', [
      '-c',
      'ls -d /usr/src/linux-headers-*-common /usr/src/linux-headers-*-amd64 2>/dev/null',
    ])
      .stdout.trim()
      .split('\n')
      .filter(Boolean);
  if (find().length < 2) {
    run('sh', [
      '-c',
      'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-headers-amd64 2>&1',
    ]);
  }
  const [common, amd64] = [
    find().find((d) => d.endsWith('-common')),
    find().find((d) => d.endsWith('-amd64')),
  ];
  if (common === undefined || amd64 === undefined) {
    return { why: 'no kernel headers for bcc (apt-get install linux-headers-amd64 failed)' };
  }
  const headers = join(dir, 'kernel-headers');
  run('sh', [
    '-c',
    `mkdir -p ${headers} && cp -rs ${common}/. ${headers}/ && cp -rsf ${amd64}/. ${headers}/`,
  ]);
  return headers;
}

export function runBpfBench() {
  console.log();
  if (process.getuid?.() !== 0) {
    console.log('bpf engine: skipped (needs root)');
    return;
  }
  const missing = {
    perf: ensure('perf', 'linux-perf', ['version']),
    bpftrace: ensure('bpftrace', 'bpftrace', ['--version']),
    bcc: ensure('funclatency-bpfcc', 'bpfcc-tools', ['-h']),
  };
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-bpf-'));
  let headers;
  // Only the latency part runs bcc.
  if (missing.bcc === undefined && PARTS.has('latency')) {
    const found = bccKernelHeaders(dir);
    if (typeof found === 'string') headers = found;
    else missing.bcc = found.why;
  }
  try {
    const bin = join(dir, 'hot');
    const cc = run('gcc', ['-O2', '-pthread', '-o', bin, join(root, 'bench/programs/hot.c')]);
    if (cc.status !== 0) throw new Error(`gcc failed: ${cc.stderr}`);
    let perfWhy = missing.perf;
    if (perfWhy === undefined) {
      run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
      const added = run('perf', ['probe', '-q', '-x', bin, 'hot_function']);
      if (added.status !== 0) perfWhy = `perf probe failed: ${added.stderr.trim()}`;
    }
    const counts = (text, n) => new RegExp(`\\b${n}\\b`).test(text);

    // 1. Counting.
    const countRows = !PARTS.has('count')
      ? []
      : [
          { label: 'bare loop', measure: () => run(bin, [String(N)]) },
          {
            label: 'kernel uprobe, no handler (perf stat)',
            why: perfWhy,
            measure: () =>
              run('perf', [
                'stat',
                '-x',
                ',',
                '-e',
                'probe_hot:hot_function',
                '--',
                bin,
                String(N),
              ]),
            check: (r) => counts(r.stderr, N),
          },
          {
            label: 'kernel uprobe, empty BPF program',
            measure: () =>
              run(process.execPath, [join(root, 'bench/bpf-floor.mjs'), bin, String(N)]),
          },
          {
            label: 'upscope count (bpf)',
            measure: () =>
              run(process.execPath, [UPSCOPE, 'count', `${bin}:hot_function`, '-c', `${bin} ${N}`]),
            check: (r) => counts(r.stdout, N),
          },
          {
            label: 'bpftrace @c = count()',
            why: missing.bpftrace,
            measure: () =>
              run('bpftrace', [
                '-e',
                `uprobe:${bin}:hot_function { @c = count(); }`,
                '-c',
                `${bin} ${N}`,
              ]),
            check: (r) => counts(r.stdout, N),
          },
        ];
    if (PARTS.has('count'))
      perHitTable(
        `bpf engine, counting: hot_function() called N=${N.toLocaleString('en-US')} times; per hit = ns/call probed - bare, median of ${ROUNDS} runs taken in turns`,
        countRows,
        (row, cost) => {
          const upscope = cost(countRows[3]);
          if (row === countRows[1]) return '(perf counts each hit too)';
          if (row === countRows[2]) return '(the floor of any BPF handler)';
          if (row === countRows[3]) {
            return `${fmt((upscope / cost(countRows[2]) - 1) * 100)}% over the floor`;
          }
          return `upscope is ${fmt(cost(row) / upscope, 2)}x faster`;
        },
      );

    // 2. Latency.
    const funclatency = missing.bcc ?? 'funclatency-bpfcc';
    const latencyRows = !PARTS.has('latency')
      ? []
      : [
          { label: 'bare loop', measure: () => run(bin, [String(N)]) },
          {
            label: 'upscope latency (bpf)',
            measure: () =>
              run(process.execPath, [
                UPSCOPE,
                'latency',
                '--unit',
                'ns',
                `${bin}:hot_function`,
                '-c',
                `${bin} ${N}`,
              ]),
            check: (r) => new RegExp(`count ${N},`).test(r.stdout),
          },
          {
            label: 'bpftrace @start[tid] + hist()',
            why: missing.bpftrace,
            measure: () =>
              run('bpftrace', [
                '-e',
                `uprobe:${bin}:hot_function { @start[tid] = nsecs; } uretprobe:${bin}:hot_function /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }`,
                '-c',
                `${bin} ${N}`,
              ]),
            check: (r) => /@ns:/.test(r.stdout),
          },
          {
            label: 'bcc funclatency',
            check: (r) => new RegExp(`count: ${N}`).test(r.stderr),
            why: missing.bcc,
            measure: () => {
              // funclatency traces system wide until its -d seconds end: start the target as soon
              // as it is attached, from a shell that waits for the first line it prints.
              // A background job of a shell without job control starts with SIGINT ignored,
              // and funclatency ends (printing) only on SIGINT: give it back its default first.
              const script = `python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' ${funclatency} ${bin}:hot_function > ${dir}/fl.out 2>&1 & FL=$!; for i in $(seq 600); do grep -q Tracing ${dir}/fl.out 2>/dev/null && break; sleep 0.1; done; ${bin} ${N}; kill -INT $FL; wait $FL; cat ${dir}/fl.out >&2`;
              return run('sh', ['-c', script], { env: { BCC_KERNEL_SOURCE: headers } });
            },
          },
        ];
    if (PARTS.has('latency'))
      perHitTable(
        `bpf engine, latency histogram of the same function (entry + return probe per call):`,
        latencyRows,
        (row, cost) =>
          row === latencyRows[1]
            ? ''
            : `upscope is ${fmt(cost(row) / cost(latencyRows[1]), 2)}x faster`,
      );

    // 3. Return probes: the kernel's return trampoline (the return address replaced at the
    // entry) against a probe on each exit of the function (the return address left alone, as
    // for Go programs and where an exception or pthread_cancel can unwind): the kernel
    // emulates the entry's `push`, but single-steps `ret`.
    const returnRows = !PARTS.has('returns')
      ? []
      : [
          { label: 'bare loop', measure: () => run(bin, [String(RETURNS_N)]) },
          ...['trampoline', 'sites'].map((mode) => ({
            label: `count r:, --return-probes ${mode}`,
            measure: () =>
              run(process.execPath, [
                UPSCOPE,
                'count',
                '--return-probes',
                mode,
                `r:${bin}:hot_function`,
                '-c',
                `${bin} ${RETURNS_N}`,
              ]),
            check: (r) => counts(r.stdout, RETURNS_N),
          })),
          {
            // What keeping the trampoline in C++ would add per call: a map update at each
            // entry and return, as latency's trampoline handlers do (to know the return
            // addresses to put back when a throw starts).
            label: 'latency, --return-probes trampoline',
            measure: () =>
              run(process.execPath, [
                UPSCOPE,
                'latency',
                '--return-probes',
                'trampoline',
                `${bin}:hot_function`,
                '-c',
                `${bin} ${RETURNS_N}`,
              ]),
            check: (r) => new RegExp(`count ${RETURNS_N},`).test(r.stdout),
          },
        ];
    if (PARTS.has('returns')) {
      perHitTable(
        `bpf engine, return probes on the same function, N=${RETURNS_N.toLocaleString('en-US')} calls: per call = ns/call probed - bare (the entry that opens the call's frame included for sites)`,
        returnRows,
        (row, cost) => {
          if (row !== returnRows[2]) return '';
          const ratio = cost(returnRows[2]) / cost(returnRows[1]);
          return ratio >= 1
            ? `the trampoline is ${fmt(ratio, 1)}x cheaper`
            : `sites are ${fmt(1 / ratio, 1)}x cheaper`;
        },
      );
      // A throw per call: what a hook where an unwind starts costs (the trampoline's
      // alternative in C++ puts the return addresses back there), and what return probes at
      // the exits cost when every call is left by the exception.
      const throws = join(dir, 'throws');
      const built = run('g++', ['-O2', '-o', throws, join(root, 'bench/programs/throws.cpp')]);
      if (built.status !== 0) throw new Error(`g++ failed: ${built.stderr}`);
      const throwRows = [
        { label: 'bare throw loop', measure: () => run(throws, [String(THROWS_N)]) },
        {
          label: 'count libgcc_s:_Unwind_RaiseException',
          measure: () =>
            run(process.execPath, [
              UPSCOPE,
              'count',
              'libgcc_s.so.1:_Unwind_RaiseException',
              '-c',
              `${throws} ${THROWS_N}`,
            ]),
          check: (r) => counts(r.stdout, THROWS_N),
        },
        {
          label: 'count r:middle (sites), all unwound',
          measure: () =>
            run(process.execPath, [
              UPSCOPE,
              'count',
              `r:${throws}:_Z6middlel`,
              '-c',
              `${throws} ${THROWS_N}`,
            ]),
          check: (r) => counts(r.stdout, THROWS_N),
        },
      ];
      perHitTable(
        `bpf engine, C++: each of N=${THROWS_N.toLocaleString('en-US')} calls throws through middle() to a catch in main(): per throw = ns/call probed - bare`,
        throwRows,
        () => '',
      );
    }

    // 4. Attaching many probes.
    console.log(
      'bpf engine, attaching many probes: gen_f* functions, each called once; attach = start of the tool to the start of the target',
    );
    console.log(
      `${'tool'.padEnd(36)}${'probes'.padStart(8)}${'attach ms'.padStart(12)}${'total ms'.padStart(12)}${'counted'.padStart(10)}`,
    );
    for (const count of PARTS.has('attach') ? [1000, 10000] : []) {
      const many = generated(dir, count);
      const up = run(process.execPath, [UPSCOPE, 'count', '--json', `${many}:gen_f*`, '-c', many]);
      let counted;
      try {
        counted = JSON.parse(up.stdout.trim().split('\n').at(-1)).reduce((n, r) => n + r.count, 0);
      } catch {
        counted = undefined;
      }
      const rows = [attachRun('upscope count (uprobe_multi)', up, counted)];
      if (missing.bpftrace !== undefined) {
        rows.push({ label: 'bpftrace', why: missing.bpftrace });
      } else if (count > 1000) {
        rows.push({
          label: 'bpftrace',
          why: 'not run: one perf event per probe, about 0.1 s each to detach here (see 1,000)',
        });
      } else {
        const bt = run('bpftrace', ['-e', `uprobe:${many}:gen_f* { @c = count(); }`, '-c', many], {
          env: { BPFTRACE_MAX_PROBES: '20000' },
        });
        rows.push(attachRun('bpftrace', bt, Number(/@c: (\d+)/.exec(bt.stdout)?.[1])));
      }
      for (const row of rows) {
        if (row.why !== undefined) {
          console.log(`${row.label.padEnd(36)}${String(count).padStart(8)}  skipped: ${row.why}`);
          continue;
        }
        console.log(
          `${row.label.padEnd(36)}${String(count).padStart(8)}${fmt(row.attachMs).padStart(12)}${fmt(row.totalMs).padStart(12)}${String(row.counted ?? `exit ${row.status}`).padStart(10)}`,
        );
      }
    }
    if (perfWhy === undefined) run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) runBpfBench();
