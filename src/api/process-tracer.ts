import { readlinkSync } from 'node:fs';
import {
  addInlineAggregates,
  type ForeignBreakpointNotice,
  type HitContext,
  type HookTimeNs,
  type InlineAggregate,
  type InlineReads,
  type InlineValue,
  type ProbeEventKind,
  type ProbesOptions,
  ProcessProbes,
  RETURN_LIMITS,
  type ReturnSites,
  type SpawnOptions,
} from '../engines/index.js';
import { ProbeError, quote } from '../errors/index.js';
import { descendantsOf } from '../host/index.js';
import {
  excludeSites,
  type OptionFetch,
  type ProbeSite,
  planProbesSync,
  processObjects,
  type ReturnProbeMode,
  runPlanOptions,
  type SkippedSite,
  type TargetFile,
} from '../plan/index.js';
import {
  fileOffsetToRuntime,
  type MappedObject,
  R_STATE_OFFSET,
  rendezvousState,
} from '../symbols/index.js';
import { injectHookOf, inlineReadsOf } from './inject-plan.js';
import { findLoaderRendezvous, type LoaderRendezvous } from './loader-rendezvous.js';
import { probeName } from './tracer.js';

export type { HitContext, ProbeEventKind } from '../engines/index.js';

/** What to be told of, where, and by which handler (seed 002's `struct uprobe`). */
export interface ProcessRegistration {
  readonly id: string;
  readonly event: ProbeEventKind;
  /**
   * For breakpoint and return: a runtime address, or a probe spec (`./app:parse`,
   * `libc:malloc`, `./app:main+0x1a`) resolved in the process. A spec's sites in a library
   * not loaded yet are placed when the dynamic loader maps it (in each followed process that
   * maps it), removed when it is closed, and placed again when it is opened again.
   */
  readonly where?: bigint | string | undefined;
  /**
   * Runs while the thread is stopped; without one, poll() returns the event. With a spec,
   * `site` is the resolved site that fired.
   */
  readonly handler?: ((hit: HitContext, site: ProbeSite | undefined) => void) | undefined;
  readonly filter?: ((hit: HitContext) => boolean) | undefined;
  /**
   * For a return: whether the call is wanted, decided at the function's entry (its arguments
   * are there; at the return their registers hold other values). A call it refuses gives no
   * return event. With a spec, `site` is the resolved site.
   */
  readonly entryFilter?: ((hit: HitContext, site: ProbeSite | undefined) => boolean) | undefined;
  /** Allow raw addresses no symbol covers, in specs. */
  readonly unsafe?: boolean | undefined;
  /** Directories searched for separate debug files (FILE:LINE specs), before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
  /**
   * Fail when a spec's pattern matches a function that cannot be probed, instead of skipping
   * it (skippedOf() lists those skipped).
   */
  readonly strict?: boolean | undefined;
  /**
   * For a return: how it is caught (default `auto`): `sites` breaks at each instruction the
   * function leaves by, `trampoline` swaps its return address (see ReturnProbeMode).
   */
  readonly returnProbes?: ReturnProbeMode | undefined;
  /**
   * For a return caught at the function's exits: also call the handler (or return from
   * poll()) for the calls an unwind (an exception, a Go panic, pthread_cancel, a longjmp) or
   * their thread's end took away, with `exit` 'unwind' and no `retval` (default false).
   */
  readonly unwinds?: boolean | undefined;
  /**
   * With `unwinds`: the calls still open when their thread ends are closed without a call,
   * not taken for unwound (a recording's tree closes them as not returned).
   */
  readonly openAtThreadEnd?: boolean | undefined;
  /** For a spec: fetches given apart from it, lowered at each site (ProbeSite.optionFetches). */
  readonly optionFetches?: readonly OptionFetch[] | undefined;
  /** For a spec: leave out the functions whose name matches one of these globs. */
  readonly exclude?: readonly string[] | undefined;
  /**
   * Takes the hits of inline hooks (the inject engine) instead of `handler`, by their kind,
   * thread and time alone: read bare (no registers, memory or stack), several times faster
   * (a recording of calls). Not with `filter`.
   */
  readonly bareHandler?:
    | ((
        event: 'breakpoint' | 'return',
        tid: number,
        timeNs: HookTimeNs,
        site: ProbeSite | undefined,
      ) => void)
    | undefined;
  /**
   * With inline hooks (the inject engine): the sites a hook serves are aggregated in the
   * process instead of delivered, their entries counted (a breakpoint) or their calls timed
   * (a return); inProcessAggregates() reads them. Sites an int3 serves deliver their hits.
   * With `value`: the value each entry of a site puts in the histogram instead (a site it
   * gives none for delivers its hits).
   */
  readonly inProcess?:
    | boolean
    | { readonly value: (site: ProbeSite) => InlineValue | undefined }
    | undefined;
}

