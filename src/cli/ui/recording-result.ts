import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  CallGraphs,
  CallTimeline,
  depthFirst,
  type FunctionStats,
  FunctionStatsBuilder,
  type GraphNode,
  replayCalls,
} from '../../aggregate/index.js';
import {
  type CallPathView,
  type CallRecorder,
  loadRecording,
  type Recording,
  type RecordingState,
  type RecordingTreeView,
  type RecordingView,
  recordCalls,
  threadsSaid,
} from '../../api/index.js';
import { grouped } from '../../internal/index.js';
import {
  functionReportRows,
  renderCallGraphJson,
  renderFunctionReportText,
  sortFunctionStats,
} from '../../output/index.js';
import { planProgressText } from '../io.js';
import { namer, renderGraphStacks, steppedOf, writeReplayTrace } from '../recording-documents.js';
import { type ExportFile, errorText, uiEngines, warningNotes } from './measurement.js';

/** Paths of the call tree sent to the page at most (the heaviest; the rest are summed up). */
const MAX_PATHS = 20_000;
/** Levels of the call tree the page is sent (its tree is drawn nested, level by level). */
const MAX_VIEW_DEPTH = 256;

/** What the page asked to record. */
export interface RecordChoice {
  readonly pid?: number | undefined;
  readonly command?: string | undefined;
  readonly targets: readonly string[];
  readonly exclude?: readonly string[] | undefined;
  /** Where to keep it (resolved against the server's directory); none: a temporary one. */
  readonly dir?: string | undefined;
}

/**
 * A recording of calls for the page: one it makes (upscope record's entry and return probes on
 * the functions asked for, in a process or a command it starts, until Stop or the end of the
 * program) or one read from disk; read back into its call tree (with progress), then kept for
 * the page's tree, report, flame graph and exports. A temporary directory is removed by
 * dispose().
 */
export class RecordingResult {
  readonly id: string;
  readonly kind = 'recording' as const;
  readonly #target: string;
  readonly #specs: readonly string[];
  readonly #startedMs = Date.now();
  #state: RecordingState = 'starting';
  #progress: string;
  #fraction: number | null = null;
  #error: string | null = null;
  readonly #notes: string[] = [];
  #dir: string | null = null;
  #temporary = false;
  #recorder: CallRecorder | undefined;
  #recording: Recording | undefined;
  /** What was made of it as it was read (its tree is not kept). */
  #made:
    | { graph: GraphNode[]; stats: FunctionStats[]; graphs: CallGraphs; timeline: CallTimeline }
    | undefined;
  #functions = 0;
  #stopRequested = false;
  #devNull: number | undefined;
  readonly #abort = new AbortController();
  #tree: RecordingTreeView | undefined;
  /** Told when it changes by itself (the program ended, reading finished, a failure). */
  onEnd: (() => void) | undefined;
  /** Told as the planning of its functions gets on. */
  onProgress: ((progress: string, fraction: number | null) => void) | undefined;

  private constructor(id: string, target: string, specs: readonly string[], progress: string) {
    this.id = id;
    this.#target = target;
    this.#specs = specs;
    this.#progress = progress;
  }

  /** Starts recording (attaching may take a while: the view says so meanwhile). */
  static record(id: string, choice: RecordChoice): RecordingResult {
    const target =
      choice.command !== undefined ? `command ${choice.command}` : `process ${choice.pid}`;
    const what = choice.targets.length > 0 ? choice.targets.join(' ') : 'its executable';
    const result = new RecordingResult(
      id,
      target,
      choice.targets,
      `resolving the functions of ${what} and attaching an entry and a return probe to each`,
    );
    void result.#record(choice);
    return result;
  }

  /** Reads the recording in `path` (relative: to the server's directory). */
  static open(id: string, path: string): RecordingResult {
    const dir = resolve(path);
    const result = new RecordingResult(id, `recording ${dir}`, [], `reading ${dir}`);
    result.#dir = dir;
    void result.#load(dir);
    return result;
  }

