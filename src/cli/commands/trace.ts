import { constants } from 'node:os';
import type { Command } from '@commander-js/extra-typings';
import {
  type Attachment,
  notLoadedNotes,
  type ProbeSite,
  probeName,
  Tracer,
} from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import { type Io, planProgress, withOutput } from '../io.js';
import type { CommandResult } from '../main.js';
import {
  childrenOption,
  commandEnd,
  commandEndJson,
  commandOutputOption,
  commandStdout,
  debugDirOption,
  includeSelfOption,
  jsonOutput,
  killAfterOption,
  lossReporter,
  machineReadable,
  outputOption,
  parsePid,
  parseTraceEngine,
  positive,
  returnProbesOption,
  startLine,
  strictOption,
} from '../options.js';
import {
  formatOption,
  otlpOption,
  releaseExporters,
  type TraceOutput,
  traceOutput,
} from '../outputs.js';
import { inPtraceHelper, ptraceInHelper, runInHelper } from '../ptrace-helper.js';
import { stepsNote } from '../stepped.js';
import { sayUnprobedProgram } from '../unprobed-program.js';
import { tracePtrace } from './trace-ptrace.js';
import { summaryLine } from './trace-summary.js';

export function registerTrace(program: Command, io: Io, result: CommandResult): void {
  program
    .command('trace')
    .summary('print every hit of the probes, with fetched values, return values and latencies')
    .description(
      'Trace each SPEC and print one line per ' +
        'event: time, command, pid/tid, probe and fetched fields. Return probes show the return ' +
        'value and the time since the matching call (on the kernel engines, a function whose ' +
        'first instruction the kernel single-steps has that trap in its time: said before the ' +
        'start). With -p, only that process is traced (all ' +
        'its threads, the children it forks meanwhile, and with --children those it has ' +
        'started already), and probes on a library it has not loaded yet attach when it loads ' +
        'it; with -c, the command is started in a process group of its own, traced from its ' +
        'first instruction with the children it starts, and its exit ends the trace and sets ' +
        'the exit status; when the trace ends first, the group gets SIGTERM (SIGKILL after ' +
        "--kill-after). Without either, every process but upscope's own. Ctrl-C ends the " +
        'trace; events lost are said on stderr as they happen, and a summary of events ' +
        'delivered, lost and missed at the end. Engines: tracefs (kernel uprobes; root; every ' +
        'process, or the one given), bpf (kernel uprobes with a BPF handler writing each hit to ' +
        'a BPF ring buffer; root, or CAP_BPF and CAP_PERFMON, with read access to tracefs for ' +
        '-p and -c) and ptrace (one process, -p or -c, probes served in user space by a helper ' +
        'process that restores the process even if upscope is killed; no root needed for your ' +
        "own processes; it counts beside another tracer's kernel uprobe on the same function, " +
        'and a process another ptrace tracer holds is refused naming it). A probed file ' +
        'replaced on disk (a rebuild, an upgrade) is probed again when a process loads it ' +
        'again, and said. On the kernel engines, the plan of a pattern that fetches nothing ' +
        '(which functions, each checked) is kept in ~/.cache/upscope/plans ' +
        '($UPSCOPE_CACHE_DIR; empty: none) and taken again while the file and options are ' +
        'the same.',
    )
    .argument('<spec...>', "probe specs, e.g. 'libc:malloc size=arg0:u64' 'r:./app:parse_request'")
    .option(
      '-p, --pid <pid>',
      'trace only this process (all its threads) and the children it forks from now on',
      parsePid,
    )
    .option(...childrenOption)
    .option(
      '-c, --command <command>',
      "start this command and trace only it (from its first instruction) and the children it starts, e.g. -c './app 5'",
    )
    .option(...killAfterOption)
    .option(...includeSelfOption)
    .option('--json', 'print JSON lines instead of text')
    .option(...formatOption(['trace']))
    .option(...outputOption)
    .option(...commandOutputOption)
    .option(...otlpOption)
    .option('--duration <seconds>', 'end the trace after this many seconds', positive('--duration'))
    .option(
      '--max-events <n>',
      'print this many events, then end the trace (the summary says how many more were read with them)',
      positive('--max-events'),
    )
    .option(
      '--buffer-size <KiB>',
      'ring-buffer size per CPU (default 4096; bpf: one buffer of twice this times the CPUs): more absorbs longer bursts',
      positive('--buffer-size'),
    )
    .option('--unsafe', 'allow raw addresses no symbol covers')
    .option(...strictOption)
    .option(...debugDirOption)
    .option(...returnProbesOption)
    .option(
      '--engine <engine>',
      'tracefs (kernel uprobes, root), bpf (kernel uprobes, BPF ring buffer, root), ptrace (one process, no root) or inject (one process, no root: function entries hooked inside the process, no trap per hit, memory and strings copied there, a string cut at 256 bytes; other probes as ptrace); by default as root tracefs, or bpf from 40 probes (tracefs removes its probes one at a time, about 50 ms each; said when chosen), else ptrace',
      parseTraceEngine,
    )
    .action(async (specs, options) => {
      const stdout = commandStdout(
        options.commandOutput,
        machineReadable(options),
        options.output === undefined,
      );
      try {
        await withOutput(io, options.output, async (out) => {
          const output = await traceOutput(options, out);
          try {
            await trace(specs, { ...options, commandStdout: stdout.fd }, out, result, output);
          } finally {
            await output.close();
          }
        });
      } finally {
        stdout.close();
      }
    });
}

