#!/usr/bin/env node
// The ptrace half of `npm run bench` (issue 4): the cost per hit of a probe served in user
// space (`upscope trace --engine ptrace`, entry and return) on bench/programs/hot.c, next to
// gdb (a breakpoint with `silent` and `continue`), ltrace (-x on the same function, which
// also catches its return) and the kernel's own uprobe (perf stat, counted in the kernel),
// all in one run, taken in turns. Installs gdb, ltrace and perf when missing.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const N = Number(process.env.BENCH_PTRACE_N ?? 20_000);
const ROUNDS = Number(process.env.BENCH_PTRACE_RUNS ?? 3);

const fmt = (n, digits = 1) =>
  n === undefined || Number.isNaN(n)
    ? '-'
    : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function run(command, args, { stdout = 'ignore' } = {}) {
  const result = spawnSync(command, args, {
    stdio: ['ignore', stdout, 'pipe'],
    timeout: 300_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return {
    status: result.status ?? String(result.signal ?? result.error),
    stdout: result.stdout?.toString() ?? '',
    stderr: result.stderr?.toString() ?? '',
  };
}

/** The target's own `calls=N ns_per_call=F`, from its stderr. */
function nsPerCall(text) {
  const m = /calls=(\d+) ns_per_call=([\d.]+)/.exec(text);
  return m ? { calls: Number(m[1]), ns: Number(m[2]) } : undefined;
}

function ensure(tool, pkg, versionArgs) {
  if (run(tool, versionArgs).status === 0) return undefined;
  if (process.getuid?.() !== 0) return `${tool} missing and not root to install it`;
  run('sh', ['-c', 'apt-get update -qq']);
  const install = run('sh', [
    '-c',
    `DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${pkg} 2>&1`,
  ]);
  if (install.status !== 0 || run(tool, versionArgs).status !== 0) {
    return `apt-get install ${pkg} failed`;
  }
  return undefined;
}

export function runPtraceBench() {
  console.log();
  const missing = {
    gdb: ensure('gdb', 'gdb', ['--version']),
    ltrace: ensure('ltrace', 'ltrace', ['-V']),
    perf: ensure('perf', 'linux-perf', ['version']),
  };
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-ptrace-'));
  try {
    const bin = join(dir, 'hot');
    const cc = run('gcc', ['-O2', '-pthread', '-o', bin, join(root, 'bench/programs/hot.c')]);
    if (cc.status !== 0) throw new Error(`gcc failed: ${cc.stderr}`);
    const gdbScript = join(dir, 'gdb.cmds');
    writeFileSync(
      gdbScript,
      [
        'set pagination off',
        'set confirm off',
        'break hot_function',
        'commands',
        'silent',
        'continue',
        'end',
        `run ${N}`,
        'quit',
        '',
      ].join('\n'),
    );
    let perfWhy = missing.perf;
    if (perfWhy === undefined) {
      run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
      const added = run('perf', ['probe', '-q', '-x', bin, 'hot_function']);
      if (added.status !== 0) perfWhy = `perf probe failed: ${added.stderr.trim()}`;
    }
    const upscope = (spec) => () =>
      run(process.execPath, [
        join(root, 'bin/upscope.js'),
        'trace',
        '--engine',
        'ptrace',
        spec,
        '-c',
        `${bin} ${N}`,
      ]);
    const rows = [
      { label: 'bare loop', measure: () => run(bin, [String(N)]) },
      {
        label: 'kernel uprobe (perf stat)',
        why: perfWhy,
        measure: () =>
          run('perf', ['stat', '-x', ',', '-e', 'probe_hot:hot_function', '--', bin, String(N)]),
      },
      { label: 'upscope ptrace, entry', measure: upscope(`${bin}:hot_function`) },
      { label: 'upscope ptrace, return', measure: upscope(`r:${bin}:hot_function`) },
      {
        label: 'AsyncProcessTracer, entry',
        measure: () => run(process.execPath, [join(root, 'bench/async-hit.mjs'), bin, String(N)]),
      },
      {
        label: 'gdb break/silent/continue',
        why: missing.gdb,
        measure: () => run('gdb', ['-q', '-batch', '-x', gdbScript, bin]),
      },
      {
        label: 'ltrace -x (entry+return)',
        why: missing.ltrace,
        measure: () => run('ltrace', ['-x', 'hot_function', '-o', '/dev/null', bin, String(N)]),
      },
    ];
    for (const row of rows) row.samples = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const row of rows) {
        if (row.why !== undefined || row.error !== undefined) continue;
        const result = row.measure();
        const parsed = nsPerCall(result.stderr + result.stdout);
        if (parsed === undefined) row.error = `no calls= line (exit ${result.status})`;
        else row.samples.push(parsed.ns);
      }
    }
    const bare = median(rows[0].samples);
    const perHit = (row) =>
      row.samples.length === 0 ? undefined : (median(row.samples) - bare) / 1000;
    const entry = perHit(rows[2]);
    console.log(
      `ptrace engine: hot_function() called N=${N.toLocaleString('en-US')} times; per hit = ns/call ` +
        `probed - bare, median of ${ROUNDS} runs taken in turns`,
    );
    console.log(`${'tool'.padEnd(28)}${'µs/hit'.padStart(10)}${'upscope entry is'.padStart(20)}`);
    for (const row of rows.slice(1)) {
      const head = row.label.padEnd(28);
      if (row.why !== undefined || row.error !== undefined) {
        console.log(`${head}skipped: ${row.why ?? row.error}`);
        continue;
      }
      const cost = perHit(row);
      const versus =
        row === rows[2] || entry === undefined
          ? '-'
          : row === rows[1]
            ? `${fmt(entry / cost)}x its cost`
            : row === rows[3]
              ? `(${fmt(cost / entry)}x an entry)`
              : `${fmt(cost / entry)}x faster`;
      console.log(`${head}${fmt(cost).padStart(10)}${versus.padStart(20)}`);
    }
    if (perfWhy === undefined) run('perf', ['probe', '-q', '-d', 'probe_hot:*']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) runPtraceBench();
