/**
 * Outstanding allocations, paired in the kernel (see leak-programs.ts): the maps, the
 * allocator's probes, and readers of the records and of the stacks they were made on.
 */

import { BPF_FUNC } from '../../native/index.js';
import {
  type AggregateOptions,
  BpfAggregation,
  decodeStackKey,
  type StackFrameKey,
  type StackOptions,
} from './aggregations.js';
import { Asm } from './asm.js';
import { MAX_FOLLOWED } from './follow.js';
import { alu64Imm, call, type Insn, ldMapFd, mov64Imm, mov64Reg, stx } from './insn.js';
import type { BpfMap } from './kernel.js';
import {
  ALLOC_KEY_BYTES,
  ALLOC_VALUE_BYTES,
  ALLOCATOR_KINDS,
  type AllocatorKind,
  LEAK_SLOT,
  LEAK_SLOTS,
  leakEntryProgram,
  leakReturnProgram,
  PENDING_VALUE_BYTES,
  releases,
} from './leak-programs.js';
import { UnwindMaps } from './unwind-maps.js';
import { UNWIND_KEY_BYTES } from './unwind-program.js';

/** A function of the allocator to probe: where, and which one it is. */
export interface AllocatorSite {
  readonly path: string;
  readonly offset: bigint;
  readonly kind: AllocatorKind;
}

/** One block not freed yet. */
export interface AllocationRecord {
  readonly pid: number;
  readonly tid: number;
  readonly address: bigint;
  readonly sizeBytes: bigint;
  /** When it was allocated (CLOCK_MONOTONIC, ns). */
  readonly timeNs: bigint;
  /** Its stack (see stacks()); 0 when the stack could not be kept. */
  readonly stackId: number;
}

/** What the handlers counted. */
export interface LeakCounters {
  readonly allocations: bigint;
  readonly frees: bigint;
  readonly unknownFrees: bigint;
  readonly failed: bigint;
  /** Allocations not recorded: the map of blocks was full. */
  readonly dropped: bigint;
  /** Allocations recorded without their stack: the map of stacks was full. */
  readonly stacksFull: bigint;
  readonly pendingFull: bigint;
  readonly faults: bigint;
  readonly unmatched: bigint;
  /**
   * Blocks an exec released: not freed by the program whose image the exec replaced (its
   * memory went with it), each counted once, as allocations() found them.
   */
  readonly releasedByExec: bigint;
}

export interface LeakOptions extends AggregateOptions {
  readonly stacks: StackOptions;
  /** Blocks kept at once (the map's bound; more are counted as dropped). */
  readonly maxAllocations: number;
  /** Distinct stacks kept. */
  readonly maxStacks: number;
}

/** Threads followed at once inside an allocator call (an LRU: old threads' slots go first). */
const MAX_THREADS = 16384;

function u32(value: number): Uint8Array {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, value, true);
  return bytes;
}

export class BpfLeaks extends BpfAggregation {
  readonly unwind: UnwindMaps;
  readonly #counters: BpfMap;
  readonly #pending: BpfMap;
  readonly #allocs: BpfMap;
  readonly #stackIds: BpfMap;
  readonly #nextId: BpfMap;
  /** Per process, when it last exec'd (CLOCK_MONOTONIC ns). */
  readonly #execs: BpfMap;
  /**
   * The blocks found released by an exec (process, address and time: the map's entry stays
   * until the new image allocates at that address, whose entry is then another block).
   */
  readonly #released = new Set<string>();
  /** Stacks read so far, by id (ids are never reused). */
  readonly #stacks = new Map<number, { pid: number; frames: StackFrameKey[] }>();
  #stacksSeen = 0;

