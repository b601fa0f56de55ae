import { closeSync, openSync, readdirSync, readFileSync, readSync, writeSync } from 'node:fs';
import { ProbeError, quote } from '../../errors/index.js';
import {
  checkCommand,
  checkProgram,
  kernelThreadError,
  processEnded,
  procState,
  ptraceRefusal,
  stopThenExec,
} from '../../host/index.js';
import {
  describeErrno,
  loadNative,
  type NativeBinding,
  PTRACE,
  PTRACE_EVENT,
  PTRACE_O,
  SYSCALL,
  WAIT,
} from '../../native/index.js';
import { parseProcMaps } from '../../symbols/index.js';
import { Registers } from './registers.js';
import {
  AUDIT_ARCH_X86_64,
  allows,
  decodeFilter,
  describeVerdict,
  type SockFilter,
  seccompVerdict,
} from './seccomp.js';

/** waitpid's flag to see only the children and tracees of the calling thread. */
const WNOTHREAD = 0x20000000;
export const SIGTRAP = 5;
/** si_code of a SIGTRAP an int3 raised. */
const SI_KERNEL = 0x80;
const SIGCONT = 18;

/** What one waitpid() reported for one thread. */
export type StopReport =
  | { readonly kind: 'exited'; readonly tid: number; readonly code: number; readonly pid?: number }
  | {
      readonly kind: 'killed';
      readonly tid: number;
      readonly signal: number;
      readonly pid?: number;
    }
  /**
   * A ptrace-stop: a signal about to be delivered (`event` 0), or an event stop
   * (PTRACE_EVENT_CLONE, _FORK, _EXEC, _STOP...), whose `signal` is SIGTRAP or a stop signal.
   */
  | {
      readonly kind: 'stopped';
      readonly tid: number;
      readonly signal: number;
      readonly event: number;
      /** The traced process the thread belongs to (reports of wait()). */
      readonly pid?: number;
    };

/** The processes one tracer thread follows: one traced, and the children it forked. */
class Family {
  readonly members: Tracee[] = [];
  /** Stops seen while a system call was injected, to be reported by takeDeferred(). */
  readonly deferred: StopReport[] = [];
}

export interface SpawnOptions {
  /** The environment (`KEY=value` strings); this process's by default. */
  readonly env?: readonly string[] | undefined;
  /** The program's stdin, stdout and stderr: file descriptors of this process (its own by default). */
  readonly stdio?: readonly number[] | undefined;
  /** argv is one shell command line (`./app 5 > out`), run by `sh` (which execs it). */
  readonly shell?: boolean | undefined;
  /**
   * Start it in a session and process group of its own (its pid), which holds what it starts,
   * so that they can be ended together (default false: it shares this process's group).
   */
  readonly newSession?: boolean | undefined;
}

/**
 * Options every traced thread gets: follow clones, forks and execs, and see a vfork's end (a
 * thread that vforked waits for its child uninterruptibly, and stops there before it runs on).
 */
const TRACE_OPTIONS =
  PTRACE_O.PTRACE_O_TRACECLONE |
  PTRACE_O.PTRACE_O_TRACEFORK |
  PTRACE_O.PTRACE_O_TRACEVFORK |
  PTRACE_O.PTRACE_O_TRACEVFORKDONE |
  PTRACE_O.PTRACE_O_TRACEEXEC;

/** Sleeps without burning CPU and without an event loop (usable in any thread). */
const sleeper = new Int32Array(new SharedArrayBuffer(4));
function sleepMs(ms: number): void {
  Atomics.wait(sleeper, 0, 0, ms);
}

/**
 * One process traced with ptrace from the calling thread, with every thread it has and makes:
 * the requests must all come from the thread that attached (run a tracer on its own
 * worker_thread), and waits see only this thread's tracees (`__WNOTHREAD`), never the
 * children Node's own child_process made from the main thread.
 *
 * Memory is read and written through /proc/PID/mem, which (for a tracer) also writes to
 * read-only text, as breakpoints need.
 */
export class Tracee {
  readonly pid: number;
  /** Threads traced and not yet gone. */
  readonly threads = new Set<number>();
  readonly #native: NativeBinding;
  readonly #status = new Int32Array(1);
  #mem: number | undefined;
  /** A `syscall` instruction of the process, to run injected system calls from. */
  #syscallAt: bigint | undefined;
  /**
   * The event message (PTRACE_GETEVENTMSG) of each thread's last event stop, read when it
   * was reported: a later stop of the thread (an injected system call's step) replaces it.
   */
  readonly #messages = new Map<number, bigint>();
  /**
   * New threads reported (a stop, or their end) before their creator's clone event: that
   * event must not count them again (one that has ended would stay a thread for good).
   */
  readonly #unannounced = new Set<number>();
  /** With pin(): the CPU masks to put back (the tracer's own under 0). */
  #affinity: Map<number, Uint8Array> | undefined;

  readonly #family: Family;

  private constructor(native: NativeBinding, pid: number, family = new Family()) {
    this.#native = native;
    this.pid = pid;
    this.#family = family;
    family.members.push(this);
  }

