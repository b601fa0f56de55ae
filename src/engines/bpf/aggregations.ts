/**
 * In-kernel aggregations: maps sized for the probes, handlers generated for them, probes
 * attached, and readers that turn the maps' per-CPU values into totals.
 */
import { existsSync } from 'node:fs';
import { type BucketScheme, type Histogram, linearSteps } from '../../aggregate/index.js';
import { ProbeError } from '../../errors/index.js';
import { type FetchArg, printFetchExpr } from '../../spec/index.js';
import type { FollowSpec } from './follow.js';
import {
  COOKIE_CHAINS,
  COOKIE_FRAME_ENTRY,
  COOKIE_GOROUTINE,
  COOKIE_LOOPS,
  COOKIE_RETURN_SITE,
  COOKIE_TAIL_CALL,
  COOKIE_TRAMPOLINE_RETURN,
  FRAMES_KEY_BYTES,
  FRAMES_VALUE_BYTES,
} from './frame-programs.js';
import type { BpfMap } from './kernel.js';
import {
  type CountKey,
  CUT_MARK,
  countKeyBytes,
  countProgram,
  ERROR_SLOT,
  ERROR_SLOTS,
  type Filters,
  fetchType,
  isSigned,
  isStringType,
  KEY_CUT,
  KEY_HEADER_BYTES,
  latencyProgram,
  SPAN_RECORD,
  STATS_BYTES,
  valueProgram,
} from './programs.js';
import { RingBuffer } from './ring-buffer.js';
import {
  type AttachMode,
  type AttachReport,
  type BpfProbe,
  BpfSession,
  type MoveProbe,
} from './session.js';
import { type UnwindCapacity, UnwindMaps } from './unwind-maps.js';
import {
  FRAME_FILE_BIT,
  FRAME_FILE_ID_SHIFT,
  FRAME_MARK,
  UNWIND_KEY_BYTES,
} from './unwind-program.js';

/** A probe to aggregate over: where it is, and which way. Its index is its cookie. */
export interface AggregateSite {
  readonly path: string;
  readonly offset: bigint;
  readonly kind: 'entry' | 'return';
  readonly refCtrOffset?: bigint | undefined;
  /**
   * The probe this uprobe serves (its index among the probes), when it is one of several
   * uprobes of one probe; by default the uprobe's own place in the list.
   */
  readonly probe?: number | undefined;
  /**
   * For a return probe caught at its function's exits (uprobes of kind `entry`), or timed
   * through the kernel's return trampoline (a `return` of kind `return`): a `return` at one
   * exit, or the `frame-entry` that opens a call's frame (nothing is counted there).
   */
  readonly role?: 'return' | 'frame-entry' | undefined;
  /** That function's calls are paired per goroutine (Go's register ABI), not per thread. */
  readonly goroutine?: boolean | undefined;
  /** That function jumps back to its entry (ReturnPlan.loopsAtEntry; a `frame-entry`). */
  readonly loops?: boolean | undefined;
  /** A `frame-entry` of returns through the kernel's trampoline (see COOKIE_CHAINS). */
  readonly chains?: boolean | undefined;
  /** A return caught at a jump to another function: the result is not made yet. */
  readonly tailCall?: boolean | undefined;
}

/** The uprobe of a site: a return caught at an exit is linked before the entries (#groups()). */
function probeOf(site: AggregateSite, cookie: number): BpfProbe {
  // Assigned, not spread: a spread in a loop makes a hidden class per object (see withQualifier()).
  return Object.assign({}, site, {
    cookie,
    early: site.role === 'return' && site.kind === 'entry',
  });
}

/** A function to time: its entry, and how its returns are caught. */
export interface TimedFunction extends AggregateSite {
  /**
   * Returns caught at its exits (no return address replaced): the uprobe that opens a call's
   * frame and one per exit; without, the kernel's return trampoline.
   */
  readonly exits?:
    | {
        readonly entryOffset: bigint;
        readonly offsets: readonly bigint[];
        readonly goroutine: boolean;
        /** The function jumps back to its entry (ReturnPlan.loopsAtEntry). */
        readonly loops?: boolean | undefined;
      }
    | undefined;
}