interface TraceOptions {
  pid?: number;
  command?: string;
  children?: true;
  includeSelf?: true;
  killAfter?: number;
  /** The -c command's stdout (see --command-output); upscope's by default. */
  commandStdout?: number | undefined;
  json?: true;
  format?: string;
  duration?: number;
  maxEvents?: number;
  bufferSize?: number;
  unsafe?: true;
  strict?: true;
  debugDir?: string[];
  returnProbes?: 'auto' | 'sites' | 'trampoline';
  engine?: 'tracefs' | 'bpf' | 'ptrace' | 'inject';
}

async function trace(
  specs: string[],
  options: TraceOptions,
  io: Io,
  result: CommandResult,
  output: TraceOutput,
): Promise<void> {
  // Times print as seconds since the trace began: no event is older than this.
  const start = process.hrtime.bigint();
  const engine = inPtraceHelper()
    ? options.engine === 'inject'
      ? 'inject'
      : 'ptrace'
    : (options.engine ?? (process.getuid?.() === 0 ? 'auto' : 'ptrace'));
  if (engine === 'ptrace' || engine === 'inject') {
    if (options.bufferSize !== undefined) {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot use --buffer-size with the ${engine} engine: ${engine === 'ptrace' ? 'it has no ring buffer' : 'its ring buffer is sized in records, not per CPU'}`,
      );
    }
    // The tracer runs in a helper process that restores the target if upscope is killed.
    if (ptraceInHelper()) {
      await releaseExporters();
      result.status = await runInHelper();
      return;
    }
    const ended = await tracePtrace(
      specs,
      {
        pid: options.pid,
        command: options.command,
        children: options.children,
        killAfterMs: options.killAfter === undefined ? undefined : options.killAfter * 1000,
        includeSelf: options.includeSelf,
        commandStdout: options.commandStdout,
        unsafe: options.unsafe,
        strict: options.strict,
        debugDirs: options.debugDir,
        returnProbes: options.returnProbes,
        durationSeconds: options.duration,
        maxEvents: options.maxEvents,
        engine,
      },
      io,
      (sites) => output.sink(sinkOptions(sites, start)),
    );
    if (ended.exit !== undefined) {
      if (jsonOutput(options)) io.out(commandEndJson(ended.pid, ended.exit));
      io.err(`upscope: ${commandEnd(ended.exit)}\n`);
    }
    result.status = 0;
    return;
  }
  const attachment = await new Tracer().attach(specs, {
    onProgress: planProgress(io),
    pid: options.pid,
    command: options.command,
    children: options.children,
    includeSelf: options.includeSelf,
    killAfterMs: options.killAfter === undefined ? undefined : options.killAfter * 1000,
    commandStdout: options.commandStdout,
    unsafe: options.unsafe,
    strict: options.strict,
    debugDirs: options.debugDir,
    returnProbes: options.returnProbes,
    bufferSizeKb: options.bufferSize === undefined ? undefined : Math.ceil(options.bufferSize),
    engine,
    // A pattern that fetches nothing is planned lean and its plan kept, as record's (lost
    // events are then counted in all, which is all a trace says of them).
    lean: true,
    onNotice: (text) => io.err(`upscope: ${text}\n`),
  });
  installLifecycle(attachment);
  const sink = output.sink(sinkOptions(attachment.sites, start));
  sink.begin();
  if (options.pid !== undefined) {
    for (const note of notLoadedNotes(attachment.sites, options.pid)) io.err(`upscope: ${note}\n`);
  }
  for (const note of attachment.notes) io.err(`upscope: ${note}\n`);
  // A return's time is from its function's entry: the same caveat as latency's.
  const note = stepsNote(attachment.sites, 'returns');
  if (note !== undefined) io.err(`upscope: ${note}\n`);
  io.err(
    startLine(
      'Tracing',
      attachment.sites.length,
      'probe',
      attachment.engine,
      attachment.skipped,
      attachment.engine,
      attachment.warnings,
    ),
  );
  const timer =
    options.duration === undefined
      ? undefined
      : setTimeout(() => void attachment.close(), options.duration * 1000);
  // Lines are made as events are read (none is kept) and written 64 KiB at a time.
  let count = 0;
  const max = options.maxEvents ?? Number.POSITIVE_INFINITY;
  // A write that fails (a full disk) ends the trace; the error is reported once it is down.
  let failure: unknown;
  attachment.on('*', (event) => {
    if (count >= max || failure !== undefined) return;
    try {
      sink.value(event);
    } catch (err) {
      failure = err; // a write failed
      void attachment.close();
    }
    if (++count === max) void attachment.close();
  });
  // Losses are said as they happen, not only in the summary.
  const losses = lossReporter(
    () => attachment.stats(),
    io,
    'a larger --buffer-size, fewer probes or -o FILE lose fewer',
  );
  // What was read goes out at least every 100 ms: a reader (`| head -3`, `| jq`) sees events
  // as they come, and one that went away is noticed (EPIPE), which ends the trace.
  const flushTimer = setInterval(() => {
    try {
      sink.flush();
    } catch (err) {
      failure ??= err;
      void attachment.close();
    }
  }, 100);
  const onClosed = () => void attachment.close();
  io.outputClosed?.addEventListener('abort', onClosed, { once: true });
  await attachment.ended;
  clearTimeout(timer);
  losses.stop();
  clearInterval(flushTimer);
  io.outputClosed?.removeEventListener('abort', onClosed);
  if (failure !== undefined) throw failure;
  sink.lost(attachment.stats().lost);
  sink.end();
  if (attachment.error !== undefined) throw attachment.error;
  losses.say();
  if (attachment.targetExited) io.err(`upscope: process ${options.pid} exited, ending the trace\n`);
  const stats = attachment.stats();
  io.err(`upscope: ${summaryLine(count, max, stats)}\n`);
  if (attachment.returnsLeftOut > 0) {
    io.err(
      `upscope: the kernel did not report the returns of ${attachment.returnsLeftOut} calls (it leaves out the return probes of calls nested over 64 deep in a thread); --return-probes sites catches every return\n`,
    );
  }
  sayUnprobedProgram(io, stats.delivered, options.command, attachment.sites);
  // Ended as asked (the command's or the process's end, --duration, --max-events, a signal,
  // the reader gone): status 0; the command's own status is said, not taken.
  if (attachment.exit !== undefined) {
    if (jsonOutput(options)) io.out(commandEndJson(attachment.commandPid, attachment.exit));
    io.err(`upscope: ${commandEnd(attachment.exit)}\n`);
  }
  result.status = 0;
}

/**
 * End the trace cleanly on Ctrl-C, SIGTERM and SIGHUP (a second signal forces it), and remove
 * every probe on any exit, including an uncaught error.
 */
export function installLifecycle(attachment: Pick<Attachment, 'close' | 'closeSync' | 'ended'>): {
  signal: NodeJS.Signals | undefined;
} {
  const state: { signal: NodeJS.Signals | undefined } = { signal: undefined };
  const onSignal = (signal: NodeJS.Signals) => {
    if (state.signal !== undefined) {
      attachment.closeSync();
      process.exit(128 + constants.signals[signal]);
    }
    state.signal = signal;
    void attachment.close();
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of signals) process.on(signal, onSignal);
  const onExit = () => attachment.closeSync();
  process.on('exit', onExit);
  const onUncaught = (err: unknown) => {
    attachment.closeSync();
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`error[ERR_INTERNAL]: Trace failed: ${message}\n`);
    process.exit(70);
  };
  process.on('uncaughtException', onUncaught);
  void attachment.ended.then(() => {
    for (const signal of signals) process.off(signal, onSignal);
    process.off('exit', onExit);
    process.off('uncaughtException', onUncaught);
  });
  return state;
}

/** Per probe, how each field prints: hex for the x* types and pointers, else as it comes. */
function valueFormats(sites: readonly ProbeSite[]): Map<string, Map<string, boolean>> {
  const hex = new Map<string, Map<string, boolean>>();
  for (const site of sites) {
    const own = hex.get(probeName(site)) ?? new Map<string, boolean>();
    for (const fetch of site.fetches) {
      own.set(
        fetch.name,
        fetch.type !== undefined && (fetch.type.startsWith('x') || fetch.type === 'ptr'),
      );
    }
    hex.set(probeName(site), own);
  }
  return hex;
}

/** What the sinks need of a trace's probes: fields shown in hex, probes with a return probe. */
export function sinkOptions(sites: readonly ProbeSite[], startNs: bigint) {
  return {
    startNs,
    hexFields: valueFormats(sites),
    returning: new Set(sites.filter((s) => s.kind === 'return').map((s) => probeName(s))),
  };
}
