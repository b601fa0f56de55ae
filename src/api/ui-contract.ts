/**
 * What `upscope ui`'s server and its page say to each other: the JSON of its API and of its
 * event stream. Plain data only (counts as decimal strings, exact past 2^53); the page
 * imports these types, so nothing here may import Node.
 */

/** What the Measure view can start: count, latency histogram, event table, flame graph. */
export type MeasureKind = 'count' | 'latency' | 'trace' | 'stacks';

/** What a measurement runs on: a process, or a command it starts (and ends at its stop). */
export interface TargetChoice {
  readonly pid?: number | undefined;
  readonly command?: string | undefined;
}

/** POST /api/measure */
export interface MeasureRequest extends TargetChoice {
  /** The id the event stream gave this page: its measurements end when the stream closes. */
  readonly client: string;
  readonly kind: MeasureKind;
  readonly specs: readonly string[];
}

/** GET /api/processes */
export interface ProcessRow {
  readonly pid: number;
  readonly ppid: number;
  readonly comm: string;
  readonly commandLine: string;
  readonly user: string;
  readonly uid: number;
  readonly exe: string | null;
}

/** GET /api/doctor */
export interface DoctorView {
  readonly checks: readonly {
    readonly id: string;
    readonly title: string;
    readonly status: string;
    readonly detail: string;
    readonly fix?: string | undefined;
  }[];
  /** The engine count, latency and flame graphs run on, and the one traces run on (null: none). */
  readonly engines: { readonly aggregate: string | null; readonly trace: string | null };
  /** Why there is no engine, when there is none. */
  readonly why: string | null;
  /** Who the page probes as. */
  readonly user: string;
}

export interface FunctionRow {
  /** As shown: demangled, with its version. */
  readonly name: string;
  /** As stored in the file: what a spec names. */
  readonly symbol: string;
  readonly vaddr: string;
  readonly fileOffset: string | null;
  readonly size: number;
}

export interface UsdtRow {
  readonly provider: string;
  readonly name: string;
  readonly args: string;
  readonly vaddr: string;
}

/** GET /api/functions?target=PATH[&pid=PID] */
export interface FunctionsView {
  readonly path: string;
  readonly displayPath: string;
  readonly stripped: boolean;
  readonly debugFile: string | null;
  readonly functions: readonly FunctionRow[];
  readonly usdt: readonly UsdtRow[];
  /** With a pid: the ELF objects the process maps (to list another one's functions). */
  readonly objects: readonly string[];
}

/** POST /api/resolve: resolve's details of a spec, and the function's source lines. */
export interface ResolveView {
  /** What `upscope resolve SPEC` prints. */
  readonly text: string;
  /** Its errors, as the command line prints them. */
  readonly errors: readonly string[];
  readonly source: {
    readonly file: string;
    readonly lines: readonly { line: number; text: string | null; probe: boolean }[];
  } | null;
  /** Why there are no source lines (no debug info...). */
  readonly sourceWhy: string | null;
}

/** POST /api/validate: each spec's errors, as the command line prints them (empty: valid). */
export interface ValidateView {
  readonly errors: readonly (readonly string[])[];
}

export interface CountRowView {
  readonly probe: string;
  readonly key: string | null;
  readonly count: string;
  /** Hits per second over the last reading. */
  readonly rate: number;
}

export interface LatencyRowView {
  readonly probe: string;
  readonly count: string;
  readonly rate: number;
  /** Nanoseconds (null before the first call). */
  readonly meanNs: number | null;
  readonly minNs: number | null;
  readonly p50Ns: number | null;
  readonly p90Ns: number | null;
  readonly p99Ns: number | null;
  readonly maxNs: number | null;
  /** The log2 histogram in microseconds: [low, high) and count. */
  readonly buckets: readonly { low: string; high: string; count: string }[];
}

export interface StackRowView {
  /** Outermost frame first. */
  readonly frames: readonly string[];
  readonly count: number;
}

export interface TraceEventView {
  readonly timeNs: string;
  readonly probe: string;
  readonly kind: string;
  readonly pid: number;
  readonly tid: number;
  readonly comm: string;
  readonly fields: Readonly<Record<string, unknown>>;
  readonly latencyNs?: string;
}

