import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { goroutineDepth, PendingCalls, threadDepth } from '../../aggregate/index.js';
import {
  decodeInstructions,
  emulate,
  planPairSlot,
  planXol,
  reverseEffect,
  XOL_SLOT_BYTES,
  type XolPlan,
  type XolRegisters,
} from '../../arch/index.js';
import { InternalError, ProbeError } from '../../errors/index.js';
import { pausePoint, procState } from '../../host/index.js';
import { PTRACE_EVENT, SYSCALL } from '../../native/index.js';
import {
  addInlineAggregates,
  type HookTimeNs,
  type InlineAggregate,
  type InlineHit,
  type InlineHooks,
  type InlineHooksFactory,
  type InlineReads,
  type InlineValue,
  NO_INLINE_READS,
} from './inline-hooks.js';
import { readCopied, readCopiedString } from './inline-reads.js';
import { Registers } from './registers.js';
import {
  cannotReport,
  leftStop,
  SIGTRAP,
  type SpawnOptions,
  type StopReport,
  syscallPc,
  Tracee,
} from './tracee.js';
import { XolArea } from './xol-area.js';

const INT3 = 0xcc;
const SIGSTOP = 19;
/** The last of the stop signals (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU are 19 to 22). */
const SIGTTOU = 22;

/** What a registration waits for (seed 002's events, and the process events it lists). */
export type ProbeEventKind = 'breakpoint' | 'return' | 'exit' | 'clone' | 'fork' | 'exec';

/** The state of a thread stopped at an event, handed to handlers and poll()'s caller. */
export interface HitContext {
  readonly id: string;
  readonly event: ProbeEventKind;
  readonly pid: number;
  readonly tid: number;
  /** CLOCK_MONOTONIC when the tracer saw the stop, in ns. */
  readonly timeNs: bigint;
  /** The probe's address (breakpoint, return: the function's entry). */
  readonly where: bigint | undefined;
  /** The thread's registers: changes are written back before it runs on. */
  readonly regs: Registers;
  /** For a return: the return value (%rax); set it to change what the caller gets. */
  retval: bigint | undefined;
  /** For a return: the registers at the matching entry. */
  readonly entry: Registers | undefined;
  /** For a return: when the matching entry was hit (CLOCK_MONOTONIC, ns). */
  readonly entryTimeNs: bigint | undefined;
  /**
   * For a return caught at an exit (Registration `returnSites`), when not by a `ret` there:
   * `tail-call`, a jump to another function that returns for it (its result is not made
   * yet); `unwind`, a call an unwind (an exception, a Go panic, pthread_cancel, a longjmp)
   * or its thread's end took away, found when a later call or return of the same thread or
   * goroutine reached its depth again (`regs` are then its entry's, `retval` undefined).
   */
  readonly exit?: 'tail-call' | 'unwind' | undefined;
  /** For exit: the exit status, or the signal that ended it (negative). For clone and fork: the new thread or child. */
  readonly detail: number | undefined;
  readU64(vaddr: bigint): bigint;
  /**
   * 8 bytes of the thread's stack at `vaddr`, with a return address this engine swapped for
   * its return trampoline read back as it was (what a stack walk needs).
   */
  readStackU64?(vaddr: bigint): bigint;
  read(vaddr: bigint, length: number): Uint8Array;
  readCString(vaddr: bigint, maxBytes?: number): string;
  write(vaddr: bigint, bytes: Uint8Array): void;
}

export interface Registration {
  readonly id: string;
  /** The id events carry, when not `id` (one user registration placed at several sites). */
  readonly reportAs?: string | undefined;
  readonly event: ProbeEventKind;
  /** The probe's runtime address, for breakpoint and return. */
  readonly where?: bigint | undefined;
  /** What is probed at `where`, for messages (a function's name); else its address alone. */
  readonly label?: string | undefined;
  /**
   * The runtime address of a USDT semaphore (a u16 the program tests to see whether its probe
   * is traced): raised by one while the registration is in a process, as the kernel does with
   * a uprobe's ref_ctr_offset.
   */
  readonly semaphore?: bigint | undefined;
  /** Runs while the thread is stopped; without one, poll() returns the event instead. */
  readonly handler?: ((hit: HitContext) => void) | undefined;
  /** Only hits this returns true for count. */
  readonly filter?: ((hit: HitContext) => boolean) | undefined;
  /**
   * The file's bytes at `where` (the probed instruction and the ones after it), when known:
   * an int3 in memory where the file has another byte is then known for another tracer's
   * breakpoint (a kernel uprobe), which the probe lives beside instead of refusing it.
   */
  readonly fileCode?: Uint8Array | undefined;
  /**
   * Whether the instruction after the probed one is reached only through it (no jump lands
   * there): the engine may then guard it, to see the hits another tracer's breakpoint on the
   * probed instruction takes first (see arch's guard.ts).
   */
  readonly guardable?: boolean | undefined;
  /**
   * A breakpoint at a function's entry (an entry probe, not an instruction's): not hit where
   * the function goes back to its start within its own call (a loop there).
   */
  readonly functionEntry?: boolean | undefined;
  /**
   * For a return: catch it at the instructions the function leaves by, instead of through a
   * trampoline's address put in place of its return address (which a Go runtime or a C++
   * unwinder walking the stack cannot read). `entry` is where a call begins (a Go
   * function's: after its stack check); calls are kept per thread by stack pointer, or per
   * goroutine (%r14) by depth below the top of its stack.
   */
  readonly returnSites?: ReturnSites | undefined;
  /**
   * With `returnSites`: also deliver the calls an unwind took away, as returns with `exit`
   * `unwind` (default false: they are closed without an event).
   */
  readonly unwinds?: boolean | undefined;
  /**
   * With `unwinds`: the calls still open when their thread ends are closed without an event,
   * not delivered as unwound (a recording's tree closes them as not returned).
   */
  readonly openAtThreadEnd?: boolean | undefined;
  /**
   * For a return: whether the call is wanted, decided at the function's entry (with the
   * entry's registers and memory); a call it refuses gives no return event.
   */
  readonly entryFilter?: ((hit: HitContext) => boolean) | undefined;
  /**
   * For a breakpoint at a function's entry: serve it with an inline hook
   * (ProbesOptions.inline) where one can be placed, with no trap per hit; `jumpTargets` are
   * the addresses near the entry that a jump of the function lands on (undefined: unknown).
   * Its hits then come with the registers at the entry, after the thread has gone on: a
   * handler must not change them (nor write memory), and read() sees only the first stack
   * words and the memory `reads` copied (planInlineReads() of its fetches). `aggregate`: the hook
   * counts the entries (a breakpoint) or times the calls (a return) in the process, with no
   * hit delivered for them; inlineAggregates() reads them (when every registration at its
   * address asks for it; else hits are recorded as usual).
   */
  /**
   * Takes an inline hook's hits instead of `handler`, by their kind, thread and time alone
   * (no registers, memory or stack: where every registration at a hook has one, its hits are
   * read bare, several times faster; a recording of calls). Not with `filter`.
   */
  readonly bareHandler?:
    | ((event: 'breakpoint' | 'return', tid: number, timeNs: HookTimeNs) => void)
    | undefined;
  readonly inline?:
    | {
        readonly jumpTargets: readonly bigint[] | undefined;
        readonly aggregate?: boolean | undefined;
        /** With `aggregate`: the value each entry puts in the histogram. */
        readonly value?: InlineValue | undefined;
        /** The memory it copies for the fetches (planInlineReads()). */
        readonly reads?: InlineReads | undefined;
      }
    | undefined;
}

/** Where a function's calls begin and end, at run time. */
export interface ReturnSites {
  readonly entry: bigint;
  readonly exits: readonly { readonly vaddr: bigint; readonly kind: 'ret' | 'tail-call' }[];
  readonly frames: 'thread' | 'goroutine';
  /** The function jumps back to its entry (ReturnPlan.loopsAtEntry). */
  readonly loopsAtEntry?: boolean | undefined;
}

/**
 * The registrations of a process by id, also found by the address they are hit at (`where`,
 * and a return probe's entry and exits when it catches them there): a hit looks at its own,
 * not at every registration (a recording of every function has tens of thousands). In the
 * order they were registered, as a walk of them all would find them.
 */
class Registrations extends Map<string, Registration> {
  #byAddress: Map<bigint, Registration[]> | undefined;
  /**
   * The last address looked up, and what was found there: a recursion or a loop hits one
   * function again and again (a BigInt's hash made for each lookup was a part of reading an
   * inject ring). Forgotten whenever the registrations change.
   */
  #lastAt: bigint | undefined;
  #lastFound: readonly Registration[] = NONE;

  override set(id: string, registration: Registration): this {
    this.#lastAt = undefined;
    // A new one goes last, as in the map; one that replaces another keeps that one's place.
    // The lists are copied, not changed: a hit going through one (whose handler registers or
    // unregisters) sees those there when it began.
    if (this.#byAddress !== undefined && !super.has(id)) {
      for (const at of hitAt(registration)) {
        this.#byAddress.set(at, [...(this.#byAddress.get(at) ?? []), registration]);
      }
    } else {
      this.#byAddress = undefined;
    }
    return super.set(id, registration);
  }

