import { ProbeError } from '../errors/index.js';
import type { ProbeEvent } from '../events/index.js';
import {
  renderCountsJson,
  renderCountsText,
  renderHistogramsJson,
  renderHistogramsText,
} from './aggregate-text.js';
import { ChromeTraceSink } from './chrome-trace.js';
import { eventJsonFormatter, eventTextFormatter } from './events-text.js';
import type { HexFields } from './fields.js';
import { renderFlameGraph } from './flamegraph.js';
import { renderFolded } from './folded.js';
import { renderPprof } from './pprof.js';
import { renderPrometheus } from './prometheus.js';
import type { Sink, Write } from './sink.js';
import { renderSpeedscopeStacks, SpeedscopeTraceSink } from './speedscope.js';
import type { StackCount, StackWeight } from './stacks.js';
import type { CountRow, HistogramRow, Reading } from './values.js';

/**
 * What a command produces, which decides the formats it can write. A recording's: `calls`
 * (replay: each call in time order), `call-graph` (graph: the merged call tree, weighed by
 * time), `call-report` (report: a row per function).
 */
export type ResultKind =
  | 'trace'
  | 'count'
  | 'stacks'
  | 'hist'
  | 'latency'
  | 'bytes'
  | 'calls'
  | 'call-graph'
  | 'call-report';

export type Format =
  | 'text'
  | 'json'
  | 'folded'
  | 'flamegraph'
  | 'pprof'
  | 'speedscope'
  | 'chrome'
  | 'prometheus';

/** The formats of each kind of result, the default first. */
export const FORMATS: Readonly<Record<ResultKind, readonly Format[]>> = {
  trace: ['text', 'json', 'chrome', 'speedscope'],
  count: ['text', 'json', 'prometheus'],
  stacks: ['text', 'json', 'folded', 'flamegraph', 'pprof', 'speedscope', 'prometheus'],
  hist: ['text', 'json', 'prometheus'],
  latency: ['text', 'json', 'prometheus'],
  bytes: ['folded', 'flamegraph', 'pprof', 'speedscope'],
  calls: ['text', 'json', 'chrome', 'speedscope'],
  'call-graph': ['text', 'json', 'folded', 'flamegraph', 'pprof', 'speedscope'],
  'call-report': ['text', 'json'],
};

/** Each format: what it is, for --help, and how its files are named. */
export const FORMAT_INFO: Readonly<
  Record<Format, { readonly summary: string; readonly extension: string; readonly binary: boolean }>
> = {
  text: { summary: 'lines and tables for reading', extension: '.txt', binary: false },
  json: { summary: 'JSON (a line per event or per reading)', extension: '.json', binary: false },
  folded: {
    summary: 'collapsed stacks, root first (flamegraph.pl, speedscope, inferno)',
    extension: '.folded',
    binary: false,
  },
  flamegraph: {
    summary: 'an interactive flame graph, a self-contained SVG',
    extension: '.svg',
    binary: false,
  },
  pprof: { summary: 'a gzipped pprof profile (go tool pprof)', extension: '.pb.gz', binary: true },
  speedscope: { summary: 'a speedscope file', extension: '.speedscope.json', binary: false },
  chrome: {
    summary: 'Chrome trace-event JSON (Perfetto, chrome://tracing, speedscope)',
    extension: '.json',
    binary: false,
  },
  prometheus: { summary: "Prometheus's text exposition format", extension: '.prom', binary: false },
};

const WHAT: Readonly<Record<ResultKind, string>> = {
  trace: 'a trace',
  count: 'counts',
  stacks: 'counts by stack',
  hist: 'a histogram',
  latency: 'latencies',
  bytes: 'bytes by stack',
  calls: 'the calls of a recording',
  'call-graph': 'the call tree of a recording',
  'call-report': 'the functions of a recording',
};

/** The commands that write each kind of a recording's results, for hints. */
const RECORDING_COMMANDS: Readonly<Partial<Record<ResultKind, string>>> = {
  calls: 'upscope replay',
  'call-graph': 'upscope graph',
  'call-report': 'upscope report',
};

function list(formats: readonly string[]): string {
  return formats.length === 1
    ? formats[0]!
    : `${formats.slice(0, -1).join(', ')} or ${formats.at(-1)}`;
}

