// The cost of the exporters: the benchmark target's own loop rate (events per second, from
// its `ns_per_call`) under plain `count` against `count --prometheus` (scraped every second
// meanwhile) and `count --otlp` (to a receiver here that answers 200), and plain `trace`
// (stdout to /dev/null) against `trace --otlp` (a span per call), and `latency` against
// `latency --otlp` (metrics, and a span per call from the kernel), in turns in the same run.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const BIN = join(root, 'bin/upscope.js');

function nsPerCall(text) {
  const match = /calls=(\d+) ns_per_call=([\d.]+)/.exec(text);
  if (match === null) throw new Error(`no ns_per_call in:\n${text}`);
  return Number(match[2]);
}

/** One run of upscope with -c; its target's ns per call. `during` runs while it does. */
async function once(args, during) {
  const child = spawn(process.execPath, [BIN, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, OTEL_METRIC_EXPORT_INTERVAL: '1000', OTEL_BSP_SCHEDULE_DELAY: '1000' },
  });
  let err = '';
  child.stderr.on('data', (c) => {
    err += c;
  });
  const stop = during?.();
  const code = await new Promise((resolve) => child.once('close', resolve));
  stop?.();
  if (code !== 0) throw new Error(`upscope ${args.join(' ')} failed (${code}):\n${err}`);
  return nsPerCall(err);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function runExporterBench(runs = 3) {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bench-exp-'));
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const otlp = `http://127.0.0.1:${receiver.address().port}`;
  try {
    const hot = join(dir, 'hot');
    const built = spawnSync('gcc', [
      '-O2',
      '-pthread',
      '-o',
      hot,
      join(root, 'bench/programs/hot.c'),
    ]);
    if (built.status !== 0) throw new Error(`gcc failed: ${built.stderr}`);
    const calls = 500_000;
    const cmd = `${hot} ${calls}`;
    const probe = `${hot}:hot_function`;
    let port = 0;
    const scraping = () => {
      const timer = setInterval(() => {
        if (port !== 0) fetch(`http://127.0.0.1:${port}/metrics`).catch(() => {});
      }, 1000);
      return () => clearInterval(timer);
    };
    const cases = {
      count: () => once(['count', '-c', cmd, probe]),
      'count --prometheus (scraped every 1 s)': async () => {
        port = 20000 + Math.floor(Math.random() * 20000);
        return once(['count', '--prometheus', String(port), '-c', cmd, probe], scraping);
      },
      'count --otlp (metrics every 1 s)': () => once(['count', '--otlp', otlp, '-c', cmd, probe]),
      latency: () => once(['latency', '-c', cmd, probe]),
      'latency --otlp (metrics, and a span per call)': () =>
        once(['latency', '--otlp', otlp, '-c', cmd, probe]),
      trace: () => once(['trace', '-c', `${hot} ${calls / 10}`, probe, `r:${probe}`]),
      'trace --otlp (a span per call)': () =>
        once(['trace', '--otlp', otlp, '-c', `${hot} ${calls / 10}`, probe, `r:${probe}`]),
    };
    const samples = Object.fromEntries(Object.keys(cases).map((k) => [k, []]));
    for (let i = 0; i < runs; i++) {
      for (const [name, run] of Object.entries(cases)) samples[name].push(await run());
    }
    const rate = (name) => 1e9 / median(samples[name]);
    console.log(
      `\nExporters (hot_function, median of ${runs} runs in turns; events/s of the target):`,
    );
    for (const name of Object.keys(cases)) {
      const base = name.split(' ')[0];
      const cost = ((rate(base) - rate(name)) / rate(base)) * 100;
      console.log(
        `  ${name.padEnd(46)} ${Math.round(rate(name)).toLocaleString('en-US').padStart(11)}/s` +
          (name === base
            ? ''
            : `  ${cost >= 0 ? '-' : '+'}${Math.abs(cost).toFixed(1)}% against ${base}`),
      );
    }
  } finally {
    receiver.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === new URL(import.meta.url).pathname)
  await runExporterBench(Number(process.env.BENCH_RUNS ?? 3));
