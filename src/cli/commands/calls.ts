import { mkdtempSync, rmSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import {
  CallGraphs,
  type CallObserver,
  CallTimeline,
  FunctionStatsBuilder,
  replayCalls,
} from '../../aggregate/index.js';
import {
  loadRecording,
  type RecordEngine,
  type Recording,
  type RecordingIndex,
  type RecordingProgress,
  recordCalls,
  threadLabel,
  threadsSaid,
} from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import {
  firstCallNs,
  isStackFormat,
  REPORT_SORTS,
  type ReportSort,
  renderCallGraphJson,
  renderCallGraphText,
  renderFunctionReportJson,
  renderFunctionReportText,
  renderReplayJson,
  renderReplayText,
  sortFunctionStats,
} from '../../output/index.js';
import { type Io, planProgress, progressLine, withOutput } from '../io.js';
import type { CommandResult } from '../main.js';
import {
  childrenOption,
  collect,
  commandEnd,
  debugDirOption,
  killAfterOption,
  lossReporter,
  outputOption,
  parsePid,
  positive,
  returnProbesOption,
  startLine,
  strictOption,
} from '../options.js';
import { checkTerminal, chooseFormat, formatOption } from '../outputs.js';
import { helperSignal, ptraceInHelper, runInHelper } from '../ptrace-helper.js';
import {
  functionIds,
  namer,
  renderGraphStacks,
  steppedOf,
  writeReplayTrace,
} from '../recording-documents.js';
import { sayUnprobedProgram } from '../unprobed-program.js';
import { installLifecycle } from './trace.js';

/** Options of the commands that record. */
interface RecordCliOptions {
  command?: string;
  pid?: number;
  children?: true;
  killAfter?: number;
  returnProbes?: 'auto' | 'sites' | 'trampoline';
  strict?: true;
  exclude?: string[];
  bufferSize?: number;
  debugDir?: string[];
  engine?: RecordEngine;
  duration?: number;
}

/**
 * Adds the recording options (-c, -p, --children, --kill-after, --exclude, --buffer-size,
 * --debug-dir, --return-probes, --strict, --duration, --engine) to `command`.
 */
function recordOptions<T extends Command<[string[]]>>(command: T): T {
  command
    .option('-c, --command <command>', "start this command and record it, e.g. -c './app 5'")
    .option(
      '-p, --pid <pid>',
      'record this running process (its threads, and the children it forks from now on)',
      parsePid,
    )
    .option(...childrenOption)
    .option(...killAfterOption)
    .option(
      '--exclude <glob>',
      'leave out the functions whose name matches GLOB (e.g. "_*"); repeatable',
      collect,
    )
    .option(
      '--buffer-size <KiB>',
      'ring-buffer size per CPU (default 8192); with --engine inject, of the ring in the process (default 49152, records of 192 bytes): more absorbs longer bursts of calls',
      positive('--buffer-size'),
    )
    .option(...debugDirOption)
    .option(...returnProbesOption)
    .option(...strictOption)
    .option(
      '--duration <seconds>',
      'end the recording after this many seconds (with -c, the command is ended too)',
      positive('--duration'),
    )
    .option(
      '--engine <engine>',
      'bpf (default: a BPF handler per entry and return writing to a BPF ring buffer), tracefs (uprobe_events and the tracing ring buffer), inject (-c or -p: hooks patched into the process record each call into a ring shared with upscope, no trap: the fastest) or ptrace (-c or -p: an int3 per entry and return, no root needed)',
      parseRecordEngine,
    );
  return command;
}

const TARGETS_HELP =
  'what to record: TARGET (every function of a program or library: ./app, libc) or ' +
  "TARGET:PATTERN ('libc:mem*', './app:parse_*'); default: every function of the " +
  "command's or process's executable";

export function registerCalls(program: Command, io: Io, result: CommandResult): void {
  recordOptions(
    program
      .command('record')
      .summary('record every call and return of the functions of a command or process')
      .description(
        'Record each entry into and return from every function of the main executable of the ' +
          'command (-c) or process (-p), or of the TARGETs given, with kernel uprobes on the ' +
          'unmodified binary (bpf engine: root, or CAP_BPF and CAP_PERFMON), or hooks patched ' +
          'into the process (--engine inject, no trap a call), into the directory ' +
          'DIR: calls.bin (binary records, written as they come) and index.json (functions, ' +
          'threads, losses). Threads and the child processes forked while it records are ' +
          "followed (with -p --children, those started before too); a Go function's calls are " +
          'recorded per goroutine. Read it with upscope ' +
          'report, graph and replay. Events lost (ring buffer full) are said as they happen and ' +
          'in the index. Ctrl-C ends the recording (with -p the process runs on). With ' +
          'kernel uprobes, the plan of each pattern (which functions, where each returns) is ' +
          'kept in ~/.cache/upscope/plans ($UPSCOPE_CACHE_DIR; empty: none) and taken again ' +
          'while the file and options are the same.',
      )
      .argument('[target...]', TARGETS_HELP)
      .requiredOption('-o, --output <dir>', 'the recording directory (made if missing)'),
  ).action(async (targets, options) => {
    if (toHelper(options as RecordCliOptions)) {
      result.status = await runInHelper();
      return;
    }
    const recorded = await record(targets, options as RecordCliOptions, options.output, io);
    result.status = recorded.status;
  });

  program
    .command('report')
    .summary("a recording's functions by total and self time, calls, min/avg/max")
    .description(
      'One line per function of the recording in DIR (per thread and function with ' +
        '--threads): the time spent in it (a recursion counted once), its self time (less its ' +
        'callees), its calls and their min, average and max duration. Calls an unwind ' +
        '(longjmp, exception) ended, or that never returned (exit() in a callee), are said, ' +
        'and so are the functions whose probes the kernel single-stepped (kernel-stepped: a ' +
        'first instruction it does not emulate, or a ret probed in place): a trap more each ' +
        'call, which their times include.',
    )
    .argument('<dir>', 'a recording made by upscope record')
    .option('--sort <key>', `sort by ${REPORT_SORTS.join(', ')} (default total)`, parseSort)
    .option('--threads', 'one line per thread and function')
    .option('--json', 'print JSON (times in ns); --format json')
    .option(...formatOption(['call-report']))
    .option(...outputOption)
    .action(async (dir, options) => {
      const format = chooseFormat('call-report', options);
      await withOutput(io, options.output, async (out) => {
        await report(dir, { ...options, format }, out, io);
      });
    });

  program
    .command('graph')
    .summary("a recording's merged call tree with counts and times")
    .description(
      'The call tree of every thread of the recording in DIR, merged by path (each chain of ' +
        'callers once), with calls, total and self time per path; from the outermost calls, or ' +
        'from every call of FUNC (a name or glob).',
    )
    .argument('<dir>', 'a recording made by upscope record')
    .argument('[func]', 'start from this function')
    .option('--depth <n>', 'show this many levels', positive('--depth'))
    .option('--json', 'print JSON (times in ns); --format json')
    .option(...formatOption(['call-graph']))
    .option(...outputOption)
    .action(async (dir, func, options) => {
      const format = chooseFormat('call-graph', options);
      checkTerminal(format, options.output !== undefined);
      await withOutput(io, options.output, async (out) => {
        // Made as the records are read: the tree is not kept.
        let graphs = new CallGraphs();
        const recording = await loadAndWarn(dir, io, (index) => {
          const from = func === undefined ? undefined : functionIds({ dir, index }, func);
          graphs = new CallGraphs({ from });
          return [graphs];
        });
        if (!isStackFormat(format)) {
          const render = format === 'json' ? renderCallGraphJson : renderCallGraphText;
          out.out(render(graphs.graph(), namer(recording), { depth: options.depth }));
          return;
        }
        out.out(renderGraphStacks(recording, format, { graphs, func, depth: options.depth }));
      });
    });

  program
    .command('replay')
    .summary("a recording's calls in time order per thread, indented, with durations")
    .description(
      'Each call of the recording in DIR on a line: per thread, in time order, indented by ' +
        'depth (the depth said past 64 levels), with the time since the recording began and ' +
        'its duration; a call an unwind ended is marked [unwound], one that never returned ' +
        '[no return: thread ended], one whose returns are not probed (they cannot be found ' +
        'safely) [returns not probed], without a duration. A Go recording has a tree per goroutine.',
    )
    .argument('<dir>', 'a recording made by upscope record')
    .option('--depth <n>', 'show calls at most N deep', positive('--depth'))
    .option(
      '--time-filter <time>',
      'hide calls shorter than TIME (e.g. 10us, 2ms; calls whose returns are not probed have no time and stay)',
      parseTime,
    )
    .option('-F, --filter <func>', 'only calls of FUNC and what they call; repeatable', collect)
    .option('-N, --notrace <func>', 'hide calls of FUNC and what they call; repeatable', collect)
    .option('--tid <tid>', 'only this thread; repeatable', (v, prev: number[] | undefined) => [
      ...(prev ?? []),
      parsePid(v),
    ])
    .option('--json', 'print JSON lines (a line per call); --format json')
    .option(...formatOption(['calls']))
    .option(...outputOption)
    .action(async (dir, options) => {
      const format = chooseFormat('calls', options);
      await withOutput(io, options.output, async (out) => {
        // The calls kept in columns as they are read, not as a tree; the functions -F and -N
        // name are looked up before.
        const timeline = new CallTimeline();
        let only: Set<number> | undefined;
        let hide: Set<number> | undefined;
        const recording = await loadAndWarn(dir, io, (index) => {
          const ids = (funcs: string[] | undefined) =>
            funcs === undefined
              ? undefined
              : new Set(funcs.flatMap((f) => [...functionIds({ dir, index }, f)]));
          only = ids(options.filter);
          hide = ids(options.notrace);
          return [timeline];
        });
        const name = namer(recording);
        const calls = untilClosed(
          replayCalls(timeline, {
            depth: options.depth,
            minDurationNs: options.timeFilter,
            only,
            hide,
            tids: options.tid === undefined ? undefined : new Set(options.tid),
          }),
          out.outputClosed,
        );
        const write = (text: string) => out.out(text);
        if (format === 'chrome' || format === 'speedscope') {
          writeReplayTrace(recording, format, (chunk) => out.out(chunk), calls);
        } else if (format === 'json') renderReplayJson(calls, name, write);
        else {
          renderReplayText(calls, name, write, {
            startNs: firstCallNs(recording.threads),
            thread: threadNamer(recording),
          });
        }
      });
    });

  recordOptions(
    program
      .command('calls')
      .summary('record a command and print its report in one step')
      .description(
        'upscope record into a temporary directory (removed after), then upscope report: ' +
          'every function of the command (or the TARGETs) by total and self time and calls.',
      )
      .argument('[target...]', TARGETS_HELP)
      .option('--sort <key>', `sort by ${REPORT_SORTS.join(', ')} (default total)`, parseSort)
      .option('--threads', 'one line per thread and function')
      .option('--json', 'print JSON (times in ns); --format json')
      .option(...formatOption(['call-report']))
      .option(...outputOption),
  ).action(async (targets, options) => {
    const format = chooseFormat('call-report', options);
    // The helper of a ptrace or inject run records and reports, all of it.
    if (toHelper(options as RecordCliOptions)) {
      result.status = await runInHelper();
      return;
    }
    const dir = mkdtempSync(join(tmpdir(), 'upscope-calls-'));
    try {
      const recorded = await record(targets, options as RecordCliOptions, join(dir, 'rec'), io);
      await withOutput(io, options.output, async (out) => {
        await report(join(dir, 'rec'), { ...options, format }, out, io);
      });
      result.status = recorded.status;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

/**
 * Whether this record runs on the ptrace engine (ptrace or inject) in a helper process that
 * restores the target if upscope is killed (this process then only waits for it).
 */
function toHelper(options: RecordCliOptions): boolean {
  return (options.engine === 'ptrace' || options.engine === 'inject') && ptraceInHelper();
}

async function record(
  targets: string[],
  options: RecordCliOptions,
  dir: string,
  io: Io,
): Promise<{ status: number }> {
  const inProcess = options.engine === 'ptrace' || options.engine === 'inject';
  if (options.engine === 'ptrace' && options.bufferSize !== undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot use --buffer-size with the ptrace engine: it has no ring buffer',
    );
  }
  // In the helper process, an ending signal (upscope's death) may have come already.
  if (inProcess && helperSignal() !== undefined) return { status: 130 };
  if (options.command === undefined && options.pid === undefined) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot record: give the command (-c CMD) or process (-p PID)',
      {
        hints: ["e.g. upscope record -c './app 5' -o app.calls"],
      },
    );
  }
  const engine = options.engine ?? 'bpf';
  const recorder = await recordCalls({
    command: options.command,
    pid: options.pid,
    children: options.children,
    killAfterMs: options.killAfter === undefined ? undefined : options.killAfter * 1000,
    returnProbes: options.returnProbes,
    strict: options.strict,
    targets,
    exclude: options.exclude,
    dir,
    bufferSizeKb: options.bufferSize === undefined ? undefined : Math.ceil(options.bufferSize),
    debugDirs: options.debugDir,
    engine: options.engine,
    onNotice: (text) => io.err(`upscope: ${text}\n`),
    onProgress: planProgress(io),
    // Said as soon as the probes are live: what runs from then on is recorded.
    onLive: ({ functions, skipped, warnings, notes }) =>
      io.err(
        notes.map((note) => `upscope: ${note}\n`).join('') +
          startLine(
            'Recording',
            functions,
            'function',
            `entry and return, ${engine}, to ${dir}`,
            skipped,
            engine === 'inject' ? 'ptrace' : engine,
            warnings,
          ),
      ),
  });
  const { attachment } = recorder;
  const endedBy = installLifecycle(attachment);
  const losses = lossReporter(
    () => attachment.stats(),
    io,
    'a larger --buffer-size or fewer functions lose fewer',
  );
  let timedOut = false;
  const timer =
    options.duration === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          void attachment.close();
        }, options.duration * 1000);
  let index: Awaited<typeof recorder.done>;
  try {
    index = await recorder.done;
  } finally {
    clearTimeout(timer);
    losses.stop();
  }
  if (attachment.error !== undefined) throw attachment.error;
  losses.say();
  // As trace and count say it: why the recording ended by itself.
  if (attachment.targetExited && options.pid !== undefined) {
    io.err(`upscope: process ${options.pid} exited, ending the recording\n`);
  }
  io.err(
    `upscope: recorded ${index.records} calls and returns of ${threadsSaid(index.threads)}, ${index.lost} lost\n`,
  );
  sayUnprobedProgram(io, index.records, options.command, attachment.sites);
  // Said whether or not the command's end is known yet (it gets its SIGTERM as the probes
  // are removed).
  if (timedOut) io.err(`upscope: --duration ${options.duration} s reached, ending the recording\n`);
  const exit = attachment.exit;
  if (exit !== undefined) {
    io.err(`upscope: ${commandEnd(exit)}\n`);
    // Ended as asked (--duration): the command's end is said, not taken.
    if (timedOut) return { status: 0 };
    return { status: exit.code ?? 128 + (constants.signals[exit.signal!] ?? 0) };
  }
  if (endedBy.signal !== undefined && endedBy.signal !== 'SIGINT') {
    return { status: 128 + constants.signals[endedBy.signal] };
  }
  return { status: 0 };
}

