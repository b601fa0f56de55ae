import { hostname } from 'node:os';
import type { Attributes, HrTime } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { MetricData, ResourceMetrics } from '@opentelemetry/sdk-metrics';
import type {
  ReadableSpan,
  SpanExporter,
  SpanProcessor,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import { ProbeError } from '../errors/index.js';
import type { FieldValue, ProbeEvent } from '../events/index.js';
import {
  type Call,
  CallPairer,
  type MetricFamily,
  PrometheusExporter,
  type PrometheusInput,
} from '../output/index.js';

/** The OpenTelemetry packages, imported when --otlp is given (never otherwise). */
async function load() {
  const [api, resources, trace, metrics, traceExporter, metricExporter] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/sdk-metrics'),
    import('@opentelemetry/exporter-trace-otlp-proto'),
    import('@opentelemetry/exporter-metrics-otlp-proto'),
  ]);
  return { api, resources, trace, metrics, traceExporter, metricExporter };
}
type Otel = Awaited<ReturnType<typeof load>>;

export interface OtlpOptions {
  /** Told, in one line each, when sending fails and when it works again. */
  readonly onNotice: (text: string) => void;
  /** Spans held for sending at most (default OTEL_BSP_MAX_QUEUE_SIZE, else 2048). */
  readonly maxQueue?: number | undefined;
  /** Spans per request (default OTEL_BSP_MAX_EXPORT_BATCH_SIZE, else 512). */
  readonly batchSize?: number | undefined;
  /** How often queued spans go (default OTEL_BSP_SCHEDULE_DELAY, else 5000 ms). */
  readonly spanDelayMs?: number | undefined;
  /** How often metrics go (default OTEL_METRIC_EXPORT_INTERVAL, else 10000 ms). */
  readonly metricIntervalMs?: number | undefined;
  /** Metric names' prefix and series cap, as with --prometheus. */
  readonly prefix?: string | undefined;
  readonly maxSeries?: number | undefined;
  /** The service.name resource attribute (default `upscope`). */
  readonly serviceName?: string | undefined;
}

/** A timed call, as latency gives it (see LatencyCall in src/api). */
export interface TimedSpan {
  readonly probe: string;
  readonly pid: number;
  readonly tid: number;
  readonly comm: string;
  /** CLOCK_MONOTONIC nanoseconds (process.hrtime.bigint()'s clock). */
  readonly startNs: bigint;
  readonly endNs: bigint;
}

/** What was sent and what was not, for the summary. */
export interface OtlpStats {
  readonly spansSent: number;
  /** Spans dropped: the queue was full, or a request failed after its retries. */
  readonly spansDropped: number;
  readonly metricExports: number;
  readonly metricExportsFailed: number;
}

function envNumber(name: string): number | undefined {
  const value = Number(process.env[name]);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

/** An --otlp value: an http(s) URL, the base the signals' paths (`/v1/traces`) go under. */
export function parseOtlpUrl(value: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --otlp "${value}": give the http(s) URL of an OTLP/HTTP receiver, e.g. --otlp http://127.0.0.1:4318`,
    );
  }
  return url;
}

/** `base/v1/traces` from a base URL that may end in a slash. */
function signalUrl(base: URL, signal: 'traces' | 'metrics'): string {
  return `${base.href.replace(/\/+$/, '')}/v1/${signal}`;
}

/** Nanoseconds since the epoch as OpenTelemetry's [seconds, nanoseconds]. */
function hrTime(epochNs: bigint): HrTime {
  return [Number(epochNs / 1_000_000_000n), Number(epochNs % 1_000_000_000n)];
}

/** A fetched value as an attribute value: integers as numbers when exact, bytes as hex. */
function attributeValue(value: FieldValue): string | number | undefined {
  if (value === null) return undefined;
  if (typeof value === 'bigint') {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : value.toString();
  }
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  return value;
}

/**
 * How long one export may take, its retries included (the exporter's own backoff, on network
 * errors and 429/502/503/504): then its data is dropped and counted. close() waits a little
 * longer for the last ones.
 */
