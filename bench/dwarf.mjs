#!/usr/bin/env node
// The debug-info part of `npm run bench` (issue 6): how long resolving a probe by source line
// takes on a LARGE binary with DWARF, next to perf probe on the same file, both started fresh
// (start-up included) and taken in turns. The binary is generated once into the temp dir: a C
// program of FILES files x FUNCS functions (several hundred thousand lines), built -g -O1 (GCC
// emits DWARF 5). Rows:
//   source line -> address:  upscope resolve BIN:FILE.c:N        vs perf probe -x BIN -D FILE.c:N
//   source lines of a range: upscope list BIN --lines FILE.c:A-B vs perf probe -x BIN -L FILE.c:A-B
//   one parameter:           upscope resolve 'BIN:FUNC y'         vs perf probe -x BIN -D 'FUNC y'
//   a function's variables:  upscope list BIN --vars FUNC         vs perf probe -x BIN -V FUNC
// Installs perf when missing.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const FILES = Number(process.env.BENCH_DWARF_FILES ?? 120);
const FUNCS = Number(process.env.BENCH_DWARF_FUNCS ?? 40);
const RUNS = Number(process.env.BENCH_RUNS ?? 9);
const GENERATOR_VERSION = 1;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function ensurePerf() {
  if (spawnSync('sh', ['-c', 'command -v perf'], { stdio: 'ignore' }).status === 0) return true;
  const installed = spawnSync(
    'sh',
    ['-c', 'apt-get update -qq && apt-get install -y -qq linux-perf >/dev/null'],
    { stdio: 'inherit' },
  );
  return installed.status === 0;
}

/** The body of function k of file f: a loop, branches and arithmetic, ~55 lines. */
function functionText(f, k) {
  const name = `fn_${f}_${k}`;
  const lines = [`long ${name}(long x, long y) {`, '  long acc = x;'];
  for (let i = 0; i < 12; i++) {
    lines.push(`  if ((acc + ${i}) % ${i + 3} == 0) {`);
    lines.push(`    acc += y * ${i + 1};`);
    lines.push('  } else {');
    lines.push(`    acc ^= (x << ${i % 7}) + ${k};`);
  }
  // Close the else blocks the loop above nested, one statement before each brace.
  for (let i = 0; i < 12; i++) lines.push(`    acc += ${i};`, '  }');
  lines.push(`  for (long i = 0; i < (y & 15); i++) acc += g_sink_${f} * i;`);
  lines.push(`  g_sink_${f} = acc;`);
  lines.push('  return acc;');
  lines.push('}');
  return lines.join('\n');
}

/** Generates and builds the program once; returns the binary's path and one source line. */
function bigBinary() {
  const dir = join(tmpdir(), `upscope-bench-dwarf-v${GENERATOR_VERSION}-${FILES}x${FUNCS}`);
  const bin = join(dir, 'big');
  const objects = [];
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true });
    let total = 0;
    for (let f = 0; f < FILES; f++) {
      const parts = [`volatile long g_sink_${f};`];
      for (let k = 0; k < FUNCS; k++) parts.push(functionText(f, k));
      const text = `${parts.join('\n\n')}\n`;
      total += text.split('\n').length;
      writeFileSync(join(dir, `unit${f}.c`), text);
      objects.push(`unit${f}.o`);
    }
    const calls = [];
    for (let f = 0; f < FILES; f++) {
      for (let k = 0; k < FUNCS; k++) calls.push(`  s += fn_${f}_${k}(argc, s);`);
    }
    const decls = [];
    for (let f = 0; f < FILES; f++) {
      for (let k = 0; k < FUNCS; k++) decls.push(`long fn_${f}_${k}(long, long);`);
    }
    writeFileSync(
      join(dir, 'main.c'),
      `${decls.join('\n')}\nint main(int argc, char **argv) {\n  long s = 0;\n  (void)argv;\n${calls.join('\n')}\n  return (int)(s & 1);\n}\n`,
    );
    console.log(
      `(building the bench binary once: ${FILES} files, ${FILES * FUNCS} functions, ${total} lines, -g -O1, in ${dir})`,
    );
    const jobs = Math.max(1, cpus().length);
    writeFileSync(
      join(dir, 'Makefile'),
      `OBJS = main.o ${objects.join(' ')}\nbig.tmp: $(OBJS)\n\tgcc -o $@ $(OBJS)\n%.o: %.c\n\tgcc -g -O1 -c -o $@ $<\n`,
    );
    execFileSync('make', ['-s', `-j${jobs}`, 'big.tmp'], { cwd: dir, stdio: 'inherit' });
    execFileSync('mv', [join(dir, 'big.tmp'), bin]);
  }
  // A line in the middle of the middle file: the 3rd line of one of its functions (code on both -O levels).
  const file = `unit${FILES >> 1}.c`;
  const text = readFileSync(join(dir, file), 'utf8').split('\n');
  const start = text.findIndex((l) => l.startsWith(`long fn_${FILES >> 1}_${FUNCS >> 1}(`));
  return {
    bin,
    file,
    line: start + 4,
    range: [start + 1, start + 30],
    fn: `fn_${FILES >> 1}_${FUNCS >> 1}`,
  };
}