/** `upscope report`: made as the recording is read (its tree is not kept). */
async function report(
  dir: string,
  options: { sort?: ReportSort; threads?: true; format: string },
  out: Io,
  io: Io,
): Promise<void> {
  const stats = new FunctionStatsBuilder({ perThread: options.threads === true });
  const recording = await loadAndWarn(dir, io, () => [stats]);
  const name = namer(recording);
  const rows = sortFunctionStats(stats.rows(), options.sort ?? 'total', name);
  if (options.format === 'json') {
    out.out(renderFunctionReportJson(rows, name, steppedOf(recording)));
    return;
  }
  // A goroutine by its g in the TID column (its id there is the recording's own), a thread
  // by its id.
  const threads = new Map(recording.index.threads.map((t) => [t.tid, t]));
  const tid = (id: number) => {
    const thread = threads.get(id);
    return thread?.goroutine === undefined ? String(id) : threadLabel(thread, id);
  };
  out.out(renderFunctionReportText(rows, name, steppedOf(recording), tid));
}

/** A recording at least this large says how far its reading got, on a terminal. */
const PROGRESS_BYTES = 32 << 20;

/**
 * Reads a recording and says on stderr what is wrong with it (the valid part is shown); on a
 * terminal, a large one says how far its reading got meanwhile, on one line it clears after.
 * With `observers`, they are told of the calls and the tree is not kept.
 */
