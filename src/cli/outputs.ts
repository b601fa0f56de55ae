/**
 * What trace, count, hist and latency write and export: `--format` (and `--json`) through
 * src/output's sinks to stdout or -o FILE, `--prometheus ADDR` (a /metrics endpoint) and
 * `--otlp URL` (OTLP/HTTP). The commands make one call here; the choices live here.
 */
import { ProbeError } from '../errors/index.js';
import type { ProbeEvent } from '../events/index.js';
import {
  OtlpExporter,
  PrometheusServer,
  parseListenAddress,
  parseOtlpUrl,
  type TimedSpan,
} from '../exporters/index.js';
import {
  type CountRow,
  countSink,
  FORMAT_INFO,
  FORMATS,
  type Format,
  type Health,
  type HexFields,
  type HistogramRow,
  histogramSink,
  type PrometheusInput,
  parseFormat,
  type ResultKind,
  type Sink,
  traceSink,
} from '../output/index.js';
import type { Io } from './io.js';

/** The options every command here takes for its output. */
export interface OutputOptions {
  format?: string;
  json?: true;
  prometheus?: string;
  otlp?: string;
}

/**
 * `--format FMT` for a command producing these kinds of result (count: `count`, and
 * `stacks` with --by ustack); the help lists each format. Spread into .option().
 */
export function formatOption(kinds: readonly ResultKind[]) {
  const formats = [...new Set(kinds.flatMap((k) => FORMATS[k]))];
  const stackOnly = kinds.includes('stacks')
    ? formats.filter((f) => !FORMATS[kinds[0]!].includes(f))
    : [];
  const each = formats
    .map((f) => `${f} (${FORMAT_INFO[f].summary}${stackOnly.includes(f) ? ', --by ustack' : ''})`)
    .join(', ');
  return [
    '--format <format>',
    `how to write the output: ${each}; default text. --json is --format json. Binary and whole-document formats are written at the end; give -o FILE for them`,
  ] as const;
}

/** `--prometheus ADDR`. Spread into .option(). */
export const prometheusOption = [
  '--prometheus <addr>',
  'serve the live totals at http://ADDR/metrics for Prometheus to scrape (counters per probe and key, histograms with buckets, sum and count, and upscope_events_lost_total, upscope_probes_attached, upscope_attach_errors_total); ADDR is PORT (on 127.0.0.1: loopback unless told) or HOST:PORT (e.g. 0.0.0.0:9464 for every interface); at most 1000 series per metric, the rest added into an overflow series',
] as const;

/** `--otlp URL`. Spread into .option(). */
export const otlpOption = [
  '--otlp <url>',
  'send to an OpenTelemetry (OTLP/HTTP, protobuf) receiver at URL, e.g. http://127.0.0.1:4318 (an OpenTelemetry Collector): trace and latency send each call (entry to return) as a span (trace with its fetched values as attributes); count, hist and latency send their totals as metrics every OTEL_METRIC_EXPORT_INTERVAL ms (default 10000) and at the end. Spans queue up to OTEL_BSP_MAX_QUEUE_SIZE (2048); what cannot be sent is dropped, counted and said, and never slows the probes',
] as const;

/** The format asked for a kind of result: --format, or json with --json, else text. */
export function chooseFormat(kind: ResultKind, options: OutputOptions): Format {
  if (options.json === true && options.format !== undefined && options.format !== 'json') {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --json with --format ${options.format}: --json is --format json; give one`,
    );
  }
  return parseFormat(kind, options.format ?? (options.json === true ? 'json' : 'text'));
}

/** A binary format is not written to a terminal. */
export function checkTerminal(format: Format, toFile: boolean): void {
  if (FORMAT_INFO[format].binary && !toFile && process.stdout.isTTY === true) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot write ${format} to a terminal: it is binary; give -o FILE${FORMAT_INFO[format].extension}`,
    );
  }
}

/** The exporters this process started, until they are closed or handed to a helper. */
const active = new Set<{ server?: PrometheusServer; otlp?: OtlpExporter }>();

/**
 * Before a ptrace run is handed to its helper process (which runs the same command line):
 * close this process's exporters, quietly, so that the helper listens on the port instead.
 */
export async function releaseExporters(): Promise<void> {
  for (const started of active) {
    active.delete(started);
    await started.server?.close();
    await started.otlp?.close(0);
  }
}

/** Start the exporters asked for: the endpoint listens now, before anything is attached. */
async function startExporters(
  options: OutputOptions,
  io: Io,
  read: () => PrometheusInput | undefined,
): Promise<{ server?: PrometheusServer; otlp?: OtlpExporter }> {
  const url = options.otlp === undefined ? undefined : parseOtlpUrl(options.otlp);
  const address =
    options.prometheus === undefined
      ? undefined
      : parseListenAddress(options.prometheus, '--prometheus');
  const server =
    address === undefined ? undefined : await PrometheusServer.listen(address, () => read() ?? {});
  let otlp: OtlpExporter | undefined;
  try {
    otlp =
      url === undefined
        ? undefined
        : await OtlpExporter.start(url, { onNotice: (text) => io.err(`upscope: ${text}\n`) });
  } catch (err) {
    await server?.close();
    throw err;
  }
  const started = { server, otlp };
  active.add(started);
  return started;
}