export type MeasureState = 'starting' | 'running' | 'stopped' | 'failed';

export interface MeasurementView {
  readonly id: string;
  readonly kind: MeasureKind;
  readonly specs: readonly string[];
  /** `process 1234 (app)` or `command ./app`. */
  readonly target: string;
  readonly state: MeasureState;
  readonly elapsedMs: number;
  /** What it is doing while it starts (resolving, attaching), or how it attached. */
  readonly progress: string;
  /** How far the step has got (0 to 1), when known (the planning of a pattern's functions). */
  readonly fraction?: number | null;
  /** Its error as the command line prints it, when it failed. */
  readonly error: string | null;
  readonly notes: readonly string[];
  readonly probes: number;
  readonly skipped: number;
  readonly counts?: readonly CountRowView[];
  readonly latency?: readonly LatencyRowView[];
  readonly stacks?: readonly StackRowView[];
  /** trace: the events read since the last message (at most 500 a second). */
  readonly events?: readonly TraceEventView[];
  readonly eventsTotal?: number;
  readonly eventsLost?: number;
}

/** POST /api/record: record the calls of a process or command (the page's Record calls). */
export interface RecordRequest extends TargetChoice {
  readonly client: string;
  /** What to record, as `upscope record TARGET...` takes it (`./app`, `./app:parse_*`). */
  readonly targets: readonly string[];
  /** Functions left out (globs), as --exclude. */
  readonly exclude?: readonly string[] | undefined;
  /** The directory to keep the recording in (made if missing); none: a temporary one. */
  readonly dir?: string | undefined;
}

/** POST /api/open: read a recording directory on the server's machine. */
export interface OpenRequest {
  readonly client: string;
  /** Absolute, or relative to the directory upscope ui was started in. */
  readonly path: string;
}

export type RecordingState = 'starting' | 'recording' | 'loading' | 'ready' | 'failed';

/** A recording of calls, made from the page or read from disk: how it goes (every second). */
export interface RecordingView {
  readonly id: string;
  readonly kind: 'recording';
  /** `command ./app`, `process 1234`, or `recording DIR` (one read from disk). */
  readonly target: string;
  /** What was recorded (the targets asked for), empty for one read from disk. */
  readonly specs: readonly string[];
  readonly state: RecordingState;
  readonly elapsedMs: number;
  /** What it is doing (attaching, recording, reading), or what it holds once ready. */
  readonly progress: string;
  /** How far the step has got (0 to 1), when known. */
  readonly fraction: number | null;
  readonly error: string | null;
  readonly notes: readonly string[];
  /** What is wrong with the recording (truncated, events lost): the valid part is shown. */
  readonly problems: readonly string[];
  /** Its directory; temporary: removed when the page closes it or upscope ui stops. */
  readonly dir: string | null;
  readonly temporary: boolean;
  readonly functions: number;
  readonly records: number;
  readonly lost: number;
  readonly threads: number;
  /** How the command or process ended, when it did: `exit 0`, `SIGSEGV`. */
  readonly exit: string | null;
}

/** A path of the merged call tree (`upscope graph`); times in ns. */
export interface CallPathView {
  readonly fn: number;
  readonly calls: number;
  /** Of the calls, those of a function whose returns are not probed: not timed. */
  readonly untimed: number;
  readonly totalNs: number;
  readonly selfNs: number;
  /** The heaviest (total time) first. */
  readonly children: readonly CallPathView[];
}

/** A function of the recording, as `upscope report --json` says it; times in ns. */
export interface FunctionReportView {
  readonly function: string;
  readonly calls: number;
  readonly totalNs: number;
  readonly selfNs: number;
  readonly minNs: number;
  readonly avgNs: number;
  readonly maxNs: number;
  /** Calls an unwind ended (exception, longjmp), calls that never returned. */
  readonly unwound: number;
  readonly notReturned: number;
  /** Calls whose return the kernel left out (nested over 64 deep: RecordedFunction.trampoline). */
  readonly unreported: number;
  /**
   * Calls of a function whose returns are not probed (they cannot be found safely): counted,
   * not timed (RecordedFunction.untimed).
   */
  readonly untimed: number;
  /**
   * Which of its probes the kernel single-stepped ('entry', 'return', 'entry and return'):
   * a trap more each call, in its times (see RecordedFunction.stepped).
   */
  readonly kernelStepped?: string | undefined;
}

