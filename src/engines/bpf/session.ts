import { ProbeError } from '../../errors/index.js';
import { pausePoint } from '../../host/index.js';
import { ClosingLater, closeTogether, watchRemoval } from '../removal.js';
import type { Subprogram } from './asm.js';
import { type FollowSpec, followProcesses } from './follow.js';
import type { Insn } from './insn.js';
import {
  BpfMap,
  closeFd,
  linkPerfEvent,
  linkUprobeMulti,
  linkUprobeMultiAsync,
  loadProgram,
  type MapSpec,
  type MultiLinkSpec,
  multiLinkError,
  openRawTracepoint,
  openUprobeEvent,
  privilegeError,
  type UprobePmu,
  uprobePmu,
} from './kernel.js';
import { FollowedScope } from './scope.js';
import { fitsSessionCookie, sessionCookie } from './stream-programs.js';

/** One uprobe to attach: where, which way, and the cookie its handler reads (the probe index). */
export interface BpfProbe {
  readonly path: string;
  readonly offset: bigint;
  /** `session`: an entry and a return probe at one place, made one (see pairSessions()). */
  readonly kind: 'entry' | 'return' | 'session';
  readonly cookie: number | bigint;
  readonly refCtrOffset?: bigint | undefined;
  /**
   * A return caught at an exit: first in its file's link, so placed before the entries there
   * and removed before them (see #groups()).
   */
  readonly early?: boolean | undefined;
  /** A session's entry and return probes, attached apart where no session link is made. */
  readonly parts?: readonly [BpfProbe, BpfProbe] | undefined;
}

/**
 * How probes are attached: `multi` through uprobe_multi links (one per file and direction,
 * kernel 6.6+), `perf` one perf event and link per probe, `auto` multi with a fallback to
 * perf where the kernel refuses it.
 */
export type AttachMode = 'auto' | 'multi' | 'perf';

export interface AttachReport {
  readonly probes: number;
  /** Probes attached through uprobe_multi links, and through perf events. */
  readonly multi: number;
  readonly perf: number;
  /** Why uprobe_multi was not used, when it was not. */
  readonly fallbackReason: string | undefined;
  readonly milliseconds: number;
}

export interface AttachOptions {
  /** Only this process (its breakpoints are placed in it alone). */
  readonly pid?: number | undefined;
  readonly mode?: AttachMode | undefined;
  /** What the handlers are for, in errors. */
  readonly purpose: string;
}

/** A handler's code: instructions, with its subprograms' list when it has any. */
export type BuiltProgram =
  | Insn[]
  | { readonly insns: Insn[]; readonly subprograms: readonly Subprogram[] };

export type Programs = Readonly<Record<'entry' | 'return', (() => BuiltProgram) | undefined>> & {
  /**
   * The handler of uprobe session links, given, where the entry and return programs are one,
   * to pair an entry and a return probe at the same place into one session probe (see
   * pairSessions()); it throws ProbeError where the kernel has no sessions.
   */
  readonly session?: (() => BuiltProgram) | undefined;
};

/** Where the copy of a probe goes in the file now at its file's path (replaced on disk). */
export interface MovedProbe {
  readonly path: string;
  readonly offset: bigint;
  readonly refCtrOffset?: bigint | undefined;
}

/**
 * For a probe's file and offset as first attached: where its copy goes in a new file at that
 * path, or undefined for none.
 */
export type MoveProbe = (path: string, offset: bigint) => MovedProbe | undefined;

const EPERM = 1;
const ESRCH = 3;
const EACCES = 13;

/** How far attaching got: counts by path, and whether uprobe_multi still works. */
interface LinkState {
  multi: number;
  perf: number;
  fallbackReason: string | undefined;
  multiWorks: boolean;
}

function linkState(options: AttachOptions): LinkState {
  return {
    multi: 0,
    perf: 0,
    fallbackReason: undefined,
    multiWorks: (options.mode ?? 'auto') !== 'perf',
  };
}

function attachReport(probes: number, state: LinkState, began: number): AttachReport {
  return {
    probes,
    multi: state.multi,
    perf: state.perf,
    fallbackReason: state.fallbackReason,
    milliseconds: performance.now() - began,
  };
}