export interface FollowOptions {
  /**
   * After an exec, resolve every spec registration again in the new image (default false:
   * an exec drops the probes with the image they were placed in).
   */
  readonly followExec?: boolean | undefined;
}

export interface ProcessAttachOptions extends ProbesOptions, FollowOptions {
  /**
   * Also trace the processes descended from the process now (a server's workers), with the
   * same probes, as children it forks while traced are with followForks (default false).
   */
  readonly children?: boolean | undefined;
}

export interface ProcessTracerOptions extends ProcessAttachOptions, SpawnOptions {}

/** A site of a spec: placed in every followed process that has its file mapped. */
interface SpecSite {
  readonly registration: ProcessRegistration;
  readonly site: ProbeSite;
  /** The same for the same site of the same registration, also once resolved again. */
  readonly key: string;
}

/** A spec site placed in one process: the engine's id for it, and where. */
interface Placement {
  readonly spec: SpecSite;
  readonly internalId: string;
  readonly address: bigint;
}

/** More sites than this that an int3 serves for one reason are said in one line. */
const GROUPED_TRAPS = 3;

/**
 * Probes on one process, run by upscope over ptrace rather than by the kernel (the `ptrace`
 * engine): handlers run in JavaScript, synchronously, while the probed thread waits, and may
 * read and change its registers and memory and a function's return value. Needs only the
 * right to ptrace the process: your own children need no root.
 *
 * All calls must come from one thread (ptrace requires it); poll() blocks that thread, so a
 * tracer that shares a process with other work belongs on a worker_thread.
 *
 * detach() puts every byte back (breakpoints, return addresses swapped for the trampoline,
 * USDT semaphores) in every process followed; call it (or kill()) before the caller's process
 * exits. A SIGKILL of the caller's process cannot be repaired here: the kernel detaches the
 * tracee with its breakpoints still in it, and it dies of SIGTRAP at its next hit (a spawned
 * process is killed with its tracer). Where that matters, run the tracer in a process of its
 * own that learns of its parent's death: the `upscope` CLI runs it in a helper process that
 * gets SIGTERM when upscope dies (PR_SET_PDEATHSIG, see signalOnParentDeath()) and then
 * detaches.
 *
 * ```ts
 * const tracer = await ProcessTracer.spawn(['./app', '5']);
 * await tracer.register({ id: 'gate', event: 'return', where: './app:check_gate',
 *   handler: (hit) => { hit.retval = 1n; } });
 * while (tracer.poll() !== null) {}
 * ```
 */
export class ProcessTracer {
  readonly #probes: ProcessProbes;
  /** User id -> the engine's ids of its sites. */
  readonly #ids = new Map<string, string[]>();
  /** Every site of every spec registration, placed or waiting for its file to be mapped. */
  #specSites: SpecSite[] = [];
  /** Per followed process (pid): the spec sites placed in it, by key. */
  readonly #placements = new Map<number, Map<string, Placement>>();
  /** The site of each placement whose hits are aggregated in the process (kept after it goes). */
  readonly #siteOfInternal = new Map<string, ProbeSite>();
  /** Spec registrations, to resolve again after an exec. */
  readonly #specs = new Map<string, ProcessRegistration>();
  readonly #sites = new Map<string, readonly ProbeSite[]>();
  readonly #skipped = new Map<string, readonly SkippedSite[]>();
  readonly #warnings = new Map<string, readonly ProbeError[]>();
  readonly #followExec: boolean;
  /** The traced process's loader rendezvous, once hooked (null: it has none). */
  #rendezvous: LoaderRendezvous | null | undefined;
  #unwinderHooked = false;
  /** Processes followed that run an image of their own from the start (attached descendants). */
  readonly #ownImages = new Set<number>();
  /** Those of them whose loader is hooked (null: it has none). */
  readonly #hookedLoaders = new Map<number, LoaderRendezvous | null>();
  #next = 0;
  /** Registrations resolved again in a replaced file (id and file), tried once each. */
  readonly #tried = new Set<string>();
  readonly #notices: string[] = [];
  /**
   * Return probes int3s serve (see injectHookOf()), not said yet: their names by why, said
   * by takeNotices() (in one line for many); and those said, never again (a site placed
   * again, in another process or image, is the same site).
   */
  readonly #int3Returns = new Map<string, string[]>();
  readonly #int3ReturnsSaid = new Set<string>();
  /** Entry probes are served by inline hooks where they can be (the inject engine). */
  readonly #inline: boolean;