const EXPORT_TIMEOUT_MS = 4000;

/** Providers (one per traced process: its resource) kept at most; later processes share one. */
const MAX_PROCESSES = 256;

type QueueOptions = Required<Pick<OtlpOptions, 'maxQueue' | 'batchSize' | 'spanDelayMs'>>;

/**
 * A bounded batching span processor: spans wait in a queue of `maxQueue` (beyond it they are
 * dropped and counted, so a probe's handler never waits), and go `batchSize` at a time every
 * `delayMs` or as soon as a batch is full, one request in flight. A request that fails after
 * the exporter's own retries counts its spans as dropped and says so, once until one works.
 */
class BoundedSpanProcessor implements SpanProcessor {
  readonly #exporter: SpanExporter;
  readonly #options: QueueOptions;
  readonly #onFailure: (error: string | undefined) => void;
  readonly #queue: ReadableSpan[] = [];
  readonly #timer: NodeJS.Timeout;
  #sending: Promise<void> | undefined;
  #inFlight = 0;
  sent = 0;
  dropped = 0;

  constructor(
    exporter: SpanExporter,
    options: QueueOptions,
    onFailure: (error: string | undefined) => void,
  ) {
    this.#exporter = exporter;
    this.#options = options;
    this.#onFailure = onFailure;
    this.#timer = setInterval(() => void this.#send(), options.spanDelayMs);
    this.#timer.unref();
  }

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if (this.#queue.length >= this.#options.maxQueue) {
      this.dropped++;
      return;
    }
    this.#queue.push(span);
    if (this.#queue.length >= this.#options.batchSize) void this.#send();
  }

