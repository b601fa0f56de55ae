#!/usr/bin/env node
// The long fuzzing run: every test/fuzz/*.fuzz.test.ts with FUZZ_RUNS inputs per parser
// (argument or environment; default 100000), then each parser's input count and time.
//   npm run fuzz               100000 inputs per parser
//   npm run fuzz -- 20000      20000 per parser
//   FUZZ_SEED=123 npm run fuzz -- 1000   replay a failure's seed (fast-check prints it)
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const runs = process.argv[2] ?? process.env.FUZZ_RUNS ?? '100000';
if (!/^[1-9]\d*$/.test(runs)) {
  console.error(`Cannot run the fuzzers: ${JSON.stringify(runs)} is not a count of inputs`);
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'upscope-fuzz-'));
const stats = join(dir, 'stats.jsonl');
const files = readdirSync(join(root, 'test/fuzz'))
  .filter((f) => f.endsWith('.fuzz.test.ts'))
  .map((f) => join('test/fuzz', f))
  .sort();
const started = Date.now();
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-timeout=0', ...files],
  {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, FUZZ_RUNS: runs, FUZZ_STATS: stats },
  },
);
let total = 0;
console.log(`\nFuzzing, ${runs} inputs per parser:`);
try {
  for (const line of readFileSync(stats, 'utf8').split('\n')) {
    if (line === '') continue;
    const s = JSON.parse(line);
    total += s.inputs;
    console.log(
      `  ${s.name.padEnd(16)} ${String(s.inputs).padStart(9)} inputs  ${s.seconds.toFixed(1).padStart(7)} s  slowest ${s.slowest.toFixed(1)} ms`,
    );
  }
} catch {
  // No parser finished.
}
console.log(
  `  ${'total'.padEnd(16)} ${String(total).padStart(9)} inputs  ${((Date.now() - started) / 1000).toFixed(1).padStart(7)} s wall`,
);
rmSync(dir, { recursive: true, force: true });
process.exit(result.status ?? 1);
