import { closeSync, openSync } from 'node:fs';
import type {
  CountRowView,
  LatencyRowView,
  MeasureKind,
  MeasurementView,
  MeasureState,
  StackRowView,
  TargetChoice,
  TraceEventView,
} from '../../api/index.js';
import {
  type Aggregate,
  type Attachment,
  bpfAllowed,
  countHits,
  type Histogram,
  histogramRows,
  isProbeError,
  latencyOf,
  mean,
  type ProbeCount,
  type ProbeEvent,
  type ProbeHistogram,
  percentile,
  Tracer,
} from '../../api/index.js';
import { InternalError, ProbeError, renderError } from '../../errors/index.js';
import { grouped } from '../../internal/index.js';
import {
  eventJsonFormatter,
  type HexFields,
  renderChromeTrace,
  renderCountsJson,
  renderFlameGraph,
  renderHistogramsJson,
} from '../../output/index.js';
import { sinkOptions } from '../commands/trace.js';
import { type PlanStep, planProgressText } from '../io.js';
import { stepsNote } from '../stepped.js';

/** The engines the page's measurements run on here (null: none is allowed). */
export function uiEngines(): { aggregate: 'bpf' | null; trace: 'tracefs' | 'bpf' | null } {
  const bpf = bpfAllowed();
  return {
    aggregate: bpf ? 'bpf' : null,
    trace: process.getuid?.() === 0 ? 'tracefs' : bpf ? 'bpf' : null,
  };
}

/** A note, as a list of none or one. */
function noneOr(note: string | undefined): string[] {
  return note === undefined ? [] : [note];
}

/** The page's note of each thing a plan warns of: its message and hints, on one line. */
export function warningNotes(warnings: readonly ProbeError[]): string[] {
  return warnings.map((warning) => [warning.message, ...warning.hints].join('. '));
}

/** An error as the command line prints it. */
export function errorText(err: unknown): string {
  const error = isProbeError(err)
    ? err
    : new InternalError(`Unexpected failure: ${err instanceof Error ? err.message : err}`, err);
  return renderError(error);
}

/** Events kept for the Chrome trace export, and sent to the page per second, at most. */
const KEPT_EVENTS = 200_000;
const SENT_EVENTS = 500;

/** A file an export button downloads. */
export interface ExportFile {
  readonly name: string;
  readonly type: string;
  readonly body: string | Uint8Array;
}

/**
 * One measurement the page started: a count, a latency histogram, an event table or a flame
 * graph (count by user stack) of some specs on a process or a command, read for the page every
 * second until stop() (the page's Stop, its stream closing, the server's end) or the end of
 * its process or command. stop() removes every probe it placed.
 */
export class Measurement {
  readonly id: string;
  readonly kind: MeasureKind;
  readonly specs: readonly string[];
  readonly #target: TargetChoice;
  readonly #startedMs = Date.now();
  #state: MeasureState = 'starting';
  #progress = 'resolving the specs and attaching the probes';
  #fraction: number | null = null;
  #error: string | null = null;
  #notes: string[] = [];
  #aggregate: Aggregate<ProbeCount[]> | Aggregate<ProbeHistogram[]> | undefined;
  #attachment: Attachment | undefined;
  #hex: HexFields = new Map();
  #returning: ReadonlySet<string> = new Set();
  #traceStartNs = process.hrtime.bigint();
  readonly #events: ProbeEvent[] = [];
  #eventsTotal = 0;
  #sentUpTo = 0;
  #previous = new Map<string, { count: bigint; atMs: number }>();
  #stopRequested = false;
  #devNull: number | undefined;
  #format: ((event: ProbeEvent) => string) | undefined;
  /** Told when the measurement ends by itself (its process or command ended, a failure). */
  onEnd: (() => void) | undefined;
  /** Told as its step under way gets on (the planning of a pattern's functions). */
  onProgress: ((progress: string, fraction: number | null) => void) | undefined;

  constructor(id: string, kind: MeasureKind, specs: readonly string[], target: TargetChoice) {
    this.id = id;
    this.kind = kind;
    this.specs = specs;
    this.#target = target;
  }