  /**
   * A child `parent`'s process forked, traced already (auto-attached by the fork event) and
   * stopped: traced from now on with it, by the same thread, whose waits report both.
   */
  static adopt(child: number, parent: Tracee): Tracee {
    const tracee = new Tracee(parent.#native, child, parent.#family);
    tracee.threads.add(child);
    if (parent.#affinity !== undefined) {
      // It inherited the pinned mask of the thread that forked: it gets the process's back.
      const own = parent.#affinity.get(parent.pid) ?? parent.#affinity.get(0);
      if (own !== undefined) tracee.#affinity = new Map([[child, own]]);
    }
    return tracee;
  }

  /**
   * Start `argv` (argv[0] found on PATH) traced, and return once it is stopped at its exec,
   * before the first instruction of the new program (its dynamic loader's entry). It is
   * started through `sh`, which stops itself first so that it can be seized, then execs.
   */
  static spawn(argv: readonly string[], options: SpawnOptions = {}): Tracee {
    const program = argv[0];
    if (program === undefined || program === '') {
      throw new ProbeError('ERR_USAGE', 'Cannot start a process: no command given');
    }
    const native = loadNative();
    const env =
      options.env ??
      Object.entries(process.env).flatMap(([k, v]) => (v === undefined ? [] : [`${k}=${v}`]));
    // A missing program is an error before anything starts (the shell would only say so).
    if (options.shell === true) checkCommand(program);
    else checkProgram(program);
    const launcher =
      options.shell === true ? stopThenExec(program) : [...stopThenExec('"$0" "$@"'), ...argv];
    const pid = native.spawn(launcher, env, options.stdio, options.newSession === true);
    if (pid < 0) {
      throw new ProbeError(
        'ERR_TARGET_NOT_FOUND',
        `Cannot start ${quote(program)}: ${describeErrno(pid)}`,
      );
    }
    const tracee = new Tracee(native, pid);
    try {
      const status = tracee.#status;
      const got = native.waitpid(pid, status, WAIT.WUNTRACED | WNOTHREAD);
      if (got !== pid || (status[0]! & 0xff) !== 0x7f) {
        throw new ProbeError(
          'ERR_TARGET_NOT_FOUND',
          `Cannot start ${quote(program)}: its launcher ended before it could be traced`,
        );
      }
      tracee.#seize(pid, TRACE_OPTIONS | PTRACE_O.PTRACE_O_EXITKILL);
      native.tgkill(pid, pid, SIGCONT);
      // Let the launcher run to its exec, passing nothing on: its own stop and continue are
      // the only signals it gets.
      for (;;) {
        const report = tracee.wait(true)!;
        if (report.kind !== 'stopped') {
          throw new ProbeError(
            'ERR_TARGET_NOT_FOUND',
            `Cannot start ${quote(program)}: ${report.kind === 'exited' ? `the shell exited with status ${report.code} (command not found?)` : `the shell was killed by signal ${report.signal}`}`,
            { hints: ['Check the command runs on its own: give its path or put it on PATH'] },
          );
        }
        if (report.event === PTRACE_EVENT.PTRACE_EVENT_EXEC) break;
        tracee.cont(report.tid);
      }
      tracee.#openMemory();
      return tracee;
    } catch (err) {
      tracee.kill();
      throw err;
    }
  }

  /**
   * Trace every thread of the running process `pid`, and return with each one stopped.
   * Needs ptrace permission (the same user and ptrace_scope 0, or a descendant, or
   * CAP_SYS_PTRACE). With `family`, traced with that tracee's process, by the same thread,
   * whose waits report both (a descendant that existed before tracing began; every process
   * of the family must be stopped meanwhile), and pinned to its CPU if it is.
   */
  static attach(pid: number, family?: Tracee): Tracee {
    const native = family === undefined ? loadNative() : family.#native;
    const tracee = new Tracee(native, pid, family === undefined ? undefined : family.#family);
    try {
      // Threads made while this runs are seized through their creator's clone event.
      for (let changed = true; changed; ) {
        changed = false;
        for (const tid of listThreads(pid)) {
          if (tracee.threads.has(tid)) continue;
          // A thread that ended since the listing is not there to trace; one that a thread
          // seized already made is traced already (its first stop, or its creator's clone
          // event, makes it one of the threads).
          if (!tracee.#seize(tid, TRACE_OPTIONS)) continue;
          native.ptrace(PTRACE.PTRACE_INTERRUPT, tid, 0n, 0n);
          changed = true;
        }
      }
      // Each thread is held at the stop its interrupt makes. Any other stop that comes first
      // (a signal on its way, a fork, clone or exec) answers the interrupt in its place (the
      // kernel drops a pending interrupt at every stop): the thread goes on from it and is
      // interrupted again.
      const waiting = new Set(tracee.threads);
      // First stops of new threads and forked children seen before their creator's event.
      const early = new Set<number>();
      // Threads held at their stop already (a new thread's first stop may come before its
      // creator's clone event).
      const held = new Set<number>();
      while (waiting.size > 0) {
        const report = tracee.wait(true)!;
        const { tid } = report;
        if (report.kind !== 'stopped') {
          waiting.delete(tid);
          continue;
        }
        if (!tracee.threads.has(tid)) {
          early.add(tid);
          continue;
        }
        if (report.event === PTRACE_EVENT.PTRACE_EVENT_STOP) {
          waiting.delete(tid);
          held.add(tid);
          continue;
        }
        if (
          report.event === PTRACE_EVENT.PTRACE_EVENT_FORK ||
          report.event === PTRACE_EVENT.PTRACE_EVENT_VFORK
        ) {
          // Forked before tracing began (no probe is in it): it runs on untraced.
          const child = Number(tracee.eventMessage(tid));
          if (early.delete(child) || tracee.#firstStop(child)) {
            native.ptrace(PTRACE.PTRACE_DETACH, child, 0n, 0n);
          }
        } else if (report.event === PTRACE_EVENT.PTRACE_EVENT_CLONE) {
          // The new thread (traced already) is held at its first stop too.
          const thread = Number(tracee.eventMessage(tid));
          if (!early.delete(thread) && !held.has(thread)) waiting.add(thread);
        } else if (report.event === PTRACE_EVENT.PTRACE_EVENT_EXEC) {
          // The other threads are gone: only the one that execed (now the process's pid) is left.
          for (const gone of waiting) if (!tracee.threads.has(gone)) waiting.delete(gone);
          waiting.add(tid);
        }
        // A signal that was on its way is delivered: the program gets it as it would untraced.
        tracee.cont(tid, report.event === 0 ? report.signal : 0);
        native.ptrace(PTRACE.PTRACE_INTERRUPT, tid, 0n, 0n);
      }
      tracee.#openMemory();
      if (family !== undefined && family.#affinity !== undefined) tracee.#pinWith();
      return tracee;
    } catch (err) {
      tracee.detach();
      tracee.leaveFamily();
      throw err;
    }
  }

  /** Pin this process's threads to the CPU the tracer is pinned to (see pin()), keeping their masks. */
  #pinWith(): void {
    const native = this.#native;
    const cpu = native.currentCpu();
    if (cpu < 0) return;
    const saved = new Map<number, Uint8Array>();
    for (const tid of this.threads) {
      const mask = native.getAffinity(tid);
      if (typeof mask !== 'number') saved.set(tid, mask);
    }
    const [first] = saved.values();
    if (first === undefined) return;
    const one = new Uint8Array(first.length);
    one[cpu >> 3] = 1 << (cpu & 7);
    for (const tid of this.threads) native.setAffinity(tid, one);
    this.#affinity = saved;
  }

  /**
   * After detach() of a process this one started (spawn): collect its exit status if it has
   * ended (nobody else will: it is this process's child, not Node's). True once it is reaped.
   */
  reap(): boolean {
    const got = this.#native.waitpid(this.pid, this.#status, WAIT.WNOHANG | WAIT.__WALL);
    return got === this.pid || got < 0;
  }

  /** Wait for the first stop of `child`, a process forked and auto-attached; false if it ended. */
  #firstStop(child: number): boolean {
    for (;;) {
      const report = this.waitChild(child);
      if (report.kind !== 'stopped') return false;
      if (report.event === PTRACE_EVENT.PTRACE_EVENT_STOP) return true;
      this.#native.ptrace(
        PTRACE.PTRACE_CONT,
        child,
        0n,
        BigInt(report.event === 0 ? report.signal : 0),
      );
    }
  }

  /**
   * Trace thread `tid`; false when it is one of the process's threads (not its leader) that
   * ended meanwhile (ptrace says ESRCH, or EPERM for one exiting), or that this tracer traces
   * already (made by a thread it traces: EPERM).
   */
  #seize(tid: number, options: number): boolean {
    const result = this.#native.ptrace(PTRACE.PTRACE_SEIZE, tid, 0n, BigInt(options));
    if (result < 0) {
      if (tid !== this.pid && (processEnded(tid) || this.#tracedHere(tid))) return false;
      throw seizeError(this.pid, tid, result);
    }
    this.threads.add(tid);
    return true;
  }

  /** Whether thread `tid` is traced by a thread of this process (made by a thread it traces). */
  #tracedHere(tid: number): boolean {
    try {
      const status = readFileSync(`/proc/${tid}/status`, 'utf8');
      const tracer = Number(/^TracerPid:\s+(\d+)$/m.exec(status)?.[1]);
      return tracer > 0 && threadGroupOf(tracer) === process.pid;
    } catch {
      return false;
    }
  }

  /**
   * The next stop or end of any traced thread (waiting for one when `block`), or undefined:
   * also when `interruptible` and a signal interrupted the wait. Threads that exit are
   * forgotten; a clone's new thread is added.
   */
  wait(block: boolean, interruptible = false): StopReport | undefined {
    const status = this.#status;
    // Every thread followed was seen in a stop (or gone) when a signal interrupted the wait:
    // one more look without blocking, and none reporting means none ever will.
    let stalled = false;
    for (;;) {
      const tid = this.#native.waitpid(
        -1,
        status,
        WAIT.__WALL | WNOTHREAD | (block && !stalled ? 0 : WAIT.WNOHANG),
      );
      if (tid === 0) {
        if (stalled) {
          throw this.#stalledError(this.#family.members.flatMap((m) => [...m.threads]));
        }
        return undefined;
      }
      if (tid < 0) {
        // EINTR: a signal this process handles arrived (see interruptOnSignal()).
        if (-tid === 4) {
          if (interruptible) return undefined;
          // A wait no stop can end would block the process forever (SIGTERM included).
          const tids = this.#family.members.flatMap((m) => [...m.threads]);
          stalled = tids.length > 0 && tids.every(cannotReport);
          continue;
        }
        if (this.threads.size === 0) return undefined;
        throw new ProbeError(
          'ERR_INTERNAL',
          `Cannot wait for process ${this.pid}: waitpid: ${describeErrno(tid)}`,
        );
      }
      const s = status[0]!;
      // Another process of the family (a forked child) keeps its own accounts.
      let owner = this.#family.members.find((m) => m.threads.has(tid));
      if (owner === undefined) {
        // A new thread whose stops come before its creator's clone event (waitpid reports
        // the newest tracee first): it is a thread of the process its Tgid names, from now.
        const tgid = threadGroupOf(tid);
        owner = this.#family.members.find((m) => m.pid === tgid);
        if (owner !== undefined && tgid !== tid) {
          owner.threads.add(tid);
          owner.#unannounced.add(tid);
        }
      }
      owner ??= this;
      const pid = owner.pid;
      if ((s & 0x7f) === 0) {
        owner.threads.delete(tid);
        owner.#messages.delete(tid);
        return { kind: 'exited', tid, code: (s >> 8) & 0xff, pid };
      }
      if ((s & 0xff) !== 0x7f) {
        owner.threads.delete(tid);
        owner.#messages.delete(tid);
        return { kind: 'killed', tid, signal: s & 0x7f, pid };
      }
      const signal = (s >> 8) & 0xff;
      const event = (s >> 16) & 0xff;
      if (MESSAGE_EVENTS.has(event)) {
        const message = this.#eventMessageAtStop(tid);
        // Killed in the stop (another thread's exit_group): its end is the next report.
        if (message === undefined) continue;
        owner.#messages.set(tid, message);
      }
      if (event === PTRACE_EVENT.PTRACE_EVENT_CLONE) {
        // A new thread seen already (its first stop, perhaps its end, came first) is known.
        const thread = Number(this.eventMessage(tid));
        if (!owner.#unannounced.delete(thread)) owner.threads.add(thread);
      }
      if (event === PTRACE_EVENT.PTRACE_EVENT_EXEC) {
        // The thread that execs takes the process's pid; the others are gone.
        owner.threads.clear();
        owner.#unannounced.clear();
        owner.threads.add(owner.pid);
        owner.#openMemory();
      }
      return { kind: 'stopped', tid, signal, event, pid };
    }
  }

  /** The next report, waiting at most `timeoutMs` (polling with short sleeps). */
  waitFor(timeoutMs: number): StopReport | undefined {
    const deadline = performance.now() + timeoutMs;
    let nap = 0.05;
    for (;;) {
      const report = this.wait(false);
      if (report !== undefined) return report;
      const left = deadline - performance.now();
      if (left <= 0) return undefined;
      sleepMs(Math.min(nap, left));
      nap = Math.min(nap * 2, 5);
    }
  }

  /** Stop a running thread (it reports a PTRACE_EVENT_STOP). */
  interrupt(tid: number): void {
    this.#native.ptrace(PTRACE.PTRACE_INTERRUPT, tid, 0n, 0n);
  }

  /**
   * Wait for the next report of `child`, a process this tracer got through a fork event (not
   * one of its threads).
   */
  waitChild(child: number): StopReport {
    const status = this.#status;
    let stalled = false;
    for (;;) {
      const got = this.#native.waitpid(
        child,
        status,
        WAIT.__WALL | WNOTHREAD | (stalled ? WAIT.WNOHANG : 0),
      );
      if (got === 0) throw this.#stalledError([child]);
      // EINTR: go on, unless `child` is in a stop already reported (or gone): then no
      // report will ever come (see wait()).
      if (got === -4) {
        stalled = cannotReport(child);
        continue;
      }
      if (got < 0) return { kind: 'exited', tid: child, code: -1 };
      const s = status[0]!;
      if ((s & 0x7f) === 0) return { kind: 'exited', tid: child, code: (s >> 8) & 0xff };
      if ((s & 0xff) !== 0x7f) return { kind: 'killed', tid: child, signal: s & 0x7f };
      return { kind: 'stopped', tid: child, signal: (s >> 8) & 0xff, event: (s >> 16) & 0xff };
    }
  }

