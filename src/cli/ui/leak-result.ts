import { closeSync, openSync } from 'node:fs';
import {
  type LeakSnapshot,
  type Leaks,
  type LeakView,
  leaks,
  type MeasureState,
  type TargetChoice,
} from '../../api/index.js';
import {
  frameLabel,
  leakFrameText,
  renderLeaksJson,
  renderLeaksText,
  type StackFormat,
} from '../../output/index.js';
import { leakTitle, renderLeakStacks } from '../leak-documents.js';
import { type ExportFile, errorText, noEngine, uiEngines } from './measurement.js';

/** What the page asked of a leak report (upscope leaks' options of the same names). */
export interface LeakChoice extends TargetChoice {
  readonly top?: number | undefined;
  readonly olderThanMs?: number | undefined;
  readonly mmap?: boolean | undefined;
}

/** Points of the growth chart sent at most (evenly spread over the run, the last one kept). */
const GROWTH_POINTS = 600;
/** Stacks of the growth chart (those that were among the top ones, the heaviest now first). */
const GROWTH_STACKS = 8;

/** The stack formats an export button downloads, with the extension of each. */
const STACK_EXPORTS: Readonly<Record<string, { format: StackFormat; extension: string }>> = {
  svg: { format: 'flamegraph', extension: 'svg' },
  folded: { format: 'folded', extension: 'folded' },
  pprof: { format: 'pprof', extension: 'pb.gz' },
};

/**
 * A leak report the page started: `upscope leaks` on a process or a command (the library's
 * leaks(): the allocator's functions probed on the bpf engine, each block paired with its
 * free in the kernel), read every second for the page (a report of the stacks holding the
 * most bytes, and the growth of each) until stop() or the end of its program; then its last
 * report stays, with what was outstanding at the end.
 */
export class LeakResult {
  readonly id: string;
  readonly kind = 'leaks' as const;
  readonly #choice: LeakChoice;
  readonly #startedMs = Date.now();
  #state: MeasureState = 'starting';
  #progress = 'finding the allocator and attaching its probes';
  #error: string | null = null;
  readonly #notes: string[] = [];
  #found: Leaks | undefined;
  #specs: readonly string[] = [];
  #last: LeakSnapshot | undefined;
  #final: LeakSnapshot | undefined;
  /** Every block's bytes at each report: [seconds, bytes]. */
  readonly #totals: [number, number][] = [];
  #stopRequested = false;
  #ending: Promise<void> | undefined;
  #devNull: number | undefined;
  /** Told when it ends by itself (its process or command ended, a failure). */
  onEnd: (() => void) | undefined;

  constructor(id: string, choice: LeakChoice) {
    this.id = id;
    this.#choice = choice;
  }