/** The attach cookie of a site: its probe's index, and what kind of uprobe it is. */
function cookieOf(site: AggregateSite, index: number): number {
  let cookie = site.probe ?? index;
  if (site.role === 'frame-entry') cookie += COOKIE_FRAME_ENTRY;
  if (site.role === 'return') cookie += COOKIE_RETURN_SITE;
  if (site.role !== undefined && site.goroutine === true) cookie += COOKIE_GOROUTINE;
  if (site.role === 'return' && site.tailCall === true) cookie += COOKIE_TAIL_CALL;
  if (site.role === 'return' && site.kind === 'return') cookie += COOKIE_TRAMPOLINE_RETURN;
  if (site.role === 'frame-entry' && site.loops === true) cookie += COOKIE_LOOPS;
  if (site.role === 'frame-entry' && site.chains === true) cookie += COOKIE_CHAINS;
  return cookie;
}

/** How many probes the sites serve (the highest probe index, plus one). */
function probeCount(sites: readonly AggregateSite[]): number {
  return sites.reduce((count, site, i) => Math.max(count, (site.probe ?? i) + 1), 0);
}

export interface AggregateOptions {
  /**
   * Only these processes, followed in the kernel: the ones given, with the children they
   * fork, or a command from its exec (see FollowSpec). Where they cannot be followed (a
   * kernel without BTF, a handler the kernel refuses), `pid` alone is taken instead and
   * `followError` says why.
   */
  readonly follow?: FollowSpec | undefined;
  /**
   * Only this process (without `follow`, or where following is not possible): filtered
   * where the probe is attached, and again in the handler.
   */
  readonly pid?: number | undefined;
  readonly filters?: Omit<Filters, 'pid'> | undefined;
  readonly mode?: AttachMode | undefined;
  /** What the aggregation is, in errors: `count of app:work`. */
  readonly purpose: string;
  /**
   * The key or value read is a function's result: at a return caught at a tail call it is
   * not made yet, and the hit is counted as a fault instead.
   */
  readonly readsResult?: boolean | undefined;
}

/** Hits the handlers saw but could not aggregate. */
export interface HandlerErrors {
  /** Not counted because a map was full. */
  readonly dropped: bigint;
  /** A fetch could not read the target's memory. */
  readonly faults: bigint;
  /** Returns whose entry was not seen. */
  readonly unmatched: bigint;
  /** Calls nested too deep in their function to be timed. */
  readonly deep: bigint;
  /**
   * Calls of functions whose returns are caught at their exits that an unwind (an exception,
   * a Go panic, pthread_cancel, a longjmp) or their thread's end took away: no return.
   */
  readonly unwound: bigint;
  /**
   * latency: calls of functions timed through the kernel's return trampoline whose return it
   * did not report: it leaves out the trampolines of calls nested more than 64 deep on a
   * thread (MAX_URETPROBE_DEPTH), and a longjmp or the thread's end leaves some too.
   */
  readonly unreported?: bigint | undefined;
  /** latency with spans: timed calls whose span record found the span buffer full. */
  readonly spansLost?: bigint | undefined;
}

/**
 * One timed call of latency, as its return's handler saw it (with spans): the probe (its
 * index), the thread, and its start and end in nanoseconds of CLOCK_MONOTONIC.
 */
export interface TimedCall {
  readonly probe: number;
  readonly pid: number;
  readonly tid: number;
  readonly comm: string;
  readonly startNs: bigint;
  readonly endNs: bigint;
}

/** Bytes of latency's span ring buffer by default: 2 MiB, about 43,000 calls between reads. */
export const SPAN_BUFFER_BYTES = 2 << 20;

const MAX_KEYS = 16384;

function u32(value: number): Uint8Array {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, value, true);
  return bytes;
}

function readErrors(errors: BpfMap): Omit<HandlerErrors, 'unwound' | 'unreported'> {
  return {
    dropped: errors.lookupSum(u32(ERROR_SLOT.dropped)),
    faults: errors.lookupSum(u32(ERROR_SLOT.faults)),
    unmatched: errors.lookupSum(u32(ERROR_SLOT.unmatched)),
    deep: errors.lookupSum(u32(ERROR_SLOT.deep)),
    spansLost: errors.lookupSum(u32(ERROR_SLOT.spansLost)),
  };
}