/** Check `--format NAME` for a kind of result: the format, or a usage error naming the choices. */
export function parseFormat(kind: ResultKind, name: string): Format {
  const choices = FORMATS[kind];
  if ((choices as readonly string[]).includes(name)) return name as Format;
  const known = name in FORMAT_INFO;
  const hints: string[] = [];
  if (kind === 'count' && FORMATS.stacks.includes(name as Format)) {
    hints.push(`${name} is written for counts by stack: add --by ustack`);
  }
  if (RECORDING_COMMANDS[kind] !== undefined) {
    for (const [other, command] of Object.entries(RECORDING_COMMANDS)) {
      if (other !== kind && FORMATS[other as ResultKind].includes(name as Format)) {
        hints.push(`For ${WHAT[other as ResultKind]}: ${command} DIR --format ${name}`);
        break;
      }
    }
  }
  throw new ProbeError(
    'ERR_USAGE',
    known
      ? `Cannot write ${WHAT[kind]} as ${name}: give --format ${list(choices)}`
      : `Cannot use --format "${name}": give ${list(choices)}${kind === 'count' ? `, or with --by ustack ${list(FORMATS.stacks.filter((f) => !choices.includes(f)))}` : ''}`,
    { hints },
  );
}

/** The buffer size of streaming sinks: text is written 64 KiB at a time. */
const FLUSH_AT = 1 << 16;

/** A sink writing a line per event through `format`, 64 KiB at a time. */
function lineSink(write: Write, format: (event: ProbeEvent) => string): Sink<ProbeEvent> {
  let text = '';
  return {
    begin() {},
    value(event) {
      text += `${format(event)}\n`;
      if (text.length >= FLUSH_AT) {
        const chunk = text;
        text = '';
        write(chunk);
      }
    },
    lost() {},
    end() {
      this.flush!();
    },
    flush() {
      if (text.length === 0) return;
      const chunk = text;
      text = '';
      write(chunk);
    },
  };
}

export interface TraceSinkOptions {
  /** The trace's start (CLOCK_MONOTONIC, ns): text times count from it, chrome's from it. */
  readonly startNs: bigint;
  /** Per probe, the fields printed in hex (from the probes' fetch types). */
  readonly hexFields?: HexFields | undefined;
  /** The probes that have a return probe: their entries wait to be paired (chrome, speedscope). */
  readonly returning?: ReadonlySet<string> | undefined;
  /** Said in the file where the format has room (chrome's otherData). */
  readonly metadata?: Readonly<Record<string, string>> | undefined;
  /** chrome: slices that end together still do once read (see ChromeTraceOptions). */
  readonly exactEnds?: boolean | undefined;
}

/**
 * Where a trace's events go in `format`. text and json write a line per event as it comes;
 * chrome writes calls as they complete; speedscope writes the whole file at end().
 */
export function traceSink(
  format: Format,
  write: Write,
  options: TraceSinkOptions,
): Sink<ProbeEvent> {
  const hex = options.hexFields ?? new Map();
  switch (parseFormat('trace', format)) {
    case 'text':
      return lineSink(write, eventTextFormatter(hex, options.startNs));
    case 'json':
      return lineSink(write, eventJsonFormatter(hex));
    case 'chrome':
      return new ChromeTraceSink(write, {
        startNs: options.startNs,
        hexFields: hex,
        returning: options.returning,
        metadata: options.metadata,
        exactEnds: options.exactEnds,
      });
    default:
      return new SpeedscopeTraceSink(write, {
        startNs: options.startNs,
        returning: options.returning,
      });
  }
}

/** "08:15:02\n" before a reading taken every --interval; nothing before the last one. */
function stamp(reading: Reading<unknown>): string {
  if (reading.final) return '';
  return `${(reading.time ?? new Date()).toISOString().slice(11, 19)}\n`;
}

/**
 * A sink that writes one document from the last reading, at end() (or from no rows, when
 * nothing was read).
 */
function documentSink<R>(write: Write, render: (rows: R | undefined) => string | Uint8Array) {
  let last: R | undefined;
  const sink: Sink<Reading<R>> = {
    begin() {},
    value(reading) {
      last = reading.rows;
    },
    lost() {},
    end() {
      write(render(last));
    },
  };
  return sink;
}

