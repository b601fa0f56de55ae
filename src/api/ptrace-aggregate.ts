/**
 * count, hist and latency on the ptrace engine: one process (`pid`) or command (`command`),
 * each hit served in user space and aggregated here into the same buckets as the bpf
 * engine's handlers, behind the same Aggregate, so that every engine reads the same.
 */
import {
  addToHistogram,
  type BucketScheme,
  HistogramAccumulator,
  linearSteps,
} from '../aggregate/index.js';
import {
  addInlineAggregates,
  evaluateFetch,
  type FetchSource,
  type HitContext,
  type InlineAggregate,
  type InlineValue,
} from '../engines/index.js';
import type { FieldValue } from '../events/index.js';
import {
  fetchAtSite,
  type OptionFetch,
  type ProbeSite,
  planProbes,
  runPlanOptions,
} from '../plan/index.js';
import { type FetchArg, parseComparisonOrThrow } from '../spec/index.js';
import {
  Aggregate,
  type AggregateOptions,
  type AggregationEngine,
  type CountKeyPart,
  type CountOptions,
  checkTimed,
  type LatencyCall,
  type ProbeCount,
  type ProbeHistogram,
  probeNames,
} from './aggregate.js';
import { PtraceRun } from './ptrace-run.js';
import { PtraceStacks, type WalkedStack } from './ptrace-stacks.js';
import { checkTargetOptions, probeName } from './tracer.js';

/** What is aggregated, and into what reading. */
export type PtraceAggregation =
  | { readonly kind: 'count'; readonly parts: readonly CountKeyPart[] }
  | { readonly kind: 'hist'; readonly value: FetchArg; readonly scheme: BucketScheme }
  | {
      readonly kind: 'latency';
      readonly unitNs: number;
      readonly onCall?: ((call: LatencyCall) => void) | undefined;
    };

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
 * Start an aggregation on the ptrace engine (see countHits(), histogramOf(), latencyOf(),
 * which call this for `engine: 'ptrace'`). `fetches` are the options' fetches (the filter's
 * first), lowered at each site when the specs are resolved.
 */