  #stalledError(tids: readonly number[]): ProbeError {
    return new ProbeError(
      'ERR_INTERNAL',
      `Cannot wait for process ${this.pid}: thread${tids.length === 1 ? '' : 's'} ${tids.join(', ')} ${tids.length === 1 ? 'is' : 'are'} stopped or gone and no stop is left to report (the tracer lost track of one)`,
    );
  }

  /**
   * Put bytes back in a stopped forked child (its copy of the breakpoints and return
   * addresses), then let it go untraced.
   */
  releaseChild(child: number, writes: readonly { vaddr: bigint; bytes: Uint8Array }[]): void {
    let fd: number | undefined;
    try {
      fd = openSync(`/proc/${child}/mem`, 'r+');
      for (const { vaddr, bytes } of writes) writeSync(fd, bytes, 0, bytes.length, Number(vaddr));
    } catch (cause) {
      // A child that cannot be cleaned must not run into a breakpoint untraced.
      this.#native.tgkill(child, child, 9);
      throw new ProbeError(
        'ERR_TARGET_MEMORY',
        `Cannot remove the breakpoints from forked child ${child} of process ${this.pid}: ${(cause as Error).message}`,
        { cause },
      );
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    this.#native.ptrace(PTRACE.PTRACE_DETACH, child, 0n, 0n);
  }

  /**
   * The stop thread `tid` is in, from its siginfo (PTRACE_GETSIGINFO): for a thread known to
   * be in a ptrace-stop whose report was not seen. Undefined for a group stop (no siginfo).
   */
  stopOf(tid: number): StopReport | undefined {
    const info = new Uint8Array(SIGINFO_BYTES);
    if (this.#native.ptraceBuffer(PTRACE.PTRACE_GETSIGINFO, tid, 0n, info) < 0) return undefined;
    const view = new DataView(info.buffer);
    const signal = view.getInt32(0, true);
    const code = view.getInt32(8, true);
    // An event stop's si_code is SIGTRAP | event << 8; a signal's is small (SI_KERNEL, SI_USER...).
    if (signal === SIGTRAP && code > 0xff) {
      return { kind: 'stopped', tid, signal, event: (code >> 8) & 0xff, pid: this.pid };
    }
    return { kind: 'stopped', tid, signal, event: 0, pid: this.pid };
  }

  /** Resume a stopped thread, delivering `signal` (0: none). */
  cont(tid: number, signal = 0): void {
    this.#messages.delete(tid);
    this.#check(
      this.#native.ptrace(PTRACE.PTRACE_CONT, tid, 0n, BigInt(signal)),
      `resume thread ${tid}`,
    );
  }

  /**
   * Leave a thread in the group-stop it reported (someone sent the process SIGSTOP), still
   * traced: it runs again when the process gets SIGCONT, as it would untraced.
   */
  listen(tid: number): void {
    this.#messages.delete(tid);
    this.#check(
      this.#native.ptrace(PTRACE.PTRACE_LISTEN, tid, 0n, 0n),
      `keep thread ${tid} stopped`,
    );
  }

  /** Run one instruction of a stopped thread (it stops again with SIGTRAP). */
  step(tid: number): void {
    this.#check(this.#native.ptrace(PTRACE.PTRACE_SINGLESTEP, tid, 0n, 0n), `step thread ${tid}`);
  }

  regs(tid: number): Registers {
    const regs = new Registers();
    this.#check(
      this.#native.ptraceBuffer(PTRACE.PTRACE_GETREGS, tid, 0n, regs.bytes),
      `read the registers of thread ${tid}`,
    );
    return regs;
  }

  setRegs(tid: number, regs: Registers): void {
    this.#check(
      this.#native.ptraceBuffer(PTRACE.PTRACE_SETREGS, tid, 0n, regs.bytes),
      `write the registers of thread ${tid}`,
    );
  }

  /**
   * PTRACE_GETEVENTMSG: the new thread or child of a clone/fork event, the old tid of an
   * exec; as read when the event stop was reported (a stop since, such as an injected system
   * call's step, replaces the kernel's).
   */
  eventMessage(tid: number): bigint {
    return this.#messages.get(tid) ?? this.#readEventMessage(tid);
  }

  /**
   * The event message of a thread waitpid just reported in an event stop, or undefined when it
   * has left that stop since: a SIGKILL (its process's exit_group, run by another thread)
   * takes a thread out of a ptrace-stop at once, and ptrace then says ESRCH.
   */
  #eventMessageAtStop(tid: number): bigint | undefined {
    try {
      return this.#readEventMessage(tid);
    } catch (err) {
      if (err instanceof ProbeError && err.code === 'ERR_TARGET_GONE' && leftStop(tid)) {
        return undefined;
      }
      throw err;
    }
  }

  #readEventMessage(tid: number): bigint {
    const message = new Uint8Array(8);
    this.#check(
      this.#native.ptraceBuffer(PTRACE.PTRACE_GETEVENTMSG, tid, 0n, message),
      `read the event of thread ${tid}`,
    );
    return new DataView(message.buffer).getBigUint64(0, true);
  }

  read(vaddr: bigint, length: number): Uint8Array {
    const bytes = new Uint8Array(length);
    let done = 0;
    while (done < length) {
      let got: number;
      try {
        got = readSync(this.#memory(), bytes, done, length - done, Number(vaddr) + done);
      } catch (err) {
        throw this.#memoryError('read', vaddr, length, err);
      }
      if (got <= 0) throw this.#memoryError('read', vaddr, length, undefined);
      done += got;
    }
    return bytes;
  }

  /**
   * `length` bytes of the file mapped at `vaddr`, as the file has them (not as memory has them
   * now: an int3 another tracer wrote is not in the file), through /proc/PID/map_files (which
   * reaches a deleted or replaced file: root) or the mapping's path; undefined where no file
   * is mapped or neither can be read.
   */
  fileBytes(vaddr: bigint, length: number): Uint8Array | undefined {
    let maps: string;
    try {
      maps = readFileSync(`/proc/${this.pid}/maps`, 'utf8');
    } catch {
      return undefined;
    }
    const area = parseProcMaps(maps).find(
      (e) => e.start <= vaddr && vaddr < e.end && e.inode !== 0n && !e.pseudo,
    );
    if (area === undefined) return undefined;
    const hex = (n: bigint) => n.toString(16);
    const at = Number(area.offset + (vaddr - area.start));
    const places = [`/proc/${this.pid}/map_files/${hex(area.start)}-${hex(area.end)}`];
    if (!area.deleted) places.push(`/proc/${this.pid}/root${area.path}`);
    for (const place of places) {
      let fd: number;
      try {
        fd = openSync(place, 'r');
      } catch {
        continue;
      }
      try {
        const bytes = new Uint8Array(length);
        const got = readSync(fd, bytes, 0, length, at);
        if (got > 0) return bytes.subarray(0, got);
      } catch {
        // Unreadable: the next place, if any.
      } finally {
        closeSync(fd);
      }
    }
    return undefined;
  }

  write(vaddr: bigint, bytes: Uint8Array): void {
    let done = 0;
    while (done < bytes.length) {
      let put: number;
      try {
        put = writeSync(this.#memory(), bytes, done, bytes.length - done, Number(vaddr) + done);
      } catch (err) {
        throw this.#memoryError('write', vaddr, bytes.length, err);
      }
      if (put <= 0) throw this.#memoryError('write', vaddr, bytes.length, undefined);
      done += put;
    }
  }

  readU64(vaddr: bigint): bigint {
    const bytes = this.read(vaddr, 8);
    return new DataView(bytes.buffer).getBigUint64(0, true);
  }

  /**
   * Make stopped thread `tid` run one system call (`number` with up to 6 arguments) and return
   * its result (negative: -errno). The thread's registers are put back.
   *
   * The call runs from a `syscall` instruction the process has already (syscallSite()): no
   * code is written, so no other thread can run into a borrowed instruction (a clone's new
   * thread starts at the very address its creator is stopped at).
   *
   * A thread stopped inside a system call that has not returned yet (at a clone, fork, vfork
   * or exec event) finishes it at the first step, which reports at once, before our call
   * runs: that call's result (a clone's new thread id) is what it gets back afterwards.
   *
   * A signal on its way to the thread (a SIGCHLD that came while it was held) would stop it
   * for delivery before the step, and the step would never come: the thread's signals are
   * blocked while the call runs (they stay pending and are delivered after, as they came), and
   * one that cannot be blocked (SIGSTOP) is kept back and sent again once the call is done.
   */
  injectSyscall(tid: number, number: number, args: readonly bigint[]): bigint {
    const saved = this.regs(tid);
    const site = this.#syscallSite(saved.rip);
    const at = site ?? saved.rip;
    this.#checkSeccomp(tid, number, args, at + 2n);
    // No `syscall` instruction found (never seen): borrow two bytes at the thread's own.
    const original = site === undefined ? this.read(at, 2) : undefined;
    const regs = saved.clone();
    regs.rip = at;
    regs.set('rax', BigInt(number));
    // No restart of an interrupted system call: orig_rax -1.
    regs.set('orig_rax', -1n);
    const names = ['rdi', 'rsi', 'rdx', 'r10', 'r8', 'r9'] as const;
    names.forEach((name, i) => {
      regs.set(name, args[i] ?? 0n);
    });
    const mask = this.#blockSignals(tid);
    const kept: number[] = [];
    try {
      if (original !== undefined) this.write(at, SYSCALL_INSTRUCTION);
      // A call the thread is in still returns (at the first step's stop, made at once).
      let inCall = BigInt.asIntN(64, saved.get('orig_rax')) >= 0n;
      for (let attempt = 0; ; attempt++) {
        this.setRegs(tid, regs);
        this.step(tid);
        const event = this.#waitStep(tid, kept);
        const after = this.regs(tid);
        if (after.rip === at + 2n) return BigInt.asIntN(64, after.get('rax'));
        if (after.rip !== at || attempt === 3) {
          throw new ProbeError(
            'ERR_INTERNAL',
            `Cannot run a system call in process ${this.pid}: thread ${tid} went to 0x${after.rip.toString(16)} instead`,
          );
        }
        // Stopped before the `syscall` ran: an interrupt that was pending (PTRACE_EVENT_STOP),
        // or the step's trap at the end of the system call the thread was stopped in, whose
        // result is in %rax now: the thread goes on with it.
        if (event === 0 && inCall) saved.set('rax', after.get('rax'));
        if (event === 0) inCall = false;
      }
    } finally {
      if (original !== undefined) this.write(at, original);
      if (this.threads.has(tid)) {
        this.setRegs(tid, saved);
        if (mask !== undefined) {
          this.#native.ptraceBuffer(PTRACE.PTRACE_SETSIGMASK, tid, SIGSET_BYTES, mask);
        }
        for (const signal of kept) this.#native.tgkill(this.pid, tid, signal);
      }
    }
  }

  /**
   * Throws ProbeError ERR_SECCOMP where thread `tid`'s seccomp filters would not let system
   * call `number` (with `args`, the instruction after it at `after`) run as made: they would
   * kill the process, fail the call, or hand it to someone else. Strict mode lets no call
   * upscope makes run; filters it cannot read (not root) are taken to refuse it.
   */
  #checkSeccomp(tid: number, number: number, args: readonly bigint[], after: bigint): void {
    const mode = seccompMode(`/proc/${this.pid}/task/${tid}/status`);
    if (mode === undefined || mode.mode === 0) return;
    const name = SYSCALL_NAMES.get(number) ?? `system call ${number}`;
    const refuse = (why: string, hints: string[] = []) =>
      new ProbeError(
        'ERR_SECCOMP',
        `Cannot place probes in process ${this.pid} with this engine: it needs to run ${name}() there, and ${why}`,
        { hints: [...hints, 'Use --engine bpf: kernel probes make no system call in the process'] },
      );
    if (mode.mode === 1) throw refuse('the process is in seccomp strict mode, which would kill it');
    const filters = this.#seccompFilters(tid);
    if (filters === undefined) {
      // Unreadable without CAP_SYS_ADMIN. As many as upscope's own: the ones both inherited
      // (a container's, which upscope runs under too), none of its own.
      const own = seccompMode('/proc/thread-self/status');
      if (own !== undefined && own.mode === 2 && own.filters === mode.filters) return;
      throw refuse(
        'the process has seccomp filters of its own, which upscope cannot read without CAP_SYS_ADMIN (root)',
        ['Run as root: upscope then reads the filters and runs the call if they let it'],
      );
    }
    const verdict = seccompVerdict(filters, {
      nr: number,
      arch: AUDIT_ARCH_X86_64,
      instructionPointer: after,
      args,
    });
    if (verdict === undefined) {
      throw refuse(
        'its seccomp filters hold an instruction upscope cannot run to see what they do',
      );
    }
    if (!allows(verdict)) {
      // mmap() or mprotect() of executable memory (the out-of-line page, the hooks).
      const exec =
        (number === SYSCALL.mmap || number === SYSCALL.mprotect) && ((args[2] ?? 0n) & 4n) !== 0n;
      throw refuse(
        `its seccomp filter would ${describeVerdict(verdict)} at that call`,
        exec
          ? ["The filter refuses executable memory, as systemd's MemoryDenyWriteExecute=yes does"]
          : [],
      );
    }
  }

  /**
   * Thread `tid`'s seccomp filters (PTRACE_SECCOMP_GET_FILTER), or undefined if they cannot
   * all be read.
   */
  #seccompFilters(tid: number): SockFilter[][] | undefined {
    const filters: SockFilter[][] = [];
    // The kernel takes at most 32,768 instructions on a thread's filters, a filter at least 1.
    for (let index = 0; index < 32_768; index++) {
      const count = this.#native.ptrace(PTRACE.PTRACE_SECCOMP_GET_FILTER, tid, BigInt(index), 0n);
      // ENOENT past the last one.
      if (count === -2) return filters;
      if (count <= 0) return undefined;
      const bytes = new Uint8Array(count * 8);
      const got = this.#native.ptraceBuffer(
        PTRACE.PTRACE_SECCOMP_GET_FILTER,
        tid,
        BigInt(index),
        bytes,
      );
      if (got !== count) return undefined;
      filters.push(decodeFilter(bytes));
    }
    return undefined;
  }

  /**
   * The address of a `syscall` instruction in the process's executable memory (the vDSO's,
   * or else the mapping around `near`, or else any), checked again before each use (a
   * breakpoint may have been placed on it since); undefined if none is found.
   */
  #syscallSite(near: bigint): bigint | undefined {
    const cached = this.#syscallAt;
    if (cached !== undefined) {
      try {
        const bytes = this.read(cached, 2);
        if (bytes[0] === SYSCALL_INSTRUCTION[0] && bytes[1] === SYSCALL_INSTRUCTION[1]) {
          return cached;
        }
      } catch (err) {
        if (!(err instanceof ProbeError)) throw err;
      }
      this.#syscallAt = undefined;
    }
    let maps: { start: bigint; end: bigint; name: string }[];
    try {
      maps = executableMappings(this.pid);
    } catch {
      return undefined;
    }
    const order = (m: { start: bigint; end: bigint; name: string }) =>
      m.name === '[vdso]' ? 0 : near >= m.start && near < m.end ? 1 : 2;
    maps.sort((a, b) => order(a) - order(b));
    for (const mapping of maps) {
      const found = this.#findSyscall(mapping.start, mapping.end);
      if (found !== undefined) {
        this.#syscallAt = found;
        return found;
      }
    }
    return undefined;
  }

  /** The first `syscall` instruction's bytes (0f 05) in [start, end), read in chunks. */
  #findSyscall(start: bigint, end: bigint): bigint | undefined {
    const CHUNK = 64 * 1024;
    for (let at = start; at < end; at += BigInt(CHUNK) - 1n) {
      const length = Number(end - at < BigInt(CHUNK) ? end - at : BigInt(CHUNK));
      if (length < 2) break;
      let bytes: Uint8Array;
      try {
        bytes = this.read(at, length);
      } catch (err) {
        if (err instanceof ProbeError) return undefined;
        throw err;
      }
      for (let i = bytes.indexOf(0x0f); i >= 0 && i + 1 < length; i = bytes.indexOf(0x0f, i + 1)) {
        if (bytes[i + 1] === 0x05) return at + BigInt(i);
      }
    }
    return undefined;
  }

  /** Block every signal of stopped thread `tid`; returns the mask to put back (undefined: unchanged). */
  #blockSignals(tid: number): Uint8Array | undefined {
    const mask = new Uint8Array(Number(SIGSET_BYTES));
    const native = this.#native;
    if (native.ptraceBuffer(PTRACE.PTRACE_GETSIGMASK, tid, SIGSET_BYTES, mask) < 0)
      return undefined;
    const all = new Uint8Array(mask.length).fill(0xff);
    if (native.ptraceBuffer(PTRACE.PTRACE_SETSIGMASK, tid, SIGSET_BYTES, all) < 0) return undefined;
    return mask;
  }

  /**
   * Wait for `tid`'s single-step trap; other threads' stops wait in the deferred list. A stop
   * of `tid` for a signal before the step ran (one that cannot be blocked) holds the signal in
   * `kept`, to be sent again after the call, and steps again. Returns the event of the
   * SIGTRAP stop that came (0: a step; PTRACE_EVENT_STOP: an interrupt that was pending).
   */
  #waitStep(tid: number, kept: number[]): number {
    for (;;) {
      const report = this.wait(true);
      if (report === undefined || report.kind !== 'stopped') {
        if (report !== undefined && report.tid !== tid) {
          this.#family.deferred.push(report);
          continue;
        }
        throw new ProbeError(
          'ERR_TARGET_GONE',
          `Cannot run a system call in process ${this.pid}: thread ${tid} ended`,
        );
      }
      if (report.tid !== tid) {
        // Another thread's stop, or a signal on its way: it waits until the call is done.
        this.#family.deferred.push(report);
        continue;
      }
      if (report.signal === SIGTRAP) return report.event;
      if (kept.length >= MAX_KEPT_SIGNALS) {
        throw new ProbeError(
          'ERR_INTERNAL',
          `Cannot run a system call in process ${this.pid}: thread ${tid} keeps stopping for signal ${report.signal}`,
        );
      }
      // Stopped for a signal (or a group stop) instead of stepping: the step is still to come.
      if (report.event === 0) kept.push(report.signal);
      this.step(tid);
    }
  }

  /** A stop seen while a system call was injected (in any process of the family). */
  takeDeferred(): StopReport | undefined {
    return this.#family.deferred.shift();
  }

  /** The first stop seen while a system call was injected that is `tid`'s, taken from the list. */
  takeDeferredOf(tid: number): StopReport | undefined {
    const deferred = this.#family.deferred;
    const at = deferred.findIndex((report) => report.tid === tid);
    return at < 0 ? undefined : deferred.splice(at, 1)[0];
  }

  /** Stop following this process with its family (it was detached from, or it ended). */
  leaveFamily(): void {
    const members = this.#family.members;
    const at = members.indexOf(this);
    if (at >= 0) members.splice(at, 1);
  }

  /**
   * Run the tracer's thread and every traced thread on one CPU (the tracer's): a stop and
   * the resume after it then switch between the two on that CPU, with no wake-up of another
   * one. Measured here: 20 µs a breakpoint hit pinned, 70 µs not. Threads made later inherit
   * it. detach() puts the masks back.
   */
  pin(): void {
    if (this.#affinity !== undefined) return;
    const native = this.#native;
    const cpu = native.currentCpu();
    const own = native.getAffinity(0);
    if (cpu < 0 || typeof own === 'number') return;
    const saved = new Map<number, Uint8Array>([[0, own]]);
    for (const tid of this.threads) {
      const mask = native.getAffinity(tid);
      if (typeof mask !== 'number') saved.set(tid, mask);
    }
    const one = new Uint8Array(own.length);
    one[cpu >> 3] = 1 << (cpu & 7);
    native.setAffinity(0, one);
    for (const tid of this.threads) native.setAffinity(tid, one);
    this.#affinity = saved;
  }

  /** Give the CPU masks pin() changed back (also done by detach() and kill()). */
  unpin(): void {
    const saved = this.#affinity;
    if (saved === undefined) return;
    this.#affinity = undefined;
    const native = this.#native;
    // The tracer's own (a forked child's tracee has none to give back).
    const tracer = saved.get(0);
    if (tracer !== undefined) native.setAffinity(0, tracer);
    // Threads made while pinned get what the process's main thread had.
    const main = saved.get(this.pid) ?? tracer!;
    for (const tid of this.threads) native.setAffinity(tid, saved.get(tid) ?? main);
  }

  /**
   * Let go of every thread (they must be stopped); the process runs on untraced. A thread
   * stopped for the delivery of a signal gets the one `signals` gives it (none by default).
   */
  detach(signals: ReadonlyMap<number, number> = new Map()): void {
    this.unpin();
    for (const tid of this.threads) {
      const signal = signals.get(tid) ?? 0;
      const result = this.#native.ptrace(PTRACE.PTRACE_DETACH, tid, 0n, BigInt(signal));
      if (result < 0) this.#detachRunning(tid, signal);
    }
    this.threads.clear();
    this.#closeMemory();
  }

  /**
   * PTRACE_DETACH refused thread `tid`: it was not in a stop (one the tracer counted as a
   * stop had been answered already). One that has ended is reaped (a traced thread's end
   * waits for its tracer); one running is stopped and let go now (left traced, it would wait
   * for this tracer for good at its next stop). Every breakpoint is out by now: a thread that
   * trapped on one meanwhile goes back onto the instruction, as if it had not.
   */
  #detachRunning(tid: number, signal: number): void {
    if (processEnded(tid)) {
      this.#native.waitpid(tid, this.#status, WAIT.WNOHANG | WAIT.__WALL | WNOTHREAD);
      return;
    }
    this.#native.ptrace(PTRACE.PTRACE_INTERRUPT, tid, 0n, 0n);
    for (;;) {
      const report = this.waitChild(tid);
      if (report.kind !== 'stopped') return;
      let deliver = signal;
      if (report.event === 0 && report.signal === SIGTRAP) {
        const regs = this.regs(tid);
        // An int3 still there is the program's own (it gets its signal), as is a trap that
        // no int3 made (si_code other than SI_KERNEL).
        if (this.#trapCode(tid) !== SI_KERNEL || this.read(regs.rip - 1n, 1)[0] === 0xcc) {
          deliver = SIGTRAP;
        } else {
          regs.rip -= 1n;
          this.setRegs(tid, regs);
        }
      } else if (report.event === 0) {
        deliver = report.signal;
      }
      const result = this.#native.ptrace(PTRACE.PTRACE_DETACH, tid, 0n, BigInt(deliver));
      if (result >= 0 || processEnded(tid)) return;
    }
  }

  /** The si_code of the signal thread `tid` is stopped with. */
  #trapCode(tid: number): number | undefined {
    const info = new Uint8Array(SIGINFO_BYTES);
    if (this.#native.ptraceBuffer(PTRACE.PTRACE_GETSIGINFO, tid, 0n, info) < 0) return undefined;
    return new DataView(info.buffer).getInt32(8, true);
  }

  /** End the process (SIGKILL) and reap what is left of it. */
  kill(): void {
    this.unpin();
    try {
      process.kill(this.pid, 'SIGKILL');
    } catch {
      // Already gone: what is left is reaped below.
    }
    while (this.threads.size > 0) {
      const report = this.wait(true);
      if (report === undefined) break;
      if (report.kind === 'stopped') this.#native.ptrace(PTRACE.PTRACE_CONT, report.tid, 0n, 0n);
    }
    this.#closeMemory();
  }

  #memory(): number {
    if (this.#mem === undefined) this.#openMemory();
    return this.#mem!;
  }

  #openMemory(): void {
    this.#closeMemory();
    // A new image (an exec): its code is elsewhere.
    this.#syscallAt = undefined;
    try {
      this.#mem = openSync(`/proc/${this.pid}/mem`, 'r+');
    } catch (cause) {
      throw new ProbeError(
        'ERR_PROCESS_ACCESS',
        `Cannot open the memory of process ${this.pid}: ${(cause as Error).message}`,
        { cause },
      );
    }
  }

  #closeMemory(): void {
    if (this.#mem === undefined) return;
    try {
      closeSync(this.#mem);
    } catch {
      // Already closed.
    }
    this.#mem = undefined;
  }

  #memoryError(what: string, vaddr: bigint, length: number, cause: unknown): ProbeError {
    const why = cause instanceof Error ? cause.message : 'end of the mapping';
    return new ProbeError(
      'ERR_TARGET_MEMORY',
      `Cannot ${what} ${length} bytes at 0x${vaddr.toString(16)} in process ${this.pid}: ${why}`,
      { cause },
    );
  }

  #check(result: number, what: string): void {
    if (result < 0) {
      throw new ProbeError(
        'ERR_TARGET_GONE',
        `Cannot ${what} of process ${this.pid}: ptrace: ${describeErrno(result)}`,
      );
    }
  }
}