/** GET /api/recording?id=ID: a ready recording's call tree and report. */
export interface RecordingTreeView {
  /** Function ids are indexes into this list. */
  readonly functions: readonly string[];
  readonly roots: readonly CallPathView[];
  /** By total time, as `upscope report` sorts them. */
  readonly report: readonly FunctionReportView[];
  /** Paths in the whole tree, and whether fewer (the lightest) were sent. */
  readonly paths: number;
  readonly truncated: boolean;
}

/** POST /api/leaks: find the leaks of a process or a command (the Measure view's Leaks). */
export interface LeaksRequest extends TargetChoice {
  readonly client: string;
  /** The N stacks holding the most bytes (default 10), as upscope leaks --top. */
  readonly top?: number | undefined;
  /** Only blocks allocated at least this long ago, as --older-than. */
  readonly olderThanMs?: number | undefined;
  /** Also mmap and munmap, as --mmap. */
  readonly mmap?: boolean | undefined;
}

/** A call path's blocks not freed yet. */
export interface LeakStackView {
  readonly pid: number;
  /** Innermost (the allocator) first, as upscope leaks prints them: `fn+0x1a (app) at app.c:42`. */
  readonly frames: readonly string[];
  /** The functions alone, outermost first: what the flame graph merges frames by. */
  readonly names: readonly string[];
  /** Blocks and their bytes (decimal strings). */
  readonly count: string;
  readonly bytes: string;
  /** How long the oldest of them has been outstanding. */
  readonly oldestAgeMs: number;
}

/** A leak report of a process or command (upscope leaks), read every second. */
export interface LeakView {
  readonly id: string;
  readonly kind: 'leaks';
  /** `process 1234` or `command ./app`. */
  readonly target: string;
  /** The allocator's functions probed (`/usr/lib/x86_64-linux-gnu/libc.so.6:malloc`...). */
  readonly specs: readonly string[];
  readonly state: MeasureState;
  readonly elapsedMs: number;
  readonly progress: string;
  readonly error: string | null;
  readonly notes: readonly string[];
  /** The last report is the final one (the run ended: stopped, or the program ended). */
  readonly final: boolean;
  readonly olderThanMs: number | null;
  /** Every block outstanding (old enough), over every stack; null before the first report. */
  readonly outstanding: {
    readonly count: string;
    readonly bytes: string;
    readonly stacks: number;
  } | null;
  /** The stacks holding the most bytes, the most first. */
  readonly stacks: readonly LeakStackView[];
  /** What the allocator's probes counted (allocations, frees, unknownFrees...): decimal strings. */
  readonly counters: Readonly<Record<string, string>>;
  /**
   * Outstanding bytes over time: seconds since the start, every block's bytes, and those of
   * each stack that was among the top ones (labelled by its last functions).
   */
  readonly growth: {
    readonly t: readonly number[];
    readonly total: readonly number[];
    readonly stacks: readonly { readonly label: string; readonly bytes: readonly number[] }[];
  };
}

/**
 * What the page shows a card of, by kind: a measurement (count, latency, trace, stacks), a
 * recording, or a leak report. Each kind has its own view in the page.
 */
export type ResultView = MeasurementView | RecordingView | LeakView;

export type ResultViewKind = ResultView['kind'];

/** A message of GET /api/events (server-sent events, one JSON object each). */
export type StreamMessage =
  | { readonly type: 'hello'; readonly client: string }
  | { readonly type: 'results'; readonly results: readonly ResultView[] }
  /**
   * A step of a result under way, sent as it happens (between the results of every second):
   * `planning 2,000 of 3,706 functions of libc.so.6`, and how far it got (0 to 1).
   */
  | {
      readonly type: 'progress';
      readonly id: string;
      readonly progress: string;
      readonly fraction: number | null;
    };

/** An error answer of the API: the message as the command line prints it. */
export interface ErrorView {
  readonly error: string;
}

/** The header the page sends its token in (EventSource, which sends none, uses ?token=). */
export const TOKEN_HEADER = 'x-upscope-token';