/** The uprobe_multi link of a group (one file and direction) for process `pid`. */
function multiLinkSpec(group: readonly BpfProbe[], pid: number | undefined): MultiLinkSpec {
  const semaphores = group.some((p) => p.refCtrOffset !== undefined);
  return {
    path: group[0]!.path,
    offsets: group.map((p) => p.offset),
    cookies: group.map((p) => p.cookie),
    refCtrOffsets: semaphores ? group.map((p) => p.refCtrOffset ?? 0n) : undefined,
    retprobe: group[0]!.kind === 'return',
    session: group[0]!.kind === 'session',
    pid,
  };
}

/**
 * The probes with each entry probe and return probe at the same place (a call's entry, where
 * the return's trampoline is set) made one uprobe session probe: the kernel runs its handler
 * at the entry and at that call's return, on one uprobe (one link for both, not one each).
 * Only where exactly one of each is there, without a semaphore, and their cookies fit one
 * (see sessionCookie()). The session takes the return's place in the order (see #groups()).
 */
export function pairSessions(probes: readonly BpfProbe[]): readonly BpfProbe[] {
  // Most patterns have no return through the trampoline (C++, Rust, Go: exits): no key made.
  if (!probes.some((probe) => probe.kind === 'return')) return probes;
  /** Per file, per offset (a number: no string per probe): the probes there, by index. */
  const at = new Map<string, Map<number, { entry?: number; ret?: number; more?: boolean }>>();
  probes.forEach((probe, index) => {
    // An early entry probe is a return caught at an exit (see BpfProbe.early): not a call's entry.
    if (probe.refCtrOffset !== undefined || (probe.kind === 'entry' && probe.early === true))
      return;
    let file = at.get(probe.path);
    if (file === undefined) {
      file = new Map();
      at.set(probe.path, file);
    }
    const offset = Number(probe.offset);
    const here = file.get(offset) ?? {};
    file.set(offset, here);
    const side = probe.kind === 'entry' ? 'entry' : probe.kind === 'return' ? 'ret' : undefined;
    if (side === undefined || here[side] !== undefined) here.more = true;
    else here[side] = index;
  });
  const paired = new Map<number, BpfProbe>();
  const taken = new Set<number>();
  for (const file of at.values()) {
    for (const { entry, ret, more } of file.values()) {
      if (more === true || entry === undefined || ret === undefined) continue;
      const e = probes[entry]!;
      const r = probes[ret]!;
      if (typeof e.cookie !== 'number' || typeof r.cookie !== 'number') continue;
      if (!fitsSessionCookie(e.cookie) || !fitsSessionCookie(r.cookie)) continue;
      paired.set(ret, {
        path: r.path,
        offset: r.offset,
        kind: 'session',
        cookie: sessionCookie(e.cookie, r.cookie),
        parts: [e, r],
      });
      taken.add(entry);
    }
  }
  if (paired.size === 0) return probes;
  const out: BpfProbe[] = [];
  probes.forEach((probe, index) => {
    if (!taken.has(index)) out.push(paired.get(index) ?? probe);
  });
  return out;
}

/**
 * The kernel objects of one aggregation or stream: maps, programs, perf events and links, all
 * file descriptors of this process, so that the kernel releases them even if the process is
 * killed. close() releases them at once, links first (no handler runs after it).
 */
