import type { Command } from '@commander-js/extra-typings';
import {
  type Aggregate,
  countHits,
  histogramOf,
  latencyOf,
  type ProbeCount,
  type ProbeHistogram,
} from '../../api/index.js';
import { isProbeError } from '../../errors/index.js';
import {
  OtlpExporter,
  PrometheusServer,
  parseListenAddress,
  parseOtlpUrl,
} from '../../exporters/index.js';
import { type MetricFamily, PrometheusExporter, type PrometheusInput } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import { readServeConfig, type ServedAggregation } from '../serve-config.js';
import { notCounted } from './aggregate.js';

interface Running {
  readonly config: ServedAggregation;
  readonly aggregate: Aggregate<ProbeCount[]> | Aggregate<ProbeHistogram[]>;
  readonly exporter: PrometheusExporter;
}

function inputOf(r: Running): PrometheusInput {
  const rows = r.aggregate.read();
  if (r.config.kind === 'count') {
    return { counts: { by: r.config.by, rows: rows as ProbeCount[] } };
  }
  if (r.config.kind === 'hist') {
    return { values: { value: r.config.value!, rows: rows as ProbeHistogram[] } };
  }
  return { latency: rows as ProbeHistogram[] };
}

async function attach(a: ServedAggregation, io: Io) {
  const common = {
    pid: a.pid,
    filter: a.filter,
    onNotice: (text: string) => io.err(`upscope: ${a.name}: ${text}\n`),
  };
  if (a.kind === 'count') return countHits(a.specs, { ...common, by: a.by });
  if (a.kind === 'hist') return histogramOf(a.specs, a.value!, common);
  return latencyOf(a.specs, common);
}

export function registerServe(program: Command, io: Io, result: CommandResult): void {
  program
    .command('serve')
    .summary('keep named aggregations attached and export them (Prometheus, OpenTelemetry)')
    .description(
      'Run the aggregations a config file names (JSON or YAML: listen, otlp, maxSeries, and ' +
        'aggregations, each with a name, kind count, hist or latency, specs, and by, value, pid ' +
        'or filter) in the kernel (bpf engine) until SIGTERM or Ctrl-C, serving their live ' +
        'totals at http://LISTEN/metrics for Prometheus (metric names upscope_NAME_..., and ' +
        "upscope's own health) and sending them to an OTLP/HTTP receiver with otlp. " +
        'http://LISTEN/ready answers 200 once every aggregation is attached (503 before): a ' +
        'Kubernetes readiness probe. A process in a container is probed by its pid as this ' +
        'host sees it (hostPID), its files read through /proc/PID/root; or name a file as ' +
        '/proc/PID/root/usr/bin/app:func. An aggregation that cannot attach is said and ' +
        'counted (upscope_attach_errors_total); the others run. On SIGTERM every probe is ' +
        'removed and the endpoints closed. See deploy/ for a container image and a DaemonSet.',
    )
    .requiredOption('--config <file>', 'the config file (.json, or YAML)')
    .option('--prometheus <addr>', "listen here instead of the config's listen (PORT or HOST:PORT)")
    .option('--otlp <url>', "send to this OTLP/HTTP receiver instead of the config's otlp")
    .action(async (options) => {
      const config = await readServeConfig(options.config);
      const address = parseListenAddress(options.prometheus ?? config.listen, '--prometheus');
      const otlpText = options.otlp ?? config.otlp;
      const otlpUrl = otlpText === undefined ? undefined : parseOtlpUrl(otlpText);
      const running: Running[] = [];
      let attachErrors = 0;
      let ready = false;
      const health = new PrometheusExporter();
      const families = (): MetricFamily[] => [
        ...running.flatMap((r) => r.exporter.families(inputOf(r))),
        ...health.families({
          health: {
            probesAttached: running.reduce((n, r) => n + r.aggregate.sites.length, 0),
            attachErrors,
            eventsLost: running.reduce((n, r) => n + r.aggregate.errors().dropped, 0n),
            // Every aggregation's, summed by reason.
            notCounted: running.reduce<Record<string, bigint>>((sum, r) => {
              for (const [reason, n] of Object.entries(notCounted(r.aggregate.errors()))) {
                sum[reason] = (sum[reason] ?? 0n) + n;
              }
              return sum;
            }, {}),
          },
        }),
      ];
      const server = await PrometheusServer.listen(address, families, {
        routes: {
          '/ready': () =>
            ready
              ? { status: 200, type: 'text/plain; charset=utf-8', body: 'ready\n' }
              : { status: 503, type: 'text/plain; charset=utf-8', body: 'attaching\n' },
        },
      });
      // The endpoint does not keep the process alive; this does, until a signal.
      const alive = setInterval(() => {}, 1 << 30);
      let otlp: OtlpExporter | undefined;
      const stop = new Promise<NodeJS.Signals>((resolve) => {
        for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.once(s, () => resolve(s));
      });
      try {
        let first: unknown;
        for (const a of config.aggregations) {
          try {
            const aggregate = await attach(a, io);
            running.push({
              config: a,
              aggregate,
              exporter: new PrometheusExporter({
                prefix: `upscope_${a.name}`,
                maxSeries: config.maxSeries,
              }),
            });
          } catch (err) {
            if (!isProbeError(err)) throw err;
            attachErrors++;
            first ??= err;
            io.err(`upscope: cannot attach "${a.name}": ${err.message}\n`);
          }
        }
        if (running.length === 0) throw first;
        otlp =
          otlpUrl === undefined
            ? undefined
            : await OtlpExporter.start(otlpUrl, {
                onNotice: (text) => io.err(`upscope: ${text}\n`),
                maxSeries: config.maxSeries,
              });
        otlp?.metrics(families);
        ready = true;
        io.err(
          `upscope: serving ${running.length} of ${config.aggregations.length} aggregations: metrics at ${server.url}, readiness at ${server.url.replace(/metrics$/, 'ready')}${otlp === undefined ? '' : `, OTLP to ${otlp.url.origin}`}. SIGTERM ends.\n`,
        );
        const signal = await stop;
        io.err(`upscope: ${signal}: removing the probes\n`);
      } finally {
        ready = false;
        for (const r of running) r.aggregate.close();
        await otlp?.close();
        await server.close();
        clearInterval(alive);
      }
      result.status = 0;
    });
}