  private constructor(options: LeakOptions) {
    super();
    this.unwind = new UnwindMaps(this.session, options.stacks.capacity, UNWIND_KEY_BYTES);
    options.stacks.prepare(this.unwind);
    this.#counters = this.session.map({
      kind: 'percpu-array',
      name: 'leak_counters',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: LEAK_SLOTS,
    });
    this.#pending = this.session.map({
      kind: 'lru-hash',
      name: 'leak_pending',
      keyBytes: 8,
      valueBytes: PENDING_VALUE_BYTES,
      maxEntries: MAX_THREADS,
    });
    this.#allocs = this.session.map({
      kind: 'hash',
      name: 'leak_allocs',
      keyBytes: ALLOC_KEY_BYTES,
      valueBytes: ALLOC_VALUE_BYTES,
      maxEntries: options.maxAllocations,
    });
    this.#stackIds = this.session.map({
      kind: 'hash',
      name: 'leak_stacks',
      keyBytes: UNWIND_KEY_BYTES,
      valueBytes: 8,
      maxEntries: options.maxStacks,
    });
    this.#nextId = this.session.map({
      kind: 'array',
      name: 'leak_next_id',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: 1,
    });
    this.#execs = this.session.map({
      kind: 'hash',
      name: 'leak_execs',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: MAX_FOLLOWED,
    });
  }

  /**
   * Probe the allocator's functions: an entry probe on each, and a return probe on each
   * that allocates (the kernel's return trampoline: no unwind passes through an allocator).
   */
  static open(sites: readonly AllocatorSite[], options: LeakOptions): BpfLeaks {
    let made: BpfLeaks | undefined;
    try {
      made = new BpfLeaks(options);
      const self = made;
      self.follow(options);
      const maps = {
        counters: self.#counters.fd,
        pending: self.#pending.fd,
        allocs: self.#allocs.fd,
        stackIds: self.#stackIds.fd,
        nextId: self.#nextId.fd,
        unwind: self.unwind,
        followed: self.followed,
      };
      const filters = self.filters(options);
      self.session.attachRawTracepoint(
        'sched_process_exec',
        execTimeProgram(self.#execs.fd, self.followed),
      );
      const cookie = (site: AllocatorSite) => ALLOCATOR_KINDS.indexOf(site.kind);
      // Returns first: a call in flight when its entry probe arrives leaves no slot behind
      // that no return would close (its return finds none, and is counted unmatched).
      const probes = [
        ...sites
          .filter((site) => !releases(site.kind))
          .map((site) => ({ ...site, kind: 'return' as const, cookie: cookie(site) })),
        ...sites.map((site) => ({ ...site, kind: 'entry' as const, cookie: cookie(site) })),
      ];
      self.attached(
        self.session.attach(
          probes,
          {
            entry: () => leakEntryProgram(maps, filters),
            return: () => leakReturnProgram(maps, filters),
          },
          { pid: self.attachPid, mode: options.mode, purpose: options.purpose },
        ),
      );
      return self;
    } catch (err) {
      made?.close();
      throw err;
    }
  }

  counters(): LeakCounters {
    const slot = (index: number) => this.#counters.lookupSum(u32(index));
    return {
      allocations: slot(LEAK_SLOT.allocations),
      frees: slot(LEAK_SLOT.frees),
      unknownFrees: slot(LEAK_SLOT.unknownFrees),
      failed: slot(LEAK_SLOT.failed),
      dropped: slot(LEAK_SLOT.dropped),
      stacksFull: slot(LEAK_SLOT.stacksFull),
      pendingFull: slot(LEAK_SLOT.pendingFull),
      faults: slot(LEAK_SLOT.faults),
      unmatched: slot(LEAK_SLOT.unmatched),
      releasedByExec: BigInt(this.#released.size),
    };
  }

  /**
   * Every block recorded and not freed yet, but those of an image an exec has replaced since
   * (counted in counters().releasedByExec).
   */
  allocations(): AllocationRecord[] {
    const execs = new Map<number, bigint>();
    this.#execs.lookupBatch((keys, values, count) => {
      const k = new DataView(keys.buffer, keys.byteOffset, keys.byteLength);
      const v = new DataView(values.buffer, values.byteOffset, values.byteLength);
      for (let i = 0; i < count; i++)
        execs.set(k.getUint32(i * 4, true), v.getBigUint64(i * 8, true));
    });
    const records: AllocationRecord[] = [];
    this.#allocs.lookupBatch((keys, values, count) => {
      const k = new DataView(keys.buffer, keys.byteOffset, keys.byteLength);
      const v = new DataView(values.buffer, values.byteOffset, values.byteLength);
      for (let i = 0; i < count; i++) {
        const ko = i * ALLOC_KEY_BYTES;
        const vo = i * ALLOC_VALUE_BYTES;
        const pid = k.getUint32(ko, true);
        const timeNs = v.getBigUint64(vo + 8, true);
        const exec = execs.get(pid);
        if (exec !== undefined && timeNs < exec) {
          this.#released.add(`${pid}:${k.getBigUint64(ko + 8, true)}:${timeNs}`);
          continue;
        }
        records.push({
          pid,
          address: k.getBigUint64(ko + 8, true),
          sizeBytes: v.getBigUint64(vo, true),
          timeNs,
          stackId: v.getUint32(vo + 16, true),
          tid: v.getUint32(vo + 20, true),
        });
      }
    });
    return records;
  }

  /** The stack of each id (read from the kernel once per new stack). */
  stacks(): ReadonlyMap<number, { pid: number; frames: StackFrameKey[] }> {
    const known = this.#nextId.lookup(u32(0));
    const next = known === undefined ? 0 : Number(new DataView(known.buffer).getBigUint64(0, true));
    if (next === this.#stacksSeen) return this.#stacks;
    this.#stacksSeen = next;
    this.#stackIds.lookupBatch((keys, values, count) => {
      const v = new DataView(values.buffer, values.byteOffset, values.byteLength);
      for (let i = 0; i < count; i++) {
        const id = Number(v.getBigUint64(i * 8, true));
        if (this.#stacks.has(id)) continue;
        const key = keys.subarray(i * UNWIND_KEY_BYTES, (i + 1) * UNWIND_KEY_BYTES);
        this.#stacks.set(id, decodeStackKey(key));
      }
    }, 256);
    return this.#stacks;
  }
}

/**
 * At `sched_process_exec`: `execs[tgid] = now` for a followed process (`followed`, the map of
 * them; every process without one). Blocks of a process allocated before its last exec are
 * then told from those after.
 */
function execTimeProgram(execs: number, followed: number | undefined): Insn[] {
  const a = new Asm();
  const out = 'out';
  const PID = -8;
  const TIME = -16;
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32), stx('W', 10, PID, 0));
  if (followed !== undefined) {
    a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, PID));
    a.emit(call(BPF_FUNC.map_lookup_elem));
    a.jmpImm('JEQ', 0, 0, out);
  }
  a.emit(call(BPF_FUNC.ktime_get_ns), stx('DW', 10, TIME, 0));
  a.emit(ldMapFd(1, execs), mov64Reg(2, 10), alu64Imm('ADD', 2, PID));
  a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, TIME), mov64Imm(4, 0));
  a.emit(call(BPF_FUNC.map_update_elem));
  a.label(out);
  a.returnZero();
  return a.finish();
}