export class BpfSession {
  readonly #maps: BpfMap[] = [];
  readonly #programs = new Map<string, number>();
  readonly #links: number[] = [];
  /** The links of tracepoint handlers (forks and exits): removed after every uprobe's. */
  readonly #tracepointLinks: number[] = [];
  /** The links and perf events of each process added by addProcess() (closed as it ends). */
  readonly #processLinks = new Map<number, number[]>();
  /** The uprobe_multi links of uretprobes, in #links or #processLinks: closed together. */
  readonly #returnLinks = new Set<number>();
  /** The links of processes that ended, closed meanwhile on a thread of their own. */
  readonly #closing = new ClosingLater();
  /** The groups attached to the followed processes one by one, for the processes added later. */
  readonly #scopedGroups: {
    readonly group: readonly BpfProbe[];
    readonly programs: Programs;
    readonly options: AttachOptions;
  }[] = [];
  #pmu: UprobePmu | undefined;
  #scope: FollowedScope | undefined;
  /** The probes attached by attach() (not copies), with their handlers: what attachMoved() copies. */
  readonly #originals: {
    readonly probes: readonly BpfProbe[];
    readonly programs: Programs;
    readonly options: AttachOptions;
  }[] = [];
  #detached = false;
  #closed = false;

  map(spec: MapSpec): BpfMap {
    const map = BpfMap.create(spec);
    this.#maps.push(map);
    return map;
  }

  #program(kind: BpfProbe['kind'], multi: boolean, programs: Programs, purpose: string): number {
    const key = `${kind}:${multi}`;
    let fd = this.#programs.get(key);
    if (fd === undefined) {
      const build = programs[kind];
      if (build === undefined) throw new Error(`no ${kind} handler`);
      const built = build();
      const as = kind === 'session' ? 'session' : multi;
      fd = Array.isArray(built)
        ? loadProgram(built, { name: `upscope_${kind}`, purpose, multi: as })
        : loadProgram(built.insns, {
            name: `upscope_${kind}`,
            purpose,
            multi: as,
            subprograms: built.subprograms,
          });
      this.#programs.set(key, fd);
    }
    return fd;
  }

  /**
   * Attach every probe, in order of groups (a group is one file and direction, in the order
   * of their first probe), with the handler for its direction.
   */
  attach(probes: readonly BpfProbe[], programs: Programs, options: AttachOptions): AttachReport {
    this.#originals.push({ probes, programs, options });
    const report = this.#attach(probes, programs, options);
    this.#scope?.start(this);
    return report;
  }

  /**
   * attach(), with the kernel's uprobe_multi links made on another thread: `whileLinking` runs
   * here while the kernel places the first link's probes (tens of thousands take it a few
   * hundred milliseconds), or once everything is attached when no link is made that way. It
   * runs once, even when attaching fails.
   */
  async attachAsync(
    probes: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    whileLinking: () => void,
  ): Promise<AttachReport> {
    this.#originals.push({ probes, programs, options });
    let ran = false;
    const meanwhile = () => {
      if (ran) return;
      ran = true;
      whileLinking();
    };
    try {
      const report = await this.#attachGroups(probes, programs, options, meanwhile);
      this.#scope?.start(this);
      return report;
    } finally {
      meanwhile();
    }
  }

  /**
   * Follow the processes of `spec` (before attach()): the map of followed processes that the
   * handlers look up, kept in the kernel by the sched tracepoints' handlers, and the links of
   * files other processes map too made for each followed process alone (see FollowedScope).
   * Throws as followProcesses() does, before anything is attached.
   */
  follow(spec: FollowSpec): BpfMap {
    const scope = new FollowedScope(spec);
    try {
      const followed = followProcesses(this, spec, scope.ring);
      this.#scope = scope;
      return followed;
    } catch (err) {
      scope.close();
      throw err;
    }
  }

  /**
   * Attach a copy of every probe attach() attached whose file was replaced on disk (a new
   * inode at its path, which the kernel's uprobes, keyed by inode, do not see), where `move`
   * says, with the same handler and cookie: its hits count as the original's. Copies of
   * copies are never made: each new file gets one copy of each original. Nothing after
   * detach(). Returns how many probes were attached.
   */
  attachMoved(move: MoveProbe): number {
    if (this.#detached || this.#closed) return 0;
    let attached = 0;
    for (const { probes, programs, options } of this.#originals) {
      const copies: BpfProbe[] = [];
      for (const probe of probes) {
        const to = move(probe.path, probe.offset);
        if (to === undefined) continue;
        copies.push({
          ...probe,
          path: to.path,
          offset: to.offset,
          refCtrOffset: probe.refCtrOffset === undefined ? undefined : to.refCtrOffset,
        });
      }
      if (copies.length === 0) continue;
      attached += this.#attach(copies, programs, options).probes;
    }
    return attached;
  }

  #attach(probes: readonly BpfProbe[], programs: Programs, options: AttachOptions): AttachReport {
    const began = performance.now();
    const state = linkState(options);
    const linked = this.#sessions(probes, programs, options, state);
    for (const { group, pid, into } of this.#groups(linked, programs, options)) {
      this.#link(group, programs, options, pid, state, into);
    }
    return attachReport(probes.length, state, began);
  }

  /** #attach() with each uprobe_multi link made on another thread (see attachAsync()). */
  async #attachGroups(
    probes: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    whileLinking: () => void,
  ): Promise<AttachReport> {
    const began = performance.now();
    const state = linkState(options);
    const linked = this.#sessions(probes, programs, options, state);
    for (const { group, pid, into } of this.#groups(linked, programs, options)) {
      await this.#linkAsync(group, programs, options, pid, state, into, whileLinking);
    }
    return attachReport(probes.length, state, began);
  }

  /**
   * The probes as linked: with uprobe sessions paired (pairSessions()) where the programs have
   * a session handler and the kernel loads it (kernel 6.13+); else as given (what the kernel
   * takes is for `upscope doctor` to say).
   */
  #sessions(
    probes: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    state: LinkState,
  ): readonly BpfProbe[] {
    if (programs.session === undefined || !state.multiWorks) return probes;
    const paired = pairSessions(probes);
    if (paired === probes) return probes;
    try {
      this.#program('session', true, programs, options.purpose);
      return paired;
    } catch (err) {
      if (err instanceof ProbeError && err.code === 'ERR_PRIVILEGES') throw err;
      return probes;
    }
  }

  /**
   * The groups to link (a group is one file and direction, in the order of their first
   * probe), each with the process it is scoped to and where its links go: the links of a
   * file other processes map too are made for each followed process alone.
   */
  #groups(
    probes: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
  ): { group: BpfProbe[]; pid: number | undefined; into: number[] }[] {
    // One link per file and direction, a file's returns caught at exits (early probes) first in
    // its entries' link: the kernel places a link's probes in their order, and removes them in
    // it too. One link of node's 119,751 probes took 380-443 ms where the exits' link and the
    // entries' one took 473-534 ms together.
    const groups = new Map<string, { early: BpfProbe[]; others: BpfProbe[] }>();
    // Probes come in runs of one file and direction: a key made per run, not per probe.
    let last: BpfProbe | undefined;
    let run: BpfProbe[] | undefined;
    for (const probe of probes) {
      if (
        last === undefined ||
        probe.kind !== last.kind ||
        probe.path !== last.path ||
        probe.early !== last.early
      ) {
        const key = `${probe.kind}\u0000${probe.path}`;
        let group = groups.get(key);
        if (group === undefined) {
          group = { early: [], others: [] };
          groups.set(key, group);
        }
        run = probe.early === true ? group.early : group.others;
      }
      run!.push(probe);
      last = probe;
    }
    // Returns first (uretprobes, and the returns caught at exits, first in their link): the
    // kernel places a link's probes one by one, while a process (-p) runs on. A call entered
    // meanwhile is seen with its return, or its return alone (a call begun before the first
    // probe), never its entry alone, which would take its return for missed and its frame
    // for unwound. detach() removes them first too (see there).
    const returns = (group: readonly BpfProbe[]) =>
      group[0]!.kind !== 'entry' || group[0]!.early === true;
    const ordered = [...groups.values()]
      .map(({ early, others }) => early.concat(others))
      .sort((a, b) => Number(returns(b)) - Number(returns(a)));
    const links: { group: BpfProbe[]; pid: number | undefined; into: number[] }[] = [];
    for (const group of ordered) {
      const scope = options.pid === undefined ? this.#scope : undefined;
      if (scope === undefined || !scope.scoped(group[0]!.path)) {
        links.push({ group, pid: options.pid, into: this.#links });
        continue;
      }
      this.#scopedGroups.push({ group, programs, options });
      for (const pid of scope.pids()) links.push({ group, pid, into: this.#linksOf(pid) });
    }
    return links;
  }

  #linksOf(pid: number): number[] {
    let links = this.#processLinks.get(pid);
    if (links === undefined) {
      links = [];
      this.#processLinks.set(pid, links);
    }
    return links;
  }

  /**
   * Attach one group (one file and direction) for process `pid` (every process: undefined),
   * its links and perf events pushed to `into`. Returns false when the process has ended.
   */
  #link(
    group: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    pid: number | undefined,
    state: LinkState,
    into: number[],
  ): boolean {
    const program = this.#multiProgram(group, programs, options, state);
    if (program !== undefined) {
      const linked = this.#multiLinked(
        linkUprobeMulti(program, multiLinkSpec(group, pid)),
        group,
        options,
        pid,
        state,
        into,
      );
      if (linked !== undefined) return linked;
    }
    return this.#perfLink(group, programs, options, pid, state, into);
  }

  /** #link() with the uprobe_multi link made on another thread, `whileLinking` run meanwhile. */
  async #linkAsync(
    group: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    pid: number | undefined,
    state: LinkState,
    into: number[],
    whileLinking: () => void,
  ): Promise<boolean> {
    const program = this.#multiProgram(group, programs, options, state);
    if (program !== undefined) {
      const linking = linkUprobeMultiAsync(program, multiLinkSpec(group, pid));
      whileLinking();
      const linked = this.#multiLinked(await linking, group, options, pid, state, into);
      if (linked !== undefined) return linked;
    }
    return this.#perfLink(group, programs, options, pid, state, into);
  }

  /** The uprobe_multi program of the group's direction, or undefined to attach perf events. */
  #multiProgram(
    group: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    state: LinkState,
  ): number | undefined {
    if (!state.multiWorks) return undefined;
    try {
      return this.#program(group[0]!.kind, true, programs, options.purpose);
    } catch (err) {
      if (
        (options.mode ?? 'auto') === 'multi' ||
        !(err instanceof ProbeError) ||
        err.code === 'ERR_PRIVILEGES'
      ) {
        throw err;
      }
      state.multiWorks = false;
      state.fallbackReason = `the kernel does not load uprobe_multi programs (${err.message})`;
      return undefined;
    }
  }

  /**
   * What a uprobe_multi link's result means: true once attached, false when the process has
   * ended, undefined to attach perf events instead; throws what cannot be fallen back from.
   */
  #multiLinked(
    link: number,
    group: readonly BpfProbe[],
    options: AttachOptions,
    pid: number | undefined,
    state: LinkState,
    into: number[],
  ): boolean | undefined {
    const { path } = group[0]!;
    if (link >= 0) {
      into.push(link);
      if (group[0]!.kind !== 'entry') this.#returnLinks.add(link);
      state.multi += group[0]!.kind === 'session' ? group.length * 2 : group.length;
      // Fault tests stop here: programs loaded, the first link attached.
      pausePoint('attaching');
      return true;
    }
    if (-link === ESRCH && pid !== undefined && this.#processLinks.has(pid)) return false;
    if (-link === EPERM || -link === EACCES) {
      throw privilegeError(`attach uprobes to ${path}`, -link);
    }
    if ((options.mode ?? 'auto') === 'multi') throw multiLinkError(path, link);
    // One probe the kernel refuses (or no uprobe_multi at all): the perf path names it.
    state.fallbackReason = multiLinkError(path, link).message;
    return undefined;
  }

  /** A perf event and a link of it for each probe of the group. */
  #perfLink(
    group: readonly BpfProbe[],
    programs: Programs,
    options: AttachOptions,
    pid: number | undefined,
    state: LinkState,
    into: number[],
  ): boolean {
    this.#pmu ??= uprobePmu();
    // A session's parts apart: the returns first, as their groups are (see #groups()).
    const probes = group.some((probe) => probe.parts !== undefined)
      ? [...group.map((p) => p.parts?.[1] ?? p), ...group.flatMap((p) => p.parts?.[0] ?? [])]
      : group;
    for (const probe of probes) {
      const program = this.#program(probe.kind, false, programs, options.purpose);
      const event = openUprobeEvent(this.#pmu, {
        path: probe.path,
        offset: probe.offset,
        retprobe: probe.kind === 'return',
        refCtrOffset: probe.refCtrOffset,
        pid,
      });
      into.push(event);
      into.push(linkPerfEvent(program, event, BigInt(probe.cookie)));
      state.perf++;
      pausePoint('attaching');
    }
    return true;
  }

  /**
   * Put the probes that go in followed processes one by one (see ProcessScope) in process
   * `pid` too: a child the fork tracepoint saw. Nothing after detach(), nor for a process
   * that was added already. False when the process ended before its links were placed.
   */
  addProcess(pid: number): boolean {
    if (this.#detached || this.#closed || this.#processLinks.has(pid)) return true;
    const into = this.#linksOf(pid);
    const state: LinkState = {
      multi: 0,
      perf: 0,
      fallbackReason: undefined,
      multiWorks: true,
    };
    for (const { group, programs, options } of this.#scopedGroups) {
      state.multiWorks = (options.mode ?? 'auto') !== 'perf';
      try {
        if (!this.#link(group, programs, options, pid, state, into)) return false;
      } catch (err) {
        // A process that ended while its links were made (its perf events refuse it).
        if (err instanceof ProbeError && err.code === 'ERR_PROCESS_NOT_FOUND') return false;
        throw err;
      }
    }
    return true;
  }

  /**
   * Release the links of a process added by addProcess() or scoped at attach(), as it ends:
   * on a thread of their own, as the run goes on. Removing a link waits on the return
   * trampolines of every process (see detach()): a process that went on in a function that
   * never returns, calling functions with return probes, would stop the run until it ended.
   * detach() waits until they are closed.
   */
  removeProcess(pid: number): void {
    const links = this.#processLinks.get(pid);
    if (links === undefined) return;
    this.#processLinks.delete(pid);
    for (const fd of links) this.#returnLinks.delete(fd);
    this.#closing.close(links);
  }

  /**
   * Close the uretprobe links among `links` together (see closeTogether()), taking them out;
   * how many there were.
   */
  #closeReturns(...lists: number[][]): number {
    const returns: number[] = [];
    for (const links of lists) {
      for (let i = links.length - 1; i >= 0; i--) {
        if (!this.#returnLinks.delete(links[i]!)) continue;
        returns.push(links[i]!);
        links.splice(i, 1);
      }
    }
    closeTogether(returns);
    return returns.length;
  }

  /**
   * Run `insns` (a raw tracepoint's handler: its context is the tracepoint's arguments) at
   * every hit of the tracepoint `name` (`sched_process_fork`), until close().
   */
  attachRawTracepoint(name: string, insns: Insn[]): void {
    const program = loadProgram(insns, {
      name: 'upscope_sched',
      purpose: `the handler of tracepoint sched:${name}`,
      tracepoint: 'raw',
    });
    // A key of its own: another handler of the same tracepoint keeps its program (closed too).
    this.#programs.set(`tracepoint:${name}:${this.#tracepointLinks.length}`, program);
    this.#tracepointLinks.push(openRawTracepoint(program, name));
  }

  /**
   * Detach every probe (the maps stay readable until close()), returns first, as they were
   * made. Removing a link waits until no return trampoline the kernel set holds on to its
   * uprobes (synchronize_srcu on uretprobes_srcu); a call that has not returned holds on
   * until a timer lets go of it, and the kernel puts that timer off at every trampoline it
   * sets. So an entry link removed while a return link stays made the removal wait as long
   * as a program in a function that never returns (main) went on calling probed functions:
   * forever, for a hot loop. With the returns gone first, no trampoline is set meanwhile.
   * The uretprobe links of several files or processes are closed together, every process's
   * at once: one by one, each would wait on the others' trampolines. (What a consumer then
   * sees of the entries alone, it leaves out: see BpfStream.stop().)
   */
  detach(): void {
    this.#detached = true;
    watchRemoval(this.#returnLinks.size > 0 || this.#processLinks.size > 0, (step) => {
      // Fault tests stop at the first removal: the returns (a uprobe session's entries with
      // them), or else one link; the others still attached.
      const returns = this.#closeReturns(this.#links, ...this.#processLinks.values());
      step();
      if (returns > 0) pausePoint('detaching');
      for (const fd of this.#links.splice(0)) {
        closeFd(fd);
        step();
        pausePoint('detaching');
      }
      this.#scope?.stop();
      for (const links of this.#processLinks.values()) {
        for (const fd of links) {
          closeFd(fd);
          step();
        }
      }
      this.#processLinks.clear();
      this.#closing.wait();
    });
    // The tracepoints' handlers stay until close() (raw tracepoints: removed without a wait;
    // as perf events they waited out RCU grace periods, 150-250 ms a run): what they see after
    // the stream's cut (see BpfStream.stop()) is left out, and no link is made for a process
    // added meanwhile (see addProcess()).
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.detach();
    for (const fd of this.#tracepointLinks.splice(0)) closeFd(fd);
    for (const fd of this.#programs.values()) closeFd(fd);
    this.#programs.clear();
    for (const map of this.#maps.splice(0)) map.close();
    this.#scope?.close();
  }
}