  /** Resolve and attach; a failure is kept (state `failed`, the error as the CLI says it). */
  async start(): Promise<void> {
    const engines = uiEngines();
    // The command's own output is not the server's: it goes nowhere.
    if (this.#target.command !== undefined) this.#devNull = openSync('/dev/null', 'w');
    const common = {
      pid: this.#target.pid,
      command: this.#target.command,
      commandStdout: this.#devNull,
      onNotice: (text: string) => this.#notes.push(text),
      onProgress: (step: PlanStep) => this.#planned(step),
    };
    try {
      if (this.kind === 'trace') {
        if (engines.trace === null) throw noEngine('trace');
        const attachment = await new Tracer().attach(this.specs, {
          ...common,
          // As trace's: from 40 probes, tracefs would take seconds to minutes to remove them.
          engine: engines.trace === 'tracefs' ? 'auto' : engines.trace,
        });
        this.#attachment = attachment;
        const options = sinkOptions(attachment.sites, this.#traceStartNs);
        this.#hex = options.hexFields;
        this.#returning = options.returning;
        this.#format = eventJsonFormatter(this.#hex);
        attachment.on('*', (event) => {
          this.#eventsTotal++;
          if (this.#events.length < KEPT_EVENTS) this.#events.push(event);
        });
        this.#attached(attachment.sites.length, attachment.skipped.length, [
          ...warningNotes(attachment.warnings),
          ...attachment.notes,
          ...noneOr(stepsNote(attachment.sites, 'returns')),
        ]);
        this.#progress = `tracing ${attachment.sites.length} probes (${attachment.engine})`;
        void attachment.ended.then(() => this.#ended(attachment.error));
      } else {
        if (engines.aggregate === null) throw noEngine(this.kind);
        const aggregate =
          this.kind === 'latency'
            ? await latencyOf(this.specs, { ...common, engine: 'bpf', unit: 'us' })
            : await countHits(this.specs, {
                ...common,
                engine: 'bpf',
                by: this.kind === 'stacks' ? 'ustack' : undefined,
              });
        this.#aggregate = aggregate;
        this.#attached(aggregate.sites.length, aggregate.skipped.length, [
          ...warningNotes(aggregate.warnings),
          ...aggregate.notes,
          ...(this.kind === 'latency' ? noneOr(stepsNote(aggregate.sites, 'calls')) : []),
        ]);
        const report = aggregate.attachReport;
        this.#progress = `${aggregate.sites.length} probes attached in ${report.milliseconds.toFixed(1)} ms (bpf)`;
        void aggregate.ended.then(() => this.#ended(aggregate.error));
      }
      if (this.#stopRequested) await this.stop();
    } catch (err) {
      this.#state = 'failed';
      this.#error = errorText(err);
      this.#progress = 'failed';
      this.#closeDevNull();
    }
  }

  #sites = 0;
  #skipped = 0;

  #planned(step: PlanStep): void {
    const planning = step.done < step.total;
    this.#progress = planning
      ? planProgressText(step)
      : `${grouped(step.total)} functions of ${step.target} planned; attaching the probes`;
    this.#fraction = planning && step.total > 0 ? step.done / step.total : null;
    this.onProgress?.(this.#progress, this.#fraction);
  }

  #attached(sites: number, skipped: number, notes: readonly string[]): void {
    this.#sites = sites;
    this.#skipped = skipped;
    this.#notes.push(...notes);
    this.#state = 'running';
  }

  #ended(error: unknown): void {
    if (this.#state !== 'running') return;
    this.#state = error === undefined ? 'stopped' : 'failed';
    if (error !== undefined) this.#error = errorText(error);
    if (!this.#stopRequested) this.#notes.push('the process or command ended');
    this.#closeDevNull();
    // Its process ended: the probes went with it; the maps and programs go now (the last
    // reading stays readable), not when the page closes the card.
    this.#aggregate?.close();
    void this.#attachment?.close();
    this.onEnd?.();
  }

  get state(): MeasureState {
    return this.#state;
  }

  /** Whether it holds probes (or is attaching them). */
  get running(): boolean {
    return this.#state === 'running' || this.#state === 'starting';
  }

  /** Nothing to free: its readings live in memory only. */
  dispose(): void {}

  /** Remove the probes (the last reading stays); a command started for it is ended. */
  async stop(): Promise<void> {
    this.#stopRequested = true;
    if (this.#state === 'starting') return; // start() stops it once attached
    const aggregate = this.#aggregate;
    if (aggregate !== undefined) {
      aggregate.stop();
      await aggregate.ended;
      aggregate.close();
    }
    await this.#attachment?.close();
    if (this.#state === 'running') this.#state = 'stopped';
    this.#closeDevNull();
  }

  /** At the server's exit: remove the probes now, without waiting. */
  closeSync(): void {
    this.#stopRequested = true;
    this.#aggregate?.close();
    this.#attachment?.closeSync();
  }

  #closeDevNull(): void {
    if (this.#devNull === undefined) return;
    closeSync(this.#devNull);
    this.#devNull = undefined;
  }

  /** The measurement now, for the page; a trace's events read since the last view. */
  view(): MeasurementView {
    const base = {
      id: this.id,
      kind: this.kind,
      specs: this.specs,
      target:
        this.#target.command !== undefined
          ? `command ${this.#target.command}`
          : this.#target.pid !== undefined
            ? `process ${this.#target.pid}`
            : 'every process',
      state: this.#state,
      elapsedMs: Date.now() - this.#startedMs,
      progress: this.#progress,
      fraction: this.#state === 'starting' ? this.#fraction : null,
      error: this.#error,
      notes: this.#notes,
      probes: this.#sites,
      skipped: this.#skipped,
    };
    const now = Date.now();
    if (this.kind === 'trace') {
      const fresh = this.#events.slice(this.#sentUpTo, this.#sentUpTo + SENT_EVENTS);
      this.#sentUpTo = Math.min(this.#events.length, this.#sentUpTo + SENT_EVENTS);
      let lost = 0;
      try {
        lost = this.#attachment?.stats().lost ?? 0;
      } catch {
        lost = 0; // closed
      }
      return {
        ...base,
        events: fresh.map((event) => JSON.parse(this.#format!(event)) as TraceEventView),
        eventsTotal: this.#eventsTotal,
        eventsLost: lost,
      };
    }
    const aggregate = this.#aggregate;
    if (aggregate === undefined) return base;
    if (this.kind === 'latency') {
      const rows = (aggregate as Aggregate<ProbeHistogram[]>).read();
      return { ...base, latency: rows.map((row) => this.#latencyRow(row, now)) };
    }
    const rows = (aggregate as Aggregate<ProbeCount[]>).read();
    if (this.kind === 'stacks') {
      return {
        ...base,
        stacks: rows.map((row) => ({
          frames: typeof row.key === 'string' ? row.key.split(';') : [row.probe],
          count: Number(row.count),
        })) satisfies StackRowView[],
      };
    }
    return {
      ...base,
      counts: rows.map(
        (row): CountRowView => ({
          probe: row.exit === 'unwind' ? `${row.probe} (unwound)` : row.probe,
          key: null,
          count: row.count.toString(),
          rate: this.#rate(`${row.probe}\0${row.exit ?? ''}`, row.count, now),
        }),
      ),
    };
  }

  /** Hits per second since the last reading of the same row. */
  #rate(key: string, count: bigint, now: number): number {
    const last = this.#previous.get(key);
    this.#previous.set(key, { count, atMs: now });
    if (last === undefined || now <= last.atMs) return 0;
    return (Number(count - last.count) * 1000) / (now - last.atMs);
  }

  #latencyRow(row: ProbeHistogram, now: number): LatencyRowView {
    const h: Histogram = row.histogram;
    // Percentiles, min and max are in nanoseconds; the buckets count microseconds.
    const at = (p: number) => {
      const value = percentile(h, p);
      return value === undefined ? null : Number(value);
    };
    return {
      probe: row.probe,
      count: h.count.toString(),
      rate: this.#rate(row.probe, h.count, now),
      meanNs: mean(h) ?? null,
      minNs: h.min === undefined ? null : Number(h.min),
      p50Ns: at(0.5),
      p90Ns: at(0.9),
      p99Ns: at(0.99),
      maxNs: h.max === undefined ? null : Number(h.max),
      buckets: histogramRows(h).map((b) => ({
        low: String(b.low ?? ''),
        high: String(b.high ?? ''),
        count: b.count.toString(),
      })),
    };
  }

  /** What an export button downloads: `svg` (flame graph), `chrome` (trace) or `json`. */
  exportFile(format: string): ExportFile | undefined {
    const stamp = new Date(this.#startedMs).toISOString().replace(/[:.]/g, '-');
    const base = `upscope-${this.kind}-${stamp}`;
    if (format === 'svg' && this.kind === 'stacks' && this.#aggregate !== undefined) {
      const rows = (this.#aggregate as Aggregate<ProbeCount[]>).read();
      return {
        name: `${base}.svg`,
        type: 'image/svg+xml',
        body: renderFlameGraph(rows, {
          title: 'upscope count --by ustack',
          subtitle: `${this.specs.join(' ')} on ${this.view().target}`,
        }),
      };
    }
    if (format === 'chrome' && this.kind === 'trace') {
      return {
        name: `${base}.trace.json`,
        type: 'application/json',
        body: renderChromeTrace(this.#events, {
          startNs: this.#traceStartNs,
          hexFields: this.#hex,
          returning: this.#returning,
          metadata: { source: 'upscope ui', specs: this.specs.join(' ') },
        }),
      };
    }
    if (format !== 'json') return undefined;
    let body: string;
    if (this.kind === 'trace') {
      const format = this.#format ?? eventJsonFormatter(this.#hex);
      body = this.#events.map((event) => `${format(event)}\n`).join('');
    } else if (this.#aggregate === undefined) {
      return undefined;
    } else if (this.kind === 'latency') {
      const rows = (this.#aggregate as Aggregate<ProbeHistogram[]>).read();
      body = `${renderHistogramsJson(rows, { duration: true, unit: 'usecs' })}\n`;
    } else {
      const rows = (this.#aggregate as Aggregate<ProbeCount[]>).read();
      body = `${renderCountsJson(rows, this.kind === 'stacks' ? 'ustack' : undefined)}\n`;
    }
    return {
      name: `${base}.${this.kind === 'trace' ? 'jsonl' : 'json'}`,
      type: 'application/json',
      body,
    };
  }
}

/** Why a measurement cannot run here: no engine it needs is allowed for this user. */
export function noEngine(what: MeasureKind | 'leaks'): ProbeError {
  const verb = what === 'trace' ? 'trace' : what === 'leaks' ? 'find leaks' : 'measure';
  return new ProbeError(
    'ERR_PRIVILEGES',
    `Cannot ${verb}: this user may use neither tracefs nor BPF`,
    {
      hints: [
        'Run upscope ui as root, or with CAP_BPF and CAP_PERFMON',
        'upscope doctor says what this machine allows',
      ],
    },
  );
}