  private constructor(probes: ProcessProbes, options: FollowOptions & ProbesOptions) {
    this.#probes = probes;
    this.#inline = options.inline !== undefined;
    this.#followExec = options.followExec ?? false;
    probes.register({
      id: '\u0000exec',
      event: 'exec',
      handler: (hit) => {
        if (hit.pid === this.pid) this.#execed();
        else this.#childExeced(hit.pid);
      },
    });
    // A followed child starts with a copy of its parent's probes, and ends with its own.
    probes.register({
      id: '\u0000fork',
      event: 'fork',
      handler: (hit) => {
        const child = hit.detail;
        const parent = this.#placements.get(hit.pid);
        if (child === undefined || parent === undefined) return;
        if (!this.#probes.followed().includes(child)) return;
        this.#placements.set(child, new Map(parent));
      },
    });
    probes.register({
      id: '\u0000exit',
      event: 'exit',
      handler: (hit) => {
        if (hit.pid !== this.pid) this.#placements.delete(hit.pid);
        this.#ownImages.delete(hit.pid);
        this.#hookedLoaders.delete(hit.pid);
      },
    });
  }

  /** Start `argv` traced, held before its first instruction until the first poll(). */
  static async spawn(
    argv: readonly string[],
    options: ProcessTracerOptions = {},
  ): Promise<ProcessTracer> {
    return new ProcessTracer(ProcessProbes.spawn(argv, options), options);
  }

  /**
   * Trace every thread of running process `pid` (with `children`, of the processes descended
   * from it too), held until the first poll(). A descendant that ends or cannot be traced
   * while they are attached is left out.
   */
  static async attach(pid: number, options: ProcessAttachOptions = {}): Promise<ProcessTracer> {
    const probes = ProcessProbes.attach(pid, options);
    const tracer = new ProcessTracer(probes, options);
    if (options.children === true) {
      for (const descendant of descendantsOf(pid)) {
        try {
          probes.attachAlso(descendant);
          tracer.#ownImages.add(descendant);
        } catch (err) {
          // Gone meanwhile (or not ours to trace): the others are traced all the same.
          if (!(err instanceof ProbeError)) throw err;
        }
      }
    }
    return tracer;
  }

  /** The processes traced now: the process, and those followed (children, descendants). */
  followed(): number[] {
    return this.#probes.followed();
  }

  get pid(): number {
    return this.#probes.pid;
  }

  /** True once the process has exited or the tracer detached. */
  get ended(): boolean {
    return this.#probes.ended;
  }

  /** The exit status once the process exited (negative: the signal that killed it). */
  get exitCode(): number | undefined {
    return this.#probes.exitCode;
  }

  /**
   * Register interest in an event. A spec is resolved against the process and its sites are
   * returned (the promise is only for symmetry with the kernel engine: registerSync() does the
   * same at once). Events carry the id given here, whichever of a spec's sites fired.
   */
  async register(registration: ProcessRegistration): Promise<readonly ProbeSite[]> {
    return this.registerSync(registration);
  }

  /**
   * register() without a promise: from a handler, the probe is in place before the thread
   * that hit goes on.
   */
  registerSync(registration: ProcessRegistration): readonly ProbeSite[] {
    if (this.#ids.has(registration.id)) {
      throw new ProbeError('ERR_USAGE', `Cannot register "${registration.id}": that id is taken`);
    }
    if (registration.event === 'return') this.#hookUnwinder();
    const where = registration.where;
    if (typeof where !== 'string') {
      this.#place(registration, where);
      return [];
    }
    const sites = this.#resolve(registration, where);
    // upscope's own hooks (ids starting with NUL) are placed again by their own logic.
    if (!registration.id.startsWith('\u0000')) this.#specs.set(registration.id, registration);
    return sites;
  }

  /** Resolve a spec in the process now and place its sites (pending: when mapped). */
  #resolve(registration: ProcessRegistration, spec: string): readonly ProbeSite[] {
    const planned = planProbesSync([spec], {
      ...runPlanOptions({ ...registration, pid: this.pid }),
      // A return registration on a function's entry (latency) catches its returns too.
      returnsOfEntries: registration.event === 'return',
      engine: 'ptrace',
      optionFetches: registration.optionFetches,
    });
    const sites = excludeSites(planned.sites, registration.exclude);
    const skipped = planned.skipped;
    const added = sites.map((site) => ({ registration, site, key: siteKey(registration, site) }));
    // Sites in files the process has not mapped yet wait for the dynamic loader to map them;
    // sites in libraries it has are placed again if it closes and reopens them.
    const objects = processObjects(this.pid);
    const waiting = added.some((s) => addressIn(objects, s.site) === undefined);
    try {
      this.#hookLoader();
    } catch (err) {
      if (!(err instanceof ProbeError)) throw err;
      // No loader to wait for: the sites are placed where the process has them mapped, and
      // a file it has not mapped never will be (a static program loads no library).
      if (waiting) {
        const file = added.find((s) => addressIn(objects, s.site) === undefined)!.site.target;
        throw err.code === 'ERR_NOT_MAPPED' ? staticProgramError(this.pid, spec, file) : err;
      }
    }
    for (const pid of this.#ownImages) this.#hookLoaderIn(pid);
    this.#ids.set(registration.id, this.#ids.get(registration.id) ?? []);
    this.#sites.set(registration.id, sites);
    this.#skipped.set(registration.id, skipped);
    this.#warnings.set(registration.id, planned.warnings);
    this.#specSites.push(...added);
    for (const pid of this.#probes.followed()) this.#sync(pid, added);
    return sites;
  }

  /** The sites a spec registration resolved to (again after an exec, with followExec). */
  sitesOf(id: string): readonly ProbeSite[] {
    return this.#sites.get(id) ?? [];
  }

  /** The sites a spec registration's pattern matched that cannot be probed, left out. */
  skippedOf(id: string): readonly SkippedSite[] {
    return this.#skipped.get(id) ?? [];
  }

  /** What a spec registration's plan said the user should know (PlannedProbes.warnings). */
  warningsOf(id: string): readonly ProbeError[] {
    return this.#warnings.get(id) ?? [];
  }

  /** Unregister one registration (all its sites), or all. */
  unregister(id: string | 'all'): void {
    const ids = id === 'all' ? [...this.#ids.keys()] : [id];
    for (const one of ids) {
      for (const internal of this.#ids.get(one) ?? []) this.#probes.unregister(internal);
      this.#ids.delete(one);
      this.#specs.delete(one);
      this.#sites.delete(one);
      this.#skipped.delete(one);
      this.#warnings.delete(one);
      this.#specSites = this.#specSites.filter((s) => s.registration.id !== one);
      for (const placed of this.#placements.values()) {
        for (const [key, placement] of placed) {
          if (placement.spec.registration.id === one) placed.delete(key);
        }
      }
    }
  }

  /**
   * Let the thread stopped at the last event go on, then wait for the next event with no
   * handler, at most `timeoutMs` (forever when undefined): null on timeout or once the
   * process has ended. n registrations at one address give n events before the thread goes on.
   */
  poll(timeoutMs?: number): HitContext | null {
    return this.#probes.poll(timeoutMs);
  }

  /** Make the poll() under way return null once the current event is handled (from a handler). */
  interrupt(): void {
    this.#probes.interrupt();
  }

  /** Remove every probe, put back every byte changed, and let the process run on untraced. */
  detach(): void {
    this.#probes.detach();
  }

  /** Kill the process (SIGKILL). */
  kill(): void {
    this.#probes.kill();
  }

  /**
   * After detach() of a spawned process: collect its exit status once it has ended (it is
   * this process's child, which nothing else reaps). True once it is reaped.
   */
  reap(): boolean {
    return this.#probes.tracee.reap();
  }

  #internalId(id: string): string {
    return `${id}\u0000${this.#next++}`;
  }

  #place(registration: ProcessRegistration, where: bigint | undefined, site?: ProbeSite): void {
    const internalId = this.#internalId(registration.id);
    const known = this.#ids.get(registration.id) ?? [];
    this.#ids.set(registration.id, known);
    this.#probes.register({
      id: internalId,
      event: registration.event,
      where,
      semaphore: semaphoreAddress(site, where),
      reportAs: registration.id,
      filter: registration.filter,
      entryFilter:
        registration.entryFilter === undefined
          ? undefined
          : (hit) => registration.entryFilter!(hit, site),
      handler:
        registration.handler === undefined ? undefined : (hit) => registration.handler!(hit, site),
    });
    known.push(internalId);
  }