  /** Find the allocator and attach; a failure is kept (state `failed`, the CLI's words). */
  async start(): Promise<void> {
    const choice = this.#choice;
    // The command's own output is not the server's: it goes nowhere.
    if (choice.command !== undefined) this.#devNull = openSync('/dev/null', 'w');
    try {
      if (uiEngines().aggregate === null) throw noEngine('leaks');
      const found = await leaks({
        engine: 'bpf',
        pid: choice.pid,
        command: choice.command,
        commandStdout: this.#devNull,
        top: choice.top,
        olderThanMs: choice.olderThanMs,
        mmap: choice.mmap,
        onNotice: (text) => this.#notes.push(text),
      });
      this.#found = found;
      const aggregate = found.aggregate;
      this.#specs = aggregate.sites.map((site) => site.spec);
      this.#notes.push(...aggregate.notes);
      const report = aggregate.attachReport;
      this.#progress = `${aggregate.sites.length} functions of ${found.allocator.path} probed, attached in ${report.milliseconds.toFixed(1)} ms (bpf)`;
      this.#state = 'running';
      void found.ended.then(() => this.#ended());
      if (this.#stopRequested) await this.stop();
    } catch (err) {
      this.#state = 'failed';
      this.#error = errorText(err);
      this.#progress = 'failed';
      this.#closeDevNull();
    }
  }

  /** The run ended (Stop, or its program ended): the final report is kept, the rest freed. */
  #ended(): Promise<void> {
    this.#ending ??= this.#end();
    return this.#ending;
  }

  async #end(): Promise<void> {
    const found = this.#found;
    if (found === undefined) return;
    const error = found.aggregate.error;
    try {
      this.#final = await found.final();
      this.#point(this.#final);
    } finally {
      found.close();
      this.#closeDevNull();
    }
    if (error !== undefined) {
      this.#state = 'failed';
      this.#error = errorText(error);
    } else {
      this.#state = 'stopped';
    }
    if (!this.#stopRequested) {
      this.#notes.push(
        found.aggregate.targetExited
          ? `process ${this.#choice.pid} exited: the last report is what it had not freed then`
          : 'the command ended: the last report is what it had not freed when it exited',
      );
    }
    this.onEnd?.();
  }

  get state(): MeasureState {
    return this.#state;
  }

  /** Whether it holds probes (or is attaching them). */
  get running(): boolean {
    return this.#state === 'running' || this.#state === 'starting';
  }

  /** Remove the probes (the last report stays); a command started for it is ended. */
  async stop(): Promise<void> {
    this.#stopRequested = true;
    const found = this.#found;
    if (found === undefined) return; // start() stops it once attached
    found.stop();
    await found.ended;
    await this.#ended();
  }

  /** At the server's exit: remove the probes now, without waiting. */
  closeSync(): void {
    this.#stopRequested = true;
    this.#found?.close();
  }

  /** Nothing to free: its reports live in memory only. */
  dispose(): void {}

  #closeDevNull(): void {
    if (this.#devNull === undefined) return;
    closeSync(this.#devNull);
    this.#devNull = undefined;
  }

  #point(snapshot: LeakSnapshot): void {
    this.#last = snapshot;
    this.#totals.push([snapshot.elapsedMs / 1000, Number(snapshot.outstanding.bytes)]);
  }

  /** The report now (a new one while it runs: each view is a reading of the kernel's maps). */
  #report(): LeakSnapshot | undefined {
    if (this.#final !== undefined) return this.#final;
    const found = this.#found;
    if (this.#state !== 'running' || found === undefined || found.stopped) return this.#last;
    this.#point(found.snapshot());
    return this.#last;
  }

  view(): LeakView {
    const choice = this.#choice;
    const report = this.#report();
    return {
      id: this.id,
      kind: this.kind,
      target: choice.command !== undefined ? `command ${choice.command}` : `process ${choice.pid}`,
      specs: this.#specs,
      state: this.#state,
      elapsedMs: Date.now() - this.#startedMs,
      progress: this.#progress,
      error: this.#error,
      notes: this.#notes,
      final: this.#final !== undefined,
      olderThanMs: choice.olderThanMs ?? null,
      outstanding:
        report === undefined
          ? null
          : {
              count: report.outstanding.count.toString(),
              bytes: report.outstanding.bytes.toString(),
              stacks: report.outstanding.stacks,
            },
      stacks: (report?.stacks ?? []).map((row) => ({
        pid: row.pid,
        frames: row.frames.map(leakFrameText),
        names: row.frames.map((frame) => frameLabel(frame)).toReversed(),
        count: row.count.toString(),
        bytes: row.bytes.toString(),
        oldestAgeMs: row.oldestAgeMs,
      })),
      counters: Object.fromEntries(
        Object.entries(report?.counters ?? {}).map(([k, v]) => [k, String(v)]),
      ),
      growth: this.#growth(report),
    };
  }

  /** The totals over time, and each shown stack's bytes at the same times (0 when absent). */
  #growth(report: LeakSnapshot | undefined): LeakView['growth'] {
    const keep = spread(this.#totals.length, GROWTH_POINTS);
    const times = keep.map((i) => this.#totals[i]![0]);
    const stacks = [...(report?.growth ?? [])]
      .map((g) => {
        // Its bytes at each report it was seen in (then until the next one: 0 once freed).
        const at = new Map(g.series.map(([ms, bytes]) => [ms / 1000, Number(bytes)]));
        let value = 0;
        const all = this.#totals.map(([t]) => {
          value = at.get(t) ?? value;
          return value;
        });
        const frames = g.folded.split(';');
        return {
          label: `${frames.slice(-3).join(' › ')} (pid ${g.pid})`,
          bytes: keep.map((i) => all[i]!),
        };
      })
      .sort((a, b) => (b.bytes.at(-1) ?? 0) - (a.bytes.at(-1) ?? 0))
      .slice(0, GROWTH_STACKS);
    return { t: times, total: keep.map((i) => this.#totals[i]![1]), stacks };
  }

  /**
   * What an export button downloads, as upscope leaks writes it: the flame graph SVG, folded
   * stacks or pprof of the last report (weighed by bytes), the report as text, or JSON (a
   * line, with the growth of each stack).
   */
  exportFile(format: string): ExportFile | undefined {
    const report = this.#final ?? this.#last;
    if (report === undefined) return undefined;
    const stamp = new Date(this.#startedMs).toISOString().replace(/[:.]/g, '-');
    const base = `upscope-leaks-${stamp}`;
    const stacks = STACK_EXPORTS[format];
    if (stacks !== undefined) {
      return {
        name: `${base}.${stacks.extension}`,
        type:
          format === 'svg'
            ? 'image/svg+xml'
            : format === 'pprof'
              ? 'application/octet-stream'
              : 'text/plain; charset=utf-8',
        body: renderLeakStacks(report, stacks.format, leakTitle(this.#choice)),
      };
    }
    if (format === 'text') {
      return {
        name: `${base}.txt`,
        type: 'text/plain; charset=utf-8',
        body: renderLeaksText(report),
      };
    }
    if (format === 'json') {
      return {
        name: `${base}.json`,
        type: 'application/json',
        body: `${renderLeaksJson(report)}\n`,
      };
    }
    return undefined;
  }
}

/** At most `most` indexes of `n`, evenly spread, the first and the last kept. */
function spread(n: number, most: number): number[] {
  if (n <= most) return Array.from({ length: n }, (_, i) => i);
  return Array.from({ length: most }, (_, i) => Math.round((i * (n - 1)) / (most - 1)));
}