/** Owners (threads or goroutines) kept at once with open calls of framed functions. */
const MAX_FRAME_OWNERS = 16384;

/** A thread's (or goroutine's) open calls of a probe, in the frames map. */
interface OpenFrames {
  readonly owner: bigint;
  readonly probe: number;
  readonly tgid: number;
  readonly open: bigint;
}

/** The open calls of functions whose returns are caught at their exits, and their unwinds. */
class FrameState {
  readonly frames: BpfMap;
  readonly zero: BpfMap;
  readonly unwound: BpfMap;
  readonly #probes: number;
  /** Per probe: its calls are kept per goroutine. */
  readonly #goroutine: boolean[];
  /** Per probe: its returns come through the kernel's return trampoline. */
  readonly #trampolined: boolean[];

  constructor(session: BpfSession, sites: readonly AggregateSite[], probes: number) {
    this.#probes = probes;
    this.#goroutine = Array.from({ length: probes }, () => false);
    this.#trampolined = Array.from({ length: probes }, () => false);
    sites.forEach((site, i) => {
      if (site.goroutine === true) this.#goroutine[site.probe ?? i] = true;
      if (site.role === 'return' && site.kind === 'return') {
        this.#trampolined[site.probe ?? i] = true;
      }
    });
    this.frames = session.map({
      kind: 'lru-hash',
      name: 'frames',
      keyBytes: FRAMES_KEY_BYTES,
      valueBytes: FRAMES_VALUE_BYTES,
      maxEntries: MAX_FRAME_OWNERS,
    });
    this.zero = session.map({
      kind: 'array',
      name: 'frame_zero',
      keyBytes: 4,
      valueBytes: FRAMES_VALUE_BYTES,
      maxEntries: 1,
    });
    this.unwound = session.map({
      kind: 'percpu-array',
      name: 'unwound',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: Math.max(probes, 1),
    });
  }

  maps() {
    return { frames: this.frames.fd, zero: this.zero.fd, unwound: this.unwound.fd };
  }

  /**
   * Per probe: calls the handlers found left by an unwind, and the open calls of threads
   * (for goroutines: processes) that have ended, which no return will close; as they were at
   * freeze() once it was called.
   */
  read(): bigint[] {
    const { unwound, frames } = this.#frozen ?? this.#snapshot();
    const counts = [...unwound];
    for (const { owner, probe, tgid, open } of frames) {
      const alive = this.#goroutine[probe]
        ? existsSync(`/proc/${tgid}`)
        : existsSync(`/proc/${tgid}/task/${Number(owner & 0xffff_ffffn)}`);
      if (!alive) counts[probe]! += open;
    }
    return counts;
  }

  /**
   * Keep the counts as they are now, before the probes are removed: the returns go first (see
   * BpfSession.detach()), and the entries seen meanwhile would find the calls before them
   * unclosed and count them left.
   */
  freeze(): void {
    this.#frozen ??= this.#snapshot();
  }

  #frozen: { unwound: bigint[]; frames: OpenFrames[] } | undefined;

