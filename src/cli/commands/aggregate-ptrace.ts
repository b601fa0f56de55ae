/**
 * count, hist and latency on the ptrace engine: for one process (-p) or command (-c) when
 * BPF is not allowed. Each hit is served in user space and aggregated here, with the same
 * buckets as the bpf engine's handlers, so that the output reads the same.
 */
import { constants } from 'node:os';
import {
  type AggregateOptions,
  type BucketScheme,
  evaluateFetch,
  type FetchArg,
  type FetchSource,
  type FieldValue,
  fetchAtSite,
  HistogramAccumulator,
  type HitContext,
  type ProbeCount,
  type ProbeHistogram,
  type ProbeSite,
  PtraceStacks,
  parseComparisonOrThrow,
  parseFetchOrThrow,
  probeName,
  type WalkedStack,
} from '../../api/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import { runPtrace } from './trace-ptrace.js';

/** The library's options for an aggregation, with the CLI's timing ones. */
export interface PtraceAggregateOptions
  extends Pick<
    AggregateOptions,
    | 'pid'
    | 'command'
    | 'tid'
    | 'comm'
    | 'filter'
    | 'unsafe'
    | 'strict'
    | 'debugDirs'
    | 'returnProbes'
  > {
  readonly duration?: number | undefined;
  readonly interval?: number | undefined;
  /** By ustack: functions inlined at a frame are frames of their own. */
  readonly inlines?: boolean | undefined;
}

/** What is aggregated, and into what reading. */
export type PtraceAggregation =
  | { readonly kind: 'count'; readonly by: string | undefined }
  | { readonly kind: 'hist'; readonly value: string; readonly scheme: BucketScheme }
  | { readonly kind: 'latency'; readonly unitNs: number };

/** The reading each kind gives. */
type Reading<A extends PtraceAggregation> = A extends { kind: 'count' }
  ? ProbeCount[]
  : ProbeHistogram[];

/** A fetched value as a key or number: integers as bigints, strings as they are. */
function asKey(value: FieldValue): bigint | string | undefined {
  if (value === null) return undefined;
  if (typeof value === 'number' || typeof value === 'bigint') return BigInt(value);
  if (typeof value === 'string') return value;
  return Buffer.from(value).toString('hex');
}

const COMPARE = {
  '==': (a: bigint, b: bigint) => a === b,
  '!=': (a: bigint, b: bigint) => a !== b,
  '<': (a: bigint, b: bigint) => a < b,
  '<=': (a: bigint, b: bigint) => a <= b,
  '>': (a: bigint, b: bigint) => a > b,
  '>=': (a: bigint, b: bigint) => a >= b,
} as const;

/**
 * Run the aggregation until the process ends, --duration, or Ctrl-C; print it every
 * --interval and at the end; set the exit status from the command's.
 */