  /**
   * Place in process `pid` the spec sites whose file it has mapped now, and forget the ones
   * placed in it whose file it has unmapped (a library it closed): their memory is gone, so
   * nothing is written there. Called when a spec is registered, and each time the dynamic
   * loader says its list of objects is consistent again.
   */
  #sync(pid: number, specSites: readonly SpecSite[]): void {
    let objects: MappedObject[];
    try {
      objects = processObjects(pid);
    } catch (err) {
      // The process has just ended: its exit is on its way.
      if (err instanceof ProbeError) return;
      throw err;
    }
    const again = this.#resolveReplaced(pid, objects);
    if (again.length > 0) specSites = [...specSites, ...again];
    let placed = this.#placements.get(pid);
    if (placed === undefined) {
      placed = new Map();
      this.#placements.set(pid, placed);
    }
    for (const [key, placement] of placed) {
      if (addressIn(objects, placement.spec.site) === placement.address) continue;
      this.#probes.forgetIn(pid, placement.internalId);
      placed.delete(key);
      this.#dropUnused(placement);
    }
    for (const spec of specSites) {
      if (placed.has(spec.key)) continue;
      const address = addressIn(objects, spec.site);
      if (address === undefined) continue;
      const { registration, site } = spec;
      const internalId = this.#internalId(registration.id);
      // upscope's own hooks (ids starting with NUL: the unwinder's) need the thread stopped.
      const inline =
        this.#inline &&
        !registration.id.startsWith('\u0000') &&
        ((registration.event === 'breakpoint' && site.kind === 'entry') ||
          (registration.event === 'return' && site.returns?.mode === 'trampoline'))
          ? this.#inlineFor(site, registration.inProcess, address)
          : undefined;
      if (
        this.#inline &&
        registration.event === 'return' &&
        site.returns?.mode === 'sites' &&
        !registration.id.startsWith('\u0000')
      ) {
        const name = probeName(site);
        const why = injectHookOf(site).why;
        if (!this.#int3ReturnsSaid.has(`${name}\0${why}`)) {
          this.#int3ReturnsSaid.add(`${name}\0${why}`);
          const names = this.#int3Returns.get(why);
          if (names === undefined) this.#int3Returns.set(why, [name]);
          else names.push(name);
        }
      }
      this.#probes.registerIn(pid, {
        inline,
        id: internalId,
        event: registration.event,
        where: address,
        label: probeName(site),
        fileCode: fileCode(site),
        guardable: site.nextIsJumpTarget === false,
        functionEntry: registration.event === 'breakpoint' && site.kind === 'entry',
        returnSites: registration.event === 'return' ? returnSitesIn(objects, site) : undefined,
        unwinds: registration.unwinds,
        openAtThreadEnd: registration.openAtThreadEnd,
        bareHandler:
          registration.bareHandler === undefined
            ? undefined
            : (event, tid, timeNs) => registration.bareHandler!(event, tid, timeNs, site),
        semaphore: semaphoreAddress(site, address),
        reportAs: registration.id,
        filter: registration.filter,
        entryFilter:
          registration.entryFilter === undefined
            ? undefined
            : (hit) => registration.entryFilter!(hit, site),
        handler:
          registration.handler === undefined
            ? undefined
            : (hit) => registration.handler!(hit, site),
      });
      placed.set(spec.key, { spec, internalId, address });
      if (inline?.aggregate === true) this.#siteOfInternal.set(internalId, site);
      this.#ids.get(registration.id)?.push(internalId);
    }
  }

  /**
   * Spec sites for the files process `pid` has mapped at the path of a spec's target that are
   * not that file (another inode: the library was replaced on disk, and loaded again): each
   * spec is resolved again in the file mapped, once per file, and its new sites are added to
   * the spec's (the old file's stay, for the processes that still map it). A spec that names
   * nothing in the new file gets nothing there (and a notice says so).
   */
  #resolveReplaced(pid: number, objects: readonly MappedObject[]): SpecSite[] {
    const added: SpecSite[] = [];
    for (const object of objects) {
      const stale = new Set<ProcessRegistration>();
      const current = new Set<ProcessRegistration>();
      for (const { registration, site } of this.#specSites) {
        if (site.target.dev === object.dev && site.target.inode === object.inode) {
          current.add(registration);
        } else if (site.target.displayPath === object.path) {
          stale.add(registration);
        }
      }
      for (const registration of stale) {
        if (current.has(registration) || typeof registration.where !== 'string') continue;
        const key = `${registration.id}\u0000${object.dev}:${object.inode}`;
        if (this.#tried.has(key)) continue;
        this.#tried.add(key);
        let sites: ProbeSite[];
        try {
          ({ sites } = planProbesSync([registration.where], {
            pid,
            unsafe: registration.unsafe,
            debugDirs: registration.debugDirs,
            engine: 'ptrace',
            targetFile: { object },
          }));
        } catch (err) {
          if (!(err instanceof ProbeError)) throw err;
          this.#notices.push(
            `${object.path} was replaced on disk and loaded again by process ${pid}: ${registration.where} is not probed in the new file: ${err.message}`,
          );
          continue;
        }
        const news = sites.map((site) => ({
          registration,
          site,
          key: siteKey(registration, site),
        }));
        this.#specSites.push(...news);
        this.#sites.set(registration.id, [...(this.#sites.get(registration.id) ?? []), ...sites]);
        added.push(...news);
      }
    }
    return added;
  }

  /**
   * What an inline hook needs to serve `site` (ProcessProbes' Registration.inline): the memory
   * it copies for the fetches among it; or undefined (with a notice) when a hook cannot make
   * those reads (more than a record holds, an address made from %rip at a return): an int3
   * serves it.
   */
  #inlineFor(
    site: ProbeSite,
    inProcess: ProcessRegistration['inProcess'],
    address: bigint,
  ):
    | {
        jumpTargets: readonly bigint[] | undefined;
        aggregate: boolean;
        value: InlineValue | undefined;
        reads: InlineReads;
      }
    | undefined {
    const reads = inlineReadsOf(site);
    if ('why' in reads) {
      this.#notices.push(
        `${probeName(site)}: served by an int3 (a trap per hit) instead of an inline hook: its fetch "${reads.fetch}": ${reads.why}`,
      );
      return undefined;
    }
    const value = typeof inProcess === 'object' ? inProcess.value(site) : undefined;
    return {
      // Where the function's jumps land in the process, as its entry is (a PIE's code is
      // not at its file's addresses: compared as they were, a jump into the bytes a patch
      // covers went unseen, and the program crashed there).
      jumpTargets: site.jumpTargetsNear?.map((target) => address + (target - site.vaddr)),
      aggregate: inProcess === true || value !== undefined,
      value,
      reads: reads.reads,
    };
  }

  /**
   * What inline hooks aggregated in the processes for the registrations that asked for it
   * (ProcessRegistration.inProcess), by site, every process and image so far added up.
   */
  inProcessAggregates(): Map<ProbeSite, InlineAggregate> {
    const found = new Map<ProbeSite, InlineAggregate>();
    for (const [internalId, aggregate] of this.#probes.inlineAggregates()) {
      const site = this.#siteOfInternal.get(internalId);
      if (site === undefined) continue;
      const before = found.get(site);
      found.set(site, before === undefined ? aggregate : addInlineAggregates(before, aggregate));
    }
    return found;
  }

  /** Hits inline hooks could not record (their ring was full), in total, since the last call. */
  takeLost(): number {
    let total = 0;
    for (const count of this.#probes.takeLost().values()) total += count;
    return total;
  }

  /** Things the tracer noticed that a user should hear of, since the last call (oldest first). */
  takeNotices(): string[] {
    // Sites an int3 serves for the same reason, more than a few at once (every function of a
    // program recorded), are said in one line.
    for (const [why, names] of this.#int3Returns) {
      if (names.length <= GROUPED_TRAPS) {
        for (const name of names) this.#notices.push(`${name}: served by int3s: ${why}`);
      } else {
        this.#notices.push(
          `${names.length} functions (${names.slice(0, GROUPED_TRAPS).join(', ')}, ...): served by int3s: ${why}`,
        );
      }
    }
    this.#int3Returns.clear();
    // A reason's own instruction and addresses aside ("je 0x45f40e" in its first 5 bytes...).
    const kindOf = (notice: ForeignBreakpointNotice) =>
      `${notice.pid} ${(notice.reason ?? '').replace(/"[^"]*"/g, 'an instruction').replace(/0x[0-9a-f]+/g, 'an address')}`;
    const traps = new Map<string, ForeignBreakpointNotice[]>();
    const notices = this.#probes.takeNotices();
    for (const notice of notices) {
      if (notice.what !== 'trap') continue;
      const key = kindOf(notice);
      traps.set(key, [...(traps.get(key) ?? []), notice]);
    }
    for (const notice of notices) {
      const key = kindOf(notice);
      const same = traps.get(key);
      if (notice.what !== 'trap' || same === undefined || same.length <= GROUPED_TRAPS) {
        this.#notices.push(this.#describe(notice));
      } else if (same[0] === notice) {
        const names = same.slice(0, GROUPED_TRAPS).map((n) => this.#nameOf(n));
        this.#notices.push(
          `${same.length} functions in process ${notice.pid} (${names.join(', ')}, ...): served by an int3 (a trap per hit) instead of an inline hook: ${key.slice(key.indexOf(' ') + 1) || 'no reason given'}`,
        );
      }
    }
    return this.#notices.splice(0);
  }

  /** A notice's probe: its name and address, or its address alone. */
  #nameOf(notice: ForeignBreakpointNotice): string {
    for (const placement of this.#placements.get(notice.pid)?.values() ?? []) {
      if (placement.address !== notice.vaddr) continue;
      return `${probeName(placement.spec.site)} (0x${notice.vaddr.toString(16)})`;
    }
    return `0x${notice.vaddr.toString(16)}`;
  }

  /** What the engine noticed of another tracer's breakpoint, said with the probe's name. */
  #describe(notice: ForeignBreakpointNotice): string {
    const where = `${this.#nameOf(notice)} in process ${notice.pid}`;
    switch (notice.what) {
      case 'shared':
        return `${where} also holds another tracer's breakpoint (a kernel uprobe: bpftrace, perf, or upscope's bpf or tracefs engine): its hits are seen after its first instruction, and both tracers count every one`;
      case 'put-back':
        return `${where}: another tracer removed upscope's breakpoint (a kernel uprobe that was placed over it and then removed puts back the byte it found); it is in again, and no hit was missed`;
      case 'missed': {
        const since =
          notice.sinceNs === undefined
            ? 'since it was placed'
            : `in the last ${(Number(process.hrtime.bigint() - notice.sinceNs) / 1e9).toFixed(1)} s (since its last hit)`;
        return `${where}: another tracer removed upscope's breakpoint (a kernel uprobe that was placed over it and then removed puts back the byte it found); it is in again, but hits ${since} may have been missed`;
      }
      case 'trap':
        return `${where}: served by an int3 (a trap per hit) instead of an inline hook: ${notice.reason ?? 'no reason given'}`;
      case 'untracked':
        return `process ${notice.pid}: the returns of ${notice.reason ?? 'some'} calls (and maybe more later) are not reported: calls deeper than ${RETURN_LIMITS.depth} in one thread, more than ${RETURN_LIMITS.threads} threads running hooked calls at once, or a tail call from another hooked function keep their return address`;
    }
  }

  /** An engine id no process uses any more is dropped from its registration's list. */
  #dropUnused(placement: Placement): void {
    for (const placed of this.#placements.values()) {
      for (const other of placed.values()) if (other.internalId === placement.internalId) return;
    }
    const ids = this.#ids.get(placement.spec.registration.id);
    const at = ids?.indexOf(placement.internalId) ?? -1;
    if (at >= 0) ids!.splice(at, 1);
  }

  /**
   * A breakpoint, invisible to the user, where the dynamic loader calls its debugger hook
   * (r_brk, `_dl_debug_state`) before and after it changes its list of loaded objects: each
   * time the list is consistent again (r_state RT_CONSISTENT), the process's spec sites are
   * placed and forgotten as its maps say. Throws ProbeError for a process without a loader.
   */
  #hookLoader(): void {
    if (this.#rendezvous === null) {
      throw new ProbeError(
        'ERR_NOT_MAPPED',
        `Cannot wait for libraries to load in process ${this.pid}: no dynamic loader is mapped (a static program?)`,
      );
    }
    if (this.#rendezvous !== undefined) return;
    try {
      this.#rendezvous = findLoaderRendezvous(this.pid, (vaddr, length) =>
        this.#probes.tracee.read(vaddr, length),
      );
    } catch (err) {
      if (err instanceof ProbeError) this.#rendezvous = null;
      throw err;
    }
    this.#probes.register(this.#loaderRegistration(this.#rendezvous));
  }

  /**
   * The loader breakpoint in a followed process that runs an image of its own from the start
   * (an attached descendant), once; a process without a loader (static) has its own file's
   * sites only.
   */
  #hookLoaderIn(pid: number): void {
    if (this.#hookedLoaders.has(pid) || !this.#probes.followed().includes(pid)) return;
    let rendezvous: LoaderRendezvous | null = null;
    try {
      rendezvous = findLoaderRendezvous(pid, (vaddr, length) =>
        this.#probes.readIn(pid, vaddr, length),
      );
      this.#probes.registerIn(pid, this.#loaderRegistration(rendezvous));
    } catch (err) {
      if (!(err instanceof ProbeError)) throw err;
    }
    this.#hookedLoaders.set(pid, rendezvous);
  }

  /** The loader breakpoint's registration (followed children inherit it at fork). */
  #loaderRegistration(rendezvous: LoaderRendezvous) {
    const state =
      rendezvous.rDebug === undefined ? undefined : rendezvous.rDebug + BigInt(R_STATE_OFFSET);
    return {
      id: '\u0000loader',
      event: 'breakpoint' as const,
      where: rendezvous.brk,
      handler: (hit: HitContext) => {
        if (state !== undefined) {
          const value = Number(BigInt.asUintN(32, hit.readU64(state)));
          if (rendezvousState(value) !== 'consistent') return;
        }
        this.#sync(hit.pid, this.#specSites);
      },
    };
  }

  /**
   * A followed child ran exec: its probes went with its old image. With followExec, the
   * sites of every spec are placed in its new image as its files are mapped (the program now,
   * its libraries once its loader has mapped them), as a kernel probe on the same file would
   * fire there.
   */
  #childExeced(pid: number): void {
    this.#placements.delete(pid);
    // Its new image's loader is hooked below, like any followed child's.
    this.#ownImages.delete(pid);
    this.#hookedLoaders.delete(pid);
    if (!this.#followExec || this.#specSites.length === 0) return;
    try {
      const rendezvous = findLoaderRendezvous(pid, (vaddr, length) =>
        this.#probes.readIn(pid, vaddr, length),
      );
      this.#probes.registerIn(pid, this.#loaderRegistration(rendezvous));
    } catch (err) {
      // A static program: only its own file's sites are placed.
      if (!(err instanceof ProbeError)) throw err;
    }
    this.#sync(pid, this.#specSites);
  }

  /**
   * Return probes swap return addresses for a trampoline the C++ unwinder knows nothing of:
   * when a thread starts an unwind (`_Unwind_RaiseException`, `_Unwind_ForcedUnwind` in
   * libgcc_s, once it is loaded), its return addresses are put back first.
   */
  #hookUnwinder(): void {
    if (this.#unwinderHooked) return;
    this.#unwinderHooked = true;
    for (const name of ['_Unwind_RaiseException', '_Unwind_ForcedUnwind']) {
      try {
        this.registerSync({
          id: `\u0000${name}`,
          event: 'breakpoint',
          where: `libgcc_s.so.1:${name}`,
          handler: (hit) => this.#probes.restoreReturns(hit.tid),
        });
      } catch (err) {
        // No libgcc_s on this machine: nothing can unwind through it.
        if (!(err instanceof ProbeError)) throw err;
      }
    }
  }

  /**
   * After an exec the old image's probes are gone (the engine dropped them), and so are the
   * hooks on its loader and unwinder. With followExec, every spec is resolved again in the
   * new image, while the thread is held at the exec: a spec that names nothing there (another
   * program's function) is left without sites.
   */
  #execed(): void {
    this.#rendezvous = undefined;
    this.#tried.clear();
    this.#unwinderHooked = false;
    this.#specSites = [];
    this.#placements.delete(this.pid);
    for (const [id, internals] of this.#ids) {
      if (id.startsWith('\u0000')) this.#ids.delete(id);
      else
        this.#ids.set(
          id,
          internals.filter((internal) => this.#probes.isRegistered(internal)),
        );
    }
    this.#sites.clear();
    this.#skipped.clear();
    this.#warnings.clear();
    if (!this.#followExec) {
      this.#specs.clear();
      return;
    }
    for (const registration of this.#specs.values()) {
      if (registration.event === 'return') this.#hookUnwinder();
      try {
        this.#resolve(registration, registration.where as string);
      } catch (err) {
        if (!(err instanceof ProbeError)) throw err;
      }
    }
  }
}