export async function ptraceAggregate<A extends PtraceAggregation>(
  specs: string | readonly string[],
  aggregation: A,
  options: AggregateOptions & Pick<CountOptions, 'inlines'>,
  fetches: readonly OptionFetch[],
): Promise<Aggregate<Reading<A>>> {
  checkTargetOptions(options, 'aggregate');
  const list = typeof specs === 'string' ? [specs] : specs;
  const latency = aggregation.kind === 'latency';
  if (fetches.length > 0 || latency) {
    // Every name is resolved, and latency's sites checked, before the process is touched.
    const { sites } = await planProbes(list, {
      ...runPlanOptions(options),
      returnsOfEntries: latency,
      engine: 'ptrace',
      optionFetches: fetches,
    });
    if (latency) checkTimed(sites);
  }
  const predicate =
    options.filter === undefined ? undefined : parseComparisonOrThrow(options.filter, '--filter');
  // Where each option's fetch is in a site's optionFetches: the filter's first.
  const valueIndex = predicate === undefined ? 0 : 1;
  const parts = aggregation.kind === 'count' ? aggregation.parts : [];
  // By user stack: each hit's stack walked while its thread is stopped, named when read.
  const stacks = parts.some((part) => part.kind === 'ustack')
    ? new PtraceStacks({ inlines: options.inlines })
    : undefined;
  const comm = options.comm?.slice(0, 15);
  const counts = new Map<
    string,
    {
      probe: string;
      key: bigint | string | (bigint | string)[] | undefined;
      stack?: WalkedStack | undefined;
      count: bigint;
    }
  >();
  const histograms = new Map<string, HistogramAccumulator>();
  const signed = aggregation.kind === 'hist' && aggregation.value.type?.startsWith('s') === true;
  const newHistogram = () =>
    aggregation.kind === 'hist'
      ? new HistogramAccumulator(aggregation.scheme, signed)
      : new HistogramAccumulator(
          { kind: 'log2' },
          false,
          BigInt(aggregation.kind === 'latency' ? aggregation.unitNs : 1),
        );
  let faults = 0n;
  /** Per return probe: calls an unwind took away. */
  const unwound = new Map<string, bigint>();
  let names = new Map<ProbeSite, string>();
  let probes: readonly string[] = [];
  const nameOf = (site: ProbeSite) => {
    let name = names.get(site);
    if (name === undefined) {
      // A site placed later (a library loaded, an exec) is named as its first was.
      name = (site.kind === 'return' && !latency ? 'r:' : '') + probeName(site);
      names.set(site, name);
    }
    return name;
  };
  // Each fetch as it reads at each site: variables lowered there, argN the note's argument at
  // USDT probes, the calling convention's registers in Go code.
  const lowered = new Map<ProbeSite, Map<number, FetchArg>>();
  const at = (index: number, fetch: FetchArg, site: ProbeSite): FetchArg => {
    let own = lowered.get(site);
    if (own === undefined) {
      own = new Map();
      lowered.set(site, own);
    }
    let found = own.get(index);
    if (found === undefined) {
      found = fetchAtSite(site.optionFetches?.[index] ?? fetch, site);
      own.set(index, found);
    }
    return found;
  };
  const valueFetch = aggregation.kind === 'hist' ? aggregation.value : undefined;
  const keyFetches = parts.flatMap((part) => (part.kind === 'value' ? [part.fetch] : []));
  const holds = (context: HitContext, site: ProbeSite, name: string): boolean => {
    const source: FetchSource = { ...context, comm: () => name };
    const value = asKey(evaluateFetch(at(0, predicate!.fetch, site), source));
    return typeof value === 'bigint' && COMPARE[predicate!.op](value, predicate!.value);
  };
  // latency's filter on the arguments is decided at each call's entry, where they are (and
  // carried to its return); one on the return value at its return.
  const atEntry = latency && predicate !== undefined && !readsResult(predicate.fetch.expr);
  const hit = (context: HitContext, site: ProbeSite, name: string): boolean => {
    if (options.tid !== undefined && context.tid !== options.tid) return true;
    if (comm !== undefined && name !== comm) return true;
    const source: FetchSource = { ...context, comm: () => name };
    if (predicate !== undefined && !atEntry && !holds(context, site, name)) return true;
    const probe = nameOf(site);
    if (context.exit === 'unwind') {
      // No return was seen: counted apart, neither keyed, measured nor timed.
      unwound.set(probe, (unwound.get(probe) ?? 0n) + 1n);
      return true;
    }
    // At a tail call the result is not made yet: a key or value read from it is not there.
    const reads = valueFetch === undefined ? keyFetches : [valueFetch];
    if (context.exit === 'tail-call' && reads.some((fetch) => readsResult(fetch.expr))) {
      faults++;
      return true;
    }
    switch (aggregation.kind) {
      case 'count': {
        const values: (bigint | string)[] = [];
        let stack: WalkedStack | undefined;
        let fetched = 0;
        for (const part of parts) {
          if (part.kind === 'ustack') {
            stack = stacks!.walk(context);
            values.push(stack.id);
          } else if (part.kind === 'pid') values.push(BigInt(context.pid));
          else if (part.kind === 'tid') values.push(BigInt(context.tid));
          else if (part.kind === 'comm') values.push(name);
          else if (part.kind === 'value') {
            const value = asKey(
              evaluateFetch(at(valueIndex + fetched++, part.fetch, site), source),
            );
            if (value === undefined) {
              faults++;
              return true;
            }
            values.push(value);
          }
        }
        const key = values.length === 0 ? undefined : values.length === 1 ? values[0] : values;
        const id = `${probe}\u0000${values.map(String).join('\u0000')}`;
        const row = counts.get(id) ?? { probe, key, stack, count: 0n };
        row.count++;
        counts.set(id, row);
        return true;
      }
      case 'hist': {
        const value = asKey(evaluateFetch(at(valueIndex, aggregation.value, site), source));
        if (typeof value !== 'bigint') {
          faults++;
          return true;
        }
        histogram(probe).add(value);
        return true;
      }
      case 'latency': {
        if (context.entryTimeNs === undefined) return true;
        histogram(probe).add(context.timeNs - context.entryTimeNs);
        aggregation.onCall?.({
          probe,
          pid: context.pid,
          tid: context.tid,
          comm: name,
          startNs: context.entryTimeNs,
          endNs: context.timeNs,
        });
        return true;
      }
    }
  };
  // On the inject engine, what needs no more than the hit itself (plain counts; latency
  // without a filter or a call-by-call consumer) is aggregated in the process where a hook
  // serves the site: no record per hit, no hit lost when the ring would be full.
  const inProcess =
    options.engine === 'inject' &&
    predicate === undefined &&
    options.tid === undefined &&
    comm === undefined &&
    ((aggregation.kind === 'count' && parts.length === 0) ||
      (aggregation.kind === 'latency' && aggregation.onCall === undefined) ||
      (aggregation.kind === 'hist' &&
        (aggregation.scheme.kind === 'log2' ||
          linearSteps(aggregation.scheme) + 2 <= INLINE_VALUE_BUCKETS)))
      ? {
          entries: aggregation.kind !== 'latency',
          returns: aggregation.kind === 'latency',
          timeUnitNs: aggregation.kind === 'latency' ? aggregation.unitNs : 1,
          ...(aggregation.kind === 'hist'
            ? {
                valueScheme: aggregation.scheme,
                value: (site: ProbeSite) =>
                  inlineValueOf(at(valueIndex, aggregation.value, site), site),
              }
            : {}),
        }
      : undefined;
  /** What the process aggregated so far, by probe name. */
  const aggregatedInProcess = () => {
    const found = new Map<string, InlineAggregate>();
    if (inProcess === undefined) return found;
    for (const [site, aggregate] of run.inProcess()) {
      const probe = nameOf(site);
      const before = found.get(probe);
      found.set(probe, before === undefined ? aggregate : addInlineAggregates(before, aggregate));
    }
    return found;
  };
  const histogram = (probe: string) => {
    let found = histograms.get(probe);
    if (found === undefined) {
      found = newHistogram();
      histograms.set(probe, found);
    }
    return found;
  };
  const read = (): Reading<A> => {
    const inside = aggregatedInProcess();
    if (aggregation.kind === 'count') {
      const all = new Map(counts);
      for (const [probe, { entries }] of inside) {
        if (entries === 0n) continue;
        const id = `${probe}\u0000`;
        const row = all.get(id);
        all.set(id, { probe, key: undefined, count: (row?.count ?? 0n) + entries });
      }
      const rows = [...all.values()].map(({ probe, key, stack, count }): ProbeCount => {
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
      const counted = new Set(rows.map((row) => row.probe));
      for (const probe of probes) {
        if (!counted.has(probe)) rows.push({ probe, key: undefined, count: 0n });
      }
      rows.sort((a, b) => (a.count < b.count ? 1 : a.count > b.count ? -1 : 0));
      for (const [probe, count] of unwound) {
        rows.push({ probe, key: undefined, count, exit: 'unwind' });
      }
      return rows as Reading<A>;
    }
    const seen = [...new Set([...probes, ...histograms.keys()])];
    return seen.map((probe) => {
      const own = (histograms.get(probe) ?? newHistogram()).read();
      const timed = inside.get(probe);
      return {
        probe,
        histogram:
          timed === undefined
            ? own
            : addToHistogram(own, {
                buckets: timed.buckets,
                count: timed.calls,
                sum: timed.sumNs,
                min: timed.minNs,
                max: timed.maxNs,
              }),
      };
    }) as Reading<A>;
  };
  const run = await PtraceRun.start(
    list,
    {
      pid: options.pid,
      children: options.children,
      command: options.command,
      commandStdout: options.commandStdout,
      killAfterMs: options.killAfterMs,
      unsafe: options.unsafe,
      strict: options.strict,
      debugDirs: options.debugDirs,
      returnProbes: options.returnProbes,
      optionFetches: fetches,
      onNotice: options.onNotice,
      engine: options.engine === 'inject' ? 'inject' : 'ptrace',
      inProcess,
    },
    {
      returns: (spec) => latency || /^r:/.test(spec),
      hit,
      entryFilter: atEntry ? holds : undefined,
    },
  );
  const sites = run.sites;
  probes = probeNames(sites).map((name, i) =>
    // probeNames() marks returns; latency times entries' calls: a function's own name.
    latency && sites[i]!.kind === 'return' ? name.replace(/^r:/, '') : name,
  );
  names = new Map(sites.map((site, i) => [site, probes[i]!]));
  let failure: unknown;
  const engine: AggregationEngine = {
    attachReport: {
      probes: sites.length,
      multi: 0,
      perf: 0,
      fallbackReason: undefined,
      milliseconds: run.milliseconds,
    },
    detach: () => run.stop(),
    handlerErrors: () => ({
      // Hits inline hooks could not record (their ring was full): none with int3s alone.
      dropped: BigInt(run.lost),
      faults,
      unmatched: 0n,
      deep: 0n,
      unwound: [
        ...unwound.values(),
        ...[...aggregatedInProcess().values()].map((a) => a.unwound),
      ].reduce((sum, n) => sum + n, 0n),
    }),
    close: () => {
      run.stop();
      stacks?.close();
    },
  };
  const launched = run.launched(options);
  const aggregate = new Aggregate(
    { sites: [...sites], skipped: [...run.skipped], warnings: [...run.warnings] },
    probes,
    {
      engine,
      name: options.engine === 'inject' ? 'inject' : 'ptrace',
      read,
      ended: new Promise<void>((resolve) => {
        void run.ended.then(() => {
          if (run.processEnded && options.pid !== undefined) resolve();
        });
      }),
      error: () => failure,
    },
    options,
    launched,
    [],
  );
  if (latency) {
    options.onNotice?.(
      options.engine === 'inject'
        ? "times on the inject engine include its hooks' recording at each call's entry and return (a fraction of a microsecond each; a function an int3 serves instead pays the tracer's stops, tens of microseconds)"
        : "times on the ptrace engine include the tracer's stops at each call's entry and return (tens of microseconds each): compare them with each other, not with the bpf engine's",
    );
  }
  run.run().catch((err: unknown) => {
    failure = err;
    aggregate.stop();
  });
  return aggregate;
}

/** Buckets an inline hook's histogram of values has (arch's BUCKETS.count). */
const INLINE_VALUE_BUCKETS = 1024;

/** The registers of the first six integer arguments (System V x86-64). */
const ARGUMENT_REGISTERS = ['rdi', 'rsi', 'rdx', 'rcx', 'r8', 'r9'] as const;

/** The registers an inline hook can read a value from at a function's entry (those it saves). */
const SAVED_REGISTERS = new Set(['rax', 'rcx', 'rdx', 'rsi', 'rdi', 'r8', 'r9', 'r10', 'r11']);

/**
 * The value an inline hook can put in its histogram for `fetch` at `site`'s entry: an
 * integer argument passed in a register (C's convention) or a saved register, as an integer
 * of its type's width; undefined for anything else (the hits are recorded then).
 */
function inlineValueOf(fetch: FetchArg, site: ProbeSite): InlineValue | undefined {
  if (site.kind !== 'entry' || site.usdt !== undefined) return undefined;
  const type = fetch.type ?? 'u64';
  const m = /^([usx])(8|16|32|64)$/.exec(type);
  if (m === null) return undefined;
  const bits = Number(m[2]) as InlineValue['bits'];
  const signed = m[1] === 's';
  const expr = fetch.expr;
  if (expr.kind === 'arg' && expr.index < ARGUMENT_REGISTERS.length) {
    if (site.convention !== undefined && site.convention.kind !== 'sysv') return undefined;
    return { register: ARGUMENT_REGISTERS[expr.index]!, bits, signed };
  }
  if (expr.kind === 'register' && SAVED_REGISTERS.has(expr.name)) {
    return { register: expr.name, bits, signed };
  }
  return undefined;
}

/** Whether a fetch reads a function's result (`retval`, `retvalN`), anywhere in it. */
function readsResult(expr: FetchArg['expr']): boolean {
  if (expr.kind === 'deref') return readsResult(expr.inner);
  return expr.kind === 'retval';
}