function once(command, args) {
  const start = process.hrtime.bigint();
  const result = spawnSync(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  if (result.status !== 0) {
    throw new Error(
      `${command} ${args.join(' ')} failed: ${result.stderr.toString().slice(0, 400)}`,
    );
  }
  return ms;
}

/** Median wall times, the commands run in turns; the first round warms the page cache. */
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

/**
 * The median time of one library call in a fresh process, after the modules are loaded: what
 * resolving costs without Node's start-up (nothing is cached between runs but the page cache).
 */
function libraryCall(expression) {
  const script = `const api = await import(${JSON.stringify(`${root}dist/api/index.js`)});
const start = process.hrtime.bigint();
${expression};
console.log(Number(process.hrtime.bigint() - start) / 1e6);`;
  const samples = [];
  for (let i = 0; i < RUNS; i++) {
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script]);
    samples.push(Number(out.toString().trim()));
  }
  return median(samples);
}

export function runDwarfBench() {
  const { bin, file, line, range, fn } = bigBinary();
  const size = statSync(bin).size / (1024 * 1024);
  const hasPerf = ensurePerf();
  const upscope = [process.execPath, `${root}bin/upscope.js`];
  const rows = [
    {
      label: 'source line -> address',
      library: `await api.resolveProbes([${JSON.stringify(`${bin}:${file}:${line}`)}])`,
      ours: [...upscope, 'resolve', `${bin}:${file}:${line}`],
      theirs: ['perf', ['probe', '-x', bin, '-D', `${file}:${line}`]],
    },
    {
      label: 'source lines of a range',
      library: `api.listSourceLines(${JSON.stringify(bin)}, ${JSON.stringify(`${file}:${range[0]}-${range[1]}`)})`,
      ours: [...upscope, 'list', bin, '--lines', `${file}:${range[0]}-${range[1]}`],
      theirs: ['perf', ['probe', '-x', bin, '-L', `${file}:${range[0]}-${range[1]}`]],
    },
    {
      label: 'one parameter, typed',
      library: `await api.resolveProbes([${JSON.stringify(`${bin}:${fn} y`)}])`,
      ours: [...upscope, 'resolve', `${bin}:${fn} y`],
      theirs: ['perf', ['probe', '-x', bin, '-D', `${fn} y`]],
    },
    {
      label: "a function's variables",
      library: `await api.listVariables(${JSON.stringify(bin)}, ${JSON.stringify(fn)})`,
      ours: [...upscope, 'list', bin, '--vars', fn],
      theirs: ['perf', ['probe', '-x', bin, '-V', fn]],
    },
  ];
  console.log(
    `\nupscope vs perf probe on a large binary with DWARF (${size.toFixed(0)} MiB, ${FILES * FUNCS} functions): median of ${RUNS} runs, start-up included`,
  );
  console.log(
    'what                           perf ms   upscope ms   ratio   library call ms (fresh process, start-up excluded)',
  );
  for (const row of rows) {
    const [command, ...args] = row.ours;
    const call = libraryCall(row.library);
    if (!hasPerf) {
      const [ours] = timeTogether([[command, args]]);
      console.log(
        `${row.label.padEnd(29)}  ${'-'.padStart(8)}  ${ours.toFixed(1).padStart(10)}      -  ${call.toFixed(1).padStart(8)}`,
      );
      continue;
    }
    const [theirs, ours] = timeTogether([row.theirs, [command, args]]);
    console.log(
      `${row.label.padEnd(29)}  ${theirs.toFixed(1).padStart(8)}  ${ours.toFixed(1).padStart(10)}  ${(ours / theirs).toFixed(2).padStart(5)}x  ${call.toFixed(1).padStart(8)}`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) runDwarfBench();
