import { constants } from 'node:os';
import type { Command } from '@commander-js/extra-typings';
import {
  type Aggregate,
  type AggregateOptions,
  bpfAllowed,
  countHits,
  type HandlerErrors,
  histogramOf,
  type LatencyUnit,
  latencyOf,
  notLoadedNotes,
  type ProbeCount,
  type ProbeHistogram,
  UNIT_NS,
} from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import { type Io, planProgress, withOutput } from '../io.js';
import type { CommandResult } from '../main.js';
import {
  childrenOption,
  commandEnd,
  commandOutputOption,
  commandStdout,
  debugDirOption,
  includeSelfOption,
  killAfterOption,
  machineReadable,
  outputOption,
  parsePid,
  positive,
  returnProbesOption,
  startLine,
  strictOption,
} from '../options.js';
import {
  formatOption,
  otlpOption,
  type Printer,
  prometheusOption,
  releaseExporters,
  withAggregateOutput,
} from '../outputs.js';
import { helperSignal, inPtraceHelper, ptraceInHelper, runInHelper } from '../ptrace-helper.js';
import { stepsNote } from '../stepped.js';
import { sayUnprobedProgram } from '../unprobed-program.js';

/** What onEngine() reads of a command's options (and sets: commandStdout). */
export interface EngineOptions<E extends 'bpf' | 'ptrace' | 'inject' = 'bpf' | 'ptrace'> {
  pid?: number;
  command?: string;
  engine?: E;
  output?: string;
  json?: true;
  format?: string;
  commandOutput?: string;
  commandStdout?: number | undefined;
}

interface CommonOptions {
  pid?: number;
  command?: string;
  children?: true;
  includeSelf?: true;
  killAfter?: number;
  tid?: number;
  comm?: string;
  filter?: string;
  duration?: number;
  interval?: number;
  json?: true;
  format?: string;
  prometheus?: string;
  otlp?: string;
  output?: string;
  unsafe?: true;
  strict?: true;
  debugDir?: string[];
  returnProbes?: 'auto' | 'sites' | 'trampoline';
  engine?: 'bpf' | 'ptrace' | 'inject';
  commandOutput?: string;
  /** The -c command's stdout (see --command-output), set by onEngine(). */
  commandStdout?: number | undefined;
}

function parseEngine(value: string): 'bpf' | 'ptrace' | 'inject' {
  if (value === 'bpf' || value === 'ptrace' || value === 'inject') return value;
  throw new ProbeError(
    'ERR_USAGE',
    `Cannot use engine "${value}" here: give bpf, ptrace or inject`,
  );
}

/**
 * Run on the engine asked for; by default on bpf, and on ptrace when BPF is not allowed and
 * there is one process (-p) or command (-c) to serve the probes of in user space. Whether
 * BPF is allowed is tried before anything starts: a command is never started twice. A
 * ptrace run happens in a helper process that restores the target if upscope is killed
 * (this process then only waits for it), or here when this process is that helper.
 */
export async function onEngine<E extends 'bpf' | 'ptrace' | 'inject'>(
  options: EngineOptions<E>,
  io: Io,
  result: CommandResult,
  body: (engine: E | 'bpf' | 'ptrace') => Promise<void>,
): Promise<void> {
  let engine: E | 'bpf' | 'ptrace' = options.engine ?? 'bpf';
  // The helper process was started because the ptrace engine (or inject, which runs on it)
  // was chosen (and said why).
  if (inPtraceHelper()) engine = options.engine === 'inject' ? options.engine : 'ptrace';
  const oneProcess = options.pid !== undefined || options.command !== undefined;
  if (options.engine === undefined && engine === 'bpf' && oneProcess && !bpfAllowed()) {
    io.err('upscope: BPF is not allowed here: using the ptrace engine (slower per hit)\n');
    engine = 'ptrace';
  }
  if ((engine === 'ptrace' || engine === 'inject') && ptraceInHelper()) {
    // The helper runs the same command line: it listens on the exporters' ports instead.
    await releaseExporters();
    result.status = await runInHelper();
    return;
  }
  const stdout = commandStdout(
    options.commandOutput,
    machineReadable(options),
    options.output === undefined,
  );
  options.commandStdout = stdout.fd;
  try {
    await body(engine);
  } finally {
    stdout.close();
  }
}