async function loadAndWarn(
  dir: string,
  io: Io,
  observers?: (index: RecordingIndex) => readonly CallObserver[],
): Promise<Recording> {
  const line = progressLine(io);
  const onProgress = (p: RecordingProgress) => {
    if (p.totalBytes < PROGRESS_BYTES) return;
    const mib = (n: number) => (n / (1 << 20)).toFixed(0);
    line.show(
      `upscope: reading the recording: ${Math.floor((p.bytes / p.totalBytes) * 100)}% (${mib(p.bytes)} of ${mib(p.totalBytes)} MiB, ${p.records} records)`,
    );
  };
  const recording = await loadRecording(dir, {
    onProgress,
    ...(observers === undefined ? {} : { observers, keep: false }),
  });
  line.clear();
  for (const problem of recording.problems) io.err(`upscope: warning: ${problem}\n`);
  return recording;
}

function parseRecordEngine(value: string): RecordEngine {
  if (value === 'bpf' || value === 'tracefs' || value === 'ptrace' || value === 'inject') {
    return value;
  }
  throw new ProbeError(
    'ERR_USAGE',
    `Cannot record with the engine "${value}": give bpf, tracefs, ptrace or inject`,
  );
}

function parseSort(value: string): ReportSort {
  if ((REPORT_SORTS as readonly string[]).includes(value)) return value as ReportSort;
  throw new ProbeError(
    'ERR_USAGE',
    `Cannot sort by "${value}": give one of ${REPORT_SORTS.join(', ')}`,
  );
}

/** A duration: a number with ns, us, ms or s (default us, as uftrace). */
function parseTime(value: string): bigint {
  const m = /^(\d+(?:\.\d+)?)(ns|us|ms|s)?$/.exec(value.trim());
  if (m === null) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --time-filter "${value}": give a time such as 10us, 2ms or 1s`,
    );
  }
  const scale = { ns: 1, us: 1e3, ms: 1e6, s: 1e9 }[(m[2] ?? 'us') as 'ns' | 'us' | 'ms' | 's'];
  return BigInt(Math.round(Number(m[1]) * scale));
}

/** `items` until `closed` (the reader of the output went away: `upscope replay DIR | head`). */
function* untilClosed<T>(items: Iterable<T>, closed: AbortSignal | undefined): Generator<T> {
  for (const item of items) {
    if (closed?.aborted === true) return;
    yield item;
  }
}

/** A recording's thread by its id: `thread 4707`, or `goroutine 0xc000102000`. */
function threadNamer(recording: Recording): (tid: number) => string {
  const threads = new Map(recording.index.threads.map((t) => [t.tid, t]));
  return (tid) => threadLabel(threads.get(tid), tid);
}