export async function aggregatePtrace<A extends PtraceAggregation>(
  specs: readonly string[],
  aggregation: A,
  options: PtraceAggregateOptions,
  io: Io,
  result: CommandResult,
  verb: string,
  print: (reading: Reading<A>, final: boolean) => void,
): Promise<void> {
  const predicate =
    options.filter === undefined ? undefined : parseComparisonOrThrow(options.filter, '--filter');
  // By user stack: each hit's stack walked while its thread is stopped, named when read.
  const stacks =
    aggregation.kind === 'count' && aggregation.by === 'ustack'
      ? new PtraceStacks({ inlines: options.inlines })
      : undefined;
  const byFetch =
    aggregation.kind === 'count' &&
    aggregation.by !== undefined &&
    !['pid', 'tid', 'comm', 'ustack'].includes(aggregation.by)
      ? parseFetchOrThrow(aggregation.by, '--by')
      : undefined;
  const valueFetch =
    aggregation.kind === 'hist' ? parseFetchOrThrow(aggregation.value, 'VALUE') : undefined;
  const comm = options.comm?.slice(0, 15);
  const counts = new Map<
    string,
    {
      probe: string;
      key: bigint | string | undefined;
      stack?: WalkedStack | undefined;
      count: bigint;
    }
  >();
  const histograms = new Map<string, HistogramAccumulator>();
  let faults = 0;
  /** Per return probe: calls an unwind took away. */
  const unwound = new Map<string, bigint>();
  const names = new Map<ProbeSite, string>();
  const nameOf = (site: ProbeSite) => {
    let name = names.get(site);
    if (name === undefined) {
      name = (site.kind === 'return' ? 'r:' : '') + probeName(site);
      names.set(site, name);
    }
    return name;
  };
  const histogram = (probe: string, make: () => HistogramAccumulator) => {
    let found = histograms.get(probe);
    if (found === undefined) {
      found = make();
      histograms.set(probe, found);
    }
    return found;
  };
  // At a USDT probe argN is the note's argument: each fetch as it reads at each site.
  const lowered = new Map<ProbeSite, Map<FetchArg, FetchArg>>();
  const at = (fetch: FetchArg, site: ProbeSite): FetchArg => {
    let own = lowered.get(site);
    if (own === undefined) {
      own = new Map();
      lowered.set(site, own);
    }
    let found = own.get(fetch);
    if (found === undefined) {
      found = fetchAtSite(fetch, site);
      own.set(fetch, found);
    }
    return found;
  };
  const hit = (context: HitContext, site: ProbeSite, name: string): boolean => {
    if (options.tid !== undefined && context.tid !== options.tid) return true;
    if (comm !== undefined && name !== comm) return true;
    const source: FetchSource = { ...context, comm: () => name };
    if (predicate !== undefined) {
      const value = asKey(evaluateFetch(at(predicate.fetch, site), source));
      if (typeof value !== 'bigint' || !COMPARE[predicate.op](value, predicate.value)) return true;
    }
    const probe = nameOf(site);
    if (context.exit === 'unwind') {
      // No return was seen: counted apart, neither keyed, measured nor timed.
      unwound.set(probe, (unwound.get(probe) ?? 0n) + 1n);
      return true;
    }
    // At a tail call the result is not made yet: a key or value read from it is not there.
    const fetched = aggregation.kind === 'hist' ? valueFetch : byFetch;
    if (context.exit === 'tail-call' && fetched !== undefined && readsResult(fetched.expr)) {
      faults++;
      return true;
    }
    switch (aggregation.kind) {
      case 'count': {
        let key: bigint | string | undefined;
        let stack: WalkedStack | undefined;
        if (stacks !== undefined) {
          stack = stacks.walk(context);
          key = stack.id;
        } else if (aggregation.by === 'pid') key = BigInt(context.pid);
        else if (aggregation.by === 'tid') key = BigInt(context.tid);
        else if (aggregation.by === 'comm') key = name;
        else if (byFetch !== undefined) {
          key = asKey(evaluateFetch(at(byFetch, site), source));
          if (key === undefined) {
            faults++;
            return true;
          }
        }
        const id = `${probe}\u0000${String(key)}`;
        const row = counts.get(id) ?? { probe, key, stack, count: 0n };
        row.count++;
        counts.set(id, row);
        return true;
      }
      case 'hist': {
        const value = asKey(evaluateFetch(at(valueFetch!, site), source));
        if (typeof value !== 'bigint') {
          faults++;
          return true;
        }
        const signed = valueFetch!.type?.startsWith('s') === true;
        histogram(probe, () => new HistogramAccumulator(aggregation.scheme, signed)).add(value);
        return true;
      }
      case 'latency': {
        if (context.entryTimeNs === undefined) return true;
        const unit = BigInt(aggregation.unitNs);
        histogram(
          probeName(site),
          () => new HistogramAccumulator({ kind: 'log2' }, false, unit),
        ).add(context.timeNs - context.entryTimeNs);
        return true;
      }
    }
  };
  const read = (): Reading<A> => {
    if (aggregation.kind === 'count') {
      const rows = [...counts.values()].map(({ probe, key, stack, count }): ProbeCount => {
        if (stack === undefined || stacks === undefined) return { probe, key, count };
        const named = stacks.name(stack);
        const folded = named.map((frame) => frame.key).toReversed();
        return {
          probe,
          key: folded.length === 0 ? '[no user stack]' : folded.join(';'),
          stack: { pid: stack.pid, frames: named.map((frame) => frame.text) },
          count,
        };
      });
      rows.sort((a, b) => (a.count < b.count ? 1 : a.count > b.count ? -1 : 0));
      for (const [probe, count] of unwound) {
        rows.push({ probe, key: undefined, count, exit: 'unwind' });
      }
      return rows as Reading<A>;
    }
    return [...histograms].map(([probe, h]) => ({ probe, histogram: h.read() })) as Reading<A>;
  };
  let failure: unknown;
  const ticker =
    options.interval === undefined
      ? undefined
      : setInterval(() => {
          if (failure !== undefined) return;
          try {
            print(read(), false);
          } catch (err) {
            failure = err; // a write failed (a full disk): ends the run, reported after the detach
          }
        }, options.interval * 1000);
  let ended: Awaited<ReturnType<typeof runPtrace>>;
  try {
    ended = await runPtrace(
      specs,
      {
        pid: options.pid,
        command: options.command,
        unsafe: options.unsafe,
        strict: options.strict,
        debugDirs: options.debugDirs,
        returnProbes: options.returnProbes,
        durationSeconds: options.duration,
      },
      io,
      {
        verb,
        returns: (spec) => aggregation.kind === 'latency' || /^r:/.test(spec),
        begin: () => {},
        hit,
        polled: () => failure === undefined && io.outputClosed?.aborted !== true,
      },
    );
  } finally {
    clearInterval(ticker);
  }
  if (failure !== undefined) {
    stacks?.close();
    throw failure;
  }
  try {
    print(read(), true);
  } finally {
    stacks?.close();
  }
  if (faults > 0) io.err(`upscope: ${faults} hits whose value could not be read\n`);
  const unwinds = [...unwound.values()].reduce((sum, n) => sum + n, 0n);
  if (unwinds > 0n && aggregation.kind !== 'count') {
    io.err(`upscope: ${unwinds} calls ended by an unwind (an exception, a panic), not timed\n`);
  }
  if (ended.exitCode !== undefined) {
    result.status = ended.exitCode >= 0 ? ended.exitCode : 128 - ended.exitCode;
  } else if (ended.signal !== undefined && ended.signal !== 'SIGINT') {
    result.status = 128 + constants.signals[ended.signal];
  }
}

/** Whether a fetch reads a function's result (`retval`, `retvalN`), anywhere in it. */
function readsResult(expr: FetchArg['expr']): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}