// biome-ignore lint/complexity/noBannedTypes: commander's own default for no options yet
function common<Opts extends Record<string, unknown> = {}>(command: Command<[string[]], Opts>) {
  return command
    .option(
      '-p, --pid <pid>',
      'only this process (all its threads) and the children it forks from now on',
      parsePid,
    )
    .option(...childrenOption)
    .option(
      '-c, --command <command>',
      "start this command and aggregate only it (from its exec on) and the children it starts, e.g. -c './app 5'",
    )
    .option(...killAfterOption)
    .option(...includeSelfOption)
    .option('--tid <tid>', 'only this thread', parsePid)
    .option('--comm <name>', 'only threads of this name')
    .option('--filter <expr>', "only hits where this holds, e.g. 'arg0 > 4096' or 'retval:s32 < 0'")
    .option('--duration <seconds>', 'stop after this many seconds', positive('--duration'))
    .option(
      '--interval <seconds>',
      'print the totals every this many seconds',
      positive('--interval'),
    )
    .option('--json', 'print JSON instead of text')
    .option(...outputOption)
    .option(...prometheusOption)
    .option(...otlpOption)
    .option(...commandOutputOption)
    .option('--unsafe', 'allow raw addresses no symbol covers')
    .option(...strictOption)
    .option(...debugDirOption)
    .option(...returnProbesOption)
    .option(
      '--engine <engine>',
      'bpf (in the kernel; root or CAP_BPF and CAP_PERFMON), ptrace (one process, -p or -c, ' +
        'in user space, far slower per hit) or inject (one process, -p or -c, function entries ' +
        'and returns hooked inside it, no trap per hit; a plain count, latency without a ' +
        'filter and hist of a register argument are aggregated inside it); by default bpf, ' +
        'or ptrace where ' +
        'BPF is not allowed',
      parseEngine,
    );
}

function aggregateOptions(
  options: CommonOptions,
  io: Io,
  engine: 'bpf' | 'ptrace' | 'inject',
): AggregateOptions {
  return {
    onProgress: planProgress(io),
    engine,
    onNotice: (text) => io.err(`upscope: ${text}\n`),
    pid: options.pid,
    command: options.command,
    children: options.children,
    includeSelf: options.includeSelf,
    killAfterMs: options.killAfter === undefined ? undefined : options.killAfter * 1000,
    commandStdout: options.commandStdout,
    tid: options.tid,
    comm: options.comm,
    filter: options.filter,
    unsafe: options.unsafe,
    strict: options.strict,
    debugDirs: options.debugDir,
    returnProbes: options.returnProbes,
  };
}

/**
 * The hits and calls an aggregation's handlers could not count (or time), by reason, as the
 * metrics export them (upscope_hits_not_counted_total).
 */
export function notCounted(errors: HandlerErrors): Record<string, bigint> {
  return {
    map_full: errors.dropped,
    fault: errors.faults,
    unmatched: errors.unmatched,
    deep: errors.deep,
    unreported: errors.unreported ?? 0n,
  };
}

/**
 * What the handlers of an aggregation could not take, in a few words each (none when they
 * took every hit): `what` is the command's word (Counting shows the calls unwinds took away
 * as rows of their own; Timing says the calls it could not time). `running`: the probes were
 * placed in a process already running (-p), whose calls begun before them return unmatched.
 */
export function handlerNotes(
  aggregate: Pick<Aggregate<unknown>, 'errors' | 'engine'>,
  what: string,
  running = false,
): string[] {
  // count shows the calls unwinds took away as rows of their own; the others say how many.
  const countsUnwinds = what === 'Counting';
  const errors = aggregate.errors();
  const notes: string[] = [];
  if (errors.dropped > 0n) {
    notes.push(
      aggregate.engine === 'inject'
        ? `${errors.dropped} hits not counted (the ring buffer the hooks write into was full)`
        : `${errors.dropped} hits not counted (a map was full)`,
    );
  }
  if (errors.faults > 0n) notes.push(`${errors.faults} hits whose value could not be read`);
  if (errors.unmatched > 0n) {
    notes.push(
      `${errors.unmatched} returns without their entry${running ? ' (calls begun before the probes were placed)' : ''}`,
    );
  }
  if (errors.deep > 0n && what === 'Timing') {
    notes.push(`${errors.deep} calls nested over 16 deep, not timed`);
  }
  if (errors.unwound > 0n && !countsUnwinds) {
    notes.push(
      aggregate.engine === 'inject'
        ? `${errors.unwound} calls ended by an unwind (an exception, a panic) or in flight when an exception began, not timed`
        : `${errors.unwound} calls ended by an unwind (an exception, a panic), not timed`,
    );
  }
  if ((errors.unreported ?? 0n) > 0n) {
    notes.push(
      `${errors.unreported} calls whose return the kernel did not report (it leaves out the return probes of calls nested over 64 deep in a thread, and a longjmp skips them), ${what === 'Timing' ? 'not timed' : 'not counted'}; --return-probes sites catches every return`,
    );
  }
  if ((errors.spansLost ?? 0n) > 0n) {
    notes.push(`${errors.spansLost} calls timed but not sent as spans (the span buffer was full)`);
  }
  return notes;
}

