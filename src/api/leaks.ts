/**
 * Outstanding allocations by call stack (`upscope leaks`): the allocator's functions probed
 * in one process or command, each block paired with its free (in the kernel on the bpf
 * engine, in user space on the ptrace engine), and reports of what is still allocated.
 */
import { readlinkSync } from 'node:fs';
import {
  ALLOCATOR_KINDS,
  type AllocatorKind,
  BpfLeaks,
  type LeakCounters,
} from '../engines/index.js';
import { ProbeError, quote } from '../errors/index.js';
import type { StackFrame } from '../events/index.js';
import { checkCommand, commandProgram } from '../host/index.js';
import type { LeakGrowth, LeakReport, LeakStackRow } from '../output/index.js';
import {
  closeDebugInfo,
  commandSearchOptions,
  type ProbeSite,
  processError,
  resolveTarget,
  targetSymbols,
} from '../plan/index.js';
import { interpreterOf, openElf } from '../symbols/index.js';
import { type Aggregate, type AggregateOptions, startAggregate } from './aggregate.js';
import { BpfStacks } from './bpf-stacks.js';
import { ptraceLeaks } from './ptrace-leaks.js';
import { structuredFrame } from './stack-namer.js';

export interface LeaksOptions
  extends Pick<
    AggregateOptions,
    | 'pid'
    | 'command'
    | 'children'
    | 'killAfterMs'
    | 'commandStdout'
    | 'signal'
    | 'debugDirs'
    | 'attach'
    | 'onNotice'
  > {
  /** `bpf` (the default: paired in the kernel) or `ptrace` (no privileges, far slower). */
  readonly engine?: 'bpf' | 'ptrace' | undefined;
  /**
   * The allocator: a library (name or path) or program whose `malloc`, `free`... are probed
   * (jemalloc, tcmalloc...). By default the C library the process uses, or the program
   * itself when it is statically linked.
   */
  readonly lib?: string | undefined;
  /** Also `mmap` and `munmap`. */
  readonly mmap?: boolean | undefined;
  /** How often the async iterator gives a snapshot (default 5000 ms). */
  readonly intervalMs?: number | undefined;
  /** Only blocks allocated at least this long ago. */
  readonly olderThanMs?: number | undefined;
  /** Only the N stacks with the most bytes (default 10). */
  readonly top?: number | undefined;
  /** Blocks kept at once (default 1,048,576); more are counted and said. */
  readonly maxAllocations?: number | undefined;
  /** Distinct stacks kept (default 16,384); more are recorded without a stack, and said. */
  readonly maxStacks?: number | undefined;
  /** Functions inlined at a frame become frames of their own (from DWARF). */
  readonly inlines?: boolean | undefined;
}

/** A report of outstanding allocations (see LeakReport), with the handlers' counts. */
export interface LeakSnapshot extends LeakReport {
  readonly counters: LeakCounters;
}

const DEFAULT_MAX_ALLOCATIONS = 1 << 20;
const DEFAULT_MAX_STACKS = 16384;
const DEFAULT_TOP = 10;
const DEFAULT_INTERVAL_MS = 5000;

/** The frame shown for blocks whose stack could not be kept. */
const NO_STACK_KEPT = '[stack not kept: stack map full]';

/** One outstanding block, as both engines give it. */
export interface LeakBlock {
  readonly pid: number;
  /** Which stack (an id of the engine's). */
  readonly stack: string;
  readonly sizeBytes: bigint;
  /** CLOCK_MONOTONIC, ns. */
  readonly timeNs: bigint;
}

/** A reading of an engine: every outstanding block, their stacks named, and the counters. */
export interface LeakReading {
  readonly blocks: readonly LeakBlock[];
  readonly stacks: ReadonlyMap<string, { readonly pid: number; readonly frames: StackFrame[] }>;
  readonly counters: LeakCounters;
  /** When it was taken (CLOCK_MONOTONIC, ns). */
  readonly nowNs: bigint;
}

/** The allocator's file and the functions of it to probe. */
export interface AllocatorTarget {
  /** As specs name it. */
  readonly path: string;
  readonly kinds: readonly AllocatorKind[];
}

/** The C library a process maps, or its program when it maps none (a static binary). */
function defaultTargetOfPid(pid: number): string {
  try {
    const libc = resolveTarget('libc', { pid });
    if (libc.mappedObject !== undefined) return libc.path;
  } catch (err) {
    // A process that is gone or not ours to read is said so; else it maps no libc.
    if (
      err instanceof ProbeError &&
      (err.code === 'ERR_PROCESS_NOT_FOUND' || err.code === 'ERR_PROCESS_ACCESS')
    ) {
      throw err;
    }
  }
  try {
    return `/proc/${pid}/root${readlinkSync(`/proc/${pid}/exe`)}`;
  } catch (err) {
    throw processError(pid, 'read the program', err);
  }
}