const SYSCALL_INSTRUCTION = new Uint8Array([0x0f, 0x05]);
/** The size of a siginfo_t. */
const SIGINFO_BYTES = 128;
/** The kernel's sigset_t (64 signals), as PTRACE_GETSIGMASK and _SETSIGMASK take it. */
const SIGSET_BYTES = 8n;
/** Signals a thread may stop for while one injected system call runs, before that is an error. */
const MAX_KEPT_SIGNALS = 16;

/**
 * The ptrace events whose stop has a message (PTRACE_GETEVENTMSG): the new thread or child's
 * id, the former id of a thread that execs. Not PTRACE_EVENT_STOP (an interrupt or a group
 * stop).
 */
const MESSAGE_EVENTS: ReadonlySet<number> = new Set([
  PTRACE_EVENT.PTRACE_EVENT_CLONE,
  PTRACE_EVENT.PTRACE_EVENT_FORK,
  PTRACE_EVENT.PTRACE_EVENT_VFORK,
  PTRACE_EVENT.PTRACE_EVENT_VFORK_DONE,
  PTRACE_EVENT.PTRACE_EVENT_EXEC,
]);

/**
 * Whether thread `tid` is no longer in the ptrace-stop the tracer thought it was in: gone, a
 * zombie, or running on its way out (a SIGKILL takes a thread out of its stop at once). Its
 * next report, an exit, comes through the wait. False when its state cannot be read.
 */