  /** Send what is queued, a batch at a time, one request in flight. */
  #send(): Promise<void> {
    if (this.#sending !== undefined || this.#queue.length === 0)
      return this.#sending ?? Promise.resolve();
    const batch = this.#queue.splice(0, this.#options.batchSize);
    this.#inFlight = batch.length;
    this.#sending = new Promise<void>((resolve) => {
      this.#exporter.export(batch, (result) => {
        if (this.#inFlight === 0) return resolve(); // abandoned: counted as dropped
        this.#inFlight = 0;
        if (result.code === 0) {
          this.sent += batch.length;
          this.#onFailure(undefined);
        } else {
          this.dropped += batch.length;
          this.#onFailure(result.error?.message ?? 'the request failed');
        }
        resolve();
      });
    }).then(() => {
      this.#sending = undefined;
      if (this.#queue.length >= this.#options.batchSize) return this.#send();
    });
    return this.#sending;
  }

  /** Send everything queued (what cannot go is counted as dropped). */
  async forceFlush(): Promise<void> {
    while (this.#queue.length > 0 || this.#sending !== undefined) await this.#send();
  }

  async shutdown(): Promise<void> {
    clearInterval(this.#timer);
    await this.forceFlush();
  }

  /** Give up on what is queued or being sent (the receiver did not answer in time). */
  abandon(): void {
    clearInterval(this.#timer);
    this.dropped += this.#queue.length + this.#inFlight;
    this.#queue.length = 0;
    this.#inFlight = 0;
  }
}

/**
 * `--otlp URL`: calls (an entry and its return, paired per thread) as OpenTelemetry spans,
 * and counts and histograms as OTLP metrics, sent over OTLP/HTTP (protobuf) with the official
 * exporters to URL/v1/traces and URL/v1/metrics. Each traced process is a resource
 * (process.pid, process.executable.name, host.name, service.name); a span is named after its
 * probe, carries the thread (thread.id, thread.name) and the fetched values of its entry and
 * return as attributes, and has no parent. Metrics are cumulative, the same families as
 * --prometheus (counters per probe and key, histograms with their buckets, upscope's health).
 * Nothing waits on the network: spans queue (bounded; drops counted), metrics are read every
 * interval, an unreachable receiver is retried by the exporter and said in one line.
 */
export class OtlpExporter {
  readonly url: URL;
  readonly #otel: Otel;
  readonly #options: OtlpOptions;
  readonly #spans: BoundedSpanProcessor;
  readonly #metricExporter: InstanceType<Otel['metricExporter']['OTLPMetricExporter']>;
  readonly #providers = new Map<number, TracerProvider>();
  readonly #shared: TracerProvider;
  readonly #resource: Resource;
  readonly #pairer = new CallPairer();
  readonly #families: PrometheusExporter;
  /** CLOCK_MONOTONIC ns to epoch ns. */
  readonly #epochOffsetNs: bigint;
  readonly #startTime: HrTime;
  #metricsTimer: NodeJS.Timeout | undefined;
  #metricsSource: (() => PrometheusInput | readonly MetricFamily[]) | undefined;
  #metricSending: Promise<void> | undefined;
  #failing: string | undefined;
  #metricExports = 0;
  #metricExportsFailed = 0;
  #closed = false;

  private constructor(url: URL, otel: Otel, options: OtlpOptions) {
    this.url = url;
    this.#otel = otel;
    this.#options = options;
    const nowEpochNs = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
    this.#epochOffsetNs = nowEpochNs - process.hrtime.bigint();
    this.#startTime = hrTime(nowEpochNs);
    this.#families = new PrometheusExporter({
      prefix: options.prefix,
      maxSeries: options.maxSeries,
    });
    const traceExporter = new otel.traceExporter.OTLPTraceExporter({
      url: signalUrl(url, 'traces'),
      timeoutMillis: EXPORT_TIMEOUT_MS,
    });
    // The exporters say a failed request through OpenTelemetry's diagnostics (before they
    // retry): said here at once, in one line, instead of only after the retries.
    otel.api.diag.setLogger(
      {
        error: (message) => this.#said('data', message),
        warn: (message) => {
          if (/retryable|network error|failed/i.test(message)) this.#said('data', message);
        },
        info: () => {},
        debug: () => {},
        verbose: () => {},
      },
      { logLevel: otel.api.DiagLogLevel.WARN, suppressOverrideMessage: true },
    );
    this.#spans = new BoundedSpanProcessor(
      traceExporter,
      {
        maxQueue: options.maxQueue ?? envNumber('OTEL_BSP_MAX_QUEUE_SIZE') ?? 2048,
        batchSize: options.batchSize ?? envNumber('OTEL_BSP_MAX_EXPORT_BATCH_SIZE') ?? 512,
        spanDelayMs: options.spanDelayMs ?? envNumber('OTEL_BSP_SCHEDULE_DELAY') ?? 5000,
      },
      (error) => this.#said('spans', error),
    );
    this.#metricExporter = new otel.metricExporter.OTLPMetricExporter({
      url: signalUrl(url, 'metrics'),
      timeoutMillis: EXPORT_TIMEOUT_MS,
    });
    this.#resource = otel.resources.resourceFromAttributes({
      'service.name': options.serviceName ?? 'upscope',
      'host.name': hostname(),
    });
    this.#shared = this.#provider(this.#resource);
  }

  /** Load the OpenTelemetry packages and make the exporter (nothing is sent yet). */
  static async start(url: URL, options: OtlpOptions): Promise<OtlpExporter> {
    return new OtlpExporter(url, await load(), options);
  }

  #provider(resource: Resource): TracerProvider {
    return new this.#otel.trace.TracerProvider({ resource, spanProcessors: [this.#spans] });
  }

  /** Say once that sending fails (with why and what was dropped), and once that it works again. */
  #said(what: string, error: string | undefined): void {
    if (error === undefined) {
      if (this.#failing !== undefined) {
        this.#options.onNotice(`sending to the OTLP receiver at ${this.url.origin} works again`);
      }
      this.#failing = undefined;
      return;
    }
    if (this.#failing !== undefined) return;
    this.#failing = error;
    this.#options.onNotice(
      `cannot send ${what} to the OTLP receiver at ${this.url.origin}: ${error}; retrying, and counting what is dropped (the probes are not slowed)`,
    );
  }

  /** The provider of a process: its resource names it. */
  #providerOf(event: { readonly pid: number; readonly comm: string }): TracerProvider {
    let provider = this.#providers.get(event.pid);
    if (provider !== undefined) return provider;
    if (this.#providers.size >= MAX_PROCESSES) return this.#shared;
    provider = this.#provider(
      this.#resource.merge(
        this.#otel.resources.resourceFromAttributes({
          'process.pid': event.pid,
          'process.executable.name': event.comm,
        }),
      ),
    );
    this.#providers.set(event.pid, provider);
    return provider;
  }

  /** An event of a trace: a call it completes becomes a span. Never waits. */
  event(event: ProbeEvent): void {
    if (this.#closed) return;
    for (const done of this.#pairer.push(event)) if (done.kind === 'call') this.#span(done);
  }

  /** A call timed by latency (its function, thread and times): a span. Never waits. */
  call(call: TimedSpan): void {
    if (this.#closed) return;
    this.#send(call, call.probe, call.startNs, call.endNs, {});
  }

  #span(call: Call): void {
    const event = call.entry ?? call.ret;
    const attributes: Attributes = {};
    for (const source of [call.entry, call.ret]) {
      if (source === undefined) continue;
      for (const [name, value] of Object.entries(source.fields)) {
        const v = attributeValue(value);
        if (v !== undefined) attributes[name] = v;
      }
    }
    if (call.ret.exit !== undefined) attributes['upscope.exit'] = call.ret.exit;
    this.#send(event, event.probe.replace(/^r:/, ''), call.startNs, call.endNs, attributes);
  }

  /** A span named after its function, on its process's provider, with the thread's attributes. */
  #send(
    thread: { readonly pid: number; readonly tid: number; readonly comm: string },
    name: string,
    startNs: bigint,
    endNs: bigint,
    fields: Attributes,
  ): void {
    const attributes: Attributes = {
      'thread.id': thread.tid,
      'thread.name': thread.comm,
      'code.function.name': name,
      ...fields,
    };
    const tracer = this.#providerOf(thread).getTracer('upscope');
    const span = tracer.startSpan(
      name,
      {
        kind: this.#otel.api.SpanKind.INTERNAL,
        startTime: hrTime(startNs + this.#epochOffsetNs),
        attributes,
        root: true,
      },
      this.#otel.api.ROOT_CONTEXT,
    );
    span.end(hrTime(endNs + this.#epochOffsetNs));
  }

  /** Send metrics read from `read()` every interval, and once more at close(). */
  metrics(read: () => PrometheusInput | readonly MetricFamily[]): void {
    this.#metricsSource = read;
    const every =
      this.#options.metricIntervalMs ?? envNumber('OTEL_METRIC_EXPORT_INTERVAL') ?? 10_000;
    this.#metricsTimer = setInterval(() => void this.#sendMetrics(), every);
    this.#metricsTimer.unref();
  }

  #sendMetrics(): Promise<void> {
    const read = this.#metricsSource;
    if (read === undefined || this.#metricSending !== undefined) {
      return this.#metricSending ?? Promise.resolve();
    }
    let data: ResourceMetrics;
    try {
      data = this.#resourceMetrics(read());
    } catch {
      return Promise.resolve(); // read after the aggregation closed: the last export was sent
    }
    this.#metricSending = new Promise<void>((resolve) => {
      this.#metricExporter.export(data, (result) => {
        if (result.code === 0) {
          this.#metricExports++;
          this.#said('metrics', undefined);
        } else {
          this.#metricExportsFailed++;
          this.#said('metrics', result.error?.message ?? 'the request failed');
        }
        resolve();
      });
    }).then(() => {
      this.#metricSending = undefined;
    });
    return this.#metricSending;
  }

  /** The families --prometheus shows, as OTLP metric data (cumulative since the start). */
  #resourceMetrics(input: PrometheusInput | readonly MetricFamily[]): ResourceMetrics {
    const { DataPointType, AggregationTemporality } = this.#otel.metrics;
    const { ValueType } = this.#otel.api;
    const now = hrTime(BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)));
    const times = { startTime: this.#startTime, endTime: now };
    const metrics: MetricData[] = [];
    const families = Array.isArray(input)
      ? input
      : this.#families.families(input as PrometheusInput);
    for (const family of families) {
      const descriptor = {
        name: family.type === 'counter' ? family.name.replace(/_total$/, '') : family.name,
        description: family.help,
        unit: family.name.endsWith('_seconds') ? 's' : '',
        valueType: ValueType.DOUBLE,
      };
      if (family.type === 'histogram') {
        metrics.push({
          descriptor,
          aggregationTemporality: AggregationTemporality.CUMULATIVE,
          dataPointType: DataPointType.HISTOGRAM,
          dataPoints: histogramPoints(family).map((p) => ({ ...times, ...p })),
        });
        continue;
      }
      const dataPoints = family.samples.map((s: MetricFamily['samples'][number]) => ({
        ...times,
        attributes: Object.fromEntries(s.labels),
        value: Number(s.value),
      }));
      metrics.push(
        family.type === 'counter'
          ? {
              descriptor,
              aggregationTemporality: AggregationTemporality.CUMULATIVE,
              dataPointType: DataPointType.SUM,
              isMonotonic: true,
              dataPoints,
            }
          : {
              descriptor,
              aggregationTemporality: AggregationTemporality.CUMULATIVE,
              dataPointType: DataPointType.GAUGE,
              dataPoints,
            },
      );
    }
    return {
      resource: this.#resource,
      scopeMetrics: [{ scope: { name: 'upscope' }, metrics }],
    };
  }

  stats(): OtlpStats {
    return {
      spansSent: this.#spans.sent,
      spansDropped: this.#spans.dropped,
      metricExports: this.#metricExports,
      metricExportsFailed: this.#metricExportsFailed,
    };
  }

  /**
   * Send what is left (the last metrics, queued spans), waiting at most `waitMs` for the
   * receiver; what cannot go by then is counted as dropped. Idempotent.
   */
  async close(waitMs = EXPORT_TIMEOUT_MS + 1000): Promise<OtlpStats> {
    if (!this.#closed) {
      this.#closed = true;
      clearInterval(this.#metricsTimer);
      const done = (async () => {
        await this.#metricSending;
        await this.#sendMetrics();
        await this.#spans.shutdown();
      })();
      let timer: NodeJS.Timeout | undefined;
      const finished = await Promise.race([
        done.then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), waitMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
      if (!finished) {
        this.#spans.abandon();
        if (this.#metricSending !== undefined) this.#metricExportsFailed++;
      }
    }
    return this.stats();
  }
}

/**
 * A histogram family's samples as data points: per label set (without `le`), the bucket
 * bounds (inclusive upper ones, as Prometheus's `le`), per-bucket counts (the differences of
 * the cumulative ones), the sum and the count.
 */
function histogramPoints(family: MetricFamily) {
  const points = new Map<
    string,
    {
      attributes: Attributes;
      le: [number, number][];
      sum: number;
      count: number;
    }
  >();
  for (const sample of family.samples) {
    const labels = sample.labels.filter(([k]) => k !== 'le');
    const key = JSON.stringify(labels);
    let point = points.get(key);
    if (point === undefined) {
      point = { attributes: Object.fromEntries(labels), le: [], sum: 0, count: 0 };
      points.set(key, point);
    }
    if (sample.name.endsWith('_bucket')) {
      const le = sample.labels.find(([k]) => k === 'le')![1];
      if (le !== '+Inf') point.le.push([Number(le), Number(sample.value)]);
    } else if (sample.name.endsWith('_sum')) {
      point.sum = Number(sample.value);
    } else if (sample.name.endsWith('_count')) {
      point.count = Number(sample.value);
    }
  }
  return [...points.values()].map((p) => {
    const counts: number[] = [];
    let below = 0;
    for (const [, cumulative] of p.le) {
      counts.push(cumulative - below);
      below = cumulative;
    }
    counts.push(p.count - below);
    return {
      attributes: p.attributes,
      value: {
        buckets: { boundaries: p.le.map(([b]) => b), counts },
        sum: p.sum,
        count: p.count,
      },
    };
  });
}