/**
 * Run an aggregation until Ctrl-C, --duration, or the end of the command or process; print
 * it every --interval and at the end; set the command's exit status.
 */
async function run<R>(
  aggregate: Aggregate<R>,
  options: CommonOptions,
  what: string,
  noun: string,
  io: Io,
  result: CommandResult,
  print: Printer<R>,
  /** The hits a reading holds, in all (none: the run may say why, sayUnprobedProgram()). */
  hits: (reading: R) => bigint,
): Promise<void> {
  const report = aggregate.attachReport;
  const how =
    aggregate.engine === 'ptrace' || aggregate.engine === 'inject'
      ? `process ${aggregate.commandPid ?? options.pid}`
      : report.multi > 0 && report.perf === 0
        ? 'uprobe_multi'
        : report.multi === 0
          ? 'perf events'
          : `${report.multi} uprobe_multi, ${report.perf} perf events`;
  // Ctrl-C from the moment the start line is out ends the run as it should.
  let signal: NodeJS.Signals | undefined;
  const onSignal = (received: NodeJS.Signals) => {
    if (signal !== undefined) {
      aggregate.close();
      process.exit(128 + constants.signals[received]);
    }
    signal = received;
    aggregate.stop();
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of signals) process.on(s, onSignal);
  if (options.pid !== undefined) {
    for (const note of notLoadedNotes(aggregate.sites, options.pid)) io.err(`upscope: ${note}\n`);
  }
  for (const note of aggregate.notes) io.err(`upscope: ${note}\n`);
  if (what === 'Timing' && aggregate.engine === 'bpf') {
    const note = stepsNote(aggregate.sites, 'calls');
    if (note !== undefined) io.err(`upscope: ${note}\n`);
  }
  io.err(
    startLine(
      what,
      aggregate.sites.length,
      noun,
      `${aggregate.engine}, ${how}, attached in ${report.milliseconds.toFixed(1)} ms`,
      aggregate.skipped,
      aggregate.engine === 'inject' ? 'ptrace' : aggregate.engine,
      aggregate.warnings,
    ),
  );
  // In the ptrace helper, an ending signal (upscope's death) may have come already.
  const early = helperSignal();
  if (early !== undefined) onSignal(early);
  const onExit = () => aggregate.close();
  process.on('exit', onExit);
  print.live?.(
    () => aggregate.read(),
    () => {
      const errors = aggregate.errors();
      return {
        eventsLost: errors.dropped,
        probesAttached: aggregate.sites.length,
        attachErrors: aggregate.skipped.length,
        notCounted: notCounted(errors),
      };
    },
  );
  const timer =
    options.duration === undefined
      ? undefined
      : setTimeout(() => aggregate.stop(), options.duration * 1000);
  const ticker =
    options.interval === undefined
      ? undefined
      : setInterval(() => {
          if (failure !== undefined) return;
          try {
            print(aggregate.read(), false);
          } catch (err) {
            failure = err; // a write failed (a full disk): stop, and report it once detached
            aggregate.stop();
          }
        }, options.interval * 1000);
  let failure: unknown;
  // The reader of the output went away (`| head`): end as on Ctrl-C.
  const onClosed = () => aggregate.stop();
  io.outputClosed?.addEventListener('abort', onClosed, { once: true });
  try {
    await aggregate.ended;
  } finally {
    io.outputClosed?.removeEventListener('abort', onClosed);
    clearTimeout(timer);
    clearInterval(ticker);
    process.off('exit', onExit);
  }
  // The signal handlers stay until the totals are out: a Ctrl-C that comes as the run ends
  // by itself (the process exited) must not kill upscope before it prints them.
  try {
    if (failure !== undefined) throw failure;
    if (aggregate.error !== undefined) throw aggregate.error;
    if (aggregate.targetExited) io.err(`upscope: process ${options.pid} exited\n`);
    const reading = aggregate.read();
    print(reading, true);
    sayUnprobedProgram(io, hits(reading), options.command, aggregate.sites);
    const notes = handlerNotes(aggregate, what, options.pid !== undefined);
    if (notes.length > 0) io.err(`upscope: ${notes.join(', ')}\n`);
  } finally {
    aggregate.close();
    for (const s of signals) process.off(s, onSignal);
  }
  // Ended as asked (the command's or the process's end, --duration, a signal, the reader
  // gone): status 0; the command's own status is said, not taken.
  if (aggregate.exit !== undefined) io.err(`upscope: ${commandEnd(aggregate.exit)}\n`);
  result.status = 0;
}

