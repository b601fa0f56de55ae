import {
  alarmIn,
  evaluateFetch,
  type FetchSource,
  type FieldValue,
  type HitContext,
  interruptWaitsOn,
  notLoadedNotes,
  type ProbeEvent,
  type ProbeSite,
  ProcessTracer,
  parseSpec,
  probeName,
  qualifyNames,
  type SkippedSite,
  ThreadNames,
} from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import type { Io } from '../io.js';
import { startLine } from '../options.js';
import { helperSignal } from '../ptrace-helper.js';
import { summaryLine } from './trace-summary.js';

export interface PtraceTraceOptions {
  readonly pid?: number | undefined;
  readonly command?: string | undefined;
  /** The command's stdout: a file descriptor of this process (its own stdout by default). */
  readonly commandStdout?: number | undefined;
  readonly unsafe?: boolean | undefined;
  /** A function a pattern matches that cannot be probed is an error, not skipped. */
  readonly strict?: boolean | undefined;
  readonly debugDirs?: readonly string[] | undefined;
  readonly returnProbes?: 'auto' | 'sites' | 'trampoline' | undefined;
  readonly durationSeconds?: number | undefined;
  readonly maxEvents?: number | undefined;
}

/** How a ptrace trace ended: the command's status (with -c), and the signal that ended it. */
export interface PtraceTraceResult {
  readonly exitCode: number | undefined;
  readonly signal: NodeJS.Signals | undefined;
}

/**
 * `upscope trace` on the ptrace engine: one process (-p) or command (-c), probes served in
 * user space, each hit formatted by `format` and written as it happens. Ends when the process
 * exits, after --duration or --max-events, or on Ctrl-C/SIGTERM/SIGHUP, and then detaches
 * (a process attached with -p runs on; a command started with -c is killed if still running).
 */
export async function tracePtrace(
  specs: readonly string[],
  options: PtraceTraceOptions,
  io: Io,
  makeFormat: (sites: readonly ProbeSite[]) => (event: ProbeEvent) => string,
): Promise<PtraceTraceResult> {
  let format: (event: ProbeEvent) => string = () => '';
  let count = 0;
  const max = options.maxEvents ?? Number.POSITIVE_INFINITY;
  let text = '';
  const flush = () => {
    if (text.length > 0) io.out(text);
    text = '';
  };
  // A write that fails (a full disk) ends the run (false), to be reported after the detach:
  // a hit handler must not throw through the tracer's poll().
  let failure: unknown;
  const flushed = (): boolean => {
    if (failure !== undefined) return false;
    try {
      flush();
      // The reader of the output went away (`| head`): end as on Ctrl-C.
      return io.outputClosed?.aborted !== true;
    } catch (err) {
      failure = err;
      return false;
    }
  };
  const ended = await runPtrace(specs, options, io, {
    verb: 'Tracing',
    returns: (spec) => parseSpec(spec).spec?.kind === 'return',
    begin: (sites) => {
      format = makeFormat(sites);
    },
    hit: (hit, site, comm) => {
      if (count >= max || failure !== undefined) return false;
      count++;
      text += `${format(toEvent(hit, site, comm))}\n`;
      if (text.length >= 1 << 16) return flushed() && count < max;
      return count < max;
    },
    polled: flushed,
  });
  // After the detach: the process runs on whatever the output did.
  if (failure !== undefined) throw failure;
  flush();
  io.err(`upscope: ${summaryLine(count, max, { delivered: count, lost: 0, missed: 0 })}\n`);
  return ended;
}

/** What a run of the ptrace engine does with its hits. */
export interface PtraceConsumer {
  /** `Tracing`, `Counting`...: the start of the line saying what runs. */
  readonly verb: string;
  /** Whether the spec is served at the function's return (else at the probed address). */
  readonly returns: (spec: string) => boolean;
  readonly begin: (sites: readonly ProbeSite[]) => void;
  /** One hit (`comm` is the thread's name); false ends the run. */
  readonly hit: (hit: HitContext, site: ProbeSite, comm: string) => boolean;
  /** After each batch of hits; false ends the run. */
  readonly polled: () => boolean | undefined;
}

/**
 * Run specs on the ptrace engine until the process ends, --duration passes, the consumer
 * says so, or a signal comes; then detach (-p) or kill the command (-c).
 */
