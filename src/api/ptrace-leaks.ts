/**
 * `leaks` on the ptrace engine: the allocator's calls served in user space while their thread
 * is stopped, paired here as the bpf engine's handlers pair them in the kernel (the
 * outermost allocator call of a thread counts; realloc moves the record; a free of an address
 * never seen is counted), behind the same Aggregate and readings.
 */
import {
  type AllocatorKind,
  type HitContext,
  type LeakCounters,
  releases,
} from '../engines/index.js';
import type { StackFrame } from '../events/index.js';
import { Aggregate, type AggregationEngine, probeNames } from './aggregate.js';
import type { AllocatorTarget, LeakBlock, LeakReading, LeaksOptions } from './leaks.js';
import { PtraceRun } from './ptrace-run.js';
import { PtraceStacks, type WalkedStack } from './ptrace-stacks.js';
import { structuredFrame } from './stack-namer.js';

/** A thread inside an allocator call: how deep, and the outermost call's arguments. */
interface Pending {
  depth: number;
  kind: AllocatorKind;
  size: bigint;
  pointer: bigint;
  stack: WalkedStack | undefined;
}

const MAP_FAILED = (1n << 64n) - 1n;

export async function ptraceLeaks(
  target: AllocatorTarget,
  options: LeaksOptions,
): Promise<Aggregate<LeakReading>> {
  const specs = target.kinds.map((kind) => `${target.path}:${kind}`);
  const kindOf = new Map(target.kinds.map((kind, i) => [specs[i]!, kind]));
  const stacks = new PtraceStacks({ inlines: options.inlines, sources: true });
  const pending = new Map<number, Pending>();
  const blocks = new Map<string, LeakBlock>();
  const walked = new Map<string, WalkedStack>();
  const named = new Map<string, { pid: number; frames: StackFrame[] }>();
  const counters = {
    allocations: 0n,
    frees: 0n,
    unknownFrees: 0n,
    failed: 0n,
    dropped: 0n,
    stacksFull: 0n,
    pendingFull: 0n,
    faults: 0n,
    unmatched: 0n,
    releasedByExec: 0n,
  } satisfies Record<keyof LeakCounters, bigint>;

  /** An exec replaced process `pid`'s image: its blocks went with it. */
  const execed = (pid: number) => {
    const prefix = `${pid}:`;
    for (const key of blocks.keys()) {
      if (!key.startsWith(prefix)) continue;
      blocks.delete(key);
      counters.releasedByExec++;
    }
  };

  const release = (pid: number, address: bigint) => {
    if (address === 0n) return;
    if (blocks.delete(`${pid}:${address}`)) counters.frees++;
    else counters.unknownFrees++;
  };

  const atEntry = (hit: HitContext, kind: AllocatorKind): void => {
    const own = pending.get(hit.tid);
    if (own !== undefined && own.depth > 0) {
      own.depth++;
      return;
    }
    const arg = (name: 'rdi' | 'rsi' | 'rdx') => hit.regs.get(name);
    const mask = (1n << 64n) - 1n;
    let size = 0n;
    let pointer = 0n;
    switch (kind) {
      case 'calloc':
        size = (arg('rdi') * arg('rsi')) & mask;
        break;
      case 'realloc':
        size = arg('rsi');
        pointer = arg('rdi');
        break;
      case 'reallocarray':
        size = (arg('rsi') * arg('rdx')) & mask;
        pointer = arg('rdi');
        break;
      case 'posix_memalign':
        size = arg('rdx');
        pointer = arg('rdi');
        break;
      case 'aligned_alloc':
      case 'memalign':
      case 'mmap':
        size = arg('rsi');
        break;
      default:
        size = arg('rdi');
    }
    pending.set(hit.tid, { depth: 1, kind, size, pointer, stack: stacks.walk(hit) });
  };

  const atReturn = (hit: HitContext): void => {
    const own = pending.get(hit.tid);
    if (own === undefined || own.depth === 0) {
      counters.unmatched++;
      return;
    }
    own.depth--;
    if (own.depth > 0) return;
    const { kind, size, pointer } = own;
    let address = BigInt.asUintN(64, hit.retval ?? 0n);
    if (kind === 'posix_memalign') {
      if (address !== 0n) {
        counters.failed++;
        return;
      }
      try {
        address = hit.readU64(pointer);
      } catch {
        counters.faults++;
        return;
      }
    } else if (kind === 'mmap' && address === MAP_FAILED) {
      counters.failed++;
      return;
    }
    const moves = kind === 'realloc' || kind === 'reallocarray';
    if (address === 0n) {
      // realloc(p, 0) freed p; anything else failed.
      if (moves && size === 0n) release(hit.pid, pointer);
      else counters.failed++;
      return;
    }
    if (moves) release(hit.pid, pointer);
    const stack = own.stack;
    const id = stack === undefined ? `${hit.pid}:-` : stack.id;
    if (stack !== undefined) walked.set(id, stack);
    blocks.set(`${hit.pid}:${address}`, {
      pid: hit.pid,
      stack: id,
      sizeBytes: size,
      timeNs: hit.timeNs,
    });
    counters.allocations++;
  };

  const run = await PtraceRun.start(
    specs,
    {
      pid: options.pid,
      children: options.children,
      command: options.command,
      commandStdout: options.commandStdout,
      killAfterMs: options.killAfterMs,
      debugDirs: options.debugDirs,
      // No unwind passes through an allocator: its returns through the return trampoline.
      returnProbes: 'trampoline',
      onNotice: options.onNotice,
    },
    {
      returns: (spec) => !releases(kindOf.get(spec) ?? 'free'),
      exec: execed,
      entryFilter: (hit, site) => {
        const kind = kindOf.get(site.spec);
        if (kind !== undefined) atEntry(hit, kind);
        return true;
      },
      hit: (hit, site) => {
        const kind = kindOf.get(site.spec);
        if (kind === undefined) return true;
        if (releases(kind)) {
          // Inside another allocator call (realloc's own free): that call's business.
          if ((pending.get(hit.tid)?.depth ?? 0) > 0) return true;
          release(hit.pid, hit.regs.get('rdi'));
        } else {
          atReturn(hit);
        }
        return true;
      },
    },
  );
  const read = (): LeakReading => {
    for (const block of blocks.values()) {
      if (named.has(block.stack)) continue;
      const stack = walked.get(block.stack);
      named.set(block.stack, {
        pid: block.pid,
        frames: stack === undefined ? [] : stacks.name(stack).map(structuredFrame),
      });
    }
    return {
      blocks: [...blocks.values()],
      stacks: named,
      counters: { ...counters },
      nowNs: process.hrtime.bigint(),
    };
  };
  const sites = run.sites;
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
      dropped: 0n,
      faults: counters.faults,
      unmatched: counters.unmatched,
      deep: 0n,
      unwound: 0n,
    }),
    close: () => {
      run.stop();
      stacks.close();
    },
  };
  const launched = run.launched(options);
  const aggregate = new Aggregate(
    { sites: [...sites], skipped: [...run.skipped], warnings: [...run.warnings] },
    probeNames(sites),
    {
      engine,
      name: 'ptrace',
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
  run.run().catch((err: unknown) => {
    failure = err;
    aggregate.stop();
  });
  return aggregate;
}