/** The same for the same site of the same registration, also once resolved again. */
function siteKey(registration: ProcessRegistration, site: ProbeSite): string {
  return `${registration.id}\u0000${site.kind}:${site.target.dev}:${site.target.inode}:${site.fileOffset}`;
}

/** The file's bytes at a site: its first instructions, as resolved. */
function fileCode(site: ProbeSite): Uint8Array {
  const bytes: number[] = [];
  for (const instruction of site.instructions) bytes.push(...instruction.bytes);
  return Uint8Array.from(bytes);
}

/**
 * Where a return probe's calls begin and end in a process with these objects mapped, when
 * its returns are caught at its exits (ReturnPlan `sites`); undefined otherwise.
 */
function returnSitesIn(objects: readonly MappedObject[], site: ProbeSite): ReturnSites | undefined {
  const returns = site.returns;
  if (returns?.mode !== 'sites') return undefined;
  const object = objects.find((o) => o.dev === site.target.dev && o.inode === site.target.inode);
  if (object === undefined) return undefined;
  const entry = fileOffsetToRuntime(object, returns.entry.fileOffset);
  const exits = returns.sites.map((exit) => ({
    vaddr: fileOffsetToRuntime(object, exit.fileOffset),
    kind: exit.kind,
  }));
  if (entry === undefined || exits.some((exit) => exit.vaddr === undefined)) return undefined;
  return {
    entry,
    exits: exits as { vaddr: bigint; kind: 'ret' | 'tail-call' }[],
    frames: returns.frames,
    loopsAtEntry: returns.loopsAtEntry === true,
  };
}