export async function runPtrace(
  specs: readonly string[],
  options: PtraceTraceOptions,
  io: Io,
  consumer: PtraceConsumer,
): Promise<PtraceTraceResult> {
  if ((options.pid === undefined) === (options.command === undefined)) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot trace with the ptrace engine without a process: give -p PID or -c COMMAND',
      {
        hints: [
          'The ptrace engine probes one process; the tracefs engine (root) traces every process',
        ],
      },
    );
  }
  // In the helper process, an ending signal (upscope's death) may have come already.
  const early = helperSignal();
  if (early !== undefined) return { exitCode: undefined, signal: early };
  const tracer =
    options.command !== undefined
      ? await ProcessTracer.spawn([options.command], {
          shell: true,
          stdio: [0, options.commandStdout ?? 1, 2],
          followExec: true,
          followForks: true,
        })
      : await ProcessTracer.attach(options.pid!, { followExec: true, followForks: true });
  let signal: NodeJS.Signals | undefined;
  const onSignal = (name: NodeJS.Signals) => {
    signal ??= name;
  };
  // SIGALRM only ends a wait: the loop below looks at the time.
  const onAlarm = () => {};
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const name of signals) process.on(name, onSignal);
  process.on('SIGALRM', onAlarm);
  // poll() blocks in waitpid (the fastest wait): these signals end it.
  interruptWaitsOn([...signals, 'SIGALRM']);
  const cleanup = () => {
    if (tracer.ended) return;
    if (options.command !== undefined) tracer.kill();
    else tracer.detach();
  };
  process.on('exit', cleanup);
  let closeNames = () => {};
  try {
    // Sites are known once registered; no hit comes before the first poll(). A hit is named
    // by what its thread is called while it is stopped there (it may rename itself or exec).
    const names = new ThreadNames();
    closeNames = () => names.close();
    const comm = (tid: number) => names.name(tid);
    let more = true;
    let yieldAt = Number.POSITIVE_INFINITY;
    // Sites of several specs that share a name are told apart (qualifyNames) once all are placed.
    const qualified = new Map<ProbeSite, ProbeSite>();
    const handler = (hit: HitContext, site: ProbeSite | undefined) => {
      if (site === undefined || !more) return;
      more = consumer.hit(hit, qualified.get(site) ?? site, comm(hit.tid));
      // A busy process never lets poll() wait: end it every 100 ms all the same, so that
      // timers (--interval), signals and --duration are seen.
      if (!more || performance.now() >= yieldAt) tracer.interrupt();
    };
    const sites: ProbeSite[] = [];
    const skipped: SkippedSite[] = [];
    for (const [i, spec] of specs.entries()) {
      sites.push(
        ...(await tracer.register({
          id: `spec${i}`,
          event: consumer.returns(spec) ? 'return' : 'breakpoint',
          where: spec,
          unsafe: options.unsafe,
          strict: options.strict,
          debugDirs: options.debugDirs,
          returnProbes: options.returnProbes,
          // Calls an unwind took away are shown (trace) and counted (count) as such.
          unwinds: true,
          handler,
        })),
      );
      skipped.push(...tracer.skippedOf(`spec${i}`));
    }
    const named = qualifyNames(sites);
    for (const [i, site] of sites.entries()) qualified.set(site, named[i]!);
    consumer.begin(named);
    if (options.pid !== undefined) {
      for (const note of notLoadedNotes(sites, options.pid)) io.err(`upscope: ${note}\n`);
    }
    const probes = new Set(sites.map(probeName));
    io.err(
      startLine(
        `${consumer.verb} ${probes.size} probe${probes.size === 1 ? '' : 's'} (ptrace, process ${tracer.pid}). Ctrl-C to end.`,
        skipped,
        sites.length,
        'ptrace',
      ),
    );
    const deadline =
      options.durationSeconds === undefined
        ? Number.POSITIVE_INFINITY
        : performance.now() + options.durationSeconds * 1000;
    // One that came while the probes were placed was seen by the helper's own listeners.
    signal ??= helperSignal();
    while (!tracer.ended && signal === undefined && more && performance.now() < deadline) {
      // A signal that came after the last turn of the event loop but before poll() blocked
      // interrupted nothing: a SIGALRM each second ends the wait so that its handler runs.
      alarmIn(1);
      yieldAt = performance.now() + 100;
      tracer.poll();
      for (const notice of tracer.takeNotices()) io.err(`upscope: ${notice}\n`);
      if (consumer.polled() === false) more = false;
      // Let the handlers of the signals that ended the wait run: libuv reads its signal pipe
      // in the poll phase, which a setImmediate() alone can pass over.
      await new Promise<void>((resolve) => setTimeout(resolve, 5));
    }
    return { exitCode: tracer.exitCode, signal };
  } finally {
    cleanup();
    closeNames();
    alarmIn(0);
    process.off('exit', cleanup);
    process.off('SIGALRM', onAlarm);
    for (const name of signals) process.off(name, onSignal);
  }
}

export function toEvent(hit: HitContext, site: ProbeSite, comm: string): ProbeEvent {
  const fields: Record<string, FieldValue> = {};
  const source: FetchSource = { ...hit, comm: () => comm };
  // A call an unwind took away has no values to show; at a tail call, no result yet.
  if (hit.exit !== 'unwind') {
    for (const fetch of site.fetches) {
      if (hit.exit === 'tail-call' && readsResult(fetch.expr)) continue;
      fields[fetch.name] = evaluateFetch(fetch, source);
    }
  }
  return {
    probe: probeName(site),
    spec: site.spec,
    kind: site.kind,
    pid: hit.pid,
    tid: hit.tid,
    cpu: -1,
    timestampNs: hit.timeNs,
    comm,
    fields,
    latencyNs:
      hit.entryTimeNs === undefined || hit.exit === 'unwind'
        ? undefined
        : hit.timeNs - hit.entryTimeNs,
    exit: hit.exit,
  };
}

function readsResult(expr: ProbeSite['fetches'][number]['expr']): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}
