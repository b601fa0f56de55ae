import type { Metric } from 'prom-client';
import {
  type MetricFamily,
  PrometheusExporter,
  type PrometheusInput,
  type PrometheusOptions,
} from '../output/index.js';
import { formatAddress, type ListenAddress } from './address.js';
import { HttpEndpoint, type Route } from './http-endpoint.js';

/**
 * A metric family as prom-client's registry reads a metric: get() gives its samples. The
 * values come from an in-kernel aggregation already counted (histogram buckets included),
 * which prom-client's own Counter and Histogram cannot be set to, so each scrape's families
 * are registered as they are; prom-client writes and escapes them.
 */
function asMetric(family: MetricFamily): Metric {
  const values = family.samples.map((s) => ({
    metricName: s.name,
    labels: Object.fromEntries(s.labels),
    value: Number(s.value),
  }));
  const metric = {
    name: family.name,
    help: family.help,
    type: family.type,
    aggregator: 'sum',
    get: async () => ({ ...metric, values }),
    reset: () => {},
  };
  return metric as unknown as Metric;
}

/** One scrape's metrics as prom-client writes them (text exposition format 0.0.4). */
export async function scrapeText(
  exporter: PrometheusExporter,
  input: PrometheusInput | readonly MetricFamily[],
): Promise<{ type: string; body: string }> {
  const { Registry } = await import('prom-client');
  const registry = new Registry();
  const families = Array.isArray(input) ? input : exporter.families(input as PrometheusInput);
  for (const family of families) registry.registerMetric(asMetric(family));
  return { type: registry.contentType, body: await registry.metrics() };
}

export interface PrometheusServerOptions extends PrometheusOptions {
  /** More paths to serve (serve's `/ready`). */
  readonly routes?: Readonly<Record<string, Route>> | undefined;
}

/**
 * `--prometheus ADDR`: `/metrics` for Prometheus to scrape, read from `read()` at each
 * scrape (the live totals of the aggregation). Counters stay monotonic and series, once
 * admitted under the cap, stay (one PrometheusExporter for the whole run).
 */
export class PrometheusServer {
  readonly #endpoint: HttpEndpoint;

  private constructor(endpoint: HttpEndpoint) {
    this.#endpoint = endpoint;
  }

  static async listen(
    address: ListenAddress,
    read: () => PrometheusInput | readonly MetricFamily[],
    options: PrometheusServerOptions = {},
  ): Promise<PrometheusServer> {
    const exporter = new PrometheusExporter(options);
    const endpoint = await HttpEndpoint.listen(address, '--prometheus', {
      ...options.routes,
      '/metrics': async () => ({ status: 200, ...(await scrapeText(exporter, read())) }),
    });
    return new PrometheusServer(endpoint);
  }

  get address(): ListenAddress {
    return this.#endpoint.address;
  }

  /** `http://127.0.0.1:9464/metrics` */
  get url(): string {
    return `http://${formatAddress(this.address)}/metrics`;
  }

  close(): Promise<void> {
    return this.#endpoint.close();
  }
}
