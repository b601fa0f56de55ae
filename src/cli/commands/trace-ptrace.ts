import {
  checkTargetOptions,
  evaluateFetch,
  type FetchSource,
  type FieldValue,
  type HitContext,
  notLoadedNotes,
  type ProbeEvent,
  type ProbeSite,
  PtraceRun,
  parseSpec,
  probeName,
} from '../../api/index.js';
import type { Exit } from '../../host/index.js';
import type { Sink } from '../../output/index.js';
import type { Io } from '../io.js';
import { startLine } from '../options.js';
import { helperSignal } from '../ptrace-helper.js';
import { sayUnprobedProgram } from '../unprobed-program.js';
import { summaryLine } from './trace-summary.js';

export interface PtraceTraceOptions {
  readonly pid?: number | undefined;
  /** With pid: also the processes descended from it now. */
  readonly children?: boolean | undefined;
  readonly command?: string | undefined;
  /** With command: how long it has to end after SIGTERM when the run ends first. */
  readonly killAfterMs?: number | undefined;
  /** A run over every process only (refused here, with -p or -c). */
  readonly includeSelf?: boolean | undefined;
  /** The command's stdout: a file descriptor of this process (its own stdout by default). */
  readonly commandStdout?: number | undefined;
  readonly unsafe?: boolean | undefined;
  /** A function a pattern matches that cannot be probed is an error, not skipped. */
  readonly strict?: boolean | undefined;
  readonly debugDirs?: readonly string[] | undefined;
  readonly returnProbes?: 'auto' | 'sites' | 'trampoline' | undefined;
  readonly durationSeconds?: number | undefined;
  readonly maxEvents?: number | undefined;
  /** `inject`: function entries served by inline hooks (see PtraceRunOptions.engine). */
  readonly engine?: 'ptrace' | 'inject' | undefined;
}

/** How a ptrace trace ended: the command's end (with -c), and whether the process ended. */
export interface PtraceTraceResult {
  /** The process traced (the command's, with -c). */
  readonly pid: number | undefined;
  readonly exit: Exit | undefined;
  readonly processEnded: boolean;
}

/**
 * `upscope trace` on the ptrace engine: one process (-p) or command (-c), probes served in
 * user space, each hit given to the sink `makeSink` makes, written as it happens. Ends when the process
 * exits, after --duration or --max-events, on Ctrl-C/SIGTERM/SIGHUP, or when the reader of
 * the output went away, and then detaches (a process attached with -p runs on; a command
 * started with -c is killed if still running).
 */
export async function tracePtrace(
  specs: readonly string[],
  options: PtraceTraceOptions,
  io: Io,
  makeSink: (sites: readonly ProbeSite[]) => Sink<ProbeEvent>,
): Promise<PtraceTraceResult> {
  let sink: Sink<ProbeEvent> | undefined;
  let count = 0;
  const max = options.maxEvents ?? Number.POSITIVE_INFINITY;
  const flush = () => sink?.flush?.();
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
  checkTargetOptions(options, 'trace');
  // In the helper process, an ending signal (upscope's death) may have come already.
  if (helperSignal() !== undefined) return { pid: undefined, exit: undefined, processEnded: false };
  const run = await PtraceRun.start(
    specs,
    {
      ...options,
      onNotice: (notice) => io.err(`upscope: ${notice}\n`),
    },
    {
      returns: (spec) => parseSpec(spec).spec?.kind === 'return',
      hit: (hit, site, comm) => {
        if (count >= max || failure !== undefined) return false;
        count++;
        try {
          sink!.value(toEvent(hit, site, comm));
        } catch (err) {
          failure = err;
          return false;
        }
        return count < max;
      },
      polled: flushed,
    },
  );
  sink = makeSink(run.sites);
  sink.begin();
  if (options.pid !== undefined) {
    for (const note of notLoadedNotes(run.sites, options.pid)) io.err(`upscope: ${note}\n`);
  }
  io.err(
    startLine(
      'Tracing',
      run.sites.length,
      'probe',
      `${options.engine ?? 'ptrace'}, process ${run.pid}`,
      run.skipped,
      'ptrace',
      run.warnings,
    ),
  );
  const stop = () => run.stop();
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const name of signals) process.on(name, stop);
  const timer =
    options.durationSeconds === undefined
      ? undefined
      : setTimeout(stop, options.durationSeconds * 1000);
  try {
    // One that came while the probes were placed was seen by the helper's own listeners.
    if (helperSignal() !== undefined) run.stop();
    await run.run();
  } finally {
    clearTimeout(timer);
    for (const name of signals) process.off(name, stop);
  }
  // After the detach: the process runs on whatever the output did.
  if (failure !== undefined) throw failure;
  sink?.end();
  if (run.processEnded && options.pid !== undefined) {
    io.err(`upscope: process ${options.pid} exited, ending the trace\n`);
  }
  io.err(`upscope: ${summaryLine(count, max, { delivered: count, lost: run.lost, missed: 0 })}\n`);
  sayUnprobedProgram(io, count, options.command, run.sites);
  return { pid: run.pid, exit: run.exit, processEnded: run.processEnded };
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