export function leftStop(tid: number): boolean {
  try {
    return procState(tid) !== 't';
  } catch {
    return false;
  }
}

/**
 * Whether thread `tid` cannot report anything to its tracer by itself now: it is in a
 * ptrace-stop (state t), a zombie or gone. Only the tracer can make such a thread run again.
 */
export function cannotReport(tid: number): boolean {
  let state: string | undefined;
  try {
    state = procState(tid);
  } catch {
    return true;
  }
  return state === undefined || state === 't' || state === 'Z' || state === 'X';
}

/**
 * Where a thread blocked in a system call will go on (its user pc, the last field of
 * /proc/TID/syscall), for a thread that cannot be stopped to read its registers; undefined
 * when it is not in one or is gone.
 */
export function syscallPc(tid: number): bigint | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${tid}/syscall`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = text.trim().split(' ');
  return fields.length === 9 ? BigInt(fields[8]!) : undefined;
}

/** The executable mappings of a process, from /proc/PID/maps. */
function executableMappings(pid: number): { start: bigint; end: bigint; name: string }[] {
  const found: { start: bigint; end: bigint; name: string }[] = [];
  for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
    const fields = line.split(/\s+/);
    if (fields.length < 5 || fields[1]?.[2] !== 'x' || fields[5] === '[vsyscall]') continue;
    const [start, end] = fields[0]!.split('-');
    found.push({
      start: BigInt(`0x${start}`),
      end: BigInt(`0x${end}`),
      name: fields.slice(5).join(' '),
    });
  }
  return found;
}

/** The threads of a process, from /proc. */
function listThreads(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number);
  } catch (cause) {
    throw new ProbeError('ERR_PROCESS_NOT_FOUND', `Cannot find process ${pid}: no such process`, {
      cause,
      hints: ['List running processes with: ps -e'],
    });
  }
}

const EPERM = 1;

/** The process a thread belongs to (Tgid in /proc/TID/status), undefined when it is gone. */
function threadGroupOf(tid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${tid}/status`, 'utf8');
    const tgid = Number(/^Tgid:\s+(\d+)$/m.exec(status)?.[1]);
    return Number.isInteger(tgid) ? tgid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * PTRACE_SEIZE of thread `tid` of process `pid` failed with `-errno` `result`: say why, with
 * what to do about that cause only (a process held by another tracer is not a matter of
 * privileges, nor is a kernel thread).
 */
