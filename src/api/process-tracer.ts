import {
  type HitContext,
  type ProbeEventKind,
  type ProbesOptions,
  ProcessProbes,
  type SpawnOptions,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import { type ProbeSite, planProbesSync, processObjects } from '../plan/index.js';
import { fileOffsetToRuntime, openElf, SymbolIndex } from '../symbols/index.js';

export type { HitContext, ProbeEventKind } from '../engines/index.js';

/** What to be told of, where, and by which handler (seed 002's `struct uprobe`). */
export interface ProcessRegistration {
  readonly id: string;
  readonly event: ProbeEventKind;
  /**
   * For breakpoint and return: a runtime address, or a probe spec (`./app:parse`,
   * `libc:malloc`, `./app:main+0x1a`) resolved in the process. A spec's sites in a library
   * not loaded yet are placed when the dynamic loader maps it.
   */
  readonly where?: bigint | string | undefined;
  /**
   * Runs while the thread is stopped; without one, poll() returns the event. With a spec,
   * `site` is the resolved site that fired.
   */
  readonly handler?: ((hit: HitContext, site: ProbeSite | undefined) => void) | undefined;
  readonly filter?: ((hit: HitContext) => boolean) | undefined;
  /** Allow raw addresses no symbol covers, in specs. */
  readonly unsafe?: boolean | undefined;
  /** Directories searched for separate debug files (FILE:LINE specs), before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
}

export interface FollowOptions {
  /**
   * After an exec, resolve every spec registration again in the new image (default false:
   * an exec drops the probes with the image they were placed in).
   */
  readonly followExec?: boolean | undefined;
}

export interface ProcessAttachOptions extends ProbesOptions, FollowOptions {}

export interface ProcessTracerOptions extends ProcessAttachOptions, SpawnOptions {}

/** A site of a spec whose library the process has not mapped yet. */
interface Pending {
  readonly registration: ProcessRegistration;
  readonly site: ProbeSite;
}

/**
 * Probes on one process, run by upscope over ptrace rather than by the kernel (the `ptrace`
 * engine): handlers run in JavaScript, synchronously, while the probed thread waits, and may
 * read and change its registers and memory and a function's return value. Needs only the
 * right to ptrace the process: your own children need no root.
 *
 * All calls must come from one thread (ptrace requires it); poll() blocks that thread, so a
 * tracer that shares a process with other work belongs on a worker_thread.
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
  readonly #pending: Pending[] = [];
  /** Spec registrations, to resolve again after an exec. */
  readonly #specs = new Map<string, ProcessRegistration>();
  readonly #sites = new Map<string, readonly ProbeSite[]>();
  readonly #followExec: boolean;
  #loaderHooked = false;
  #unwinderHooked = false;
  #next = 0;

  private constructor(probes: ProcessProbes, options: FollowOptions) {
    this.#probes = probes;
    this.#followExec = options.followExec ?? false;
    // A followed child's exec drops its own probes only.
    probes.register({
      id: '\u0000exec',
      event: 'exec',
      handler: (hit) => {
        if (hit.pid === this.pid) this.#execed();
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

  /** Trace every thread of running process `pid`, held until the first poll(). */
  static async attach(pid: number, options: ProcessAttachOptions = {}): Promise<ProcessTracer> {
    return new ProcessTracer(ProcessProbes.attach(pid, options), options);
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
    const sites = planProbesSync([spec], {
      pid: this.pid,
      unsafe: registration.unsafe,
      debugDirs: registration.debugDirs,
      engine: 'ptrace',
    });
    this.#ids.set(registration.id, this.#ids.get(registration.id) ?? []);
    this.#sites.set(registration.id, sites);
    for (const site of sites) {
      const address = site.runtimeAddress ?? this.#runtimeAddress(site);
      if (address !== undefined) {
        this.#place(registration, address, site);
        continue;
      }
      this.#pending.push({ registration, site });
      this.#hookLoader();
    }
    return sites;
  }

  /** The sites a spec registration resolved to (again after an exec, with followExec). */
  sitesOf(id: string): readonly ProbeSite[] {
    return this.#sites.get(id) ?? [];
  }

  /** Unregister one registration (all its sites), or all. */
  unregister(id: string | 'all'): void {
    const ids = id === 'all' ? [...this.#ids.keys()] : [id];
    for (const one of ids) {
      for (const internal of this.#ids.get(one) ?? []) this.#probes.unregister(internal);
      this.#ids.delete(one);
      this.#specs.delete(one);
      this.#sites.delete(one);
      for (let i = this.#pending.length - 1; i >= 0; i--) {
        if (this.#pending[i]!.registration.id === one) this.#pending.splice(i, 1);
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

  #internalId(id: string): string {
    return `${id}\u0000${this.#next++}`;
  }

  #place(registration: ProcessRegistration, where: bigint | undefined, site?: ProbeSite): void {
    const internalId = this.#internalId(registration.id);
    const known = this.#ids.get(registration.id) ?? [];
    this.#ids.set(registration.id, known);
    const usdt = site?.usdt;
    const semaphore =
      usdt?.semaphoreVaddr === undefined || where === undefined || site === undefined
        ? undefined
        : where + (usdt.semaphoreVaddr - site.vaddr);
    this.#probes.register({
      id: internalId,
      event: registration.event,
      where,
      semaphore,
      reportAs: registration.id,
      filter: registration.filter,
      handler:
        registration.handler === undefined ? undefined : (hit) => registration.handler!(hit, site),
    });
    known.push(internalId);
  }

  /** Where a site's file offset is mapped in the process now, if its file is mapped. */
  #runtimeAddress(site: ProbeSite): bigint | undefined {
    const object = processObjects(this.pid).find(
      (o) => o.dev === site.target.dev && o.inode === site.target.inode,
    );
    return object === undefined ? undefined : fileOffsetToRuntime(object, site.fileOffset);
  }

  /**
   * A breakpoint on the dynamic loader's `_dl_debug_state`, which it calls after each change to
   * its list of loaded objects: pending sites whose library is mapped then are placed.
   */
  #hookLoader(): void {
    if (this.#loaderHooked) return;
    const loader = processObjects(this.pid).find((o) =>
      /\/ld-linux[^/]*\.so[^/]*$|\/ld-musl/.test(o.path),
    );
    if (loader === undefined) {
      throw new ProbeError(
        'ERR_NOT_MAPPED',
        `Cannot wait for libraries to load in process ${this.pid}: no dynamic loader is mapped (a static program?)`,
      );
    }
    const [symbol] = new SymbolIndex(openElf(loader.path)).named('_dl_debug_state');
    const fileOffset = symbol?.fileOffset;
    const address = fileOffset === undefined ? undefined : fileOffsetToRuntime(loader, fileOffset);
    if (address === undefined) {
      throw new ProbeError(
        'ERR_SYMBOL_NOT_FOUND',
        `Cannot wait for libraries to load in process ${this.pid}: ${loader.path} has no _dl_debug_state`,
      );
    }
    this.#probes.register({
      id: '\u0000loader',
      event: 'breakpoint',
      where: address,
      // Libraries a followed child loads on its own are not waited for.
      handler: (hit) => {
        if (hit.pid === this.pid) this.#placePending();
      },
    });
    this.#loaderHooked = true;
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
    this.#loaderHooked = false;
    this.#unwinderHooked = false;
    this.#pending.length = 0;
    for (const [id, internals] of this.#ids) {
      if (id.startsWith('\u0000')) this.#ids.delete(id);
      else
        this.#ids.set(
          id,
          internals.filter((internal) => this.#probes.isRegistered(internal)),
        );
    }
    this.#sites.clear();
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

  #placePending(): void {
    for (let i = this.#pending.length - 1; i >= 0; i--) {
      const pending = this.#pending[i]!;
      const address = this.#runtimeAddress(pending.site);
      if (address === undefined) continue;
      this.#pending.splice(i, 1);
      this.#place(pending.registration, address, pending.site);
    }
  }
}