/** Where a site is in a process with these objects mapped; undefined when its file is not. */
function addressIn(objects: readonly MappedObject[], site: ProbeSite): bigint | undefined {
  const object = objects.find((o) => o.dev === site.target.dev && o.inode === site.target.inode);
  return object === undefined ? undefined : fileOffsetToRuntime(object, site.fileOffset);
}

/**
 * Where a USDT site's semaphore is in the process, from where its probe is: both are in the
 * same file, so they are as far apart there as in the file.
 */
function semaphoreAddress(
  site: ProbeSite | undefined,
  where: bigint | undefined,
): bigint | undefined {
  const semaphore = site?.usdt?.semaphoreVaddr;
  if (semaphore === undefined || where === undefined || site === undefined) return undefined;
  return where + (semaphore - site.vaddr);
}

/**
 * The error for `spec`'s sites in `file`, a library process `pid` will never map: its program
 * is statically linked (it has no dynamic loader to wait for).
 */
function staticProgramError(pid: number, spec: string, file: TargetFile): ProbeError {
  let program = `/proc/${pid}/exe`;
  try {
    program = readlinkSync(program);
  } catch {
    // gone: named by its /proc link
  }
  return new ProbeError(
    'ERR_NOT_MAPPED',
    `Cannot probe ${quote(spec)} in process ${pid}: ${quote(program)} is statically linked (no dynamic loader), so it loads no library and ${quote(file.displayPath)} is never mapped in it`,
    {
      hints: [
        `The library functions it uses are in it: probe them there (upscope list ${program})`,
      ],
    },
  );
}