export interface CountSinkOptions {
  /** The key counted by: `comm`, `arg0`, `ustack`... (with `ustack`, the stack formats). */
  readonly by?: string | undefined;
  /** text: only the N largest counts. */
  readonly top?: number | undefined;
  /** Stack formats: what is counted (default hits). */
  readonly weight?: StackWeight | undefined;
  /** flamegraph: title and subtitle; pprof: comments; speedscope: name. */
  readonly title?: string | undefined;
  readonly subtitle?: string | undefined;
}

/**
 * Where the readings of `count` go in `format`: text and json write every reading (every
 * --interval, then the last); folded, flamegraph, pprof, speedscope and prometheus write the
 * last reading at end(). Stack formats need rows counted by ustack.
 */
export function countSink(
  format: Format,
  write: Write,
  options: CountSinkOptions = {},
): Sink<Reading<readonly CountRow[]>> {
  const by = options.by;
  const chosen = parseFormat(by === 'ustack' ? 'stacks' : 'count', format);
  const weight = options.weight;
  switch (chosen) {
    case 'text':
    case 'json':
      return {
        begin() {},
        value(reading) {
          write(
            chosen === 'json'
              ? `${renderCountsJson(reading.rows, by)}\n`
              : `${stamp(reading)}${renderCountsText(reading.rows, options)}\n`,
          );
        },
        lost() {},
        end() {},
      };
    case 'folded':
    case 'flamegraph':
    case 'pprof':
    case 'speedscope':
      return documentSink(write, (rows) =>
        renderStacks(chosen, rows ?? [], {
          weight,
          title: options.title,
          subtitle: options.subtitle,
        }),
      );
    default:
      return documentSink(write, (rows) => renderPrometheus({ counts: { by, rows: rows ?? [] } }));
  }
}

export interface StacksDocumentOptions {
  /** What the rows' weight is (default hits). */
  readonly weight?: StackWeight | undefined;
  /** flamegraph: title and subtitle; pprof: comments; speedscope: the name. */
  readonly title?: string | undefined;
  readonly subtitle?: string | undefined;
  /** pprof: when the data was taken, and over how long (ns). */
  readonly timeNanos?: bigint | undefined;
  readonly durationNanos?: bigint | undefined;
}

/** The formats of stacks with weights, whole documents. */
export type StackFormat = 'folded' | 'flamegraph' | 'pprof' | 'speedscope';

export function isStackFormat(format: Format): format is StackFormat {
  return (
    format === 'folded' || format === 'flamegraph' || format === 'pprof' || format === 'speedscope'
  );
}

/** Stacks with their weights as one document in a stack format (pprof's is binary). */
export function renderStacks(
  format: StackFormat,
  rows: readonly StackCount[],
  options: StacksDocumentOptions = {},
): string | Uint8Array {
  const { weight, title, subtitle } = options;
  switch (format) {
    case 'folded':
      return renderFolded(rows, { weight });
    case 'flamegraph':
      return renderFlameGraph(rows, { weight, title, subtitle });
    case 'pprof':
      return renderPprof(rows, {
        weight,
        comments: [title, subtitle].filter((c) => c !== undefined),
        timeNanos: options.timeNanos,
        durationNanos: options.durationNanos,
      });
    default:
      return renderSpeedscopeStacks(rows, { weight, name: title });
  }
}

export interface HistogramSinkOptions {
  /** hist: the value histogrammed (`arg0`), a label in prometheus. */
  readonly value?: string | undefined;
  /** text: the unit line above each histogram (`usecs`); json: the unit field. */
  readonly unit?: string | undefined;
}

/**
 * Where the readings of `hist` or `latency` go in `format`: text and json every reading,
 * prometheus the last one at end(). Latencies are durations in nanoseconds.
 */
export function histogramSink(
  kind: 'hist' | 'latency',
  format: Format,
  write: Write,
  options: HistogramSinkOptions = {},
): Sink<Reading<readonly HistogramRow[]>> {
  const chosen = parseFormat(kind, format);
  const text = { duration: kind === 'latency', unit: options.unit };
  if (chosen === 'prometheus') {
    return documentSink(write, (rows) =>
      renderPrometheus(
        kind === 'latency'
          ? { latency: rows ?? [] }
          : { values: { value: options.value ?? 'value', rows: rows ?? [] } },
      ),
    );
  }
  return {
    begin() {},
    value(reading) {
      write(
        chosen === 'json'
          ? `${renderHistogramsJson(reading.rows, text)}\n`
          : `${stamp(reading)}${renderHistogramsText(reading.rows, text)}`,
      );
    },
    lost() {},
    end() {},
  };
}
