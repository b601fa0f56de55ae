#!/usr/bin/env node
// `npm run bench`: timings of upscope next to the tools people use today, measured in the
// same run on the same files, printed as ratios. Installs the peers it needs (binutils' nm).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const root = new URL('..', import.meta.url).pathname;
const RUNS = Number(process.env.BENCH_RUNS ?? 9);

function ensurePeers() {
  try {
    execFileSync('sh', ['-c', 'command -v nm'], { stdio: 'ignore' });
  } catch {
    execFileSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq binutils'], { stdio: 'inherit' });
  }
}

/** Median wall time in ms of a command whose output goes to /dev/null. */
function time(command, args) {
  const samples = [];
  for (let i = 0; i < RUNS + 1; i++) {
    const start = process.hrtime.bigint();
    const result = spawnSync(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${result.stderr}`);
    if (i > 0) samples.push(ms); // the first run warms the page cache
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)];
}

/** Peak resident memory in MiB of one run, from GNU time when present. */
function peakMemory(command, args) {
  if (!existsSync('/usr/bin/time')) return undefined;
  const result = spawnSync('/usr/bin/time', ['-f', '%M', command, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  const kb = Number(result.stderr.toString().trim().split('\n').pop());
  return Number.isFinite(kb) ? kb / 1024 : undefined;
}

ensurePeers();
const upscope = [`${root}bin/upscope.js`, 'list'];
const cases = [
  { label: '/usr/bin/node (.symtab)', file: '/usr/bin/node', nm: ['nm', ['/usr/bin/node']] },
  {
    label: 'libc.so.6 (.dynsym)',
    file: '/usr/lib/x86_64-linux-gnu/libc.so.6',
    nm: ['nm', ['-D', '/usr/lib/x86_64-linux-gnu/libc.so.6']],
  },
];
console.log(`upscope list vs nm: median of ${RUNS} runs each, output to /dev/null, Node start-up included`);
console.log('file                          nm ms   upscope ms   ratio   upscope peak MiB');
for (const c of cases) {
  const nmMs = time(c.nm[0], c.nm[1]);
  const upMs = time(process.execPath, [...upscope, c.file]);
  const peak = peakMemory(process.execPath, [...upscope, c.file]);
  console.log(
    `${c.label.padEnd(28)}  ${nmMs.toFixed(1).padStart(6)}  ${upMs.toFixed(1).padStart(10)}  ${(upMs / nmMs).toFixed(2).padStart(5)}x  ${peak === undefined ? '-' : peak.toFixed(0).padStart(8)}`,
  );
}
const nodeStart = time(process.execPath, ['-e', '0']);
console.log(`(Node's own start-up on this machine: ${nodeStart.toFixed(1)} ms)`);