  #snapshot(): { unwound: bigint[]; frames: OpenFrames[] } {
    const unwound = Array.from({ length: this.#probes }, (_, probe) =>
      this.unwound.lookupSum(u32(probe)),
    );
    const frames: OpenFrames[] = [];
    for (const key of this.frames.keys()) {
      const view = new DataView(key.buffer, key.byteOffset, key.byteLength);
      const probe = view.getUint32(8, true);
      if (probe >= this.#probes) continue;
      const value = this.frames.lookup(key);
      if (value === undefined) continue;
      const open = new DataView(value.buffer, value.byteOffset, value.byteLength);
      frames.push({
        owner: view.getBigUint64(0, true),
        probe,
        tgid: view.getUint32(12, true),
        open: open.getBigUint64(0, true) + open.getBigUint64(8, true),
      });
    }
    return { unwound, frames };
  }

  /**
   * Per probe: calls an unwind left (or their thread's end); for a probe whose returns come
   * through the trampoline none (its calls left are the kernel's, see left()).
   */
  unwoundCalls(): bigint[] {
    return this.read().map((count, probe) => (this.#trampolined[probe] ? 0n : count));
  }

  /**
   * read(), summed: calls left by an unwind (or their thread's end), and calls of functions
   * timed through the trampoline whose return the kernel did not report.
   */
  left(): { unwound: bigint; unreported: bigint } {
    let unwound = 0n;
    let unreported = 0n;
    this.read().forEach((count, probe) => {
      if (this.#trampolined[probe]) unreported += count;
      else unwound += count;
    });
    return { unwound, unreported };
  }
}

/** Whether any site is a return caught at an exit, whose calls are kept by frame. */
function framed(sites: readonly AggregateSite[]): boolean {
  return sites.some((site) => site.role !== undefined);
}

/** Base of the aggregations: their session, attach report, error counts and life cycle. */
export abstract class BpfAggregation {
  protected readonly session = new BpfSession();
  protected readonly errors: BpfMap;
  /** For returns caught at exits: the open calls and unwinds. */
  protected frameState: FrameState | undefined;
  #attach: AttachReport | undefined;
  #followed: BpfMap | undefined;
  #followError: ProbeError | undefined;
  #pid: number | undefined;

  protected constructor() {
    this.errors = this.session.map({
      kind: 'percpu-array',
      name: 'errors',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: ERROR_SLOTS,
    });
  }

  get attachReport(): AttachReport {
    if (this.#attach === undefined) throw new Error('not attached');
    return this.#attach;
  }

  protected attached(report: AttachReport): void {
    this.#attach = report;
  }

  /**
   * Set up which processes count (before the probes are attached): the map of followed
   * processes and its handlers, or, where they cannot be read, the one process `pid`.
   */
  protected follow(options: AggregateOptions): void {
    this.#pid = options.pid;
    if (options.follow === undefined) return;
    try {
      this.#followed = this.session.follow(options.follow);
      this.#pid = undefined;
    } catch (err) {
      const fallback =
        err instanceof ProbeError &&
        options.pid !== undefined &&
        ['ERR_PRIVILEGES', 'ERR_TRACEFS_NOT_MOUNTED', 'ERR_NOT_SUPPORTED'].includes(err.code);
      if (!fallback) throw err;
      this.#followError = err;
    }
  }

  /** The filters of the handlers: `filters`, and the process filter follow() chose. */
  protected filters(options: AggregateOptions): Filters {
    return { ...options.filters, pid: this.#pid };
  }

  /** The map of followed processes, for the handlers (undefined: no following). */
  protected get followed(): number | undefined {
    return this.#followed?.fd;
  }

  /** The process whose probes are filtered where they are attached (the fallback). */
  protected get attachPid(): number | undefined {
    return this.#pid;
  }

  /**
   * Why the processes asked for are not followed (only the one process is counted, its
   * children are not, and a command is counted from its launcher on), when they are not.
   */
  get followError(): ProbeError | undefined {
    return this.#followError;
  }

  handlerErrors(): HandlerErrors {
    const left = this.frameState?.left() ?? { unwound: 0n, unreported: 0n };
    const errors = this.#errorsAtDetach ?? readErrors(this.errors);
    return { ...errors, unwound: left.unwound, unreported: left.unreported };
  }

  /** The error map's counts as they were when detach() began (see there). */
  #errorsAtDetach: ReturnType<typeof readErrors> | undefined;

  /** The frame maps, made for sites that need them (returns caught at exits). */
  protected framesFor(sites: readonly AggregateSite[], probes: number) {
    if (!framed(sites)) return undefined;
    this.frameState ??= new FrameState(this.session, sites, probes);
    return this.frameState.maps();
  }

  /**
   * Probe again a file replaced on disk since the probes were attached: copies of the probes
   * in it go where `move` says, counted as the originals (see BpfSession.attachMoved()).
   */
  attachMoved(move: MoveProbe): number {
    return this.session.attachMoved(move);
  }

  /**
   * Stop counting: every probe is removed, the maps stay readable. The handlers' error counts
   * are kept as they were before: the returns are removed first (see BpfSession.detach()),
   * and the entries that run meanwhile would count the calls before them left (unreported or
   * unwound) or nested too deep. The threads that end later still count their open calls
   * left, when read.
   */
  detach(): void {
    this.frameState?.freeze();
    this.#errorsAtDetach ??= readErrors(this.errors);
    this.session.detach();
  }

  close(): void {
    this.session.close();
  }
}

function build<T extends BpfAggregation>(make: () => T, attach: (aggregation: T) => void): T {
  let made: T | undefined;
  try {
    made = make();
    attach(made);
    return made;
  } catch (err) {
    made?.close();
    throw err;
  }
}

/**
 * A frame of a stack key: in a file the unwinder has an id for (at a file offset), at a pc
 * (anonymous memory, or a file not loaded yet), or the mark of a stack cut short.
 */
export type StackFrameKey =
  | { readonly kind: 'file'; readonly fileId: number; readonly fileOffset: bigint }
  | { readonly kind: 'pc'; readonly pc: bigint }
  | { readonly kind: 'cut'; readonly reason: number };

/** One count: the probe (its index), the key (absent without one), and the hits. */
export interface CountRow {
  readonly probe: number;
  readonly key: bigint | string | readonly (bigint | string)[] | undefined;
  /** With a user-stack key: the process, and the stack's frames, innermost first. */
  readonly stack?: { readonly pid: number; readonly frames: readonly StackFrameKey[] } | undefined;
  readonly count: bigint;
  /** A row of calls of a return probe that an unwind took away (no key: no return was seen). */
  readonly exit?: 'unwind' | undefined;
}

function decodeFrame(value: bigint): StackFrameKey {
  if ((value & FRAME_MARK) === FRAME_MARK) return { kind: 'cut', reason: Number(value & 0xffn) };
  if ((value & FRAME_FILE_BIT) !== 0n) {
    return {
      kind: 'file',
      fileId: Number((value & ~FRAME_FILE_BIT) >> FRAME_FILE_ID_SHIFT),
      fileOffset: value & ((1n << FRAME_FILE_ID_SHIFT) - 1n),
    };
  }
  return { kind: 'pc', pc: value };
}

/** A stack key as the unwinder writes it: the process, and the frames, innermost first. */
export function decodeStackKey(raw: Uint8Array): { pid: number; frames: StackFrameKey[] } {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const frames: StackFrameKey[] = [];
  for (let at = KEY_HEADER_BYTES; at < raw.byteLength; at += 8) {
    const value = view.getBigUint64(at, true);
    if (value === 0n) break;
    frames.push(decodeFrame(value));
  }
  return { pid: view.getUint32(4, true), frames };
}

/** What a count by user stack needs besides the probes: room for unwind tables, and them. */
export interface StackOptions {
  readonly capacity: UnwindCapacity;
  /** Called once the maps exist, before any probe is attached (to load the first tables). */
  readonly prepare: (maps: UnwindMaps) => void;
}

/** Hits per probe, or per probe and key. */
export class BpfCounts extends BpfAggregation {
  readonly #counts: BpfMap;
  readonly #key: CountKey;
  readonly #probes: number;

  /** The unwind tables of a count by user stack. */
  readonly unwind: UnwindMaps | undefined;

  private constructor(probes: number, key: CountKey, stacks: StackOptions | undefined) {
    super();
    this.#key = key;
    this.#probes = probes;
    if (key.kind === 'ustack') {
      if (stacks === undefined) throw new Error('a count by user stack needs its stack options');
      this.unwind = new UnwindMaps(this.session, stacks.capacity, UNWIND_KEY_BYTES);
      stacks.prepare(this.unwind);
    }
    this.#counts =
      key.kind === 'none'
        ? this.session.map({
            kind: 'percpu-array',
            name: 'counts',
            keyBytes: 4,
            valueBytes: 8,
            maxEntries: Math.max(probes, 1),
          })
        : this.session.map({
            kind: 'percpu-hash',
            name: 'counts',
            keyBytes: KEY_HEADER_BYTES + countKeyBytes(key),
            valueBytes: 8,
            maxEntries: MAX_KEYS,
          });
  }

  static open(
    sites: readonly AggregateSite[],
    key: CountKey,
    options: AggregateOptions & { readonly stacks?: StackOptions | undefined },
  ) {
    const probes = probeCount(sites);
    return build(
      () => new BpfCounts(probes, key, options.stacks),
      (self) => {
        self.follow(options);
        const frames = self.framesFor(sites, probes);
        const program = () =>
          countProgram(
            {
              errors: self.errors.fd,
              counts: self.#counts.fd,
              frames,
              unwind: self.unwind,
              followed: self.followed,
            },
            key,
            self.filters(options),
            { readsResult: options.readsResult },
          );
        self.attached(
          self.session.attach(
            sites.map((site, index) => probeOf(site, cookieOf(site, index))),
            { entry: program, return: program },
            { pid: self.attachPid, mode: options.mode, purpose: options.purpose },
          ),
        );
      },
    );
  }

  /** Every count with hits, read now; then, per return probe, the calls unwinds took away. */
  read(): CountRow[] {
    const rows = this.#read();
    const unwound = this.frameState?.unwoundCalls() ?? [];
    unwound.forEach((count, probe) => {
      if (count > 0n) rows.push({ probe, key: undefined, count, exit: 'unwind' });
    });
    return rows;
  }

  #read(): CountRow[] {
    const rows: CountRow[] = [];
    if (this.#key.kind === 'none') {
      for (let probe = 0; probe < this.#probes; probe++) {
        const count = this.#counts.lookupSum(u32(probe));
        if (count > 0n) rows.push({ probe, key: undefined, count });
      }
      return rows;
    }
    for (const raw of this.#counts.keys()) {
      const count = this.#counts.lookupSum(raw);
      if (count === 0n) continue;
      const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      const probe = view.getUint32(0, true);
      if (this.#key.kind === 'ustack') {
        rows.push({ probe, key: undefined, stack: decodeStackKey(raw), count });
        continue;
      }
      rows.push({ probe, key: this.#decodeKey(raw), count });
    }
    return rows;
  }

  #decodeKey(raw: Uint8Array): bigint | string | (bigint | string)[] {
    const key = this.#key;
    if (key.kind !== 'tuple') return decodeKeyPart(raw.subarray(KEY_HEADER_BYTES), key);
    const values: (bigint | string)[] = [];
    let at = KEY_HEADER_BYTES;
    for (const part of key.parts) {
      values.push(decodeKeyPart(raw.subarray(at, at + countKeyBytes(part)), part));
      at += countKeyBytes(part);
    }
    return values;
  }
}

/** One part of a count's key, from its bytes. */
function decodeKeyPart(own: Uint8Array, key: CountKey): bigint | string {
  if (key.kind === 'comm' || (key.kind === 'value' && isStringType(key.fetch))) {
    const end = own.indexOf(0);
    if (key.kind === 'value' && end < 0 && own[own.length - 1] === KEY_CUT) {
      // Cut at the key's size: marked as the bpf stream marks a cut string.
      return `${new TextDecoder().decode(own.subarray(0, own.length - 1))}${CUT_MARK}`;
    }
    return new TextDecoder().decode(own.subarray(0, end < 0 ? own.length : end));
  }
  const value = new DataView(own.buffer, own.byteOffset, 8).getBigUint64(0, true);
  if (key.kind === 'value' && isSigned(fetchType(key.fetch))) return BigInt.asIntN(64, value);
  return value;
}

/** Per-probe stats and buckets, from the `stats` array and the `hist` hash. */
class HistogramMaps {
  readonly hist: BpfMap;
  readonly stats: BpfMap;

  constructor(session: BpfSession, probes: number) {
    this.hist = session.map({
      kind: 'percpu-hash',
      name: 'hist',
      keyBytes: 8,
      valueBytes: 8,
      maxEntries: Math.min(Math.max(probes * 64, 4096), 262144),
    });
    this.stats = session.map({
      kind: 'percpu-array',
      name: 'stats',
      keyBytes: 4,
      valueBytes: STATS_BYTES,
      maxEntries: Math.max(probes, 1),
    });
  }

  /** One histogram per probe index (empty ones included). */
  read(probes: number, scheme: BucketScheme, signed: boolean, bucketScale = 1n): Histogram[] {
    const buckets = Array.from({ length: probes }, () => new Map<number, bigint>());
    for (const raw of this.hist.keys()) {
      const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      const own = buckets[view.getUint32(0, true)];
      const count = this.hist.lookupSum(raw);
      if (own !== undefined && count > 0n) own.set(view.getUint32(4, true), count);
    }
    const histograms: Histogram[] = [];
    const bias = signed ? 1n << 63n : 0n;
    for (let probe = 0; probe < probes; probe++) {
      const value = this.stats.lookup(u32(probe));
      let count = 0n;
      let sum = 0n;
      let lowInverted = 0n;
      let high = 0n;
      if (value !== undefined) {
        const view = new DataView(value.buffer, value.byteOffset, value.byteLength);
        for (let cpu = 0; cpu < this.stats.cpus; cpu++) {
          const at = cpu * STATS_BYTES;
          count += view.getBigUint64(at, true);
          sum += view.getBigUint64(at + 8, true);
          const inverted = view.getBigUint64(at + 16, true);
          const max = view.getBigUint64(at + 24, true);
          if (inverted > lowInverted) lowInverted = inverted;
          if (max > high) high = max;
        }
      }
      const unbias = (v: bigint) => (signed ? BigInt.asIntN(64, v ^ bias) : v);
      const empty = count === 0n;
      histograms.push({
        scheme,
        buckets: buckets[probe]!,
        count,
        sum: signed ? BigInt.asIntN(64, sum) : BigInt.asUintN(64, sum),
        min: empty ? undefined : unbias(BigInt.asUintN(64, ~lowInverted)),
        max: empty ? undefined : unbias(high),
        signed,
        bucketScale,
      });
    }
    return histograms;
  }
}

function checkScheme(scheme: BucketScheme): void {
  if (scheme.kind !== 'linear') return;
  if (scheme.step <= 0n || scheme.max <= scheme.min) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use linear buckets ${scheme.min},${scheme.max},${scheme.step}: give MIN,MAX,STEP with MIN < MAX and STEP > 0`,
    );
  }
  if (linearSteps(scheme) > 1000) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use linear buckets ${scheme.min},${scheme.max},${scheme.step}: that is ${linearSteps(scheme)} buckets, more than 1000`,
      { hints: ['Use a larger STEP, or log2 buckets (leave out --linear)'] },
    );
  }
}

/** A histogram of a fetched value per probe. */
export class BpfValueHistograms extends BpfAggregation {
  readonly #maps: HistogramMaps;
  readonly #probes: number;
  readonly #scheme: BucketScheme;
  readonly #signed: boolean;

  private constructor(probes: number, scheme: BucketScheme, signed: boolean) {
    super();
    this.#maps = new HistogramMaps(this.session, probes);
    this.#probes = probes;
    this.#scheme = scheme;
    this.#signed = signed;
  }

  static open(
    sites: readonly AggregateSite[],
    fetch: FetchArg,
    scheme: BucketScheme,
    options: AggregateOptions,
  ) {
    checkScheme(scheme);
    if (isStringType(fetch) || fetch.expr.kind === 'comm') {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot make a histogram of ${printFetchExpr(fetch.expr)}${fetch.type === undefined ? '' : `:${fetch.type}`}: it is a string, not a number`,
        { hints: ['Count strings instead: upscope count SPEC --by EXPR:string'] },
      );
    }
    const probes = probeCount(sites);
    return build(
      () => new BpfValueHistograms(probes, scheme, isSigned(fetchType(fetch))),
      (self) => {
        self.follow(options);
        const frames = self.framesFor(sites, probes);
        const program = () =>
          valueProgram(
            {
              errors: self.errors.fd,
              hist: self.#maps.hist.fd,
              stats: self.#maps.stats.fd,
              frames,
              followed: self.followed,
            },
            fetch,
            scheme,
            self.filters(options),
            { readsResult: options.readsResult },
          );
        self.attached(
          self.session.attach(
            sites.map((site, index) => probeOf(site, cookieOf(site, index))),
            { entry: program, return: program },
            { pid: self.attachPid, mode: options.mode, purpose: options.purpose },
          ),
        );
      },
    );
  }

  read(): Histogram[] {
    return this.#maps.read(this.#probes, this.#scheme, this.#signed);
  }
}

/** Entry-to-return times per function, histogrammed in units of `unitNs`. */
export class BpfLatency extends BpfAggregation {
  readonly #maps: HistogramMaps;
  readonly #probes: number;
  readonly #unitNs: number;
  /** With spans: the ring buffer each timed call is recorded in. */
  #spans: RingBuffer | undefined;

  private constructor(probes: number, unitNs: number) {
    super();
    this.#maps = new HistogramMaps(this.session, probes);
    this.#probes = probes;
    this.#unitNs = unitNs;
  }

  /**
   * `functions` are entry sites; each gets a return probe too, attached first: the kernel's
   * return trampoline, or, for a function whose returns are caught at its exits, a uprobe
   * at each exit, its calls opened by a uprobe at `exits.entryOffset`. Either way its calls
   * are paired by frame (see frame-programs.ts).
   */
  static open(
    functions: readonly TimedFunction[],
    unitNs: number,
    options: AggregateOptions,
    /** Record each timed call for readCalls() in a ring buffer of this many bytes. */
    spanBufferBytes?: number,
  ) {
    const returns = functions.flatMap((fn, probe): AggregateSite[] =>
      fn.exits === undefined
        ? [
            {
              path: fn.path,
              offset: fn.offset,
              kind: 'return' as const,
              probe,
              role: 'return' as const,
            },
          ]
        : fn.exits.offsets.map((offset) => ({
            path: fn.path,
            offset,
            kind: 'entry' as const,
            probe,
            role: 'return' as const,
            goroutine: fn.exits!.goroutine,
          })),
    );
    const entries: AggregateSite[] = functions.map((fn, probe) => ({
      path: fn.path,
      offset: fn.exits?.entryOffset ?? fn.offset,
      ...(fn.refCtrOffset === undefined ? {} : { refCtrOffset: fn.refCtrOffset }),
      kind: 'entry' as const,
      probe,
      role: 'frame-entry' as const,
      goroutine: fn.exits?.goroutine ?? false,
      loops: fn.exits?.loops === true,
      chains: fn.exits === undefined,
    }));
    return build(
      () => new BpfLatency(functions.length, unitNs),
      (self) => {
        self.follow(options);
        const frames = self.framesFor([...returns, ...entries], functions.length);
        if (spanBufferBytes !== undefined) {
          self.#spans = RingBuffer.create('upscope_spans', spanBufferBytes);
        }
        const maps = {
          errors: self.errors.fd,
          hist: self.#maps.hist.fd,
          stats: self.#maps.stats.fd,
          frames,
          followed: self.followed,
          spans: self.#spans?.map.fd,
        };
        const filters = self.filters(options);
        // Returns first: a call already running when its entry probe arrives is not timed
        // (its return finds no frame), rather than leaving a frame no return ever takes.
        const probes = [...returns, ...entries].map((site) => probeOf(site, cookieOf(site, 0)));
        const program = () => latencyProgram(maps, filters, unitNs);
        self.attached(
          self.session.attach(
            probes,
            { entry: program, return: program },
            { pid: self.attachPid, mode: options.mode, purpose: options.purpose },
          ),
        );
      },
    );
  }

  /** Histograms in units; count, sum, min and max in nanoseconds. */
  read(): Histogram[] {
    return this.#maps.read(this.#probes, { kind: 'log2' }, false, BigInt(this.#unitNs));
  }

  /** With spans: hand each call timed since the last read to `onCall`. Never blocks. */
  readCalls(onCall: (call: TimedCall) => void): number {
    const decoder = new TextDecoder();
    return (
      this.#spans?.read((view, at) => {
        const pidTgid = view.getBigUint64(at + SPAN_RECORD.pidTgid, true);
        const endNs = view.getBigUint64(at + SPAN_RECORD.end, true);
        const comm = new Uint8Array(view.buffer, view.byteOffset + at + SPAN_RECORD.comm, 16);
        const nul = comm.indexOf(0);
        onCall({
          // The cookie's low 32 bits are the probe; the bits above mark framed sites.
          probe: view.getUint32(at + SPAN_RECORD.probe, true),
          pid: Number(pidTgid >> 32n),
          tid: Number(pidTgid & 0xffffffffn),
          comm: decoder.decode(nul < 0 ? comm : comm.subarray(0, nul)),
          startNs: endNs - view.getBigUint64(at + SPAN_RECORD.duration, true),
          endNs,
        });
      }) ?? 0
    );
  }

  override close(): void {
    super.close();
    this.#spans?.close();
    this.#spans = undefined;
  }
}
