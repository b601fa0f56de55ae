import { closeSync, openSync, readFileSync } from 'node:fs';
import { type BucketScheme, linearSteps, NEGATIVE_BUCKETS } from '../../aggregate/index.js';
import {
  BUCKETS,
  buildEntryTrampoline,
  buildReturnTrampoline,
  jumpRel32,
  planEntryPatch,
  READ_DATA,
  READ_LIMITS,
  RECORD,
  RECORD_KIND,
  RECORD_PROBE,
  RECORD_REGS,
  RING,
  readLayout,
  relocatedOffset,
  SHADOW,
  SHADOW_DEPTH,
  STACK_WORDS,
  STATS,
  savedRegisterOffset,
  TRAMPOLINE_MAX_BYTES,
} from '../../arch/index.js';
import { ProbeError } from '../../errors/index.js';
import { loadNative, type NativeMemory, SYSCALL, USER_REGS } from '../../native/index.js';
import {
  addInlineAggregates,
  type InlineAggregate,
  type InlineHit,
  type InlineHooks,
  type InlineMemory,
  type InlineRead,
  type InlineReads,
  type InlineValue,
  NO_INLINE_READS,
} from '../ptrace/inline-hooks.js';
import { Registers } from '../ptrace/registers.js';
import { SIGTRAP, type Tracee } from '../ptrace/tracee.js';
import { XolArea } from '../ptrace/xol-area.js';
import { TscClock } from './tsc-clock.js';

/** How deep one thread's calls are tracked for their returns, and how many threads at once. */
export const RETURN_LIMITS = { depth: SHADOW_DEPTH, threads: SHADOW.threads } as const;

/** Records in a ring by default: 64 Ki (12 MiB), a burst of about 6 ms at 10 M hits/s. */
export const DEFAULT_RING_RECORDS = 1 << 16;

const PROT_READ_WRITE = 3n;
const MAP_SHARED = 1n;
/** Its pages made at once: a hit is never the first to touch one (a fault in the process). */
const MAP_POPULATE = 0x8000n;
const MFD_CLOEXEC = 1n;
/** Where glibc keeps a thread's id in its TCB (struct pthread's tid) on x86-64. */
const GLIBC_TID_OFFSET = 0x2d0;
/** How many times every thread is stopped to find the thread id in the TCB, at most. */
const TID_TRIES = 3;
/** How far into the TCB the thread id is looked for. */
const TCB_SCAN_BYTES = 0x1000;
/** The trap flag of %rflags (single-step). */
const TRAP_FLAG = 0x100n;
/**
 * Steps a thread may take to leave an entry trampoline's recording part: about 150
 * instructions, and about 45 more for each shadow stack entry it drops (calls a longjmp left).
 */
const MAX_STEPS = 48 * SHADOW_DEPTH + 1000;
/** Steps a thread may take to leave the return trampoline (it may pop a whole shadow stack). */
const MAX_RETURN_STEPS = 8 * SHADOW_DEPTH + 1000;

/** Where each register is in a record and in `struct user_regs_struct`: pairs of byte offsets. */
const REGISTER_COPY: readonly number[] = [
  ...RECORD_REGS.flatMap((name, i) => [RECORD.regs + 8 * i, USER_REGS[name]]),
  RECORD.rflags,
  USER_REGS.eflags,
];

/**
 * Hits whose registers and stack words share one buffer (a hit kept, as an entry waiting for
 * its return is, keeps its slab: small enough that this costs little), and the bytes of each.
 */
const SLAB_HITS = 32;
/**
 * Code below this (a program not built as PIE, from 0x400000) has pages to map near it below
 * itself (4 MiB: about a thousand) and little else within a jump's reach: each trampoline
 * takes a page, and int3s served by the ptrace engine need some for their instructions'
 * out-of-line copies (128 to a page). Hooks there stop at LOW_HOOKS.
 */
const LOW_CODE = 1n << 32n;
const LOW_HOOKS = 768;
/** Where a record holds %rsp. */
const RECORD_RSP = RECORD.regs + 8 * RECORD_REGS.indexOf('rsp');
/** A bare hit's registers (never written: nothing reads a bare hit's registers). */
const BARE_REGS = new Registers();
const NO_BYTES = new Uint8Array(0);
const NO_MEMORY: readonly InlineMemory[] = [];
const SLAB_HIT_BYTES = USER_REGS.sizeBytes + 8 * STACK_WORDS;

/** The stack address (see InlineHit.sp) at `at` of a record: a number, no BigInt made. */
function stackAddress(view: DataView, at: number): number {
  return view.getUint32(at + 4, true) * 2 ** 32 + view.getUint32(at, true);
}

/** A hooked function. */
interface Hook {
  readonly vaddr: bigint;
  readonly index: number;
  readonly trampoline: bigint;
  readonly original: Uint8Array;
  readonly patch: Uint8Array;
  /** Where the relocated instructions start in the trampoline, and what they stand for. */
  readonly relocatedAt: bigint;
  readonly relocatedEnd: bigint;
  readonly map: readonly { readonly offset: number; readonly vaddr: bigint }[];
  /** The memory its records copy into their data. */
  readonly reads: InlineReads;
}

/** How a probe index's entry (or return) records carry their reads' data. */
interface ReadLayout {
  readonly reads: readonly InlineRead[];
  readonly offsets: readonly number[];
  /** The ring slots after each entry record that hold its data. */
  readonly slots: number;
}

const NO_READS: ReadLayout = { reads: [], offsets: [], slots: 0 };