  override delete(id: string): boolean {
    this.#lastAt = undefined;
    const registration = super.get(id);
    if (registration !== undefined && this.#byAddress !== undefined) {
      for (const at of hitAt(registration)) {
        const left = (this.#byAddress.get(at) ?? []).filter((r) => r !== registration);
        if (left.length > 0) this.#byAddress.set(at, left);
        else this.#byAddress.delete(at);
      }
    }
    return super.delete(id);
  }

  override clear(): void {
    this.#lastAt = undefined;
    this.#byAddress = undefined;
    super.clear();
  }

  /** The registrations hit at `vaddr`. */
  at(vaddr: bigint): readonly Registration[] {
    if (vaddr === this.#lastAt) return this.#lastFound;
    if (this.#byAddress === undefined) {
      const index = new Map<bigint, Registration[]>();
      for (const registration of super.values()) {
        for (const at of hitAt(registration)) {
          const list = index.get(at);
          if (list === undefined) index.set(at, [registration]);
          else list.push(registration);
        }
      }
      this.#byAddress = index;
    }
    this.#lastAt = vaddr;
    this.#lastFound = this.#byAddress.get(vaddr) ?? NONE;
    return this.#lastFound;
  }
}

const NONE: readonly Registration[] = [];

/** Whether an inline hook's hits are given to `bareHandler`, kind, thread and time alone. */
function isBare(registration: Registration): boolean {
  return registration.bareHandler !== undefined && registration.filter === undefined;
}

/** The addresses a registration is hit at, each once. */
function hitAt(registration: Registration): Set<bigint> {
  const found = new Set<bigint>();
  if (registration.where !== undefined) found.add(registration.where);
  const sites = registration.returnSites;
  if (sites !== undefined) {
    found.add(sites.entry);
    for (const exit of sites.exits) found.add(exit.vaddr);
  }
  return found;
}

/** A call of a function whose returns are caught at its exits, not returned from yet. */
interface OpenCall {
  readonly tid: number;
  readonly entry: Registers;
  readonly entryTimeNs: bigint;
  /** The registration's entryFilter refused the call: its return gives no event. */
  readonly declined: boolean;
}

/**
 * What the engine noticed about another tracer's breakpoints at one of its probes (a kernel
 * uprobe on the same instruction), for the user:
 * - `shared`: one is there (found when the probe was placed, or placed since): the probe
 *   sees that instruction's hits at its guard, after it, and both count them;
 * - `put-back`: the engine's int3 there was removed by someone else (a kernel uprobe that was
 *   placed over it and then removed puts back the byte it found) and is in again; its guard
 *   saw every hit meanwhile;
 * - `missed`: the same, at a probe without a guard: hits since `sinceNs` (the last one seen,
 *   or when it was placed) may have been missed.
 */
export interface ForeignBreakpointNotice {
  readonly pid: number;
  readonly vaddr: bigint;
  readonly what: 'shared' | 'put-back' | 'missed' | 'trap' | 'untracked';
  /** For `missed`: since when (CLOCK_MONOTONIC, ns). */
  readonly sinceNs?: bigint | undefined;
  /**
   * For `trap`: why no inline hook could serve the probe (an int3 does instead); for
   * `untracked`: how many calls of inline-hooked functions gave no return event so far (a
   * shadow stack full, no room for the thread's, a tail call), said once per process.
   */
  readonly reason?: string | undefined;
}

export interface ProbesOptions {
  /**
   * Trace the children the process forks too, with the probes it had (default false: a child
   * has every breakpoint removed and runs untraced). Their events carry their pid.
   */
  readonly followForks?: boolean | undefined;
  /**
   * Run the tracer and the traced threads on one CPU (default true): about 3x faster per hit,
   * but the process's threads share that CPU until detach.
   */
  readonly pin?: boolean | undefined;
  /**
   * Inline hooks for the registrations that ask for one (Registration.inline): the `inject`
   * engine. Sites they cannot serve get an int3, and a notice (`trap`) says why.
   */
  readonly inline?: InlineHooksFactory | undefined;
}

/** How long poll() waits for a stop at a time while inline hooks may have hits to read. */
// 2 ms: at a million calls a second, a thread recording its entries and returns makes two
// million records a second, and fills the ring (65,536 records) in 33 ms.
const INLINE_SLICE_MS = 2;
/** How often inline hooks get every thread stopped when they ask to (see InlineHooks.wantsStop). */
const INLINE_STOP_EVERY_MS = 100;
/** The same, when they could not look yet (a command before its loader ran). */
const INLINE_STOP_SOON_MS = 2;

/** A breakpoint: the original byte and how the displaced instruction runs. */
interface Breakpoint {
  readonly vaddr: bigint;
  readonly original: number;
  /** The instruction's bytes, as they were before the int3 (the file's). */
  readonly code: Uint8Array;
  readonly plan: XolPlan;
  readonly slot: bigint | undefined;
  /** Where each instruction the slot runs starts in it, and the address it stands for. */
  readonly slotMap: readonly { readonly slotOffset: number; readonly vaddr: bigint }[];
  /** The guard after this breakpoint's instruction, if it has one (its slot runs both). */
  readonly guard?: bigint | undefined;
  /**
   * For a guard: the breakpoint it guards, and what to add to %rsp there to get %rsp at the
   * guarded instruction (whose effect, run by someone else, is taken back).
   */
  readonly guarded?: { readonly vaddr: bigint; readonly rspDelta: bigint } | undefined;
}

/** How often breakpoints without a guard are checked for being removed by someone else. */
const CHECK_EVERY_MS = 500;

/** A return waiting for its function to come back, on one thread. */
interface ReturnInstance {
  readonly function: bigint;
  /** Where the return address was swapped for the trampoline (the stack pointer at entry). */
  readonly stackVaddr: bigint;
  readonly returnAddress: bigint;
  readonly entry: Registers;
  readonly entryTimeNs: bigint;
  /** Return registrations whose entryFilter refused this call (ids). */
  readonly declined: ReadonlySet<string> | undefined;
}

/** A call whose return an inline hook swapped, waiting for its return record. */
interface InlineCall {
  readonly vaddr: bigint;
  /** The stack pointer at its entry (where its return address is; see InlineHit.sp). */
  readonly sp: number;
  readonly entry: Registers;
  readonly entryTimeNs: HookTimeNs;
  /** Return registrations whose entryFilter refused this call (ids). */
  readonly declined: ReadonlySet<string> | undefined;
  /**
   * A tail call from the call below it (same stack pointer), whose return it returns with;
   * not a call of the same stack pointer an unwind or a longjmp left before this one began.
   */
  readonly chained?: true | undefined;
}

/** A stopped thread with the events it still has to deliver before it runs on. */
interface Stopped {
  /** The process the thread belongs to. */
  readonly probes: ProcessProbes;
  readonly tid: number;
  readonly regs: Registers;
  /** How the thread goes on once every event is out. */
  resume: () => void;
  readonly pending: HitContext[];
}

/** What the processes of one tracer share: one wait, and one event delivered at a time. */
interface Delivery {
  /** The thread whose events are being delivered, and what is left of them. */
  current: Stopped | undefined;
  /** Threads stopped that the tracer has not handled yet (seen while handling another). */
  readonly queue: StopReport[];
  /** Threads stopped at attach, spawn or fork, or to place probes, until the next poll. */
  held: number[];
  interrupted: boolean;
  /** Every process followed and not ended, by pid: the first one, and forked children. */
  readonly members: Map<number, ProcessProbes>;
  /** First stops of forked children whose parent's fork event has not been handled yet. */
  readonly newborns: Map<number, StopReport>;
  /** What the processes noticed of other tracers' breakpoints, not taken yet. */
  readonly notices: ForeignBreakpointNotice[];
  /**
   * What inline hooks aggregated in processes and images gone (an exit, an exec, a detach),
   * by registration id.
   */
  readonly aggregated: Map<string, InlineAggregate>;
}

/** How long detach() waits for a report before it looks for threads stopped without one. */
const STOP_WAIT_MS = 200;

/** Deeper call chains than this are not given return events (the instances would grow without end). */
const MAX_RETURN_INSTANCES = 4096;

/**
 * Probes on one process, placed and served from user space over ptrace (seed 002's tracer and
 * tracee): int3 breakpoints whose displaced instruction runs from an out-of-line slot (one stop
 * per hit), return probes through a trampoline, and the process's clones, forks, execs and
 * exit as events. Every call must come from the thread that made it.
 */
export class ProcessProbes {
  readonly tracee: Tracee;
  readonly #registrations = new Registrations();
  readonly #breakpoints = new Map<bigint, Breakpoint>();
  /** Where breakpoints were removed: a trap still on its way from one is not the program's. */
  readonly #removed = new Set<bigint>();
  /**
   * Removed breakpoints whose int3 was left in as another tracer's, with the byte it
   * replaced: a trap from one reaches us only if no kernel uprobe has it (the kernel takes
   * those), so it was ours after all, and is taken out then.
   */
  readonly #leftInt3 = new Map<bigint, number>();
  #xol: XolArea;
  #trampoline: bigint | undefined;
  readonly #returns = new Map<number, ReturnInstance[]>();
  /** What every process this tracer follows shares (it and the children it forked). */
  readonly #d: Delivery;
  /** The image the probes were placed in: a forked child shares its parent's until it execs. */
  #image: object = {};
  readonly #followForks: boolean;
  #ended = false;
  #exitCode: number | undefined;
  /** The thread whose handler runs now. */
  #handling: number | undefined;
  /**
   * Threads that vforked (posix_spawn, system()) and wait in the kernel, uninterruptibly, for
   * their child to exec or exit: thread -> child. Such a thread runs nothing of the program
   * until then, and stops at PTRACE_EVENT_VFORK_DONE before it does; an interrupt would not
   * stop it sooner, so no one waits for it to stop (a held child would wait for ever).
   */
  readonly #inVfork = new Map<number, number>();
  /** USDT semaphores raised in this process: address -> by how much. */
  #semaphores = new Map<bigint, number>();
  /**
   * Breakpoints whose int3 is another tracer's (a kernel uprobe's, found there or placed over
   * ours since): their hits come through their guard, and their byte is not ours to restore.
   */
  #foreign = new Set<bigint>();
  /** When each breakpoint was last hit (or placed), for what a removal may have missed. */
  readonly #lastHitNs = new Map<bigint, bigint>();
  /** Breakpoints already said to share their instruction with another tracer. */
  readonly #saidShared = new Set<bigint>();
  #checkedAt = performance.now();
  /** Per return registration with `returnSites`: its open calls, by owner and depth. */
  #openCalls = new Map<string, PendingCalls<OpenCall>>();
  /** Inline hooks of this process (the inject engine), if asked for. */
  #inline: InlineHooks | undefined;
  /** Hits of inline hooks with no handler, for poll() to return. */
  readonly #inlinePending: HitContext[] = [];
  /** Hits inline hooks could not record (their ring was full), by address. */
  readonly #inlineLost = new Map<bigint, number>();
  #inlineStopAt = 0;
  /** Per thread: the calls whose return inline hooks swapped, outermost first. */
  readonly #inlineCalls = new Map<number, InlineCall[]>();
  /** Calls whose return inline hooks could not track, so far (said once). */
  #untracked = 0;
  /**
   * Threads that ended, whose calls are forgotten once a drain has read every record made
   * before it began (their last returns may be behind a record another thread is writing).
   */
  #endedThreads: number[] = [];

  private constructor(tracee: Tracee, options: ProbesOptions, delivery?: Delivery) {
    this.tracee = tracee;
    this.#inline = options.inline?.(tracee);
    this.#xol = new XolArea(tracee, XOL_SLOT_BYTES);
    this.#followForks = options.followForks ?? false;
    this.#d = delivery ?? {
      current: undefined,
      queue: [],
      held: [...tracee.threads],
      interrupted: false,
      members: new Map(),
      newborns: new Map(),
      notices: [],
      aggregated: new Map(),
    };
    this.#d.members.set(tracee.pid, this);
  }

  static spawn(argv: readonly string[], options: ProbesOptions & SpawnOptions = {}): ProcessProbes {
    return ProcessProbes.start(Tracee.spawn(argv, options), options);
  }

  static attach(pid: number, options: ProbesOptions = {}): ProcessProbes {
    return ProcessProbes.start(Tracee.attach(pid), options);
  }

  // Not `static #start`: see NO_STATIC_PRIVATE in scripts/build.mjs.
  private static start(tracee: Tracee, options: ProbesOptions): ProcessProbes {
    if (options.pin ?? true) tracee.pin();
    return new ProcessProbes(tracee, options);
  }

  get pid(): number {
    return this.tracee.pid;
  }

  /**
   * Trace running process `pid` too, in this tracer's family: a descendant of the traced
   * process that existed before tracing began (a server's workers). Call it before the first
   * poll(), while every process of the family is held. It gets the process-event
   * registrations (exit, fork, exec...); probes at addresses go in with registerIn(). Its
   * children are followed as the family's are. Throws ProbeError when it cannot be traced
   * (gone: ERR_PROCESS_NOT_FOUND).
   */
  attachAlso(pid: number): void {
    if (this.#ended) throw ended(this.pid);
    const probes = new ProcessProbes(
      Tracee.attach(pid, this.tracee),
      { followForks: this.#followForks },
      this.#d,
    );
    for (const [id, registration] of this.#registrations) {
      if (registration.where === undefined) probes.#registrations.set(id, registration);
    }
    this.#d.held.push(...probes.tracee.threads);
  }

  /** True once the process has exited or the tracer detached. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The process's exit status once it exited (negative: killed by that signal). */
  get exitCode(): number | undefined {
    return this.#exitCode;
  }

  /**
   * Register interest in an event. For breakpoint and return, the int3 is placed now (the
   * displaced instruction analysed once); an instruction that cannot run out of line is
   * refused with ProbeError ERR_UNPROBEABLE_INSTRUCTION and its reason.
   */
  register(registration: Registration): void {
    if (this.#ended) throw ended(this.pid);
    this.#registerOne(registration);
    // Followed children still running the same image get it too; a process event (no
    // address), every process followed.
    for (const member of this.#d.members.values()) {
      if (member === this || member.#ended) continue;
      if (member.#image === this.#image || registration.where === undefined) {
        member.#registerOne(registration);
      }
    }
  }

  #registerOne(registration: Registration): void {
    if (this.#registrations.has(registration.id)) {
      throw new ProbeError('ERR_USAGE', `Cannot register "${registration.id}": that id is taken`);
    }
    const { event, where } = registration;
    if (event === 'breakpoint' || event === 'return') {
      if (where === undefined) {
        throw new ProbeError(
          'ERR_USAGE',
          `Cannot register "${registration.id}": a ${event} needs an address`,
        );
      }
      const sites = event === 'return' ? registration.returnSites : undefined;
      if (sites !== undefined) {
        this.#arm(sites.entry, registration);
        for (const exit of sites.exits) this.#arm(exit.vaddr, registration);
        this.#openCalls.set(registration.id, new PendingCalls(MAX_RETURN_INSTANCES));
      } else if (!this.#placeInline(where, registration)) {
        this.#arm(where, registration);
        if (event === 'return') this.#armTrampoline(where);
      }
      // A fault test's stop: the first probe's breakpoint is in, the others are not yet
      // (upscope's own hooks, whose ids start with NUL, do not count).
      if (!registration.id.startsWith('\u0000')) pausePoint('attaching');
    }
    this.#registrations.set(registration.id, registration);
    if (registration.semaphore !== undefined) this.#raiseSemaphore(registration.semaphore, 1);
  }

  /** Add `delta` to a USDT semaphore in the process (a u16, kept within 0..0xffff). */
  #raiseSemaphore(vaddr: bigint, delta: number): void {
    if (this.#ended || this.tracee.threads.size === 0) return;
    const bytes = this.tracee.read(vaddr, 2);
    const view = new DataView(bytes.buffer, bytes.byteOffset, 2);
    const value = Math.min(0xffff, Math.max(0, view.getUint16(0, true) + delta));
    view.setUint16(0, value, true);
    this.tracee.write(vaddr, bytes);
    const count = (this.#semaphores.get(vaddr) ?? 0) + delta;
    if (count === 0) this.#semaphores.delete(vaddr);
    else this.#semaphores.set(vaddr, count);
  }

  #forgetSemaphore(vaddr: bigint): void {
    const count = (this.#semaphores.get(vaddr) ?? 0) - 1;
    if (count <= 0) this.#semaphores.delete(vaddr);
    else this.#semaphores.set(vaddr, count);
  }

  /**
   * Register in one process of the family only (the traced one or a followed child, by pid):
   * for a probe in a library that only that process has mapped. Children it forks later get
   * a copy, as of every registration.
   */
  registerIn(pid: number, registration: Registration): void {
    const member = this.#d.members.get(pid);
    if (member === undefined || member.#ended) throw ended(pid);
    member.#registerOne(registration);
  }

  /**
   * Unregister `id` in one process of the family, whose code at its address has been unmapped
   * (a library it closed): its breakpoint is forgotten without writing to that memory.
   */
  forgetIn(pid: number, id: string): void {
    const member = this.#d.members.get(pid);
    if (member !== undefined) member.#unregisterOne(id, true);
  }

  /** Read the memory of one process of the family (the traced one or a followed child). */
  readIn(pid: number, vaddr: bigint, length: number): Uint8Array {
    const member = this.#d.members.get(pid);
    if (member === undefined || member.#ended) throw ended(pid);
    return member.tracee.read(vaddr, length);
  }

  /** The pids of the processes followed now: the traced one and the children it forked. */
  followed(): number[] {
    return [...this.#d.members.keys()];
  }

  /** Whether `id` is registered (an exec drops the registrations at addresses). */
  isRegistered(id: string): boolean {
    return this.#registrations.has(id);
  }

  /** Unregister one registration, or all; a breakpoint no registration uses is removed. */
  unregister(id: string | 'all'): void {
    for (const member of this.#d.members.values()) member.#unregisterOne(id);
    if (!this.#d.members.has(this.pid)) this.#unregisterOne(id);
  }

  #unregisterOne(id: string | 'all', unmapped = false): void {
    const ids = id === 'all' ? [...this.#registrations.keys()] : [id];
    for (const one of ids) {
      const registration = this.#registrations.get(one);
      if (registration === undefined) continue;
      this.#registrations.delete(one);
      if (this.#d.current?.probes === this) {
        const pending = this.#d.current.pending;
        const reported = registration.reportAs ?? registration.id;
        for (let i = pending.length - 1; i >= 0; i--) {
          if (pending[i]!.id === reported && pending[i]!.where === registration.where) {
            pending.splice(i, 1);
          }
        }
      }
      this.#openCalls.delete(registration.id);
      for (const where of addressesOf(registration)) {
        if (this.#usedAt(where)) {
          // Its inline hook stays for the others: it stops swapping return addresses once
          // no return probe is left there.
          if (registration.event === 'return' && !this.#returnsAt(where)) {
            this.#inline?.setReturns(where, false);
          }
          continue;
        }
        if (this.#inline?.has(where)) {
          // Its code is gone with its mapping: nothing runs there to stop.
          if (!unmapped && this.tracee.threads.size > 0) this.#stopAll();
          this.#inline.remove(where);
          continue;
        }
        if (unmapped) this.#breakpoints.delete(where);
        else this.#disarm(where);
      }
      if (registration.semaphore !== undefined) {
        // An unmapped library's semaphore is gone with it: forget it, write nothing.
        if (unmapped) this.#forgetSemaphore(registration.semaphore);
        else this.#raiseSemaphore(registration.semaphore, -1);
      }
    }
  }

  /**
   * Let the thread stopped at the last event go on (once every event of its stop is out),
   * then wait for the next event with no handler, at most `timeoutMs` (forever when
   * undefined). Returns null on timeout, once the process has ended, after interrupt(), and
   * when a signal this process handles interrupts an unbounded wait (see the native
   * layer's interruptOnSignal()).
   */
  poll(timeoutMs?: number): HitContext | null {
    const deadline = timeoutMs === undefined ? undefined : performance.now() + timeoutMs;
    for (;;) {
      const current = this.#d.current;
      if (current !== undefined) {
        const next = current.pending.shift();
        if (next !== undefined) return next;
        this.#d.current = undefined;
        killedMeanwhile(() => this.#finish(current), current.tid);
      }
      const inlineHit = this.#inlinePending.shift() ?? this.#serveInline();
      if (inlineHit !== undefined) return inlineHit;
      for (const tid of this.#d.held.splice(0)) killedMeanwhile(() => this.tracee.cont(tid), tid);
      if (performance.now() - this.#checkedAt >= CHECK_EVERY_MS) {
        this.#checkedAt = performance.now();
        for (const member of this.#d.members.values()) member.#checkBreakpoints();
      }
      // Over once the process and every child followed have ended.
      if (this.#d.members.size === 0) return null;
      // Hits served by handlers do not end a poll early, but its time does, and interrupt().
      if (deadline !== undefined && performance.now() >= deadline) return null;
      if (this.#d.interrupted) {
        this.#d.interrupted = false;
        return null;
      }
      // Inline hooks record hits without a stop: the wait is cut into slices, and what they
      // recorded is read between two.
      const slice = this.#inline === undefined ? undefined : performance.now() + INLINE_SLICE_MS;
      const until =
        slice === undefined ? deadline : deadline === undefined ? slice : Math.min(deadline, slice);
      const report = this.#d.queue.shift() ?? this.tracee.takeDeferred() ?? this.#wait(until);
      if (report === undefined) {
        if (slice !== undefined && (deadline === undefined || performance.now() < deadline)) {
          continue;
        }
        return null;
      }
      killedMeanwhile(() => this.#route(report), report.tid);
    }
  }

  /**
   * What the processes noticed of other tracers' breakpoints at their probes since the last
   * call (see ForeignBreakpointNotice), oldest first.
   */
  takeNotices(): ForeignBreakpointNotice[] {
    return this.#d.notices.splice(0);
  }

  /**
   * Put back the int3 of every breakpoint without a guard that someone else removed (a
   * kernel uprobe placed over it takes its hits silently, and puts back the byte it found
   * when it goes), saying since when hits may have been missed. Guarded ones need no check:
   * their guard sees every hit, and puts the int3 back at the first.
   */
  #checkBreakpoints(): void {
    if (this.#ended || this.tracee.threads.size === 0) return;
    for (const breakpoint of this.#breakpoints.values()) {
      if (breakpoint.guard !== undefined || breakpoint.guarded !== undefined) continue;
      if (this.#foreign.has(breakpoint.vaddr)) continue;
      // The whole instruction as it was, not only its first byte: other code mapped there
      // since (a library closed, another one loaded) is never written to.
      const length = breakpoint.plan.length;
      let now: Uint8Array;
      try {
        now = this.tracee.read(breakpoint.vaddr, length);
      } catch (err) {
        if (err instanceof ProbeError) continue;
        throw err;
      }
      if (now[0] !== breakpoint.original || !now.every((b, i) => b === breakpoint.code[i])) {
        continue;
      }
      this.tracee.write(breakpoint.vaddr, new Uint8Array([INT3]));
      this.#d.notices.push({
        pid: this.pid,
        vaddr: breakpoint.vaddr,
        what: 'missed',
        sinceNs: this.#lastHitNs.get(breakpoint.vaddr),
      });
    }
  }

  /** Make the poll() under way return null once the event being handled is done (from a handler). */
  interrupt(): void {
    this.#d.interrupted = true;
  }

  /**
   * Remove every breakpoint and pending return, put back every byte changed, and let the
   * process run on untraced. Threads stopped in an out-of-line slot are moved back to the
   * code they came from.
   */
  detach(): void {
    // Followed children first: each leaves the family; then the process itself.
    for (const member of [...this.#d.members.values()]) if (member !== this) member.#detachOne();
    this.#detachOne();
  }

  #detachOne(): void {
    if (this.#ended) return;
    const tracee = this.tracee;
    const own = (tid: number) => tracee.threads.has(tid);
    const stopped = new Set<number>(this.#d.held.filter(own));
    this.#d.held = this.#d.held.filter((tid) => !own(tid));
    const current = this.#d.current;
    if (current?.probes === this) {
      stopped.add(current.tid);
      tracee.setRegs(current.tid, current.regs);
      this.#d.current = undefined;
    }
    // What other processes of the family reported stays theirs.
    const seen: StopReport[] = [];
    const sort = (report: StopReport) => {
      // A forked child's first stop, before its parent's fork event: #forked() looks for it.
      if (
        report.kind === 'stopped' &&
        this.#memberOf(report.tid) === undefined &&
        isProcess(report.tid)
      ) {
        this.#d.newborns.set(report.tid, report);
        return;
      }
      if (this.#owns(report)) seen.push(report);
      else this.#d.queue.push(report);
    };
    const queued = this.#d.queue.splice(0);
    for (let report = tracee.takeDeferred(); report !== undefined; report = tracee.takeDeferred())
      queued.push(report);
    for (const report of queued) sort(report);
    // Stop every thread still running.
    for (const report of seen) if (report.kind === 'stopped') stopped.add(report.tid);
    for (const tid of tracee.threads) if (!stopped.has(tid)) tracee.interrupt(tid);
    while ([...tracee.threads].some((tid) => !stopped.has(tid))) {
      const report = tracee.waitFor(STOP_WAIT_MS);
      if (report === undefined) {
        // Nothing came: a thread in a ptrace-stop whose report was taken and lost would never
        // report again (an interrupt does nothing to it). It is stopped: its siginfo says where.
        for (const tid of tracee.threads) {
          if (stopped.has(tid) || !cannotReport(tid)) continue;
          stopped.add(tid);
          const stop = tracee.stopOf(tid);
          if (stop !== undefined) seen.push(stop);
        }
        continue;
      }
      sort(report);
      if (report.kind === 'stopped' && this.#owns(report)) stopped.add(report.tid);
    }
    // A fork not handled yet: its child, traced with copies of the breakpoints, is freed.
    for (const report of seen) {
      if (
        report.kind === 'stopped' &&
        (report.event === PTRACE_EVENT.PTRACE_EVENT_FORK ||
          report.event === PTRACE_EVENT.PTRACE_EVENT_VFORK)
      ) {
        this.#forked(report.tid, Number(tracee.eventMessage(report.tid)));
      }
    }
    // A thread that trapped on a breakpoint or the trampoline goes back as if it had not.
    for (const report of seen) {
      if (report.kind === 'stopped' && report.signal === SIGTRAP && report.event === 0) {
        this.#unwindTrap(report.tid);
      }
    }
    // A trap can also still be pending behind a thread's interrupt stop: let it come.
    for (const tid of tracee.threads) {
      while (tracee.threads.has(tid) && pendingSignals(tid) & (1n << BigInt(SIGTRAP - 1))) {
        tracee.cont(tid);
        const report = tracee.waitChild(tid);
        if (report.kind !== 'stopped') {
          tracee.threads.delete(tid);
          break;
        }
        if (report.signal === SIGTRAP && report.event === 0) this.#unwindTrap(tid);
      }
    }
    for (const tid of tracee.threads) this.#leaveSlots(tid);
    if (this.#inline !== undefined) {
      const any = tracee.threads.has(this.pid) ? this.pid : [...tracee.threads][0];
      // Hits recorded so far, then those of threads that were recording one and finish it.
      this.#serveInline('drop');
      if (any !== undefined) this.#inline.release(any);
      this.#serveInline('drop');
      this.#forgetInline();
      this.#inlineCalls.clear();
      this.#endedThreads = [];
    }
    for (const [tid, stack] of this.#returns) {
      for (const instance of stack) this.#writeU64(instance.stackVaddr, instance.returnAddress);
      this.#returns.delete(tid);
    }
    for (const vaddr of [...this.#breakpoints.keys()]) {
      this.#disarm(vaddr);
      // A fault test's stop: one breakpoint is out, the others are still in.
      pausePoint('detaching');
    }
    for (const [vaddr, count] of [...this.#semaphores]) this.#raiseSemaphore(vaddr, -count);
    // No thread is in an out-of-line page any more: unmap them.
    const [someThread] = tracee.threads;
    if (someThread !== undefined) this.#xol.unmapAll(someThread);
    this.#registrations.clear();
    // A signal on its way to a thread (a SIGCHLD that came meanwhile) is delivered, not lost.
    const signals = new Map<number, number>();
    for (const report of seen) {
      if (report.kind === 'stopped' && report.event === 0 && report.signal !== SIGTRAP) {
        signals.set(report.tid, report.signal);
      }
    }
    tracee.detach(signals);
    this.#end();
  }

  /** A report about one of this process's threads. */
  #owns(report: StopReport): boolean {
    return report.pid === undefined ? this.tracee.threads.has(report.tid) : report.pid === this.pid;
  }

  /** The process is no longer followed. */
  #end(): void {
    this.#ended = true;
    this.#d.members.delete(this.pid);
    this.tracee.leaveFamily();
  }

  /** A thread stopped by our int3: back onto the instruction, or (trampoline) to its caller. */
  #unwindTrap(tid: number): void {
    const regs = this.tracee.regs(tid);
    const at = regs.rip - 1n;
    if (this.#breakpoints.has(at)) {
      regs.rip = at;
    } else if (at === this.#trampoline) {
      const stack = this.#returns.get(tid) ?? [];
      const sp = regs.rsp - 8n;
      while (stack.length > 0 && stack.at(-1)!.stackVaddr < sp) stack.pop();
      const instance = stack.pop();
      if (instance === undefined) return;
      regs.rip = instance.returnAddress;
    } else {
      return;
    }
    this.tracee.setRegs(tid, regs);
  }

  /**
   * Put back the return addresses of `tid`'s pending returns and forget them: for an unwinder
   * about to walk the stack (a C++ throw), which cannot read the trampoline's address. Those
   * calls give no return event.
   */
  restoreReturns(tid: number): void {
    const owner = this.#memberOf(tid);
    if (owner !== undefined && owner !== this) {
      owner.restoreReturns(tid);
      return;
    }
    this.#inline?.restoreReturns(tid);
    const stack = this.#returns.get(tid);
    if (stack === undefined) return;
    for (const instance of stack) this.#writeU64(instance.stackVaddr, instance.returnAddress);
    this.#returns.delete(tid);
  }

  /** Whether a return registration caught by a swapped return address is at `where`. */
  #returnsAt(where: bigint): boolean {
    for (const r of this.#registrations.at(where)) {
      if (r.event === 'return' && r.where === where && r.returnSites === undefined) return true;
    }
    return false;
  }

  /** Kill the process (a spawned one that must not outlive its tracer). */
  kill(): void {
    for (const member of [...this.#d.members.values()]) if (member !== this) member.#killOne();
    this.#killOne();
  }

  #killOne(): void {
    if (this.#ended) return;
    this.tracee.kill();
    this.#end();
  }

  #wait(deadline: number | undefined): StopReport | undefined {
    if (deadline === undefined) return this.tracee.wait(true, true);
    return this.tracee.waitFor(Math.max(0, deadline - performance.now()));
  }

  #usedAt(where: bigint): boolean {
    return this.#registrations.at(where).some((r) => addressesOf(r).includes(where));
  }

  #arm(vaddr: bigint, registration: Registration): void {
    const existing = this.#breakpoints.get(vaddr);
    if (existing !== undefined) {
      // A probe on a guard's instruction: the guard becomes a breakpoint like any other.
      if (existing.guarded !== undefined) this.#unguard(existing.guarded.vaddr);
      return;
    }
    if (this.#inline?.has(vaddr)) {
      // A probe an inline hook cannot serve (a return caught at the function's exits): an
      // int3 serves every probe there instead, return probes through the trampoline.
      this.#stopAll();
      this.#inline.remove(vaddr);
      if (this.#returnsAt(vaddr)) this.#armTrampoline(vaddr);
    }
    const tracee = this.tracee;
    let bytes = this.#readCode(vaddr);
    let foreign = false;
    const probed = `${placeName(vaddr, registration)} in process ${this.pid}`;
    if (bytes[0] === INT3) {
      // Another tracer's breakpoint where the file has another byte: a kernel uprobe (the
      // kernel writes only the int3 and runs its own copy of the file's instruction).
      // The file's bytes: the registration's at its own site; elsewhere (a return's exits,
      // its call's entry) its first instruction as the mapped file has it.
      const file =
        vaddr === registration.where && registration.fileCode !== undefined
          ? registration.fileCode
          : this.#fileInstruction(vaddr);
      if (
        file === undefined ||
        file[0] === INT3 ||
        !bytes.subarray(1, file.length).every((b, i) => b === file[i + 1])
      ) {
        throw new ProbeError(
          'ERR_UNPROBEABLE_INSTRUCTION',
          `Cannot probe ${probed}: its first byte is already an int3 the file does not have (another debugger's breakpoint?)`,
        );
      }
      foreign = true;
      bytes = Uint8Array.from([...file, ...bytes.subarray(file.length)]);
    }
    const tid = this.#stoppedThread();
    // The slot's address decides %rip-relative re-encoding: plan once a slot is known.
    const slot = this.#xol.take(vaddr, tid);
    const guarded =
      registration.guardable === true && vaddr === registration.where
        ? this.#planGuard(vaddr, bytes, slot, tid)
        : vaddr === registration.where
          ? 'the instruction after it may be reached by a jump'
          : "it is not the probe's own instruction (the instruction after is watched only there)";
    if (typeof guarded !== 'string') {
      this.#xol.fill(slot, guarded.pair.slotBytes);
      if (guarded.slot !== undefined && guarded.plan.kind === 'relocate') {
        this.#xol.fill(guarded.slot, guarded.plan.slotBytes);
      }
      const [length] = guarded.pair.lengths;
      this.#breakpoints.set(vaddr, {
        vaddr,
        original: bytes[0]!,
        code: bytes.slice(0, length),
        plan: {
          kind: 'relocate',
          length,
          text: decodeInstructions(bytes, vaddr, { maxCount: 1 })[0]?.text ?? '',
          slotBytes: guarded.pair.slotBytes,
        },
        slot,
        slotMap: guarded.pair.slotMap,
        guard: guarded.vaddr,
      });
      this.#breakpoints.set(guarded.vaddr, {
        vaddr: guarded.vaddr,
        original: bytes[length]!,
        code: bytes.slice(length, length + guarded.plan.length),
        plan: guarded.plan,
        slot: guarded.slot,
        slotMap: singleSlotMap(guarded.vaddr, guarded.plan),
        guarded: { vaddr, rspDelta: guarded.rspDelta },
      });
      // A guard traps for whoever ran the instruction before it without our int3: a thread
      // running it while the two int3s go in would be taken for another tracer's hit (and
      // our own int3 for that tracer's, left in at removal). So no thread runs meanwhile,
      // and one stopped between the two instructions goes on through the guard's slot.
      this.#stopAll();
      if (!foreign) tracee.write(vaddr, new Uint8Array([INT3]));
      tracee.write(guarded.vaddr, new Uint8Array([INT3]));
      this.#lastHitNs.set(vaddr, process.hrtime.bigint());
      if (foreign) this.#shared(vaddr);
      this.#passGuard(this.#breakpoints.get(guarded.vaddr)!);
      return;
    }
    if (foreign) {
      this.#xol.release(slot);
      throw new ProbeError(
        'ERR_UNPROBEABLE_INSTRUCTION',
        `Cannot probe ${probed}: another tracer's kernel uprobe is on that instruction (bpftrace, perf, or upscope's bpf or tracefs engine, in any process: a uprobe not limited to one process is in every process that maps the file), and upscope cannot see its calls from the instruction after it instead: ${guarded}`,
        {
          hints: [
            'Stop the other tracer first (kernel uprobes are listed by: bpftool link; cat /sys/kernel/tracing/uprobe_events)',
            'Or probe this function with a kernel engine too (--engine bpf), which shares the kernel uprobe',
          ],
        },
      );
    }
    const plan = planXol(bytes, vaddr, slot);
    if (plan.kind !== 'relocate') this.#xol.release(slot);
    if (plan.kind === 'refuse') {
      throw new ProbeError(
        'ERR_UNPROBEABLE_INSTRUCTION',
        `Cannot probe 0x${vaddr.toString(16)} in process ${this.pid}: its instruction "${plan.text}" cannot run out of line: ${plan.reason}`,
      );
    }
    if (plan.kind === 'relocate') this.#xol.fill(slot, plan.slotBytes);
    this.#breakpoints.set(vaddr, {
      vaddr,
      original: bytes[0]!,
      code: bytes.slice(0, plan.length),
      plan,
      slot: plan.kind === 'relocate' ? slot : undefined,
      slotMap: singleSlotMap(vaddr, plan),
    });
    this.#lastHitNs.set(vaddr, process.hrtime.bigint());
    tracee.write(vaddr, new Uint8Array([INT3]));
  }

  /** The instruction at `vaddr` as the file mapped there has it; undefined if unknown. */
  #fileInstruction(vaddr: bigint): Uint8Array | undefined {
    const file = this.tracee.fileBytes(vaddr, 16);
    if (file === undefined) return undefined;
    const [first] = decodeInstructions(file, vaddr, { maxCount: 1 });
    return first === undefined ? undefined : file.subarray(0, first.length);
  }

  /** The code at `vaddr`: 32 bytes (two instructions), fewer at the end of a mapping. */
  #readCode(vaddr: bigint): Uint8Array {
    try {
      return this.tracee.read(vaddr, 32);
    } catch (err) {
      if (!(err instanceof ProbeError)) throw err;
      return this.tracee.read(vaddr, 16);
    }
  }

  /**
   * A guard for the breakpoint at `vaddr` (slot `slot`, taken): the pair slot that runs its
   * instruction and the next, the guard's own plan (and slot) for that next instruction, and
   * how to take the first one's effect back. A string says why there can be none.
   */
  #planGuard(vaddr: bigint, bytes: Uint8Array, slot: bigint, tid: number) {
    const effect = reverseEffect(bytes, vaddr);
    if (typeof effect === 'string') return effect;
    const pair = planPairSlot(bytes, vaddr, slot);
    if (typeof pair === 'string') return pair;
    const at = vaddr + BigInt(pair.lengths[0]);
    if (this.#breakpoints.has(at) || bytes[pair.lengths[0]] === INT3) {
      return 'the instruction after it holds a breakpoint already';
    }
    const own = this.#xol.take(at, tid);
    const plan = planXol(bytes.subarray(pair.lengths[0]), at, own);
    if (plan.kind !== 'relocate') this.#xol.release(own);
    if (plan.kind === 'refuse')
      return `the instruction after it cannot run out of line: ${plan.reason}`;
    return {
      pair,
      vaddr: at,
      plan,
      slot: plan.kind === 'relocate' ? own : undefined,
      rspDelta: effect.rspDelta,
    };
  }

  /**
   * The guard of the breakpoint at `vaddr` stops being one (a probe is placed on its
   * instruction): the breakpoint gets a slot of its own that goes back to that instruction,
   * where the other probe now traps for every passage. A breakpoint whose int3 is another
   * tracer's cannot do without its guard: that probe is refused.
   */
  #unguard(vaddr: bigint): void {
    const primary = this.#breakpoints.get(vaddr);
    const guard = primary?.guard === undefined ? undefined : this.#breakpoints.get(primary.guard);
    if (primary === undefined || guard === undefined) return;
    if (this.#foreign.has(vaddr)) {
      throw new ProbeError(
        'ERR_UNPROBEABLE_INSTRUCTION',
        `Cannot probe 0x${guard.vaddr.toString(16)} in process ${this.pid}: upscope watches it for the probe at 0x${vaddr.toString(16)}, which shares its instruction with another tracer's breakpoint`,
      );
    }
    const bytes = this.#readCode(vaddr);
    bytes[0] = primary.original;
    const slot = this.#xol.take(vaddr, this.#stoppedThread());
    const plan = planXol(bytes, vaddr, slot);
    if (plan.kind !== 'relocate') {
      this.#xol.release(slot);
      throw new InternalError(`Cannot give 0x${vaddr.toString(16)} a slot of its own again`);
    }
    this.#xol.fill(slot, plan.slotBytes);
    this.#breakpoints.set(vaddr, {
      ...primary,
      plan,
      slot,
      slotMap: singleSlotMap(vaddr, plan),
      guard: undefined,
    });
    this.#breakpoints.set(guard.vaddr, { ...guard, guarded: undefined });
  }

  /** Say once that the breakpoint at `vaddr` shares its instruction with another tracer's. */
  #shared(vaddr: bigint): void {
    this.#foreign.add(vaddr);
    if (this.#saidShared.has(vaddr)) return;
    this.#saidShared.add(vaddr);
    this.#d.notices.push({ pid: this.pid, vaddr, what: 'shared' });
  }

  #disarm(vaddr: bigint): void {
    const breakpoint = this.#breakpoints.get(vaddr);
    if (breakpoint === undefined) return;
    this.#breakpoints.delete(vaddr);
    this.#removed.add(vaddr);
    this.#lastHitNs.delete(vaddr);
    if (breakpoint.guard !== undefined) this.#disarm(breakpoint.guard);
    // Another tracer's int3 stays: it removes it itself (a kernel uprobe puts back the
    // byte it found when it is unregistered).
    const foreign = this.#foreign.delete(vaddr);
    if (foreign) this.#leftInt3.set(vaddr, breakpoint.original);
    // Only our int3 is put back: where the code was unmapped (a library closed) or replaced
    // since, nothing is written.
    if (
      !foreign &&
      !this.#ended &&
      this.tracee.threads.size > 0 &&
      this.#readByte(vaddr) === INT3
    ) {
      this.tracee.write(vaddr, new Uint8Array([breakpoint.original]));
    }
    // The slot is not reused: a thread may still be running the instruction in it.
  }

  /** The byte at `vaddr`, or undefined where nothing is mapped. */
  #readByte(vaddr: bigint): number | undefined {
    try {
      return this.tracee.read(vaddr, 1)[0];
    } catch (err) {
      if (err instanceof ProbeError) return undefined;
      throw err;
    }
  }

  #armTrampoline(near: bigint): void {
    if (this.#trampoline !== undefined) return;
    const slot = this.#xol.take(near, this.#stoppedThread());
    this.#xol.fill(slot, new Uint8Array([INT3]));
    this.#trampoline = slot;
  }

  /** A thread that is stopped now, to run injected system calls. */
  /** Call a handler; the thread it runs for is the one probes are placed through meanwhile. */
  #run(handler: (hit: HitContext) => void, hit: HitContext): void {
    const outer = this.#handling;
    this.#handling = hit.tid;
    try {
      handler(hit);
    } finally {
      this.#handling = outer;
    }
  }

  #stoppedThread(): number {
    const current = this.#d.current?.probes === this ? this.#d.current.tid : undefined;
    const tid =
      this.#handling ?? current ?? this.#d.held.find((held) => this.tracee.threads.has(held));
    if (tid !== undefined) return tid;
    if (this.#ended) throw ended(this.pid);
    return this.#stopOne();
  }

  /**
   * Between polls every thread may be running: stop one to inject system calls through. A
   * thread already reported stopped serves as it is; otherwise the leader is interrupted and
   * held until the next poll, and what other threads report meanwhile waits in the queue.
   */
  #stopOne(): number {
    const tracee = this.tracee;
    for (let report = tracee.takeDeferred(); report !== undefined; report = tracee.takeDeferred())
      this.#d.queue.push(report);
    const stopped = this.#d.queue.find((r) => r.kind === 'stopped' && tracee.threads.has(r.tid));
    if (stopped !== undefined) return stopped.tid;
    const running = [...tracee.threads].filter((tid) => !this.#inVfork.has(tid));
    const target = running.includes(this.pid) ? this.pid : (running[0] ?? [...tracee.threads][0]);
    if (target === undefined) throw ended(this.pid);
    // Every thread waits for a vfork child: the children held go on, to their exec or exit,
    // after which their parent stops (at VFORK_DONE, which serves as well as the interrupt).
    if (running.length === 0) this.#releaseVforkChildren();
    tracee.interrupt(target);
    for (;;) {
      const report = tracee.wait(true);
      if (report === undefined) throw ended(this.pid);
      if (
        report.kind === 'stopped' &&
        report.tid === target &&
        report.event === PTRACE_EVENT.PTRACE_EVENT_STOP &&
        report.signal === SIGTRAP
      ) {
        this.#d.held.push(target);
        return target;
      }
      this.#d.queue.push(report);
      // Stopped at something else first: it serves (that stop took the interrupt's place).
      if (report.kind === 'stopped' && tracee.threads.has(report.tid)) return report.tid;
    }
  }

  /** Let the vfork children held (see #adopt) run on: their parents wait for them. */
  #releaseVforkChildren(): void {
    for (const child of this.#inVfork.values()) {
      const at = this.#d.held.indexOf(child);
      if (at < 0) continue;
      this.#d.held.splice(at, 1);
      killedMeanwhile(() => this.tracee.cont(child), child);
    }
  }

  /**
   * Stop every thread of the process that may be running, for a change no running thread may
   * see half made. Each is interrupted and held until the next poll; what a thread reports
   * instead of its interrupt (a stop it was making already) waits in the queue, as does
   * every report of another process of the family.
   */
  #stopAll(): void {
    const tracee = this.tracee;
    for (let report = tracee.takeDeferred(); report !== undefined; report = tracee.takeDeferred())
      this.#d.queue.push(report);
    const stopped = new Set<number>(this.#d.held);
    if (this.#d.current?.probes === this) stopped.add(this.#d.current.tid);
    if (this.#handling !== undefined) stopped.add(this.#handling);
    for (const report of this.#d.queue) if (report.kind === 'stopped') stopped.add(report.tid);
    const waiting = new Set<number>();
    for (const tid of tracee.threads) {
      // One waiting for its vfork child runs nothing before its VFORK_DONE stop.
      if (stopped.has(tid) || this.#inVfork.has(tid)) continue;
      tracee.interrupt(tid);
      waiting.add(tid);
    }
    while (waiting.size > 0) {
      const report = tracee.waitFor(STOP_WAIT_MS);
      if (report === undefined) {
        // Nothing came: a thread gone, a zombie leader, or one in a stop already taken
        // cannot report; none of them runs.
        for (const tid of waiting) if (cannotReport(tid)) waiting.delete(tid);
        continue;
      }
      const interrupted =
        report.kind === 'stopped' &&
        waiting.has(report.tid) &&
        report.event === PTRACE_EVENT.PTRACE_EVENT_STOP &&
        report.signal === SIGTRAP;
      if (interrupted) this.#d.held.push(report.tid);
      else this.#d.queue.push(report);
      // Stopped or gone, either way: a new thread a clone made meanwhile runs nothing
      // before its first stop, which comes through the queue.
      waiting.delete(report.tid);
    }
  }

  /**
   * A guard just placed: a thread stopped on its instruction (it ran the guarded one before
   * our int3 was there) goes on through the guard's slot, not into its trap. The threads
   * whose registers an event holds are elsewhere (at a trap).
   */
  #passGuard(guard: Breakpoint): void {
    const tracee = this.tracee;
    const eventThread = this.#d.current?.probes === this ? this.#d.current.tid : undefined;
    for (const tid of tracee.threads) {
      if (tid === eventThread || tid === this.#handling) continue;
      let regs: Registers;
      try {
        regs = tracee.regs(tid);
      } catch (err) {
        if (err instanceof ProbeError) continue;
        throw err;
      }
      if (regs.rip !== guard.vaddr) continue;
      this.#outOfLine(regs, guard);
      tracee.setRegs(tid, regs);
    }
  }

  /** The process followed that thread `tid` belongs to (none: unknown yet, or gone). */
  #memberOf(tid: number): ProcessProbes | undefined {
    for (const member of this.#d.members.values())
      if (member.tracee.threads.has(tid)) return member;
    return undefined;
  }

  /** Hand a report to the process its thread belongs to. */
  #route(report: StopReport): void {
    const members = this.#d.members;
    const known = this.#memberOf(report.tid) !== undefined;
    if (!known && report.kind === 'stopped' && isProcess(report.tid)) {
      // A forked child's first stop, seen before its parent's fork event: it waits for it.
      this.#d.newborns.set(report.tid, report);
      return;
    }
    const member = (report.pid === undefined ? undefined : members.get(report.pid)) ?? this;
    member.#handle(report);
  }

  #handle(report: StopReport): void {
    const tracee = this.tracee;
    if (report.kind === 'exited' || report.kind === 'killed') {
      this.#returns.delete(report.tid);
      this.#inVfork.delete(report.tid);
      if (this.#inline !== undefined && report.tid !== this.pid) {
        this.#inline.threadEnded(report.tid);
        this.#endedThreads.push(report.tid);
      }
      // Calls a thread was in when it ended (a cancelled thread's) no return will close.
      const ended = this.#endedCalls(report.tid === this.pid ? undefined : report.tid);
      if (report.tid !== this.pid && ended.length > 0) {
        const regs = new Registers();
        this.#stop({ probes: this, tid: report.tid, regs, pending: ended, resume: () => {} });
      }
      if (report.tid === this.pid) {
        // What its inline hooks recorded before it ended is read now (poll() returns the
        // hits without a handler before it says the process is over).
        if (this.#inline !== undefined) {
          this.#serveInline('final');
          this.#forgetInline();
        }
        this.#exitCode = report.kind === 'exited' ? report.code : -report.signal;
        // The leader's end is reported once every thread has gone: the process is over. A
        // pending exit event is still returned by poll() before it says so.
        this.#deliverProcessEvent('exit', report.tid, undefined, this.#exitCode, () => {}, ended);
        this.#end();
        this.tracee.unpin();
      }
      return;
    }
    const { tid, signal, event } = report;
    switch (event) {
      case 0:
        if (signal === SIGTRAP && this.#breakpointStop(tid)) return;
        // A signal for the program: it gets it.
        tracee.cont(tid, signal);
        return;
      case PTRACE_EVENT.PTRACE_EVENT_CLONE:
      case PTRACE_EVENT.PTRACE_EVENT_FORK:
      case PTRACE_EVENT.PTRACE_EVENT_VFORK: {
        const child = Number(tracee.eventMessage(tid));
        if (event === PTRACE_EVENT.PTRACE_EVENT_VFORK) this.#inVfork.set(tid, child);
        if (event !== PTRACE_EVENT.PTRACE_EVENT_CLONE) {
          if (this.#followForks) {
            this.#adopt(tid, child, event === PTRACE_EVENT.PTRACE_EVENT_VFORK);
          } else this.#forked(tid, child);
        }
        const kind = event === PTRACE_EVENT.PTRACE_EVENT_CLONE ? 'clone' : 'fork';
        this.#deliverProcessEvent(kind, tid, undefined, child, () => tracee.cont(tid));
        return;
      }
      case PTRACE_EVENT.PTRACE_EVENT_VFORK_DONE:
        this.#inVfork.delete(tid);
        tracee.cont(tid);
        return;
      case PTRACE_EVENT.PTRACE_EVENT_EXEC:
        // Hits its inline hooks recorded are read before they go with the old image.
        if (this.#inline !== undefined) {
          this.#serveInline('drop');
          this.#forgetInline();
          this.#inlineCalls.clear();
          this.#endedThreads = [];
        }
        // The old image and its probes are gone: so are the registrations at its addresses.
        for (const [id, registration] of this.#registrations) {
          if (registration.where !== undefined) this.#registrations.delete(id);
        }
        this.#breakpoints.clear();
        this.#inVfork.clear();
        this.#removed.clear();
        this.#leftInt3.clear();
        this.#foreign.clear();
        this.#lastHitNs.clear();
        this.#saidShared.clear();
        this.#semaphores.clear();
        this.#openCalls.clear();
        this.#image = {};
        this.#returns.clear();
        this.#trampoline = undefined;
        this.#xol.forget();
        this.#deliverProcessEvent('exec', tid, undefined, undefined, () => tracee.cont(tid));
        return;
      case PTRACE_EVENT.PTRACE_EVENT_STOP:
        // A group stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU sent to the process) holds the
        // thread as it would untraced; a new thread's first stop (SIGTRAP) goes on.
        if (signal >= SIGSTOP && signal <= SIGTTOU) tracee.listen(tid);
        else tracee.cont(tid);
        return;
      default:
        tracee.cont(tid);
    }
  }

  /** A SIGTRAP: one of our breakpoints or the trampoline, or none (the program's own). */
  #breakpointStop(tid: number): boolean {
    const tracee = this.tracee;
    const regs = tracee.regs(tid);
    const at = regs.rip - 1n;
    if (at === this.#trampoline) {
      this.#returnStop(tid, regs);
      return true;
    }
    const breakpoint = this.#breakpoints.get(at);
    if (breakpoint === undefined) {
      // A thread that trapped on a breakpoint just before it was removed: it runs the
      // instruction now in place (the kernel's uprobes do the same when they race with an
      // unregister). An int3 still there is the program's own.
      if (!this.#removed.has(at)) return false;
      if (tracee.read(at, 1)[0] === INT3) {
        const original = this.#leftInt3.get(at);
        if (original === undefined) return false;
        tracee.write(at, new Uint8Array([original]));
      }
      this.#leftInt3.delete(at);
      regs.rip = at;
      tracee.setRegs(tid, regs);
      tracee.cont(tid);
      return true;
    }
    if (breakpoint.guarded !== undefined) {
      this.#guardStop(tid, regs, breakpoint, breakpoint.guarded);
      return true;
    }
    regs.rip = at;
    this.#hit(tid, regs, at, () => this.#stepOver(tid, regs, at));
    return true;
  }

  /**
   * A hit of the breakpoint at `at`, with the thread's registers as they are there: its
   * registrations' events, a return instance for its return probes, then `resume`.
   */
  #hit(tid: number, regs: Registers, at: bigint, resume: () => void): void {
    // What the thread recorded through inline hooks before this stop comes first.
    if (this.#inline !== undefined) this.#drainInline(this.#inline);
    const timeNs = process.hrtime.bigint();
    this.#lastHitNs.set(at, timeNs);
    const pending: HitContext[] = [];
    const here = this.#registrations.at(at);
    const hasReturn = here.some(
      (r) => r.event === 'return' && r.where === at && r.returnSites === undefined,
    );
    const hits: string[] = [];
    const deliver = (registration: Registration, hit: HitContext) => {
      if (registration.filter !== undefined && !registration.filter(hit)) return;
      if (registration.handler !== undefined) this.#run(registration.handler, hit);
      else pending.push(hit);
      if (hit.event === 'return' && hit.exit !== 'unwind' && hit.retval !== undefined) {
        regs.set('rax', hit.retval);
      }
    };
    let declined: Set<string> | undefined;
    // Returns caught at entries and exits first: the calls an unwind took away (found at an
    // entry or exit of their function) are delivered before anything else of this stop, the
    // returns at an exit after the hits of the instruction there.
    const returned: [Registration, HitContext][] = [];
    // The function here went back to its entry within a call of it still open (a loop whose
    // head is its first instruction): no call begins, its entry probes are not hit.
    let goesOn = hasReturn && this.#goesOnThroughTrampoline(tid, at, regs);
    for (const registration of here) {
      const sites = registration.returnSites;
      if (sites === undefined) continue;
      const atEntry = sites.entry === at;
      const exit = sites.exits.find((e) => e.vaddr === at);
      if (!atEntry && exit === undefined) continue;
      hits.push(registration.id);
      const framed = this.#framedReturns(registration, tid, regs, timeNs, atEntry, exit);
      if (framed.goesOn) goesOn = true;
      for (const hit of framed.hits) {
        if (hit.exit === 'unwind') deliver(registration, hit);
        else returned.push([registration, hit]);
      }
    }
    for (const registration of here) {
      if (registration.returnSites !== undefined || registration.where !== at) continue;
      if (goesOn && registration.functionEntry === true) continue;
      hits.push(registration.id);
      if (registration.event === 'return' && registration.entryFilter !== undefined) {
        const entry = this.#context(
          registration,
          tid,
          regs,
          timeNs,
          undefined,
          undefined,
          undefined,
        );
        if (!registration.entryFilter(entry)) {
          declined ??= new Set();
          declined.add(registration.id);
        }
      }
      if (registration.event !== 'breakpoint') continue;
      deliver(
        registration,
        this.#context(registration, tid, regs, timeNs, undefined, undefined, undefined),
      );
    }
    for (const [registration, hit] of returned) deliver(registration, hit);
    if (hasReturn && !goesOn) this.#pushReturn(tid, at, regs, declined);
    this.#stop({ probes: this, tid, regs, pending, resume });
    // A fault test's stop: a probe's hit has been delivered (its thread may be held still);
    // upscope's own hooks (ids starting with NUL: the loader's, the unwinder's) do not count.
    if (hits.some((id) => !id.startsWith('\u0000'))) pausePoint('tracing');
  }

  /**
   * A guard trapped: the instruction before it (the guarded breakpoint's) ran without
   * trapping to us, run by another tracer whose int3 took the hit there (a kernel uprobe,
   * which runs its handlers, then the instruction, and goes on here), or because our int3
   * there is gone (such a uprobe, removed, puts back the byte it found over ours). Either way
   * it is a hit of the guarded breakpoint: delivered with the registers as they were there
   * (the instruction's effect taken back); then our int3 is put back if it is gone, and the
   * thread goes on with the guard's own instruction.
   */
  #guardStop(
    tid: number,
    regs: Registers,
    guard: Breakpoint,
    guarded: { readonly vaddr: bigint; readonly rspDelta: bigint },
  ): void {
    const at = guard.vaddr;
    regs.rip = at;
    const primary = this.#breakpoints.get(guarded.vaddr);
    if (primary === undefined) {
      this.#stepOver(tid, regs, at);
      return;
    }
    const byte = this.#readByte(primary.vaddr);
    if (byte === INT3) {
      // Not ours that trapped: another tracer's int3 (placed over ours, or there before).
      this.#shared(primary.vaddr);
    } else if (byte === primary.original) {
      this.tracee.write(primary.vaddr, new Uint8Array([INT3]));
      const wasForeign = this.#foreign.delete(primary.vaddr);
      if (!wasForeign || !this.#saidShared.has(primary.vaddr)) {
        this.#d.notices.push({ pid: this.pid, vaddr: primary.vaddr, what: 'put-back' });
      }
    }
    const view = regs.clone();
    view.rip = primary.vaddr;
    view.rsp = regs.rsp + guarded.rspDelta;
    this.#hit(tid, view, primary.vaddr, () => {
      if (view.rip !== primary.vaddr) {
        // A handler moved the thread: it goes on from there, as from the probed instruction.
        this.tracee.setRegs(tid, view);
        this.tracee.cont(tid);
        return;
      }
      const after = view.clone();
      after.rip = at;
      after.rsp = view.rsp - guarded.rspDelta;
      this.#stepOver(tid, after, at);
    });
  }

  /**
   * A call's entry or exit of a return registration caught at exits: the entry opens the
   * call's frame, an exit closes it with a return event; calls at the same depth or deeper
   * (for an entry), or deeper (for an exit), were left by an unwind and give `unwind` events
   * first.
   */
  #framedReturns(
    registration: Registration,
    tid: number,
    regs: Registers,
    timeNs: bigint,
    atEntry: boolean,
    exit: ReturnSites['exits'][number] | undefined,
  ): { hits: HitContext[]; goesOn: boolean } {
    const calls = this.#openCalls.get(registration.id);
    const frame = this.#frameOf(registration.returnSites!, tid, regs);
    if (calls === undefined || frame === undefined) return { hits: [], goesOn: false };
    const hits: HitContext[] = [];
    const unwound = (call: OpenCall) => {
      if (registration.unwinds !== true || call.declined) return;
      hits.push({
        ...this.#context(
          registration,
          call.tid,
          call.entry,
          timeNs,
          call.entry,
          undefined,
          undefined,
        ),
        entryTimeNs: call.entryTimeNs,
        exit: 'unwind',
      });
    };
    // A function that jumps back to its entry, at the depth of its call still open there:
    // that call goes on (the deeper ones were left).
    const left =
      atEntry && registration.returnSites!.loopsAtEntry === true
        ? calls.goesOn(frame.owner, frame.depth)
        : undefined;
    if (left !== undefined) {
      for (const call of left) unwound(call);
      return { hits, goesOn: true };
    }
    if (atEntry) {
      const declined =
        registration.entryFilter !== undefined &&
        !registration.entryFilter(
          this.#context(registration, tid, regs, timeNs, undefined, undefined, undefined),
        );
      const call = { tid, entry: regs.clone(), entryTimeNs: timeNs, declined };
      for (const left of calls.enter(frame.owner, frame.depth, call)) unwound(left);
    }
    if (exit !== undefined) {
      const { call, unwound: left } = calls.leave(frame.owner, frame.depth);
      for (const one of left) unwound(one);
      if (call?.declined === true) return { hits, goesOn: false };
      const retval = exit.kind === 'ret' ? regs.get('rax') : undefined;
      hits.push({
        ...this.#context(registration, tid, regs, timeNs, call?.entry, retval, undefined),
        entryTimeNs: call?.entryTimeNs,
        exit: exit.kind === 'tail-call' ? 'tail-call' : undefined,
      });
    }
    return { hits, goesOn: false };
  }

  /** Who owns a call's frame (a thread, or a goroutine), and how deep in its stack it is. */
  #frameOf(
    sites: ReturnSites,
    tid: number,
    regs: Registers,
  ): { owner: string; depth: bigint } | undefined {
    if (sites.frames === 'thread') return { owner: String(tid), depth: threadDepth(regs.rsp) };
    const g = regs.get('r14');
    try {
      return { owner: `g${g}`, depth: goroutineDepth(this.tracee.readU64(g + 8n), regs.rsp) };
    } catch (err) {
      if (err instanceof ProbeError) return undefined;
      throw err;
    }
  }

  /**
   * The open calls of a thread that has ended (or of every owner, when the process has), as
   * `unwind` returns: served by their handlers here, the others returned.
   */
  #endedCalls(tid: number | undefined): HitContext[] {
    const timeNs = process.hrtime.bigint();
    const pending: HitContext[] = [];
    for (const [id, calls] of this.#openCalls) {
      const registration = this.#registrations.get(id);
      if (registration === undefined) continue;
      const ended = calls.drop((owner) => tid === undefined || owner === String(tid));
      if (registration.unwinds !== true || registration.openAtThreadEnd === true) continue;
      for (const call of ended) {
        if (call.declined) continue;
        const hit: HitContext = {
          ...this.#context(
            registration,
            call.tid,
            call.entry,
            timeNs,
            call.entry,
            undefined,
            undefined,
          ),
          entryTimeNs: call.entryTimeNs,
          exit: 'unwind',
        };
        if (registration.filter !== undefined && !registration.filter(hit)) continue;
        if (registration.handler !== undefined) this.#run(registration.handler, hit);
        else pending.push(hit);
      }
    }
    return pending;
  }

  /**
   * Whether the entry hit at `at` is its function gone back to its start within its own call
   * (a loop whose head is its first instruction): its return address is the trampoline, and
   * the thread's newest return instance is that function's, at this stack pointer.
   */
  #goesOnThroughTrampoline(tid: number, at: bigint, regs: Registers): boolean {
    const top = this.#returns.get(tid)?.at(-1);
    if (top === undefined || top.function !== at || top.stackVaddr !== regs.rsp) return false;
    try {
      return this.tracee.readU64(regs.rsp) === this.#trampoline;
    } catch (err) {
      if (err instanceof ProbeError) return false;
      throw err;
    }
  }

  #pushReturn(
    tid: number,
    at: bigint,
    regs: Registers,
    declined: ReadonlySet<string> | undefined,
  ): void {
    const trampoline = this.#trampoline!;
    let stack = this.#returns.get(tid);
    if (stack === undefined) {
      stack = [];
      this.#returns.set(tid, stack);
    }
    const sp = regs.rsp;
    const returnAddress = this.tracee.readU64(sp);
    // A tail call (a jmp) from a function whose return address is swapped: the trampoline's
    // address is its return address too, and the call it came from has its instance at this
    // very stack pointer. It is kept: the one return ends both calls (as kernel uretprobes
    // chain them).
    const chained = returnAddress === trampoline;
    const left = (vaddr: bigint) => (chained ? vaddr < sp : vaddr <= sp);
    // Instances a longjmp skipped over are below the stack pointer now: drop them. Not those
    // of the stack a signal interrupted, when this call runs on an alternate signal stack:
    // that stack may lie anywhere below or above the signal stack.
    if (stack.length > 0 && left(stack.at(-1)!.stackVaddr)) {
      const signalStack = this.#signalStack(tid, sp);
      while (stack.length > 0 && left(stack.at(-1)!.stackVaddr)) {
        const top = stack.at(-1)!.stackVaddr;
        if (signalStack !== undefined && (top < signalStack.low || top >= signalStack.high)) break;
        stack.pop();
      }
    }
    if (stack.length >= MAX_RETURN_INSTANCES) return;
    if (chained) {
      const caller = stack.at(-1);
      if (caller?.stackVaddr !== sp) return;
      stack.push({
        function: at,
        stackVaddr: sp,
        returnAddress: caller.returnAddress,
        entry: regs.clone(),
        entryTimeNs: process.hrtime.bigint(),
        declined,
      });
      return;
    }
    stack.push({
      function: at,
      stackVaddr: sp,
      returnAddress,
      entry: regs.clone(),
      entryTimeNs: process.hrtime.bigint(),
      declined,
    });
    this.#writeU64(sp, trampoline);
  }

  /**
   * The alternate signal stack stopped thread `tid` runs on (sigaltstack(2) run in it, its
   * answer written below the red zone under `sp`), or undefined when it runs on no such stack
   * (or the call fails: a stack with no room below). Only asked where instances would be
   * dropped (a longjmp, an unwind, or a handler on a signal stack above the thread's).
   */
  #signalStack(tid: number, sp: bigint): { low: bigint; high: bigint } | undefined {
    const at = ((sp - 128n - 64n) / 16n) * 16n;
    try {
      if (this.tracee.injectSyscall(tid, SYSCALL.sigaltstack, [0n, at]) !== 0n) return undefined;
      const bytes = this.tracee.read(at, 24);
      const view = new DataView(bytes.buffer, bytes.byteOffset);
      const SS_ONSTACK = 1;
      if ((view.getInt32(8, true) & SS_ONSTACK) === 0) return undefined;
      const low = view.getBigUint64(0, true);
      return { low, high: low + view.getBigUint64(16, true) };
    } catch (err) {
      if (err instanceof ProbeError) return undefined;
      throw err;
    }
  }

  #returnStop(tid: number, regs: Registers): void {
    if (this.#inline !== undefined) this.#drainInline(this.#inline);
    const stack = this.#returns.get(tid) ?? [];
    // The return popped the trampoline's address: the stack pointer is 8 above where it was.
    const sp = regs.rsp - 8n;
    while (stack.length > 0 && stack.at(-1)!.stackVaddr < sp) stack.pop();
    const instance = stack.pop();
    if (instance === undefined) {
      throw new ProbeError(
        'ERR_INTERNAL',
        `Cannot return from a probed function in thread ${tid} of process ${this.pid}: no return address was saved for it`,
      );
    }
    // The calls that tail-called into this one (their instances at the same stack pointer)
    // return with it, after it.
    const returned = [instance];
    while (stack.at(-1)?.stackVaddr === instance.stackVaddr) returned.push(stack.pop()!);
    regs.rip = instance.returnAddress;
    const timeNs = process.hrtime.bigint();
    const pending: HitContext[] = [];
    for (const call of returned) {
      for (const registration of this.#registrations.at(call.function)) {
        if (registration.event !== 'return' || registration.where !== call.function) continue;
        if (call.declined?.has(registration.id) === true) continue;
        const hit = this.#context(
          registration,
          tid,
          regs,
          timeNs,
          call.entry,
          regs.get('rax'),
          undefined,
          call.entryTimeNs,
        );
        if (registration.filter !== undefined && !registration.filter(hit)) continue;
        if (registration.handler !== undefined) this.#run(registration.handler, hit);
        else pending.push(hit);
        if (hit.retval !== undefined) regs.set('rax', hit.retval);
      }
    }
    this.#stop({
      probes: this,
      tid,
      regs,
      pending,
      resume: () => {
        this.tracee.setRegs(tid, regs);
        this.tracee.cont(tid);
      },
    });
  }

  #deliverProcessEvent(
    event: ProbeEventKind,
    tid: number,
    regs: Registers | undefined,
    detail: number | undefined,
    resume: () => void,
    /** Events to return before this one. */
    before: readonly HitContext[] = [],
  ): void {
    const registrations = [...this.#registrations.values()].filter((r) => r.event === event);
    if (registrations.length === 0 && before.length === 0) {
      resume();
      return;
    }
    const live = regs ?? (event === 'exit' ? new Registers() : this.tracee.regs(tid));
    const timeNs = process.hrtime.bigint();
    const pending: HitContext[] = [...before];
    for (const registration of registrations) {
      const hit = this.#context(registration, tid, live, timeNs, undefined, undefined, detail);
      if (registration.filter !== undefined && !registration.filter(hit)) continue;
      if (registration.handler !== undefined) this.#run(registration.handler, hit);
      else pending.push(hit);
    }
    this.#stop({ probes: this, tid, regs: live, pending, resume });
  }

  /** Hold the thread until its pending events are out (at once when there are none). */
  #stop(stopped: Stopped): void {
    if (stopped.pending.length === 0) {
      this.#finish(stopped);
      return;
    }
    this.#d.current = stopped;
  }

  #finish(stopped: Stopped): void {
    if (!stopped.probes.tracee.threads.has(stopped.tid)) return;
    stopped.resume();
  }

  /** Run the displaced instruction: from its slot, or emulated; or where a handler moved rip. */
  #stepOver(tid: number, regs: Registers, at: bigint): void {
    const tracee = this.tracee;
    const breakpoint = this.#breakpoints.get(at);
    // A handler moved the thread, or the breakpoint is gone: it runs from where rip is.
    if (regs.rip === at && breakpoint !== undefined) this.#outOfLine(regs, breakpoint);
    tracee.setRegs(tid, regs);
    tracee.cont(tid);
  }

  /**
   * The registers of a thread at `breakpoint` moved on past its instruction: into its slot,
   * or with the instruction emulated (its write to memory done).
   */
  #outOfLine(regs: Registers, breakpoint: Breakpoint): void {
    const plan = breakpoint.plan;
    if (plan.kind === 'relocate') {
      regs.rip = breakpoint.slot!;
    } else if (plan.kind === 'emulate') {
      const result = emulate(plan.emulation, toXol(regs), (vaddr) => this.tracee.readU64(vaddr));
      if (result.write !== undefined) this.#writeU64(result.write.vaddr, result.write.value);
      fromXol(regs, result.regs);
    }
  }

  /** A forked child (auto-attached) gets its copy of every breakpoint removed, then runs free. */
  #forked(parent: number, child: number): void {
    const tracee = this.tracee;
    if (!this.#firstStop(child)) return;
    // Another tracer's int3s stay: its kernel uprobe serves the child too.
    const writes = [...this.#breakpoints.values()]
      .filter((b) => !this.#foreign.has(b.vaddr))
      .map((b) => ({ vaddr: b.vaddr, bytes: new Uint8Array([b.original]) }));
    // Its copies of the inline hooks (their trampolines and ring stay mapped in it, unused).
    writes.push(
      ...(this.#inline?.originals() ?? []).map(({ vaddr, bytes }) => ({
        vaddr,
        bytes: Uint8Array.from(bytes),
      })),
    );
    // The child is a copy of the thread that forked: its pending returns hold the trampoline.
    for (const swapped of this.#inline?.returnsOf(parent) ?? []) {
      const bytes = new Uint8Array(8);
      new DataView(bytes.buffer).setBigUint64(0, swapped.returnAddress, true);
      writes.push({ vaddr: swapped.vaddr, bytes });
    }
    for (const instance of this.#returns.get(parent) ?? []) {
      const bytes = new Uint8Array(8);
      new DataView(bytes.buffer).setBigUint64(0, instance.returnAddress, true);
      writes.push({ vaddr: instance.stackVaddr, bytes });
    }
    // Its copies of the semaphores this tracer raised go back down (nothing traces it).
    for (const [vaddr, count] of this.#semaphores) {
      const was = tracee.read(vaddr, 2);
      const bytes = new Uint8Array(2);
      new DataView(bytes.buffer).setUint16(
        0,
        Math.max(0, (was[0]! | (was[1]! << 8)) - count),
        true,
      );
      writes.push({ vaddr, bytes });
    }
    tracee.releaseChild(child, writes);
  }

  /** Wait for a forked child's first stop (it must be stopped before it is changed); false if it ended. */
  #firstStop(child: number): boolean {
    if (this.#d.newborns.delete(child)) return true;
    // Taken already by a wait for another stop (its parent's interrupt, a system call's
    // step): waiting for it would never end.
    const at = this.#d.queue.findIndex((r) => r.tid === child);
    const taken = at >= 0 ? this.#d.queue.splice(at, 1)[0] : this.tracee.takeDeferredOf(child);
    if (taken !== undefined) return taken.kind === 'stopped';
    for (;;) {
      const report = this.tracee.waitChild(child);
      if (report.kind !== 'stopped') return false;
      if (report.event === PTRACE_EVENT.PTRACE_EVENT_STOP || report.signal === SIGSTOP) return true;
      this.#d.queue.push(report);
    }
  }

  /**
   * A forked child is followed (followForks): it has a copy of every breakpoint, out-of-line
   * page and return address of its parent, so it gets the same probes, and is held until the
   * next poll lets it run. A vfork child (`sharesMemory`: posix_spawn, system()) runs in its
   * parent's memory until it execs or exits: nothing is written in it, which would be
   * written in the parent; its hits on the parent's inline hooks are the parent's.
   */
  #adopt(parent: number, child: number, sharesMemory: boolean): void {
    if (!this.#firstStop(child)) return;
    const probes = new ProcessProbes(
      Tracee.adopt(child, this.tracee),
      { followForks: true },
      this.#d,
    );
    for (const [id, registration] of this.#registrations) {
      probes.#registrations.set(id, registration);
      if (registration.returnSites !== undefined) {
        probes.#openCalls.set(id, new PendingCalls(MAX_RETURN_INSTANCES));
      }
    }
    for (const [vaddr, breakpoint] of this.#breakpoints) probes.#breakpoints.set(vaddr, breakpoint);
    for (const vaddr of this.#removed) probes.#removed.add(vaddr);
    for (const [vaddr, byte] of this.#leftInt3) probes.#leftInt3.set(vaddr, byte);
    probes.#foreign = new Set(this.#foreign);
    for (const [vaddr, time] of this.#lastHitNs) probes.#lastHitNs.set(vaddr, time);
    probes.#xol = this.#xol.copyFor(probes.tracee);
    probes.#trampoline = this.#trampoline;
    probes.#image = this.#image;
    // Its memory is a copy: so are the semaphores raised in it.
    probes.#semaphores = new Map(this.#semaphores);
    // The child is a copy of the thread that forked, pending returns and all.
    const stack = this.#returns.get(parent);
    if (stack !== undefined) probes.#returns.set(child, [...stack]);
    this.#d.held.push(child);
    if (sharesMemory) return;
    // Its copies of the inline hooks would write into the parent's ring: it gets the
    // function's bytes back, and an int3 serves each of those probes in it instead (return
    // probes through the trampoline).
    this.#adoptInlineReturns(parent, probes);
    for (const { vaddr, bytes } of this.#inline?.originals() ?? []) {
      probes.tracee.write(vaddr, bytes);
      for (const registration of this.#registrations.at(vaddr)) {
        if (registration.where !== vaddr || registration.returnSites !== undefined) continue;
        if (registration.event === 'return') probes.#armTrampoline(vaddr);
        else if (registration.event !== 'breakpoint') continue;
        probes.#arm(vaddr, registration);
      }
    }
  }

  /**
   * The calls of `parent` whose return address a hook swapped are calls of its forked child
   * too (`probes`, a copy of that thread): in the child they return through its int3
   * trampoline instead, paired with the entry the parent's hook recorded, as the child's
   * copies of the int3 return instances do (and the kernel's uretprobes). A call whose entry
   * was not read gets its return address back.
   */
  #adoptInlineReturns(parent: number, probes: ProcessProbes): void {
    const swapped = this.#inline?.returnsOf(parent) ?? [];
    if (swapped.length === 0) return;
    // Their entries may still be in the ring: read (kept for poll() where no handler takes them).
    this.#serveInline('final');
    const calls = this.#inlineCalls.get(parent) ?? [];
    const stack = probes.#returns.get(probes.pid) ?? [];
    for (const { vaddr: sp, returnAddress } of swapped) {
      const call = calls.findLast((c) => c.sp === Number(sp));
      if (call === undefined) {
        probes.#writeU64(sp, returnAddress);
        continue;
      }
      probes.#armTrampoline(call.vaddr);
      stack.push({
        function: call.vaddr,
        stackVaddr: sp,
        returnAddress,
        entry: call.entry,
        entryTimeNs: BigInt(call.entryTimeNs),
        declined: call.declined,
      });
      probes.#writeU64(sp, probes.#trampoline!);
    }
    // Outermost (highest) first, as the calls are nested.
    stack.sort((a, b) => (a.stackVaddr > b.stackVaddr ? -1 : a.stackVaddr < b.stackVaddr ? 1 : 0));
    probes.#returns.set(probes.pid, stack);
  }

  /**
   * Place an inline hook for a breakpoint registration that asks for one, with every thread
   * stopped; false when it cannot be (the int3 path serves it, and a notice says why).
   */
  #placeInline(vaddr: bigint, registration: Registration): boolean {
    const inline = this.#inline;
    if (inline === undefined || registration.inline === undefined) return false;
    const returns = registration.event === 'return';
    if (!returns && registration.event !== 'breakpoint') return false;
    const reads = registration.inline.reads ?? NO_INLINE_READS;
    if (inline.covers(vaddr, reads)) {
      if (returns) inline.setReturns(vaddr, true);
      this.#setAggregate(vaddr, registration);
      return true;
    }
    // An int3 there serves every registration at that address already.
    if (this.#breakpoints.has(vaddr)) return false;
    this.#stopAll();
    const tid = this.#stoppedThread();
    const threads = [...this.tracee.threads];
    const pcs: bigint[] = [];
    for (const thread of threads) {
      try {
        // One waiting for its vfork child is not stopped: the kernel says where it waits.
        const pc = this.#inVfork.has(thread) ? syscallPc(thread) : this.tracee.regs(thread).rip;
        if (pc !== undefined) pcs.push(pc);
      } catch (err) {
        if (!(err instanceof ProbeError)) throw err;
      }
    }
    const reason = inline.place(vaddr, registration.inline.jumpTargets, tid, pcs, reads);
    if (reason !== undefined) {
      this.#d.notices.push({ pid: this.pid, vaddr, what: 'trap', reason });
      return false;
    }
    inline.stopped(threads);
    if (returns) inline.setReturns(vaddr, true);
    this.#setAggregate(vaddr, registration);
    return true;
  }

  /**
   * The hook at `vaddr` aggregates in the process while every registration there asks for
   * it (a registration without would miss the hits), else records.
   */
  #setAggregate(vaddr: bigint, placing: Registration): void {
    let all = placing.inline?.aggregate === true;
    let bare = isBare(placing);
    for (const registration of this.#registrations.at(vaddr)) {
      if (registration.where !== vaddr) continue;
      if (registration.inline?.aggregate !== true) all = false;
      if (!isBare(registration)) bare = false;
    }
    this.#inline?.setAggregate(vaddr, all, placing.inline?.value);
    this.#inline?.setBare(vaddr, bare);
  }

  /**
   * What the inline hooks of this process aggregated, by registration id (each registration
   * at a hooked address that asked for it gets that address's).
   */
  #inlineAggregates(): Map<string, InlineAggregate> {
    const found = new Map<string, InlineAggregate>();
    const inline = this.#inline;
    if (inline === undefined) return found;
    const byAddress = inline.aggregates();
    if (byAddress.size === 0) return found;
    for (const [id, registration] of this.#registrations) {
      if (registration.inline?.aggregate !== true || registration.where === undefined) continue;
      const aggregate = byAddress.get(registration.where);
      if (aggregate !== undefined) found.set(id, aggregate);
    }
    return found;
  }

  /** The inline hooks' memory goes (an exit, an exec, a detach): what they aggregated is kept. */
  #forgetInline(): void {
    const inline = this.#inline;
    if (inline === undefined) return;
    for (const [id, aggregate] of this.#inlineAggregates()) {
      const before = this.#d.aggregated.get(id);
      this.#d.aggregated.set(
        id,
        before === undefined ? aggregate : addInlineAggregates(before, aggregate),
      );
    }
    inline.forget();
  }

  /**
   * Read what the inline hooks recorded: each hit goes to its registrations' handlers, or
   * (none) waits for poll(); returns the first of those. `final` (the process ended, or a
   * fork's child needs its parent's calls): every hit is read, none returned yet; `drop` (a
   * detach or an exec): the same, and hits without a handler are dropped with the process's
   * probes.
   */
  #serveInline(mode: 'poll' | 'final' | 'drop' = 'poll'): HitContext | undefined {
    const all = mode !== 'poll';
    const inline = this.#inline;
    if (inline === undefined) return undefined;
    if (
      !all &&
      inline.wantsStop() &&
      performance.now() >= this.#inlineStopAt &&
      this.tracee.threads.size > 0
    ) {
      this.#stopAll();
      const looked = inline.stopped([...this.tracee.threads]);
      this.#inlineStopAt =
        performance.now() + (looked ? INLINE_STOP_EVERY_MS : INLINE_STOP_SOON_MS);
    }
    this.#drainInline(inline);
    if (mode === 'drop') this.#inlinePending.length = 0;
    return all ? undefined : this.#inlinePending.shift();
  }

  /**
   * Read the records the inline hooks made so far (their hits go to their handlers, or wait
   * for poll()), with what they lost and could not track.
   */
  #drainInline(inline: InlineHooks): void {
    const ended = this.#endedThreads.splice(0);
    if (inline.drain((hit) => this.#inlineHit(hit))) {
      for (const tid of ended) this.#inlineCalls.delete(tid);
    } else {
      this.#endedThreads.unshift(...ended);
    }
    for (const [vaddr, count] of inline.takeLost()) {
      this.#inlineLost.set(vaddr, (this.#inlineLost.get(vaddr) ?? 0) + count);
    }
    const untracked = inline.takeUntracked();
    if (untracked > 0 && this.#untracked === 0) {
      this.#d.notices.push({
        pid: this.pid,
        vaddr: 0n,
        what: 'untracked',
        reason: String(untracked),
      });
    }
    this.#untracked += untracked;
  }

  #inlineHit(hit: InlineHit): void {
    if (hit.kind === 'return') {
      this.#inlineReturn(hit);
      return;
    }
    const sp = hit.sp;
    let calls = this.#inlineCalls.get(hit.tid);
    // A tail call (a jmp) from a call whose return the hook swapped: its return address is
    // the return trampoline's, which it leaves, and that call's entry has this very stack
    // pointer. The one return ends both calls, this one first (as kernel uretprobes chain
    // them).
    const chained = !hit.returns && calls !== undefined && calls.at(-1)?.sp === sp;
    let declined: Set<string> | undefined;
    for (const registration of this.#registrations.at(hit.vaddr)) {
      if (registration.where !== hit.vaddr) continue;
      if (registration.event === 'return') {
        if (
          (hit.returns || chained) &&
          registration.returnSites === undefined &&
          registration.entryFilter !== undefined &&
          !registration.entryFilter(this.#inlineContext(registration, hit))
        ) {
          declined ??= new Set();
          declined.add(registration.id);
        }
        continue;
      }
      if (registration.event !== 'breakpoint') continue;
      if (isBare(registration)) registration.bareHandler!('breakpoint', hit.tid, hit.timeNs);
      else this.#inlineDeliver(registration, this.#inlineContext(registration, hit));
    }
    if (!hit.returns) {
      if (chained && calls !== undefined && this.#returnsAt(hit.vaddr)) {
        calls.push({
          vaddr: hit.vaddr,
          sp,
          entry: hit.regs,
          entryTimeNs: hit.timeNs,
          declined,
          chained: true,
        });
      }
      return;
    }
    if (calls === undefined) {
      calls = [];
      this.#inlineCalls.set(hit.tid, calls);
    }
    // The calls the hook took for left by a longjmp or an unwind (at or below this stack
    // pointer, as many as it dropped from its shadow stack: not those a signal handler on a
    // stack of its own interrupted).
    for (let n = hit.dropped; n > 0 && calls.length > 0 && calls.at(-1)!.sp <= sp; n--) {
      calls.pop();
    }
    calls.push({ vaddr: hit.vaddr, sp, entry: hit.regs, entryTimeNs: hit.timeNs, declined });
  }

  /** A return an inline hook recorded: paired with its call's entry by stack pointer. */
  #inlineReturn(hit: InlineHit): void {
    const calls = this.#inlineCalls.get(hit.tid);
    if (calls === undefined) return;
    let at = calls.length - 1;
    while (at >= 0 && calls[at]!.sp !== hit.entrySp) at--;
    // No entry read for it (hits dropped at a detach or an exec): nothing to pair with.
    if (at < 0) return;
    // A tail call returns with the call it came from (below it, same stack pointer), first.
    let first = at;
    while (calls[first]!.chained && first > 0 && calls[first - 1]!.sp === hit.entrySp) first--;
    // The calls made after it and not returned from were left by a longjmp or an unwind.
    // Mostly it is the innermost call, alone: popped (a list made and the length set for
    // each return were a tenth of reading an inject ring).
    if (first === calls.length - 1) {
      this.#deliverInlineReturn(hit, calls.pop()!);
      return;
    }
    const returned = calls.slice(first, at + 1).reverse();
    calls.length = first;
    for (const call of returned) this.#deliverInlineReturn(hit, call);
  }

  /** The return hit `hit` of `call`, given to its registrations. */
  #deliverInlineReturn(hit: InlineHit, call: InlineCall): void {
    for (const registration of this.#registrations.at(call.vaddr)) {
      if (registration.event !== 'return' || registration.where !== call.vaddr) continue;
      if (registration.returnSites !== undefined || call.declined?.has(registration.id)) {
        continue;
      }
      if (isBare(registration)) registration.bareHandler!('return', hit.tid, hit.timeNs);
      else this.#inlineDeliver(registration, this.#inlineContext(registration, hit, call));
    }
  }

  #inlineDeliver(registration: Registration, context: HitContext): void {
    if (registration.filter !== undefined && !registration.filter(context)) return;
    // The thread is not stopped: the handler runs on its own (registering from it places
    // probes through another thread).
    if (registration.handler !== undefined) registration.handler(context);
    else this.#inlinePending.push(context);
  }

  /** A hit's context for a registration: at its entry, or (`call`) at the return of that call. */
  #inlineContext(registration: Registration, hit: InlineHit, call?: InlineCall): HitContext {
    const stackAt = hit.regs.rsp;
    const fromStack = (vaddr: bigint, length: number): Uint8Array => {
      const offset = vaddr - stackAt;
      if (offset >= 0n && offset + BigInt(length) <= BigInt(hit.stack.length)) {
        return hit.stack.slice(Number(offset), Number(offset) + length);
      }
      return readCopied(hit.memory, vaddr, length);
    };
    return {
      id: registration.reportAs ?? registration.id,
      event: call === undefined ? 'breakpoint' : 'return',
      pid: this.pid,
      tid: hit.tid,
      timeNs: BigInt(hit.timeNs),
      where: hit.vaddr,
      regs: hit.regs,
      retval: call === undefined ? undefined : hit.regs.get('rax'),
      entry: call?.entry,
      entryTimeNs: call === undefined ? undefined : BigInt(call.entryTimeNs),
      detail: undefined,
      readU64: (vaddr) => new DataView(fromStack(vaddr, 8).buffer).getBigUint64(0, true),
      read: fromStack,
      readCString: (vaddr, maxBytes = 4096) => readCopiedString(hit.memory, vaddr, maxBytes),
      write: () => {
        throw new ProbeError(
          'ERR_USAGE',
          "Cannot write to the process from an inline hook's hit: the thread has gone on (use --engine ptrace)",
        );
      },
    };
  }

  /**
   * What inline hooks aggregated in the process for the registrations that asked for it
   * (Registration.inline.aggregate), by registration id, in every process followed, ended
   * ones and earlier images included.
   */
  inlineAggregates(): Map<string, InlineAggregate> {
    const found = new Map(this.#d.aggregated);
    for (const member of new Set([this, ...this.#d.members.values()])) {
      for (const [id, aggregate] of member.#inlineAggregates()) {
        const before = found.get(id);
        found.set(id, before === undefined ? aggregate : addInlineAggregates(before, aggregate));
      }
    }
    return found;
  }

  /**
   * Hits inline hooks could not record since the last call (their ring was full), by the
   * address of the probe, in every process followed.
   */
  takeLost(): Map<bigint, number> {
    const lost = new Map<bigint, number>();
    for (const member of new Set([this, ...this.#d.members.values()])) {
      for (const [vaddr, count] of member.#inlineLost)
        lost.set(vaddr, (lost.get(vaddr) ?? 0) + count);
      member.#inlineLost.clear();
    }
    return lost;
  }

  /** A thread stopped inside a slot goes back to the code its instruction came from. */
  #leaveSlots(tid: number): void {
    const regs = this.tracee.regs(tid);
    for (const breakpoint of this.#breakpoints.values()) {
      const slot = breakpoint.slot;
      if (slot === undefined || breakpoint.plan.kind !== 'relocate') continue;
      const end = slot + BigInt(breakpoint.plan.slotBytes.length);
      if (regs.rip < slot || regs.rip >= end) continue;
      // The instruction the thread is at in the slot has not run yet: back to its original;
      // past the last one, only the jump back is left.
      const offset = Number(regs.rip - slot);
      let to = breakpoint.slotMap[0]!.vaddr;
      for (const entry of breakpoint.slotMap) if (entry.slotOffset <= offset) to = entry.vaddr;
      regs.rip = to;
      this.tracee.setRegs(tid, regs);
      return;
    }
  }

  #writeU64(vaddr: bigint, value: bigint): void {
    const bytes = new Uint8Array(8);
    new DataView(bytes.buffer).setBigUint64(0, BigInt.asUintN(64, value), true);
    this.tracee.write(vaddr, bytes);
  }

  #context(
    registration: Registration,
    tid: number,
    regs: Registers,
    timeNs: bigint,
    entry: Registers | undefined,
    retval: bigint | undefined,
    detail: number | undefined,
    entryTimeNs?: bigint,
  ): HitContext {
    const tracee = this.tracee;
    return {
      id: registration.reportAs ?? registration.id,
      event: registration.event,
      pid: this.pid,
      tid,
      timeNs,
      where: registration.where,
      regs,
      retval,
      entry,
      entryTimeNs,
      detail,
      readU64: (vaddr) => tracee.readU64(vaddr),
      readStackU64: (vaddr) => {
        const value = tracee.readU64(vaddr);
        if (value !== this.#trampoline) return value;
        const swapped = this.#returns.get(tid)?.find((instance) => instance.stackVaddr === vaddr);
        return swapped?.returnAddress ?? value;
      },
      read: (vaddr, length) => tracee.read(vaddr, length),
      readCString: (vaddr, maxBytes = 4096) => readCString(tracee, vaddr, maxBytes),
      write: (vaddr, bytes) => tracee.write(vaddr, bytes),
    };
  }
}

/** Where a slot running one instruction (or none: emulated) goes back to, by slot offset. */
function singleSlotMap(vaddr: bigint, plan: XolPlan) {
  return [
    { slotOffset: 0, vaddr },
    { slotOffset: plan.length, vaddr: vaddr + BigInt(plan.length) },
  ];
}

/** The addresses a registration has breakpoints at. */
function addressesOf(registration: Registration): bigint[] {
  const sites = registration.returnSites;
  if (registration.event === 'return' && sites !== undefined) {
    return [sites.entry, ...sites.exits.map((exit) => exit.vaddr)];
  }
  return registration.where === undefined ? [] : [registration.where];
}

/** Whether `tid` leads a process of its own (a forked child), rather than being a thread. */
function isProcess(tid: number): boolean {
  try {
    const status = readFileSync(`/proc/${tid}/status`, 'utf8');
    return Number(/^Tgid:\s+(\d+)$/m.exec(status)?.[1]) === tid;
  } catch {
    return false;
  }
}

/** The signals pending for one thread (SigPnd in /proc), as a bit mask (bit n-1: signal n). */
function pendingSignals(tid: number): bigint {
  try {
    const status = readFileSync(`/proc/${tid}/status`, 'utf8');
    return BigInt(`0x${/^SigPnd:\s+([0-9a-f]+)$/m.exec(status)?.[1] ?? '0'}`);
  } catch {
    return 0n;
  }
}

/**
 * Run what the tracer does to a stopped thread; when ptrace says ESRCH because the thread has
 * left its stop for good (a SIGKILL takes it out at once, and it is dying or gone), or its
 * memory can no longer be written because it is being killed (a dying process's memory goes
 * early), do nothing more: its end is reported by a later wait, as for any thread that exits.
 */
function killedMeanwhile(action: () => void, tid: number): void {
  try {
    action();
  } catch (err) {
    if (!(err instanceof ProbeError) || !leftStop(tid)) throw err;
    if (err.code === 'ERR_TARGET_GONE') return;
    // Memory that cannot be written is an end only for a thread being killed (or gone).
    if (err.code === 'ERR_TARGET_MEMORY' && killed(tid)) return;
    throw err;
  }
}

/** Whether a thread is gone, a zombie, or has SIGKILL pending (its end under way). */
function killed(tid: number): boolean {
  let state: string | undefined;
  try {
    state = procState(tid);
  } catch {
    return false;
  }
  if (state === undefined || state === 'Z' || state === 'X') return true;
  return (pendingSignals(tid) & (1n << BigInt(constants.signals.SIGKILL - 1))) !== 0n;
}

function ended(pid: number): ProbeError {
  return new ProbeError(
    'ERR_TARGET_GONE',
    `Cannot change probes of process ${pid}: it has ended or was detached`,
  );
}

function readCString(tracee: Tracee, vaddr: bigint, maxBytes: number): string {
  const chunks: Uint8Array[] = [];
  let total = 0;
  while (total < maxBytes) {
    // Read up to the end of the page, so that a string ending before an unmapped page reads.
    const pageLeft = 4096 - Number((vaddr + BigInt(total)) % 4096n);
    const chunk = tracee.read(vaddr + BigInt(total), Math.min(pageLeft, maxBytes - total));
    const nul = chunk.indexOf(0);
    if (nul >= 0) {
      chunks.push(chunk.subarray(0, nul));
      break;
    }
    chunks.push(chunk);
    total += chunk.length;
  }
  return Buffer.concat(chunks).toString('utf8');
}

const XOL_NAMES = [
  'rax',
  'rbx',
  'rcx',
  'rdx',
  'rsi',
  'rdi',
  'rbp',
  'r8',
  'r9',
  'r10',
  'r11',
  'r12',
  'r13',
  'r14',
  'r15',
] as const;

function toXol(regs: Registers): XolRegisters {
  const out = {
    rip: regs.rip,
    rsp: regs.rsp,
    rflags: regs.get('eflags'),
    fsBase: regs.get('fs_base'),
    gsBase: regs.get('gs_base'),
  } as Record<string, bigint>;
  for (const name of XOL_NAMES) out[name] = regs.get(name);
  return out as unknown as XolRegisters;
}

function fromXol(regs: Registers, xol: XolRegisters): void {
  regs.rip = xol.rip;
  regs.rsp = xol.rsp;
  regs.set('eflags', xol.rflags);
  for (const name of XOL_NAMES) regs.set(name, xol[name]);
}

/**
 * What an address a registration arms is, for an error: its site (`label (0x...)`), its
 * calls' entry or one of its exits (a return caught at its exits), else the address.
 */
function placeName(vaddr: bigint, registration: Registration): string {
  const at = `0x${vaddr.toString(16)}`;
  const label = registration.label;
  if (vaddr === registration.where) return label === undefined ? `(${at})` : `${label} (${at})`;
  if (label === undefined) return `(${at})`;
  const sites = registration.returnSites;
  if (sites?.entry === vaddr)
    return `${label}'s calls' entry (${at}, where its returns are paired)`;
  if (sites?.exits.some((exit) => exit.vaddr === vaddr)) return `${label}'s exit at ${at}`;
  return `${label} (${at})`;
}
