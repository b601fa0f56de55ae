#!/usr/bin/env node
// `npm run bench`: timings of upscope next to the tools people use today, measured in the
// same run on the same files, printed as ratios. Installs the peers it needs (binutils' nm).
// Then the tracing part (bench/trace.mjs): probe cost per hit and event rate against perf and
// bpftrace. Then the ptrace engine's per-hit cost (bench/ptrace.mjs), the inject engine's
// against bpf, ptrace and uftrace -pg (bench/inject.mjs), and the bpf engine's counting,
// latency and attach times against bpftrace and bcc (bench/bpf.mjs). Then probes by source line
// on a large binary with DWARF against perf probe (bench/dwarf.mjs). Then whole
// stacks without frame pointers against bpftrace's ustack and perf's --call-graph dwarf
// (bench/stacks.mjs). Then the exporters' cost: --prometheus and --otlp against plain count and
// trace (bench/exporters.mjs). Then recording every call against uftrace and bpftrace, and
// attaching to functions of node (bench/calls.mjs). Then `leaks` against bcc's memleak,
// heaptrack and valgrind: slowdown per malloc+free pair and blocks unaccounted for at about
// 1 M pairs/s (bench/leaks.mjs).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { runBpfBench } from './bpf.mjs';
import { runCallsBench } from './calls.mjs';
import { runDwarfBench } from './dwarf.mjs';
import { runExporterBench } from './exporters.mjs';
import { runInjectBench } from './inject.mjs';
import { runLeaksBench } from './leaks.mjs';
import { runPtraceBench } from './ptrace.mjs';
import { runStackBench } from './stacks.mjs';
import { runTraceBench } from './trace.mjs';

const root = new URL('..', import.meta.url).pathname;
const RUNS = Number(process.env.BENCH_RUNS ?? 9);

function ensurePeers() {
  try {
    execFileSync('sh', ['-c', 'command -v nm'], { stdio: 'ignore' });
  } catch {
    execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq binutils'], {
      stdio: 'inherit',
    });
  }
}

/** One run's wall time in ms, output to /dev/null. */
function once(command, args) {
  const start = process.hrtime.bigint();
  const result = spawnSync(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${result.stderr}`);
  return ms;
}

const median = (samples) => [...samples].sort((a, b) => a - b)[Math.floor(samples.length / 2)];

/**
 * Median wall times of several commands, run in turns (a, b, a, b, ...) so that a slow spell
 * of the machine weighs on all of them alike; the first round warms the page cache.
 */
function timeTogether(commands) {
  const samples = commands.map(() => []);
  for (let round = 0; round <= RUNS; round++) {
    commands.forEach(([command, args], i) => {
      const ms = once(command, args);
      if (round > 0) samples[i].push(ms);
    });
  }
  return samples.map(median);
}

/** Peak resident memory in MiB of one run, from GNU time when present. */
function peakMemory(command, args) {
  if (!existsSync('/usr/bin/time')) return undefined;
  const result = spawnSync('/usr/bin/time', ['-f', '%M', command, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const kb = Number(result.stderr.toString().trim().split('\n').pop());
  return Number.isFinite(kb) ? kb / 1024 : undefined;
}

ensurePeers();
const upscope = [`${root}bin/upscope.js`, 'list'];
// `list` demangles C++ and Rust names by default: nm is asked to as well (-C), so that both
// do the same work.
const cases = [
  {
    label: '/usr/bin/node (.symtab)',
    file: '/usr/bin/node',
    nm: ['nm', ['-C', '/usr/bin/node']],
  },
  {
    label: 'libc.so.6 (.dynsym)',
    file: '/usr/lib/x86_64-linux-gnu/libc.so.6',
    nm: ['nm', ['-C', '-D', '/usr/lib/x86_64-linux-gnu/libc.so.6']],
  },
];
console.log(
  `upscope list vs nm -C (both demangle): median of ${RUNS} runs each, output to /dev/null, Node start-up included`,
);
console.log('file                       nm -C ms   upscope ms   ratio   upscope peak MiB');
for (const c of cases) {
  const [nmMs, upMs] = timeTogether([c.nm, [process.execPath, [...upscope, c.file]]]);
  const peak = peakMemory(process.execPath, [...upscope, c.file]);
  console.log(
    `${c.label.padEnd(28)}  ${nmMs.toFixed(1).padStart(6)}  ${upMs.toFixed(1).padStart(10)}  ${(upMs / nmMs).toFixed(2).padStart(5)}x  ${peak === undefined ? '-' : peak.toFixed(0).padStart(8)}`,
  );
}
const [nodeStart] = timeTogether([[process.execPath, ['-e', '0']]]);
console.log(`(Node's own start-up on this machine: ${nodeStart.toFixed(1)} ms)`);
runTraceBench();
runPtraceBench();
runInjectBench();
runBpfBench();
runDwarfBench();
runStackBench();
await runExporterBench();
await runCallsBench();
runLeaksBench();