  async #record(choice: RecordChoice): Promise<void> {
    // BPF where allowed (as upscope record); else tracefs for root; else bpf says why not.
    const engines = uiEngines();
    const engine = engines.aggregate ?? (engines.trace === 'tracefs' ? 'tracefs' : 'bpf');
    try {
      if (choice.dir === undefined) {
        this.#dir = join(mkdtempSync(join(tmpdir(), 'upscope-ui-')), 'recording');
        this.#temporary = true;
      } else {
        this.#dir = resolve(choice.dir);
      }
      if (choice.command !== undefined) this.#devNull = openSync('/dev/null', 'w');
      const attachStarted = performance.now();
      const recorder = await recordCalls({
        command: choice.command,
        pid: choice.pid,
        commandStdout: this.#devNull,
        targets: choice.targets,
        exclude: choice.exclude,
        dir: this.#dir,
        engine,
        signal: this.#abort.signal,
        onNotice: (text) => this.#notes.push(text),
        onProgress: (step) => {
          const planning = step.done < step.total;
          this.#progress = planning
            ? planProgressText(step)
            : `${grouped(step.total)} functions of ${step.target} planned; attaching an entry and a return probe to each`;
          this.#fraction = planning && step.total > 0 ? step.done / step.total : null;
          this.onProgress?.(this.#progress, this.#fraction);
        },
      });
      this.#fraction = null;
      this.#recorder = recorder;
      this.#functions = recorder.functions;
      const ms = performance.now() - attachStarted;
      this.#notes.push(...warningNotes(recorder.attachment.warnings), ...recorder.attachment.notes);
      const skipped = recorder.attachment.skipped.length;
      this.#progress = `${recorder.functions} functions (${recorder.attachment.sites.length} probes) attached in ${(ms / 1000).toFixed(1)} s (${engine})${skipped > 0 ? `, ${skipped} sites skipped` : ''}`;
      this.#state = 'recording';
      if (this.#stopRequested) void recorder.attachment.close();
      let index: Awaited<CallRecorder['done']>;
      try {
        index = await recorder.done;
      } finally {
        this.#closeDevNull();
      }
      if (recorder.attachment.error !== undefined) throw recorder.attachment.error;
      if (!this.#stopRequested) this.#notes.push('the process or command ended');
      this.#functions = index.functions.length;
      this.onEnd?.();
      await this.#load(this.#dir);
    } catch (err) {
      this.#fail(err);
    }
  }

  async #load(dir: string): Promise<void> {
    this.#state = 'loading';
    this.#progress = `reading ${dir}`;
    this.#fraction = 0;
    try {
      const graphs = new CallGraphs();
      const stats = new FunctionStatsBuilder();
      const timeline = new CallTimeline();
      const recording = await loadRecording(dir, {
        keep: false,
        observers: () => [graphs, stats, timeline],
        signal: this.#abort.signal,
        onProgress: (p) => {
          this.#fraction = p.totalBytes > 0 ? p.bytes / p.totalBytes : null;
          this.#progress = `reading the recording: ${mib(p.bytes)} of ${mib(p.totalBytes)}, ${p.records} calls and returns`;
        },
      });
      this.#recording = recording;
      this.#made = { graph: graphs.graph(), stats: stats.rows(), graphs, timeline };
      this.#functions = recording.index.functions.length;
      this.#fraction = null;
      this.#progress = `${recording.records} calls and returns of ${recording.index.functions.length} functions in ${threadsSaid(recording.index.threads)}, ${recording.index.engine} engine, recorded ${recording.index.startedAt}`;
      this.#state = 'ready';
    } catch (err) {
      this.#fail(err);
    }
    this.onEnd?.();
  }

  #fail(err: unknown): void {
    if (this.#abort.signal.aborted) return;
    this.#state = 'failed';
    this.#error = errorText(err);
    this.#fraction = null;
    this.#closeDevNull();
  }

  #closeDevNull(): void {
    if (this.#devNull === undefined) return;
    closeSync(this.#devNull);
    this.#devNull = undefined;
  }

  get state(): RecordingState {
    return this.#state;
  }

  /** Whether it holds probes (or is attaching them). */
  get running(): boolean {
    return this.#state === 'starting' || this.#state === 'recording';
  }

  /** Ends the recording: the probes are removed (a command started for it is ended). */
  async stop(): Promise<void> {
    this.#stopRequested = true;
    const recorder = this.#recorder;
    if (recorder === undefined) return; // still attaching: #record() closes it once attached
    await recorder.attachment.close();
    await recorder.done.catch(() => {});
  }

  /** At the server's exit: remove the probes now, without waiting. */
  closeSync(): void {
    this.#stopRequested = true;
    this.#recorder?.attachment.closeSync();
  }

  /** Stops reading, and removes a temporary directory; what is kept on disk stays. */
  dispose(): void {
    this.#abort.abort();
    this.closeSync();
    this.#recording = undefined;
    this.#made = undefined;
    this.#tree = undefined;
    if (this.#temporary && this.#dir !== null) {
      rmSync(resolve(this.#dir, '..'), { recursive: true, force: true });
    }
  }

  view(): RecordingView {
    const recording = this.#recording;
    const index = recording?.index;
    const exit = index?.exit ?? this.#recorder?.attachment.exit;
    return {
      id: this.id,
      kind: this.kind,
      target: this.#target,
      specs: this.#specs,
      state: this.#state,
      elapsedMs: Date.now() - this.#startedMs,
      progress:
        this.#state === 'recording'
          ? `${this.#progress}; recording: ${this.#recorder?.records() ?? 0} calls and returns so far`
          : this.#progress,
      fraction: this.#fraction,
      error: this.#error,
      notes: this.#notes,
      problems: recording?.problems ?? [],
      dir: this.#dir,
      temporary: this.#temporary,
      functions: this.#functions,
      records: recording?.records ?? this.#recorder?.records() ?? 0,
      lost: index?.lost ?? 0,
      threads: recording?.threads.length ?? 0,
      exit:
        exit === undefined ? null : exit.signal !== undefined ? exit.signal : `exit ${exit.code}`,
    };
  }

  /** The call tree and report, once ready (computed once). */
  tree(): RecordingTreeView | undefined {
    const recording = this.#recording;
    const made = this.#made;
    if (recording === undefined || made === undefined) return undefined;
    if (this.#tree !== undefined) return this.#tree;
    const name = namer(recording);
    const roots = made.graph;
    let paths = 0;
    let deeper = false;
    for (const root of roots) {
      depthFirst(root, (_, depth) => {
        paths++;
        deeper ||= depth >= MAX_VIEW_DEPTH;
      });
    }
    // The heaviest paths first (depth first), until MAX_PATHS: what is left out is light.
    // Paths deeper than MAX_VIEW_DEPTH are left out too (a recursion thousands deep).
    let budget = MAX_PATHS;
    const view = (nodes: readonly GraphNode[], depth: number): CallPathView[] => {
      if (depth >= MAX_VIEW_DEPTH) return [];
      const kept = [...nodes]
        .sort((a, b) => (a.totalNs > b.totalNs ? -1 : a.totalNs < b.totalNs ? 1 : 0))
        .slice(0, Math.max(0, budget));
      budget -= kept.length;
      return kept.map((n) => ({
        fn: n.fn,
        calls: n.calls,
        untimed: n.untimed,
        totalNs: Number(n.totalNs),
        selfNs: Number(n.selfNs),
        children: view(n.children, depth + 1),
      }));
    };
    const report = functionReportRows(
      sortFunctionStats(made.stats, 'total', name),
      name,
      steppedOf(recording),
    );
    this.#tree = {
      functions: recording.index.functions.map((f) => f.name),
      roots: view(roots, 0),
      report,
      paths,
      truncated: paths > MAX_PATHS || deeper,
    };
    return this.#tree;
  }

  /**
   * What an export button downloads: the call tree as a flame graph SVG, folded stacks, pprof
   * or speedscope (as upscope graph writes them), the calls as a Chrome trace (upscope replay),
   * the report as text, or the call tree as JSON.
   */
  exportFile(format: string): ExportFile | undefined {
    const recording = this.#recording;
    const made = this.#made;
    if (recording === undefined || made === undefined) return undefined;
    const { graphs } = made;
    const stamp = recording.index.startedAt.replace(/[:.]/g, '-');
    const base = `upscope-calls-${stamp}`;
    const name = namer(recording);
    switch (format) {
      case 'svg':
        return {
          name: `${base}.svg`,
          type: 'image/svg+xml',
          body: renderGraphStacks(recording, 'flamegraph', { graphs }),
        };
      case 'folded':
        return {
          name: `${base}.folded`,
          type: 'text/plain; charset=utf-8',
          body: renderGraphStacks(recording, 'folded', { graphs }),
        };
      case 'pprof':
        return {
          name: `${base}.pb.gz`,
          type: 'application/octet-stream',
          body: renderGraphStacks(recording, 'pprof', { graphs }),
        };
      case 'speedscope':
        return {
          name: `${base}.speedscope.json`,
          type: 'application/json',
          body: renderGraphStacks(recording, 'speedscope', { graphs }),
        };
      case 'chrome': {
        const chunks: (string | Uint8Array)[] = [];
        writeReplayTrace(
          recording,
          'chrome',
          (chunk) => chunks.push(chunk),
          replayCalls(made.timeline),
        );
        return {
          name: `${base}.trace.json`,
          type: 'application/json',
          body: chunks.map((c) => (typeof c === 'string' ? c : Buffer.from(c).toString())).join(''),
        };
      }
      case 'report':
        return {
          name: `${base}.report.txt`,
          type: 'text/plain; charset=utf-8',
          body: renderFunctionReportText(
            sortFunctionStats(made.stats, 'total', name),
            name,
            steppedOf(recording),
          ),
        };
      case 'json':
        return {
          name: `${base}.graph.json`,
          type: 'application/json',
          body: renderCallGraphJson(made.graph, name),
        };
      default:
        return undefined;
    }
  }
}

function mib(bytes: number): string {
  return `${(bytes / (1 << 20)).toFixed(1)} MiB`;
}