function seizeError(pid: number, tid: number, result: number): ProbeError {
  const what = `Cannot trace process ${pid} (thread ${tid})`;
  if (-result !== EPERM) {
    return new ProbeError('ERR_PROCESS_ACCESS', `${what}: ptrace: ${describeErrno(result)}`);
  }
  const refusal = ptraceRefusal(tid);
  switch (refusal.kind) {
    case 'traced': {
      const { pid: tracer, comm } = refusal.tracer;
      return new ProbeError(
        'ERR_ALREADY_TRACED',
        `${what}: it is already traced by process ${tracer} (${quote(comm)}), and a process can have only one tracer`,
        {
          details: { tracerPid: tracer, tracerComm: comm },
          hints: [
            `Detach ${comm} (process ${tracer}) from it first (gdb: detach; strace: Ctrl-C), then run upscope again`,
            'Or use a kernel engine, which does not ptrace (root): --engine bpf or --engine tracefs',
          ],
        },
      );
    }
    case 'kernel-thread':
      return kernelThreadError(what);
    case 'yama-admin-only':
      return new ProbeError(
        'ERR_PROCESS_ACCESS',
        `${what}: ptrace: EPERM: /proc/sys/kernel/yama/ptrace_scope is 3, which forbids attaching to any process, even as root`,
        {
          hints: [
            'Start the program under upscope instead (-c), or use a kernel engine (root): --engine bpf',
          ],
        },
      );
    case 'privileges':
      return new ProbeError('ERR_PROCESS_ACCESS', `${what}: ptrace: ${describeErrno(result)}`, {
        hints: [
          'Trace your own processes, or run as root (CAP_SYS_PTRACE)',
          ...(refusal.yamaScope !== undefined && refusal.yamaScope > 0
            ? [
                `With /proc/sys/kernel/yama/ptrace_scope at ${refusal.yamaScope}, only descendants can be traced: start the program with upscope (-c)`,
              ]
            : []),
        ],
      });
    case 'unknown':
      return new ProbeError(
        'ERR_PROCESS_ACCESS',
        `${what}: ptrace: ${describeErrno(result)}, although upscope has CAP_SYS_PTRACE (a security module such as SELinux or AppArmor may forbid it)`,
      );
  }
}

/** Names of the system calls upscope runs in a process, for messages. */
const SYSCALL_NAMES = new Map<number, string>(
  Object.entries(SYSCALL).map(([name, number]) => [number, name]),
);

/**
 * A thread's seccomp mode (0 none, 1 strict, 2 filters) and how many filters it has, from its
 * /proc status file; undefined if it cannot be read.
 */
function seccompMode(status: string): { mode: number; filters: number } | undefined {
  try {
    const text = readFileSync(status, 'utf8');
    const mode = /^Seccomp:\s+(\d+)$/m.exec(text)?.[1];
    const filters = /^Seccomp_filters:\s+(\d+)$/m.exec(text)?.[1];
    return mode === undefined ? undefined : { mode: Number(mode), filters: Number(filters ?? -1) };
  } catch {
    return undefined;
  }
}
