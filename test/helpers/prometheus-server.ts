import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A free TCP port on loopback (the kernel's pick). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A Prometheus server (Debian's) scraping `targets` (job -> host:port) every second. */
export interface PrometheusServer {
  readonly base: string;
  /** Instant query: the result vector. */
  query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  /** Wait (bounded) until every job has been scraped once; returns Prometheus's log if not. */
  scraped(jobs: readonly string[]): Promise<boolean>;
  log(): string;
  /** Stop it and remove its data directory; resolves when both are gone. */
  stop(): Promise<void>;
  readonly dataDir: string;
  readonly process: ChildProcess;
}

export async function startPrometheus(
  targets: Readonly<Record<string, string>>,
): Promise<PrometheusServer> {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-prometheus-'));
  const port = await freePort();
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      ...Object.entries(targets).flatMap(([job, target]) => [
        `  - job_name: ${job}`,
        `    static_configs: [{ targets: ['${target}'] }]`,
      ]),
      '',
    ].join('\n'),
  );
  const dataDir = join(dir, 'data');
  const child = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${dataDir}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  child.stderr!.on('data', (chunk) => {
    log += chunk;
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const base = `http://127.0.0.1:${port}`;
  const query: PrometheusServer['query'] = async (expr) => {
    const res = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(expr)}`);
    const body = (await res.json()) as { status: string; data: { result: never[] } };
    if (body.status !== 'success') throw new Error(`query ${expr}: ${JSON.stringify(body)}`);
    return body.data.result;
  };
  return {
    base,
    query,
    async scraped(jobs) {
      for (let i = 0; i < 120; i++) {
        try {
          const up = await query('up');
          if (jobs.every((job) => up.some((r) => r.metric['job'] === job && r.value[1] === '1'))) {
            return true;
          }
        } catch {
          // not listening yet
        }
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
      return false;
    },
    log: () => log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
      if (existsSync(dir)) throw new Error(`${dir} is left`);
    },
    dataDir,
    process: child,
  };
}