/** Say what the OTLP exporter sent and dropped, at the end: spans, metrics, or both. */
async function closeExporters(
  started: { server?: PrometheusServer; otlp?: OtlpExporter },
  io: Io,
  sent: { readonly spans: boolean; readonly metrics: boolean },
): Promise<void> {
  if (!active.delete(started)) return; // handed to the helper
  await started.server?.close();
  const otlp = started.otlp;
  if (otlp === undefined) return;
  const stats = await otlp.close();
  const parts: string[] = [];
  if (sent.spans) parts.push(`${stats.spansSent} spans sent, ${stats.spansDropped} dropped`);
  if (sent.metrics) {
    parts.push(
      `${stats.metricExports} metric exports sent${stats.metricExportsFailed > 0 ? `, ${stats.metricExportsFailed} failed` : ''}`,
    );
  }
  io.err(`upscope: OTLP to ${otlp.url.origin}: ${parts.join(', ')}\n`);
}

/**
 * Prints readings: called every --interval (final false) and once at the end (final true).
 * live() gives the exporters the aggregation's live totals (and its health) once it runs.
 */
export type Printer<R> = ((rows: R, final: boolean) => void) & {
  live?: (read: () => R, health?: () => Health) => void;
  /** latency with --otlp: each timed call, sent as a span. */
  call?: ((call: TimedSpan) => void) | undefined;
};

type AggregateKind = 'count' | 'hist' | 'latency';
type RowsOf<K extends AggregateKind> = K extends 'count' ? CountRow[] : HistogramRow[];

export interface AggregateOutputOptions extends OutputOptions {
  output?: string;
  /** count: the key (with `ustack`, the stack formats). */
  by?: string;
  top?: number;
  /** hist: the value. */
  value?: string;
  /** latency and hist text: the unit line. */
  unit?: string;
}

/**
 * Run `body` with a printer writing the readings of count, hist or latency in the format
 * asked for (through src/output's sinks), and serving or sending them with --prometheus and
 * --otlp; the exporters stop when the body ends.
 */
export async function withAggregateOutput<K extends AggregateKind, T>(
  kind: K,
  options: AggregateOutputOptions,
  io: Io,
  body: (print: Printer<RowsOf<K>>) => Promise<T>,
): Promise<T> {
  const resultKind: ResultKind = kind === 'count' && options.by === 'ustack' ? 'stacks' : kind;
  const format = chooseFormat(resultKind, options);
  checkTerminal(format, options.output !== undefined);
  const sink: Sink<{ rows: RowsOf<K>; final: boolean }> =
    kind === 'count'
      ? (countSink(format, io.out, { by: options.by, top: options.top }) as Sink<{
          rows: RowsOf<K>;
          final: boolean;
        }>)
      : (histogramSink(kind as 'hist' | 'latency', format, io.out, {
          value: options.value,
          unit: options.unit,
        }) as Sink<{ rows: RowsOf<K>; final: boolean }>);
  let source: { read: () => RowsOf<K>; health?: (() => Health) | undefined } | undefined;
  const input = (): PrometheusInput | undefined => {
    if (source === undefined) return undefined;
    const rows = source.read();
    const health = source.health?.();
    if (kind === 'count') return { counts: { by: options.by, rows: rows as CountRow[] }, health };
    if (kind === 'hist') {
      return { values: { value: options.value ?? 'value', rows: rows as HistogramRow[] }, health };
    }
    return { latency: rows as HistogramRow[], health };
  };
  const started = await startExporters(options, io, input);
  const { server, otlp } = started;
  const print: Printer<RowsOf<K>> = Object.assign(
    (rows: RowsOf<K>, final: boolean) => {
      sink.value({ rows, final });
      if (final) {
        sink.end();
        // The last totals stay what the endpoints give, after the aggregation closes.
        source = { read: () => rows, health: source?.health };
      }
    },
    {
      live: (read: () => RowsOf<K>, health?: () => Health) => {
        source = { read, health };
        if (server !== undefined) io.err(`upscope: serving metrics at ${server.url}\n`);
        otlp?.metrics(() => input() ?? {});
      },
      call:
        kind === 'latency' && otlp !== undefined ? (call: TimedSpan) => otlp.call(call) : undefined,
    },
  );
  sink.begin();
  try {
    return await body(print);
  } finally {
    await closeExporters(started, io, { spans: kind === 'latency', metrics: true });
  }
}

export interface TraceOutputOptions extends OutputOptions {
  output?: string;
}

/** Where a trace's events go: the format's sink, and spans with --otlp. */
export interface TraceOutput {
  /** The sink for a trace that began at `startNs` (CLOCK_MONOTONIC) with these probes. */
  sink(options: {
    startNs: bigint;
    hexFields: HexFields;
    returning?: ReadonlySet<string> | undefined;
  }): Sink<ProbeEvent> & { flush(): void };
  /** Send what is left and say what was sent (with --otlp). */
  close(): Promise<void>;
}

/**
 * The output of `trace`: checks --format (before anything is attached), starts the OTLP
 * exporter if asked; sink() tees each event to the format's sink and to the spans.
 */
export async function traceOutput(options: TraceOutputOptions, io: Io): Promise<TraceOutput> {
  if (options.prometheus !== undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot use --prometheus with trace: it serves the totals of count, hist and latency',
      { hints: ["For example: upscope count --prometheus 9464 -p PID './app:parse_*'"] },
    );
  }
  const format = chooseFormat('trace', options);
  checkTerminal(format, options.output !== undefined);
  const started = await startExporters(options, io, () => undefined);
  const { otlp } = started;
  return {
    sink(sinkOptions) {
      const inner = traceSink(format, io.out, sinkOptions);
      // Streaming formats buffer 64 KiB; flush() writes what waits (after each poll).
      return {
        begin: () => inner.begin(),
        value: (event) => {
          otlp?.event(event);
          inner.value(event);
        },
        lost: (count) => inner.lost(count),
        end: () => inner.end(),
        flush: () => inner.flush?.(),
      };
    },
    close: () => closeExporters(started, io, { spans: true, metrics: false }),
  };
}