const UNIT_WORDS: Readonly<Record<LatencyUnit, string>> = {
  ns: 'nsecs',
  us: 'usecs',
  ms: 'msecs',
};

function parseUnit(value: string): LatencyUnit {
  if (value in UNIT_NS) return value as LatencyUnit;
  throw new ProbeError('ERR_USAGE', `Cannot use unit "${value}": give ns, us or ms`);
}

function parseLinear(value: string): { min: bigint; max: bigint; step: bigint } {
  const parts = value.split(',');
  const numbers = parts.map((part) => (/^-?\d+$/.test(part.trim()) ? BigInt(part.trim()) : null));
  if (numbers.length !== 3 || numbers.some((n) => n === null)) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --linear "${value}": give MIN,MAX,STEP as whole numbers, e.g. --linear 0,4096,256`,
    );
  }
  const [min, max, step] = numbers as bigint[];
  return { min: min!, max: max!, step: step! };
}

export function registerAggregate(program: Command, io: Io, result: CommandResult): void {
  common(
    program
      .command('count')
      .summary('count probe hits in the kernel, per probe or per key')
      .description(
        'Count the hits of each SPEC with an in-kernel (eBPF) handler: millions of hits a ' +
          'second at about the cost of the kernel uprobe itself. With --by, counts are kept per ' +
          'process, thread, thread name, user stack or fetched value (e.g. --by arg0, --by ' +
          "'+0(arg0):string'). --by ustack unwinds each stack from the call frame information " +
          'of its files (.eh_frame, .debug_frame), so code built without frame pointers shows ' +
          'whole stacks; JIT code is walked by frame pointers and named from /tmp/perf-PID.map ' +
          'or jitdump; a stack cut short ends with a [stack cut: REASON] frame. Totals ' +
          'print at the end (Ctrl-C, --duration, or the end of the ' +
          '-c command or -p process) and every --interval. A return probe whose returns are ' +
          'caught at its exits (Go programs; C++, Rust and pthread_cancel unwinds; see ' +
          '--return-probes) also counts the calls an unwind took away, as "PROBE (unwound)". ' +
          '-p takes the process and the children it forks meanwhile (--children: also those it ' +
          'has started already); -c the command from its exec and the children it starts, and ' +
          'ends it with SIGTERM to its process group when the count ends first (SIGKILL after ' +
          "--kill-after); without either, every process but upscope's own. " +
          'Needs root or CAP_BPF and CAP_PERFMON; without them, -p and -c run on the ptrace ' +
          "engine (which counts beside another tracer's kernel uprobe on the same function). " +
          'A probed file replaced on disk (a rebuild, an upgrade) is probed again when a ' +
          'process loads it again, and said. The plan of a pattern that fetches nothing (which ' +
          'functions, each checked) is kept in ~/.cache/upscope/plans ($UPSCOPE_CACHE_DIR; ' +
          'empty: none) and taken again while the file and options are the same.',
      )
      .argument('<spec...>', "probe specs, e.g. 'libc:malloc' 'r:./app:parse_*'"),
  )
    .option(
      '--by <key[,key...]>',
      "count per pid, tid, comm, ustack, or a value: arg0, retval, +0(arg1):string (kept to 63 bytes, a longer one ending with ...), a variable by name; several keys joined by commas (--by comm,pid), or --by given again, count per their combination, as bpftrace's @[comm, pid] (ustack goes alone)",
      (value: string, previous: string | undefined) =>
        previous === undefined ? value : `${previous},${value}`,
    )
    .option('--top <n>', 'print only the N largest counts', positive('--top'))
    .option(...formatOption(['count', 'stacks']))
    .option(
      '--inlines',
      'with --by ustack: show functions inlined at each frame as frames of their own (from DWARF)',
    )
    .action((specs, options) =>
      withOutput(io, options.output, async (io) => {
        if (options.inlines === true && options.by !== 'ustack') {
          throw new ProbeError(
            'ERR_USAGE',
            'Cannot use --inlines: it names the frames of --by ustack',
            {
              hints: ["For example: upscope count --by ustack --inlines -c './app' './app:parse'"],
            },
          );
        }
        await withAggregateOutput('count', options, io, (print: Printer<ProbeCount[]>) =>
          onEngine(options, io, result, async (engine) => {
            const aggregate = await countHits(specs, {
              ...aggregateOptions(options, io, engine),
              by: options.by,
              inlines: options.inlines,
            });
            await run(aggregate, options, 'Counting', 'probe', io, result, print, hitsOfCounts);
          }),
        );
      }),
    );

  common(
    program
      .command('hist')
      .summary('histogram of a fetched value in the kernel (e.g. the size passed to malloc)')
      .description(
        'Keep a histogram of VALUE at each hit of SPEC, in the kernel: log2 buckets by default ' +
          '(8 steps within each power of two, shown by powers of two), or linear ones with ' +
          '--linear MIN,MAX,STEP. Prints count, sum, average, min, p50/p90/p99 and max with ' +
          'the histogram. VALUE is a fetch as in specs: arg0, retval:s64, +8(arg0):u32.',
      )
      .argument('<spec...>', "the probe spec and the value, e.g. 'libc:malloc' arg0"),
  )
    .option('--linear <min,max,step>', 'linear buckets instead of log2', parseLinear)
    .option(...formatOption(['hist']))
    .action((args, options) =>
      withOutput(io, options.output, async (io) => {
        if (args.length < 2) {
          throw new ProbeError('ERR_USAGE', 'Cannot make a histogram: give a SPEC and a VALUE', {
            hints: ["For example: upscope hist 'libc:malloc' arg0"],
          });
        }
        const value = args.at(-1)!;
        const specs = args.slice(0, -1);
        await withAggregateOutput(
          'hist',
          { ...options, value },
          io,
          (print: Printer<ProbeHistogram[]>) =>
            onEngine(options, io, result, async (engine) => {
              const aggregate = await histogramOf(specs, value, {
                ...aggregateOptions(options, io, engine),
                linear: options.linear,
              });
              await run(
                aggregate,
                options,
                'Histogram of',
                'probe',
                io,
                result,
                print,
                hitsOfHistograms,
              );
            }),
        );
      }),
    );

  common(
    program
      .command('latency')
      .summary('histogram of the time from entry to return of functions, in the kernel')
      .description(
        'Time each call of the functions SPEC names, from entry to return, in the kernel: ' +
          'per thread, with recursion kept apart (each call matched to its own return); in Go ' +
          'programs per goroutine, which may move between threads. ' +
          'Prints count, average, min, p50/p90/p99 and max, and a log2 histogram in --unit. ' +
          "--filter is decided at each call's entry, where the arguments are (one on retval at " +
          'its return). The functions whose first instruction the kernel single-steps (runs out ' +
          'of line after a trap, where it emulates a push or a jmp) are said before the start: ' +
          'their times include that trap.',
      )
      .argument('<spec...>', "functions, e.g. './app:parse_request' 'libc:read'"),
  )
    .option('--unit <unit>', 'histogram unit: ns, us (default) or ms', parseUnit)
    .option(...formatOption(['latency']))
    .action((specs, options) =>
      withOutput(io, options.output, async (io) => {
        const unit = options.unit ?? 'us';
        await withAggregateOutput(
          'latency',
          { ...options, unit: UNIT_WORDS[unit] },
          io,
          (print: Printer<ProbeHistogram[]>) =>
            onEngine(options, io, result, async (engine) => {
              const aggregate = await latencyOf(specs, {
                ...aggregateOptions(options, io, engine),
                unit,
                onCall: print.call,
              });
              await run(
                aggregate,
                options,
                'Timing',
                'function',
                io,
                result,
                print,
                hitsOfHistograms,
              );
            }),
        );
      }),
    );
}

/** The hits of a count, every probe and key. */
function hitsOfCounts(rows: readonly ProbeCount[]): bigint {
  return rows.reduce((sum, row) => sum + row.count, 0n);
}

/** The hits of histograms (hist, latency), every probe. */
function hitsOfHistograms(rows: readonly ProbeHistogram[]): bigint {
  return rows.reduce((sum, row) => sum + row.histogram.count, 0n);
}