/**
 * Which file's allocator to probe, and which of its functions it has: `lib`, or the C
 * library the process or command uses, or the program itself when it is statically linked.
 * Throws ProbeError ERR_SYMBOL_NOT_FOUND when the file has no malloc or no free.
 */
export function allocatorTarget(
  options: Pick<LeaksOptions, 'pid' | 'command' | 'lib' | 'mmap'>,
): AllocatorTarget {
  const search = options.command === undefined ? {} : commandSearchOptions(options.command);
  let path: string;
  let statically = false;
  if (options.lib !== undefined) {
    path = resolveTarget(options.lib, { pid: options.pid, ...search }).path;
  } else if (options.pid !== undefined) {
    path = defaultTargetOfPid(options.pid);
    statically = !path.includes('libc');
  } else {
    const command = options.command;
    if (command === undefined) {
      throw new ProbeError(
        'ERR_USAGE',
        'Cannot find leaks without a process: give -p PID or -c COMMAND',
      );
    }
    // A program that is not there is said as every command's -c says it.
    checkCommand(command);
    const program = commandProgram(command);
    if (program === undefined) {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot find the allocator of the command ${quote(command)}: which program it runs is for the shell to decide (quotes, variables)`,
        {
          hints: [
            'Name the allocator with --lib PATH|NAME, e.g. --lib libc',
            "Or give the program plainly: -c './app 5'",
          ],
        },
      );
    }
    statically = staticProgram(program);
    path = statically ? program : resolveTarget('libc', search).path;
  }
  const elf = openElf(path);
  let kinds: AllocatorKind[];
  try {
    const symbols = targetSymbols(elf, path);
    kinds = ALLOCATOR_KINDS.filter(
      (kind) =>
        (options.mmap === true || (kind !== 'mmap' && kind !== 'munmap')) &&
        symbols.named(kind).length > 0,
    );
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
  if (!kinds.includes('malloc') || !kinds.includes('free')) {
    const missing = kinds.includes('malloc') ? 'free' : 'malloc';
    throw new ProbeError(
      'ERR_SYMBOL_NOT_FOUND',
      `Cannot find the allocator in "${path}": it has no ${missing} symbol${statically ? ' (the program is statically linked, and its symbols do not name one)' : ''}`,
      {
        hints: [
          'Name the allocator with --lib PATH|NAME (a library or program with malloc and free)',
          ...(statically ? ['A stripped static binary has no symbols to find malloc by'] : []),
        ],
      },
    );
  }
  return { path, kinds };
}

/**
 * Whether the command's program is statically linked (it is its own allocator). A script
 * (`#!`: a wrapper, a version manager's shim) is not: the program it runs in the end, found
 * at run time, is taken to use the C library, as its interpreter does.
 */
function staticProgram(program: string): boolean {
  let elf: ReturnType<typeof openElf>;
  try {
    elf = openElf(program);
  } catch (err) {
    if (err instanceof ProbeError && err.code === 'ERR_SCRIPT_TARGET') return false;
    throw err;
  }
  try {
    return interpreterOf(elf) === undefined;
  } finally {
    elf.close();
  }
}

/** The specs of the allocator's functions (entry probes). */
function allocatorSpecs(target: AllocatorTarget): string[] {
  return target.kinds.map((kind) => `${target.path}:${kind}`);
}

/** Each site with the kind of function it is, one per address (aliases probed once). */
export function allocatorSites(
  sites: readonly ProbeSite[],
  target: AllocatorTarget,
): { site: ProbeSite; kind: AllocatorKind }[] {
  const bySpec = new Map(target.kinds.map((kind) => [`${target.path}:${kind}`, kind]));
  const seen = new Set<string>();
  const found: { site: ProbeSite; kind: AllocatorKind }[] = [];
  for (const site of sites) {
    const kind = bySpec.get(site.spec);
    const where = `${site.target.path}\u0000${site.fileOffset}`;
    if (kind === undefined || seen.has(where)) continue;
    seen.add(where);
    found.push({ site, kind });
  }
  return found;
}

/** Open the allocator's probes on the bpf engine. */
async function bpfLeaks(
  target: AllocatorTarget,
  options: LeaksOptions,
): Promise<Aggregate<LeakReading>> {
  return startAggregate(
    allocatorSpecs(target),
    { ...options, returnProbes: 'trampoline' },
    (sites, _names, processes) => {
      const kinds = allocatorSites(sites, target);
      const stacks = new BpfStacks({
        pid: processes.pid,
        command: options.command,
        sites,
        inlines: options.inlines,
        sources: true,
      });
      let leaks: BpfLeaks;
      try {
        leaks = BpfLeaks.open(
          kinds.map(({ site, kind }) => ({
            path: site.target.path,
            offset: site.fileOffset,
            kind,
          })),
          {
            ...processes,
            filters: { exclude: processes.exclude },
            mode: options.attach,
            purpose: `finding leaks in ${target.path}`,
            stacks: stacks.stackOptions(),
            maxAllocations: options.maxAllocations ?? DEFAULT_MAX_ALLOCATIONS,
            maxStacks: options.maxStacks ?? DEFAULT_MAX_STACKS,
          },
        );
      } catch (err) {
        stacks.close();
        throw err;
      }
      stacks.start(options.command !== undefined);
      const named = new Map<string, { pid: number; frames: StackFrame[] }>();
      return {
        engine: leaks,
        read: (): LeakReading => {
          stacks.loadMissing();
          const blocks = leaks.allocations().map((record) => ({
            pid: record.pid,
            stack: `${record.pid}:${record.stackId}`,
            sizeBytes: record.sizeBytes,
            timeNs: record.timeNs,
          }));
          const nowNs = process.hrtime.bigint();
          const known = leaks.stacks();
          for (const block of blocks) {
            if (named.has(block.stack)) continue;
            const id = Number(block.stack.slice(block.stack.indexOf(':') + 1));
            const stack = id === 0 ? undefined : known.get(id);
            named.set(block.stack, {
              pid: block.pid,
              frames:
                stack === undefined
                  ? [{ function: NO_STACK_KEPT }]
                  : stacks.name(block.pid, stack.frames).map(structuredFrame),
            });
          }
          return { blocks, stacks: named, counters: leaks.counters(), nowNs };
        },
        stopped: () => stacks.close(),
      };
    },
  );
}

/** The folded form of a stack (root first), the key its growth is kept under. */
function folded(pid: number, frames: readonly StackFrame[]): string {
  return `${pid}|${frames
    .map((f) => `${f.function ?? '?'}+${f.symbolOffset ?? 0n}`)
    .toReversed()
    .join(';')}`;
}

/** The rows of a reading: blocks grouped by stack, old enough ones only, largest first. */
export function leakRows(
  reading: LeakReading,
  olderThanMs: number | undefined,
): { rows: LeakStackRow[]; count: bigint; bytes: bigint } {
  const minAgeNs = olderThanMs === undefined ? undefined : BigInt(Math.round(olderThanMs * 1e6));
  const groups = new Map<string, { count: bigint; bytes: bigint; oldestNs: bigint; pid: number }>();
  let count = 0n;
  let bytes = 0n;
  for (const block of reading.blocks) {
    if (minAgeNs !== undefined && reading.nowNs - block.timeNs < minAgeNs) continue;
    count++;
    bytes += block.sizeBytes;
    const group = groups.get(block.stack);
    if (group === undefined) {
      groups.set(block.stack, {
        count: 1n,
        bytes: block.sizeBytes,
        oldestNs: block.timeNs,
        pid: block.pid,
      });
    } else {
      group.count++;
      group.bytes += block.sizeBytes;
      if (block.timeNs < group.oldestNs) group.oldestNs = block.timeNs;
    }
  }
  const rows = [...groups].map(
    ([id, group]): LeakStackRow => ({
      pid: group.pid,
      frames: reading.stacks.get(id)?.frames ?? [],
      count: group.count,
      bytes: group.bytes,
      oldestAgeMs: Number(reading.nowNs - group.oldestNs) / 1e6,
    }),
  );
  rows.sort((a, b) =>
    a.bytes !== b.bytes ? (a.bytes < b.bytes ? 1 : -1) : a.count < b.count ? 1 : -1,
  );
  return { rows, count, bytes };
}

/**
 * A run finding leaks: snapshots of the allocations outstanding, read at any time or every
 * interval through the async iterator, which ends with the final snapshot when the run ends
 * (the command or process ended, stop(), the abort signal). Growth is kept at each snapshot.
 */
export class Leaks implements AsyncIterable<LeakSnapshot> {
  /** The engine that pairs the allocations. */
  readonly engine: 'bpf' | 'ptrace';
  /** The allocator's file, and the functions of it probed. */
  readonly allocator: AllocatorTarget;
  readonly #aggregate: Aggregate<LeakReading>;
  readonly #options: LeaksOptions;
  readonly #began = performance.now();
  /** Per stack (by its folded form): its bytes at each snapshot taken. */
  readonly #history = new Map<
    string,
    { pid: number; folded: string; series: [number, bigint][] }
  >();
  /** The stacks that were among the top ones at some snapshot (their growth is given). */
  readonly #shown = new Set<string>();
  #final: LeakSnapshot | undefined;

  /** @internal */
  constructor(
    aggregate: Aggregate<LeakReading>,
    allocator: AllocatorTarget,
    options: LeaksOptions,
  ) {
    this.#aggregate = aggregate;
    // Leaks run on bpf or ptrace only (LeaksOptions.engine).
    this.engine = aggregate.engine === 'bpf' ? 'bpf' : 'ptrace';
    this.allocator = allocator;
    this.#options = options;
  }

  /** The probes' sites, how they were attached, the command's pid, notes on coverage. */
  get aggregate(): Aggregate<LeakReading> {
    return this.#aggregate;
  }

  /** Resolves when the run has stopped (probes removed, the command ended). */
  get ended(): Promise<void> {
    return this.#aggregate.ended;
  }

  /** Whether the run has stopped (the next snapshot is the final one). */
  get stopped(): boolean {
    return this.#final !== undefined;
  }

  /**
   * What is outstanding now (after the run stopped: when it stopped, for a command what it
   * had not freed when it exited). Each call adds a point to the growth series.
   */
  snapshot(): LeakSnapshot {
    if (this.#final !== undefined) return this.#final;
    return this.#take(false);
  }

  #take(final: boolean): LeakSnapshot {
    const reading = this.#aggregate.read();
    const elapsedMs = performance.now() - this.#began;
    const olderThanMs = this.#options.olderThanMs;
    const { rows, count, bytes } = leakRows(reading, olderThanMs);
    const seen = new Set<string>();
    for (const row of rows) {
      const key = folded(row.pid, row.frames);
      seen.add(key);
      let entry = this.#history.get(key);
      if (entry === undefined) {
        entry = {
          pid: row.pid,
          folded: row.frames
            .map((f) => f.function ?? '?')
            .toReversed()
            .join(';'),
          series: [],
        };
        this.#history.set(key, entry);
      }
      const last = entry.series.at(-1);
      if (last !== undefined && last[0] === elapsedMs) last[1] += row.bytes;
      else entry.series.push([elapsedMs, row.bytes]);
    }
    for (const [key, entry] of this.#history) {
      if (!seen.has(key) && entry.series.at(-1)?.[1] !== 0n) entry.series.push([elapsedMs, 0n]);
    }
    const top = rows.slice(0, this.#options.top ?? DEFAULT_TOP);
    for (const row of top) this.#shown.add(folded(row.pid, row.frames));
    // Every stack that was among the top ones at some snapshot: one that was freed at the
    // end (a list the program let go of as it exited) still shows how it grew.
    const growth: LeakGrowth[] = [...this.#shown].flatMap((key) => {
      const entry = this.#history.get(key);
      return entry === undefined ? [] : [entry];
    });
    return {
      final,
      elapsedMs,
      olderThanMs,
      outstanding: { count, bytes, stacks: rows.length },
      stacks: top,
      counters: reading.counters,
      growth,
    };
  }

  /** Stop: probes removed, what was outstanding then kept as the final snapshot. */
  stop(): void {
    this.#aggregate.stop();
  }

  /** Stop and release everything (the final snapshot stays readable). Idempotent. */
  close(): void {
    this.#aggregate.close();
  }

  /** The final snapshot, once the run has ended (taken once). */
  async final(): Promise<LeakSnapshot> {
    await this.#aggregate.ended;
    this.#final ??= this.#take(true);
    return this.#final;
  }

  /** A snapshot every `intervalMs`, then the final one when the run ends. */
  async *[Symbol.asyncIterator](): AsyncIterator<LeakSnapshot> {
    const interval = this.#options.intervalMs ?? DEFAULT_INTERVAL_MS;
    let done = false;
    void this.#aggregate.ended.then(() => {
      done = true;
    });
    while (!done) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, interval);
        }),
        this.#aggregate.ended,
      ]);
      clearTimeout(timer);
      if (done) break;
      yield this.#take(false);
    }
    yield await this.final();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/**
 * Find leaks in a process (`pid`) or command (`command`): the allocator's functions probed,
 * each block paired with its free. Iterate the result for snapshots (every `intervalMs`, then
 * the final one), or call snapshot(); close() when done.
 */
export async function leaks(options: LeaksOptions): Promise<Leaks> {
  if ((options.pid === undefined) === (options.command === undefined)) {
    throw new ProbeError(
      'ERR_USAGE',
      'Cannot find leaks without one process: give -p PID or -c COMMAND (not both)',
    );
  }
  const target = allocatorTarget(options);
  if (options.engine === 'ptrace') {
    return new Leaks(await ptraceLeaks(target, options), target, options);
  }
  return new Leaks(await bpfLeaks(target, options), target, options);
}