/** Whether two reads are the same read. */
function sameRead(a: InlineRead, b: InlineRead): boolean {
  return (
    a.constant === b.constant &&
    a.after === b.after &&
    a.bytes === b.bytes &&
    a.terms.length === b.terms.length &&
    a.terms.every((t, i) => {
      const u = b.terms[i]!;
      return (
        t.register === u.register && t.shift === u.shift && t.bits === u.bits && t.scale === u.scale
      );
    })
  );
}

/**
 * `reads` with `more` added (those it lacks, each `after` renumbered), and where each of
 * `more` is in the result.
 */
function mergeReads(
  reads: readonly InlineRead[],
  more: readonly InlineRead[],
): { reads: InlineRead[]; at: number[] } {
  const merged = [...reads];
  const at: number[] = [];
  for (const read of more) {
    const mapped = { ...read, after: read.after === undefined ? undefined : at[read.after] };
    let i = merged.findIndex((r) => sameRead(r, mapped));
    if (i < 0) i = merged.push(mapped) - 1;
    at.push(i);
  }
  return { reads: merged, at };
}

/** The ring shared with the process: a memfd both map. */
interface Ring {
  readonly vaddr: bigint;
  readonly sizeBytes: number;
  readonly local: NativeMemory;
  readonly u64: BigUint64Array;
  readonly u32: Uint32Array;
  readonly u8: Uint8Array;
  /** Where calls whose return address is swapped return to (see arch's trampoline.ts). */
  readonly returnTrampoline: bigint;
  tail: number;
}

export interface InjectorOptions {
  /** Records the ring holds (a power of two; default DEFAULT_RING_RECORDS). */
  readonly ringRecords?: number | undefined;
  /** The unit the histogram of calls timed in the process counts, in ns (default 1). */
  readonly timeUnitNs?: number | undefined;
  /** The buckets of the values aggregated in the process (default log2). */
  readonly valueScheme?: BucketScheme | undefined;
}

/**
 * The inline hooks of one traced process (the `inject` engine): a code page and a ring
 * buffer mapped into it over ptrace, a trampoline per hooked function written there, and a
 * `jmp` patched over the function's first instructions. The trampolines record each hit
 * (registers, a few stack words, thread id, TSC) in the ring, which upscope reads in place;
 * nothing stops the thread. See arch's trampoline.ts for the code and the ring's protocol.
 */
export class Injector implements InlineHooks {
  readonly #tracee: Tracee;
  readonly #capacity: number;
  /** Per probe index: whether its hits are read bare (setBare()). */
  readonly #bare = new Uint8Array(RING.maxProbes);
  readonly #timeUnitNs: number;
  readonly #valueScheme: BucketScheme;
  /** Probe indexes whose histogram holds values, and whether those are signed. */
  readonly #valueSigned = new Map<number, boolean>();
  #xol: XolArea;
  #ring: Ring | undefined;
  readonly #hooks = new Map<bigint, Hook>();
  /** Hooks removed whose trampoline may still be run by a thread (kept mapped). */
  #retired: Hook[] = [];
  /** Hooked address by probe index (indexes are not reused within a ring). */
  #byIndex: (bigint | undefined)[] = [];
  /** How each probe index's entry and return records carry their reads' data. */
  #layouts: { entry: ReadLayout; return: ReadLayout }[] = [];
  /** Why the process's trampolines may not read memory (a seccomp filter), once known. */
  #readsRefused: string | null | undefined;
  #lostSeen: number[] = [];
  #untrackedSeen = 0;
  #clock: TscClock | undefined;
  #tidTries = 0;
  #tidKnown = false;

  /** A factory for ProcessProbes' `inline` option. */
  static factory(options: InjectorOptions = {}): (tracee: Tracee) => Injector {
    return (tracee) => new Injector(tracee, options);
  }

  constructor(tracee: Tracee, options: InjectorOptions = {}) {
    this.#tracee = tracee;
    const records = options.ringRecords ?? DEFAULT_RING_RECORDS;
    if (records <= 0 || (records & (records - 1)) !== 0) {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot size the ring at ${records} records: give a power of two`,
      );
    }
    this.#capacity = records;
    this.#timeUnitNs = options.timeUnitNs ?? 1;
    this.#valueScheme = options.valueScheme ?? { kind: 'log2' };
    this.#xol = new XolArea(tracee, TRAMPOLINE_MAX_BYTES);
  }

  has(vaddr: bigint): boolean {
    return this.#hooks.has(vaddr);
  }

  covers(vaddr: bigint, reads: InlineReads): boolean {
    const hook = this.#hooks.get(vaddr);
    return (
      hook !== undefined &&
      mergeReads(hook.reads.entry, reads.entry).reads.length === hook.reads.entry.length &&
      mergeReads(hook.reads.return, reads.return).reads.length === hook.reads.return.length
    );
  }

  place(
    vaddr: bigint,
    jumpTargets: readonly bigint[] | undefined,
    tid: number,
    pcs: readonly bigint[],
    reads: InlineReads = NO_INLINE_READS,
  ): string | undefined {
    const before = this.#hooks.get(vaddr);
    if (before !== undefined && this.covers(vaddr, reads)) return undefined;
    if (this.#byIndex.length >= RING.maxProbes) {
      return `one process takes at most ${RING.maxProbes} inline hooks`;
    }
    if (vaddr < LOW_CODE && this.#lowHooks() >= LOW_HOOKS) {
      return `code below 4 GiB (a program not built as PIE) has room for about a thousand pages near it: ${LOW_HOOKS} hooks there at most (a page each), the rest kept for the out-of-line copies int3s need`;
    }
    if (reads.entry.length > 0 || reads.return.length > 0) {
      const why = this.#whyNoReads();
      if (why !== undefined) return why;
    }
    const tracee = this.#tracee;
    if (before !== undefined) {
      // Hooked with fewer reads: a new trampoline makes them all, with the same settings.
      const merged = {
        entry: mergeReads(before.reads.entry, reads.entry).reads,
        return: mergeReads(before.reads.return, reads.return).reads,
      };
      const ring = this.#ring!;
      const returns = Atomics.load(ring.u8, RING.returns + before.index);
      const inProcess = Atomics.load(ring.u8, RING.inProcess + before.index);
      this.remove(vaddr);
      const why = this.place(vaddr, jumpTargets, tid, pcs, merged);
      if (why !== undefined) {
        // Back as it was (its bytes and trampoline are still there to take again).
        this.#hooks.set(vaddr, before);
        tracee.write(vaddr, before.patch);
        this.#retired = this.#retired.filter((h) => h !== before);
        Atomics.store(ring.u8, RING.returns + before.index, returns);
        return why;
      }
      const after = this.#hooks.get(vaddr)!;
      const from = (RING.stats + before.index * STATS.bytes) / 8;
      const to = (RING.stats + after.index * STATS.bytes) / 8;
      for (let field = STATS.value.at; field < STATS.bytes; field += 8) {
        Atomics.store(ring.u64, to + field / 8, Atomics.load(ring.u64, from + field / 8));
      }
      const signed = this.#valueSigned.get(before.index);
      if (signed !== undefined) this.#valueSigned.set(after.index, signed);
      Atomics.store(ring.u8, RING.returns + after.index, returns);
      Atomics.store(ring.u8, RING.inProcess + after.index, inProcess);
      return undefined;
    }
    let code: Uint8Array;
    try {
      code = tracee.read(vaddr, 32);
    } catch (err) {
      if (!(err instanceof ProbeError)) throw err;
      code = tracee.read(vaddr, 16);
    }
    if (code[0] === 0xcc) return "its first byte is an int3 (another tracer's breakpoint)";
    let trampoline: bigint;
    try {
      trampoline = this.#xol.take(vaddr, tid);
    } catch (err) {
      // Every page a jump from it reaches is taken (a program not built as PIE, low in
      // memory, with a thousand hooks already): the others stay, this one is an int3's.
      if (err instanceof ProbeError && err.code === 'ERR_XOL_UNAVAILABLE') {
        return `no page for its trampoline can be mapped within 2 GiB of it, where its jump reaches (${this.#hooks.size} hooks placed)`;
      }
      throw err;
    }
    const relocatedAt = trampoline + BigInt(relocatedOffset(reads.entry, reads.return));
    const plan = planEntryPatch(code, vaddr, relocatedAt, jumpTargets);
    if (plan.kind === 'refuse') {
      this.#xol.release(trampoline);
      return plan.reason;
    }
    const end = vaddr + BigInt(plan.length);
    const inside = pcs.find((pc) => pc > vaddr && pc < end);
    if (inside !== undefined) {
      this.#xol.release(trampoline);
      return `a thread is stopped inside its first ${plan.length} bytes (at 0x${inside.toString(16)})`;
    }
    const jump = jumpRel32(vaddr, trampoline);
    if (jump === undefined) {
      this.#xol.release(trampoline);
      return 'no trampoline page could be mapped within 2 GiB of it';
    }
    const ring = this.#ring ?? this.#mapRing(tid, trampoline);
    const index = this.#byIndex.length;
    const { bytes, returnReadsAt } = buildEntryTrampoline({
      at: trampoline,
      ring: ring.vaddr,
      capacity: this.#capacity,
      probe: index,
      returnTrampoline: ring.returnTrampoline,
      relocated: plan.relocated,
      back: end,
      reads: reads.entry,
      returnReads: reads.return,
    });
    this.#xol.fill(trampoline, bytes);
    const layout = (list: readonly InlineRead[]): ReadLayout =>
      list.length === 0 ? NO_READS : { reads: list, ...readLayout(list) };
    const layouts = { entry: layout(reads.entry), return: layout(reads.return) };
    // Where the return trampoline finds the routine for this probe's return records.
    Atomics.store(ring.u64, RING.returnSlots / 8 + index, BigInt(layouts.return.slots));
    Atomics.store(
      ring.u64,
      RING.returnReads / 8 + index,
      returnReadsAt === undefined ? 0n : trampoline + BigInt(returnReadsAt),
    );
    const patch = new Uint8Array(plan.length).fill(0x90);
    patch.set(jump);
    this.#byIndex.push(vaddr);
    this.#layouts.push(layouts);
    this.#lostSeen.push(0);
    this.#hooks.set(vaddr, {
      vaddr,
      index,
      trampoline,
      original: code.slice(0, plan.length),
      patch,
      relocatedAt,
      relocatedEnd: relocatedAt + BigInt(plan.length),
      map: plan.map,
      reads,
    });
    // Every thread is stopped and none is inside these bytes: the jump is never seen half
    // written. The kernel's resume of each thread orders its instruction fetches after this.
    tracee.write(vaddr, patch);
    return undefined;
  }

  /**
   * Why the trampolines may not read memory in this process: a seccomp filter (Seccomp: 2 in
   * /proc/PID/status) may forbid process_vm_readv(2), or kill the thread for it.
   */
  #whyNoReads(): string | undefined {
    if (this.#readsRefused === undefined) {
      let status = '';
      try {
        status = readFileSync(`/proc/${this.#tracee.pid}/status`, 'utf8');
      } catch {
        // Gone: placing fails on its own.
      }
      const mode = /^Seccomp:\s*(\d+)/m.exec(status)?.[1];
      this.#readsRefused =
        mode === undefined || mode === '0'
          ? null
          : `the process runs under seccomp (mode ${mode}), which may forbid the process_vm_readv(2) its hook would copy memory with`;
    }
    return this.#readsRefused ?? undefined;
  }

  /** Hooks placed on code below LOW_CODE. */
  #lowHooks(): number {
    let count = 0;
    for (const at of this.#hooks.keys()) if (at < LOW_CODE) count++;
    return count;
  }

  setBare(vaddr: bigint, on: boolean): void {
    const hook = this.#hooks.get(vaddr);
    if (hook !== undefined) this.#bare[hook.index] = on ? 1 : 0;
  }

  setReturns(vaddr: bigint, on: boolean): void {
    const hook = this.#hooks.get(vaddr);
    const ring = this.#ring;
    if (hook === undefined || ring === undefined) return;
    Atomics.store(ring.u8, RING.returns + hook.index, on ? 1 : 0);
  }

  setAggregate(vaddr: bigint, on: boolean, value?: InlineValue | undefined): void {
    const hook = this.#hooks.get(vaddr);
    const ring = this.#ring;
    if (hook === undefined || ring === undefined) return;
    const at = (RING.stats + hook.index * STATS.bytes) / 8;
    const set = (field: number, word: bigint) => Atomics.store(ring.u64, at + field / 8, word);
    const V = STATS.value;
    const offset = value === undefined ? undefined : savedRegisterOffset(value.register);
    if (on && offset !== undefined && value !== undefined) {
      const key = (v: bigint) => BigInt.asUintN(64, v) ^ (value.signed ? 1n << 63n : 0n);
      set(V.shift, BigInt(64 - value.bits));
      set(V.signed, value.signed ? 1n : 0n);
      const scheme = this.#valueScheme;
      if (scheme.kind === 'linear') {
        set(V.linear, 1n);
        set(V.low, key(scheme.min));
        set(V.high, key(scheme.max));
        set(V.step, scheme.step);
        set(V.top, BigInt(linearSteps(scheme) + 1));
      }
      set(V.at, BigInt(offset + 1));
      this.#valueSigned.set(hook.index, value.signed);
    } else {
      set(V.at, 0n);
      this.#valueSigned.delete(hook.index);
    }
    Atomics.store(ring.u8, RING.inProcess + hook.index, on ? 1 : 0);
  }

  aggregates(): Map<bigint, InlineAggregate> {
    const found = new Map<bigint, InlineAggregate>();
    const ring = this.#ring;
    if (ring === undefined) return found;
    const { u64 } = ring;
    for (const [index, vaddr] of this.#byIndex.entries()) {
      if (vaddr === undefined) continue;
      const at = (RING.stats + index * STATS.bytes) / 8;
      const word = (field: number) => Atomics.load(u64, at + field / 8);
      const entries = word(STATS.entries);
      const calls = word(STATS.calls);
      const unwound = word(STATS.unwound);
      if (entries === 0n && calls === 0n && unwound === 0n) continue;
      const buckets = new Map<number, bigint>();
      if (calls > 0n) {
        const first = (RING.buckets + index * BUCKETS.bytes) / 8;
        for (let i = 0; i < BUCKETS.count; i++) {
          const count = Atomics.load(u64, first + i);
          if (count > 0n) buckets.set(i, count);
        }
      }
      const max = word(STATS.max);
      const notMin = word(STATS.notMin);
      const signed = this.#valueSigned.get(index);
      // A value's order key has its top bit flipped when it is signed; a negative log2
      // bucket is at BUCKETS.negativeOffset + its magnitude's.
      const fromKey = (k: bigint) => (signed ? BigInt.asIntN(64, k ^ (1n << 63n)) : k);
      const bucketsOut =
        signed === undefined || this.#valueScheme.kind === 'linear'
          ? buckets
          : new Map(
              [...buckets].map(([i, n]) => [
                i >= BUCKETS.negativeOffset ? i - BUCKETS.negativeOffset + NEGATIVE_BUCKETS : i,
                n,
              ]),
            );
      const sum = word(STATS.sum);
      const aggregate: InlineAggregate = {
        entries,
        calls,
        sumNs: signed ? BigInt.asIntN(64, sum) : sum,
        minNs: calls === 0n ? undefined : fromKey(BigInt.asUintN(64, ~notMin)),
        maxNs: calls === 0n ? undefined : fromKey(max),
        buckets: bucketsOut,
        unwound,
      };
      // An address hooked again with more reads has counted under two indexes.
      const earlier = found.get(vaddr);
      found.set(vaddr, earlier === undefined ? aggregate : addInlineAggregates(earlier, aggregate));
    }
    return found;
  }

  remove(vaddr: bigint): void {
    const hook = this.#hooks.get(vaddr);
    if (hook === undefined) return;
    this.setReturns(vaddr, false);
    this.#hooks.delete(vaddr);
    this.#retired.push(hook);
    this.#restore(hook);
  }

  /** Put a hooked function's bytes back, where our patch is still what is there. */
  #restore(hook: Hook): void {
    let now: Uint8Array;
    try {
      now = this.#tracee.read(hook.vaddr, hook.patch.length);
    } catch (err) {
      if (err instanceof ProbeError) return;
      throw err;
    }
    if (now.every((b, i) => b === hook.patch[i])) this.#tracee.write(hook.vaddr, hook.original);
  }

  /** Map the ring: a memfd made in the process, mapped there and here, then closed there. */
  #mapRing(tid: number, near: bigint): Ring {
    const tracee = this.#tracee;
    // The shadow stacks' pages are allocated only as threads touch them.
    // The spare slots after the last record hold the data of the records near the end.
    const sizeBytes = RING.records + (this.#capacity + READ_LIMITS.slots) * RECORD.bytes;
    // The memfd's name, written where the process can read it: a slot of the code page.
    const nameAt = this.#xol.take(near, tid);
    this.#xol.fill(nameAt, new TextEncoder().encode('upscope-inject\0'));
    const check = (result: bigint, what: string): bigint => {
      if (result < 0n) {
        throw new ProbeError(
          'ERR_TARGET_MEMORY',
          `Cannot map the inject engine's ring buffer into process ${tracee.pid}: ${what} failed with errno ${-result}`,
        );
      }
      return result;
    };
    const fd = check(
      tracee.injectSyscall(tid, SYSCALL.memfd_create, [nameAt, MFD_CLOEXEC]),
      'memfd_create',
    );
    try {
      check(tracee.injectSyscall(tid, SYSCALL.ftruncate, [fd, BigInt(sizeBytes)]), 'ftruncate');
      const vaddr = check(
        tracee.injectSyscall(tid, SYSCALL.mmap, [
          0n,
          BigInt(sizeBytes),
          PROT_READ_WRITE,
          MAP_SHARED | MAP_POPULATE,
          fd,
          0n,
        ]),
        'mmap',
      );
      const native = loadNative();
      const own = openSync(`/proc/${tracee.pid}/fd/${fd}`, 'r+');
      let local: NativeMemory | number;
      try {
        local = native.mmap(sizeBytes, Number(PROT_READ_WRITE), own, 0);
      } finally {
        closeSync(own);
      }
      if (typeof local === 'number') {
        tracee.injectSyscall(tid, SYSCALL.munmap, [vaddr, BigInt(sizeBytes)]);
        check(BigInt(local), 'mmap in upscope');
        throw new Error('unreachable');
      }
      const buffer = local.bytes.buffer;
      const offset = local.bytes.byteOffset;
      const returnTrampoline = this.#xol.take(near, tid);
      this.#xol.fill(returnTrampoline, buildReturnTrampoline(vaddr, this.#capacity));
      this.#ring = {
        vaddr,
        sizeBytes,
        local,
        u64: new BigUint64Array(buffer, offset, sizeBytes / 8),
        u32: new Uint32Array(buffer, offset, sizeBytes / 4),
        u8: new Uint8Array(buffer, offset, sizeBytes),
        returnTrampoline,
        tail: 0,
      };
      this.#clock = new TscClock(native);
      this.#setRates();
      if (this.#timeUnitNs > 1) {
        const reciprocal = ((1n << 64n) + BigInt(this.#timeUnitNs) - 1n) / BigInt(this.#timeUnitNs);
        Atomics.store(this.#ring.u64, RING.unitReciprocal / 8, reciprocal);
      }
      return this.#ring;
    } finally {
      tracee.injectSyscall(tid, SYSCALL.close, [fd]);
    }
  }

  drain(visit: (hit: InlineHit) => void): boolean {
    const ring = this.#ring;
    if (ring === undefined) return true;
    const clock = this.#clock!;
    clock.update();
    this.#setRates();
    const { u32, u64, local } = ring;
    const bytes = local.bytes;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const mask = this.#capacity - 1;
    let tail = ring.tail;
    let given = tail;
    let slab = new ArrayBuffer(0);
    let slabWords = new Uint32Array(slab);
    let slabUsed = SLAB_HITS;
    // Only the records claimed before the drain began: threads that record as fast as they
    // are read would otherwise keep it going for ever (poll() comes back for the rest).
    const end = Number(Atomics.load(u64, RING.head / 8));
    while (tail < end) {
      const at = RING.records + (tail & mask) * RECORD.bytes;
      // The record's seq (its low word is enough: records are never 2^32 apart) is written
      // last: once it says this record, the rest is there.
      if (Atomics.load(u32, at / 4) !== (tail + 1) >>> 0) break;
      const word = view.getUint32(at + RECORD.probe, true);
      const index = word & ((1 << RECORD_PROBE.droppedShift) - 1);
      const kind = word >>> RECORD_PROBE.kindShift;
      const vaddr = this.#byIndex[index];
      const layouts = this.#layouts[index];
      const layout =
        layouts === undefined
          ? NO_READS
          : kind === RECORD_KIND.return
            ? layouts.return
            : layouts.entry;
      const returned = kind === RECORD_KIND.return;
      if (vaddr !== undefined) {
        let regs = BARE_REGS;
        let stack = NO_BYTES;
        let memory: readonly InlineMemory[] = NO_MEMORY;
        if (this.#bare[index] !== 1) {
          // A hit's registers and stack words go to a slab shared by a few hits (a buffer of
          // its own per hit cost more than the rest of its reading), word by word (every field
          // is 8-byte aligned in both): no view made per register.
          if (slabUsed === SLAB_HITS) {
            slab = new ArrayBuffer(SLAB_HITS * SLAB_HIT_BYTES);
            slabWords = new Uint32Array(slab);
            slabUsed = 0;
          }
          const base = slabUsed++ * SLAB_HIT_BYTES;
          regs = new Registers(new Uint8Array(slab, base, USER_REGS.sizeBytes));
          for (let i = 0; i < REGISTER_COPY.length; i += 2) {
            const from = (at + REGISTER_COPY[i]!) >>> 2;
            const to = (base + REGISTER_COPY[i + 1]!) >>> 2;
            slabWords[to] = u32[from]!;
            slabWords[to + 1] = u32[from + 1]!;
          }
          // A return's first words: the address returned to, the call's entry stack pointer.
          regs.rip = returned ? view.getBigUint64(at + RECORD.stack, true) : vaddr;
          const skip = returned ? 2 : 0;
          const stackAt = base + USER_REGS.sizeBytes;
          for (let i = 2 * skip; i < 2 * STACK_WORDS; i++) {
            slabWords[(stackAt >>> 2) + i - 2 * skip] = u32[((at + RECORD.stack) >>> 2) + i]!;
          }
          stack = new Uint8Array(slab, stackAt, 8 * (STACK_WORDS - skip));
          if (layout.slots > 0) memory = readMemory(view, at + RECORD.bytes, layout);
        }
        visit({
          kind: returned ? 'return' : 'entry',
          vaddr,
          returns: kind === RECORD_KIND.entryWithReturn,
          dropped: (word >>> RECORD_PROBE.droppedShift) & RECORD_PROBE.droppedMask,
          entrySp: returned ? stackAddress(view, at + RECORD.stack + 8) : undefined,
          tid: view.getUint32(at + RECORD.tid, true),
          sp: stackAddress(view, at + RECORD_RSP),
          timeNs: clock.toNsOfWords(
            view.getUint32(at + RECORD.tsc + 4, true),
            view.getUint32(at + RECORD.tsc, true),
          ),
          regs,
          stack,
          memory,
        });
      }
      // The slots of its data, which the next lap may take for records: their seq words (in
      // the ring, not the spare slots past its end) cleared, so that none is ever taken for a
      // record's.
      for (let slot = 1; slot <= layout.slots; slot++) {
        const physical = (tail & mask) + slot;
        if (physical <= mask) Atomics.store(u32, (RING.records + physical * RECORD.bytes) / 4, 0);
      }
      tail += 1 + layout.slots;
      // Give the room back as it is read, so that a long drain does not make the ring full.
      if (tail - given >= 1024) {
        given = tail;
        Atomics.store(u64, RING.tail / 8, BigInt(tail));
      }
    }
    if (tail !== ring.tail) {
      ring.tail = tail;
      Atomics.store(u64, RING.tail / 8, BigInt(tail));
    }
    return tail >= end;
  }

  /** Tell the trampolines the TSC's rate as the clock knows it now (RING.tickToNs). */
  #setRates(): void {
    const ring = this.#ring;
    const clock = this.#clock;
    if (ring === undefined || clock === undefined) return;
    const scaled = BigInt(Math.round(clock.nsPerTick * 2 ** 32));
    Atomics.store(ring.u64, RING.tickToNs / 8, scaled);
  }

  takeLost(): Map<bigint, number> {
    const lost = new Map<bigint, number>();
    const ring = this.#ring;
    if (ring === undefined) return lost;
    for (const [index, vaddr] of this.#byIndex.entries()) {
      if (vaddr === undefined) continue;
      const now = Number(Atomics.load(ring.u64, RING.lost / 8 + index));
      const more = now - this.#lostSeen[index]!;
      if (more > 0) {
        this.#lostSeen[index] = now;
        lost.set(vaddr, (lost.get(vaddr) ?? 0) + more);
      }
    }
    return lost;
  }

  takeUntracked(): number {
    const ring = this.#ring;
    if (ring === undefined) return 0;
    const now = Number(Atomics.load(ring.u64, RING.untracked / 8));
    const more = now - this.#untrackedSeen;
    this.#untrackedSeen = now;
    return more;
  }

  /** The shadow slot of thread `tid` (see arch's trampoline.ts), if it has one. */
  #slotOf(tid: number): number | undefined {
    const ring = this.#ring;
    if (ring === undefined || tid === 0) return undefined;
    const first = (tid & (SHADOW.threads / SHADOW.bucket - 1)) * SHADOW.bucket;
    for (let slot = first; slot < first + SHADOW.bucket; slot++) {
      if (Atomics.load(ring.u32, RING.shadowTids / 4 + slot) === tid) return slot;
    }
    return undefined;
  }

  /** The entries of a thread slot's shadow stack, outermost first. */
  #entriesOf(slot: number): { sp: bigint; returnAddress: bigint; probe: number; timed: boolean }[] {
    const ring = this.#ring!;
    const base = (RING.shadowSlots + slot * SHADOW.slotBytes) / 8;
    const depth = Math.min(Number(Atomics.load(ring.u64, base)), SHADOW_DEPTH);
    const entries: { sp: bigint; returnAddress: bigint; probe: number; timed: boolean }[] = [];
    for (let i = 0; i < depth; i++) {
      const at = base + (SHADOW.entries + i * SHADOW.entryBytes) / 8;
      entries.push({
        returnAddress: ring.u64[at]!,
        sp: ring.u64[at + 1]!,
        probe: ring.u32[(at + 2) * 2]!,
        timed: ring.u32[(at + 2) * 2 + 1] !== 0,
      });
    }
    return entries;
  }

  /**
   * Put back in thread slot `slot`'s stack every return address swapped for the return
   * trampoline (where the trampoline's address is still there: a frame a longjmp left may
   * hold something else now), and empty its shadow stack.
   */
  #putBack(slot: number): void {
    const ring = this.#ring!;
    const entries = this.#entriesOf(slot);
    for (const entry of entries.reverse()) {
      try {
        if (this.#tracee.readU64(entry.sp) !== ring.returnTrampoline) continue;
        const bytes = new Uint8Array(8);
        new DataView(bytes.buffer).setBigUint64(0, entry.returnAddress, true);
        this.#tracee.write(entry.sp, bytes);
      } catch (err) {
        // A stack gone with its frame (a signal stack unmapped): nothing returns there.
        if (!(err instanceof ProbeError)) throw err;
      }
    }
    Atomics.store(ring.u64, (RING.shadowSlots + slot * SHADOW.slotBytes) / 8, 0n);
  }

  restoreReturns(tid: number): void {
    const slot = this.#slotOf(tid);
    if (slot === undefined) return;
    // Calls timed in the process whose return will not come through the trampoline: counted
    // with those an unwind ended (the exception about to start may end them, or not).
    const ring = this.#ring!;
    for (const entry of this.#entriesOf(slot)) {
      if (!entry.timed || entry.probe >= RING.maxProbes) continue;
      Atomics.add(ring.u64, (RING.stats + entry.probe * STATS.bytes + STATS.unwound) / 8, 1n);
    }
    this.#putBack(slot);
  }

  returnsOf(tid: number): { vaddr: bigint; returnAddress: bigint }[] {
    const slot = this.#slotOf(tid);
    if (slot === undefined) return [];
    const swapped: { vaddr: bigint; returnAddress: bigint }[] = [];
    for (const entry of this.#entriesOf(slot)) {
      try {
        if (this.#tracee.readU64(entry.sp) !== this.#ring!.returnTrampoline) continue;
      } catch (err) {
        if (!(err instanceof ProbeError)) throw err;
        continue;
      }
      swapped.push({ vaddr: entry.sp, returnAddress: entry.returnAddress });
    }
    return swapped;
  }

  threadEnded(tid: number): void {
    const ring = this.#ring;
    const slot = this.#slotOf(tid);
    if (ring === undefined || slot === undefined) return;
    Atomics.store(ring.u64, (RING.shadowSlots + slot * SHADOW.slotBytes) / 8, 0n);
    Atomics.store(ring.u32, RING.shadowTids / 4 + slot, 0);
  }

  wantsStop(): boolean {
    return this.#ring !== undefined && !this.#tidKnown && this.#tidTries < TID_TRIES;
  }

  /**
   * Find where the thread id is in the TCB: the same offset from %fs's base holds each
   * thread's id, for every thread (glibc's struct pthread; 0x2d0 tried first). Until then
   * (and for good in a program without glibc's TCB, such as Go's), trampolines call gettid.
   */
  stopped(threads: readonly number[]): boolean {
    const ring = this.#ring;
    if (ring === undefined || this.#tidKnown) return true;
    const bases: { tid: number; fsBase: bigint }[] = [];
    for (const tid of threads) {
      try {
        bases.push({ tid, fsBase: this.#tracee.regs(tid).get('fs_base') });
      } catch (err) {
        if (err instanceof ProbeError) continue;
        throw err;
      }
    }
    // A thread without a TCB yet (a command held at its entry point, before its loader set
    // one up, which it does once libc is mapped): not a try, try again later (every hook
    // placed before the command ran had used up the tries, and each hit then made a
    // gettid(2), 1 us here: 20 times the cost of the rest of the hit).
    if (bases.some((b) => b.fsBase === 0n)) return false;
    this.#tidTries++;
    if (!mapsGlibc(this.#tracee.pid)) return true;
    const tcbs: { tid: number; bytes: Uint8Array }[] = [];
    for (const { tid, fsBase } of bases) {
      try {
        tcbs.push({ tid, bytes: this.#tracee.read(fsBase, TCB_SCAN_BYTES) });
      } catch (err) {
        if (err instanceof ProbeError) return true;
        throw err;
      }
    }
    if (tcbs.length === 0) return true;
    const holds = (offset: number) =>
      tcbs.every(
        ({ tid, bytes }) =>
          new DataView(bytes.buffer, bytes.byteOffset).getUint32(offset, true) === tid,
      );
    let offset: number | undefined = holds(GLIBC_TID_OFFSET) ? GLIBC_TID_OFFSET : undefined;
    for (let o = 8; offset === undefined && o < TCB_SCAN_BYTES; o += 4) if (holds(o)) offset = o;
    if (offset === undefined) return true;
    Atomics.store(ring.u64, RING.tidOffset / 8, BigInt(offset));
    this.#tidKnown = true;
    return true;
  }

  release(tid: number): void {
    for (const hook of this.#hooks.values()) {
      this.#restore(hook);
      this.#retired.push(hook);
    }
    this.#hooks.clear();
    // No thread runs into a trampoline any more; those inside one leave it.
    for (const thread of [...this.#tracee.threads]) this.#leave(thread);
    const ring = this.#ring;
    // No thread returns through the return trampoline any more.
    if (ring !== undefined) {
      for (let slot = 0; slot < SHADOW.threads; slot++) {
        if (Atomics.load(ring.u32, RING.shadowTids / 4 + slot) === 0) continue;
        this.#putBack(slot);
        Atomics.store(ring.u32, RING.shadowTids / 4 + slot, 0);
      }
    }
    // System calls run through the leader where it is still there (other threads may be
    // exiting, their end not reported yet).
    const some = this.#tracee.threads.has(this.#tracee.pid)
      ? this.#tracee.pid
      : [...this.#tracee.threads][0];
    if (ring !== undefined && some !== undefined) {
      this.#tracee.injectSyscall(some ?? tid, SYSCALL.munmap, [ring.vaddr, BigInt(ring.sizeBytes)]);
    }
    if (some !== undefined) this.#xol.unmapAll(some);
  }

  /** Unmap upscope's own view of the ring (after the last drain). */
  close(): void {
    this.#ring?.local.free();
    this.#ring = undefined;
  }

  /**
   * Bring stopped thread `tid` out of every trampoline: one stepping through the recording
   * part is stepped until it reaches the relocated instructions, which it leaves for the
   * original ones they stand for (not yet run: the same state).
   */
  #leave(tid: number): void {
    const tracee = this.#tracee;
    const all = [...this.#retired];
    const inside = (pc: bigint) =>
      all.find(
        (hook) => pc >= hook.trampoline && pc < hook.trampoline + BigInt(TRAMPOLINE_MAX_BYTES),
      );
    let regs: Registers;
    try {
      regs = tracee.regs(tid);
    } catch (err) {
      // A thread that has just exited (its end not reported yet) runs nothing.
      if (err instanceof ProbeError) return;
      throw err;
    }
    const kept: number[] = [];
    const returning = this.#ring?.returnTrampoline;
    const inReturn = (pc: bigint) =>
      returning !== undefined && pc >= returning && pc < returning + BigInt(TRAMPOLINE_MAX_BYTES);
    // The recording part of an entry trampoline: up to its relocated instructions (its
    // routines for reads of memory are there too, one of which the return trampoline calls).
    const recording = (pc: bigint) => {
      const hook = inside(pc);
      return hook !== undefined && pc < hook.relocatedAt;
    };
    if (!inReturn(regs.rip) && inside(regs.rip) === undefined) return;
    // Stepped until it is out of the return trampoline (its record written, returned to the
    // real address) and out of any recording part (at the relocated instructions).
    for (let steps = 0; inReturn(regs.rip) || recording(regs.rip); steps++) {
      if (steps >= MAX_STEPS + MAX_RETURN_STEPS) {
        throw new ProbeError(
          'ERR_INTERNAL',
          `Cannot bring thread ${tid} of process ${tracee.pid} out of the inline hooks' trampolines: it is still inside after ${steps} steps`,
        );
      }
      if (!this.#step(tid, kept)) return;
      regs = tracee.regs(tid);
    }
    const hook = inside(regs.rip);
    if (hook !== undefined && regs.rip < hook.relocatedEnd) {
      const offset = Number(regs.rip - hook.relocatedAt);
      let to = hook.map[0]!.vaddr;
      for (const entry of hook.map) if (entry.offset <= offset) to = entry.vaddr;
      regs.rip = to;
    } else if (hook !== undefined) {
      // On the jump back: where it goes.
      regs.rip = hook.vaddr + BigInt(hook.original.length);
    }
    // A `pushfq` run by a step saved the trap flag the step set, and the `popfq` put it back:
    // left set, the thread would trap on its next instruction once let go, and die of it.
    regs.set('eflags', regs.get('eflags') & ~TRAP_FLAG);
    tracee.setRegs(tid, regs);
    for (const signal of kept) loadNative().tgkill(tracee.pid, tid, signal);
  }

  /**
   * Single-step stopped thread `tid` one instruction; signals for it that come meanwhile go
   * to `kept` (delivered once it is out). False when it was killed meanwhile.
   */
  #step(tid: number, kept: number[]): boolean {
    const tracee = this.#tracee;
    tracee.step(tid);
    for (;;) {
      const report = tracee.waitChild(tid);
      if (report.kind !== 'stopped') {
        // Killed meanwhile: its end is taken here.
        tracee.threads.delete(tid);
        return false;
      }
      // The step's own trap. An interrupt that was pending (PTRACE_EVENT_STOP, a SIGTRAP
      // too) came first: the step is still to come, and its trap with it (taken for the
      // step's, that trap would be left pending, and kill the thread once let go).
      if (report.signal === SIGTRAP && report.event === 0) return true;
      if (report.event === 0) kept.push(report.signal);
      tracee.step(tid);
    }
  }

  originals(): { vaddr: bigint; bytes: Uint8Array }[] {
    return [...this.#hooks.values()].map((hook) => ({ vaddr: hook.vaddr, bytes: hook.original }));
  }

  forget(): void {
    this.#hooks.clear();
    this.#valueSigned.clear();
    this.#retired = [];
    this.#byIndex = [];
    this.#layouts = [];
    this.#lostSeen = [];
    this.#untrackedSeen = 0;
    this.#xol.forget();
    this.#ring?.local.free();
    this.#ring = undefined;
    this.#tidKnown = false;
    this.#tidTries = 0;
  }
}

/** What an entry record's reads copied, from its data at `at` in the ring. */
function readMemory(view: DataView, at: number, layout: ReadLayout): InlineMemory[] {
  return layout.reads.map((read, i) => {
    const data = at + layout.offsets[i]!;
    const result = view.getBigInt64(data + READ_DATA.result, true);
    const got = result > 0n ? Math.min(Number(result), read.bytes) : 0;
    const from = view.byteOffset + data + READ_DATA.bytes;
    return {
      vaddr: view.getBigUint64(data + READ_DATA.vaddr, true),
      bytes: new Uint8Array(view.buffer.slice(from, from + got)),
      asked: read.bytes,
    };
  });
}

/** Whether the process has glibc mapped (whose TCB holds each thread's id). */
function mapsGlibc(pid: number): boolean {
  try {
    return /\/libc\.so\.6$/m.test(readFileSync(`/proc/${pid}/maps`, 'utf8'));
  } catch {
    return false;
  }
}
