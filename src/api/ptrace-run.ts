/**
 * A run of the ptrace engine over probe specs: one process (`pid`) or command (`command`),
 * each hit served in user space while its thread is stopped. The loop shared by the ptrace
 * engine's aggregations (count, hist, latency) and the CLI's trace.
 */
import { constants } from 'node:os';
import type { BucketScheme } from '../aggregate/index.js';
import {
  alarmEvery,
  type HitContext,
  type HookTimeNs,
  Injector,
  type InlineAggregate,
  type InlineValue,
  interruptWaitsOn,
} from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import {
  DEFAULT_KILL_AFTER_MS,
  descendantsOf,
  type Exit,
  endProcessGroup,
  type GroupEnd,
  type LaunchedCommand,
  ThreadNames,
} from '../host/index.js';
import {
  type OptionFetch,
  type PlannedProbes,
  type ProbeSite,
  qualifyNames,
  type SkippedSite,
} from '../plan/index.js';
import { uncoveredNote } from './coverage.js';
import { type ProcessRegistration, ProcessTracer } from './process-tracer.js';

export interface PtraceRunOptions {
  readonly pid?: number | undefined;
  /** A shell command line started traced (held before its first instruction until it runs). */
  readonly command?: string | undefined;
  /** The command's stdout: a file descriptor of this process (its own stdout by default). */
  readonly commandStdout?: number | undefined;
  /** With `pid`: also the processes it has forked already (a server's workers). */
  readonly children?: boolean | undefined;
  /** With `command`: how long it has to end after SIGTERM when the run ends first. */
  readonly killAfterMs?: number | undefined;
  readonly unsafe?: boolean | undefined;
  /** A function a pattern matches that cannot be probed is an error, not skipped. */
  readonly strict?: boolean | undefined;
  readonly debugDirs?: readonly string[] | undefined;
  readonly returnProbes?: 'auto' | 'sites' | 'trampoline' | undefined;
  /** Told of what happens while it runs that a user should know (one line each). */
  readonly onNotice?: ((text: string) => void) | undefined;
  /** Leave out the functions whose name matches one of these globs. */
  readonly exclude?: readonly string[] | undefined;
  /** Calls open when their thread ends are left open, not unwound (see Registration). */
  readonly openAtThreadEnd?: boolean | undefined;
  /** On `inject`: how many records its ring holds (a power of two; 65,536 by default). */
  readonly ringRecords?: number | undefined;
  /** Fetches given apart from the specs, lowered at each site (ProbeSite.optionFetches). */
  readonly optionFetches?: readonly OptionFetch[] | undefined;
  /**
   * `inject` serves function entries by inline hooks patched into the process (no trap per
   * hit), and the rest as `ptrace` (the default) does.
   */
  readonly engine?: 'ptrace' | 'inject' | undefined;
  /**
   * On `inject`: aggregate in the process where a hook serves a site (see inProcess()), with
   * no hit for the consumer: the entries of the specs served at the probed address counted
   * (`entries`), the calls of those served at the return timed (`returns`), in a histogram
   * of `timeUnitNs` units; with `value`, each entry's value put in a histogram of
   * `valueScheme` buckets instead of being counted (a site it gives none for is not).
   */
  readonly inProcess?:
    | {
        readonly entries: boolean;
        readonly returns: boolean;
        readonly timeUnitNs: number;
        readonly value?: ((site: ProbeSite) => InlineValue | undefined) | undefined;
        readonly valueScheme?: BucketScheme | undefined;
      }
    | undefined;
}

/** What a run does with its hits. */
export interface PtraceConsumer {
  /** Whether the spec is served at the function's return (else at the probed address). */
  readonly returns: (spec: string) => boolean;
  /** One hit (`comm` is the thread's name); false ends the run. */
  readonly hit: (hit: HitContext, site: ProbeSite, comm: string) => boolean;
  /**
   * For a spec served at the return: whether a call is wanted, decided at its entry (where
   * its arguments are); a call it refuses gives no hit.
   */
  readonly entryFilter?: ((hit: HitContext, site: ProbeSite, comm: string) => boolean) | undefined;
  /**
   * Takes the hits of inline hooks (the inject engine) instead of `hit`, by their kind,
   * thread and time alone (no registers, memory or stack: several times faster; calls an
   * unwind ended, and hits int3s serve, still go to `hit`); false ends the run.
   */
  readonly bareHit?:
    | ((
        event: 'breakpoint' | 'return',
        tid: number,
        pid: number,
        timeNs: HookTimeNs,
        site: ProbeSite,
        comm: string,
      ) => boolean)
    | undefined;
  /** After each batch of hits; false ends the run. */
  readonly polled?: (() => boolean) | undefined;
  /** A traced process exec'd (its thread still stopped there, no hit of its new image yet). */
  readonly exec?: ((pid: number) => void) | undefined;
}

/** The signals that end a wait for hits (their listeners then run, and may stop the run). */
const WAKING: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGALRM'];

/**
 * Probes placed in one process by the ptrace engine, served until stop(), the end of the
 * process (or command), or the consumer says so. The loop blocks in waitpid (the fastest
 * wait) and lets the event loop run for a moment every 100 ms at most (timers, signals), so
 * stop() is only ever called between two waits.
 */
export class PtraceRun {
  /** The sites placed, their names told apart where specs share one (qualifyNames). */
  readonly sites: readonly ProbeSite[];
  readonly skipped: readonly SkippedSite[];
  /** What the user should know of the plan (see PlannedProbes.warnings). */
  readonly warnings: readonly ProbeError[];
  /** The process traced (the command's, with `command`). */
  readonly pid: number;
  /** How long resolving and placing the probes took. */
  readonly milliseconds: number;
  /** Resolves when the run has ended and the process is let go of. */
  readonly ended: Promise<void>;
  readonly #tracer: ProcessTracer;
  readonly #command: boolean;
  readonly #names: ThreadNames;
  readonly #consumer: PtraceConsumer;
  readonly #onNotice: (text: string) => void;
  readonly #killAfterMs: number;
  /** Inline hooks record hits with no stop: poll() comes back often to read them. */
  readonly #pollMs: number | undefined;
  #lost = 0;
  /** The run loop is on: stop() asks it to end, and it lets go of the process. */
  #running = false;
  #stopAsked = false;
  #stopped = false;
  #exit: Exit | undefined;
  #groupEnd: GroupEnd | undefined;
  #processEnded = false;
  #resolveEnded!: () => void;

  private constructor(
    tracer: ProcessTracer,
    planned: PlannedProbes & { milliseconds: number },
    names: ThreadNames,
    consumer: PtraceConsumer,
    options: PtraceRunOptions,
  ) {
    this.#tracer = tracer;
    this.#command = options.command !== undefined;
    this.#names = names;
    this.#consumer = consumer;
    this.#onNotice = options.onNotice ?? (() => {});
    this.#killAfterMs = options.killAfterMs ?? DEFAULT_KILL_AFTER_MS;
    this.#pollMs = options.engine === 'inject' ? 100 : undefined;
    this.sites = planned.sites;
    this.skipped = planned.skipped;
    this.warnings = planned.warnings;
    this.milliseconds = planned.milliseconds;
    this.pid = tracer.pid;
    this.ended = new Promise((resolve) => {
      this.#resolveEnded = resolve;
    });
  }

  /** Start or attach to the process and place the probes; the process is held until run(). */
  static async start(
    specs: readonly string[],
    options: PtraceRunOptions,
    consumer: PtraceConsumer,
  ): Promise<PtraceRun> {
    if ((options.pid === undefined) === (options.command === undefined)) {
      const engine = options.engine ?? 'ptrace';
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot trace with the ${engine} engine without a process: give -p PID or -c COMMAND`,
        {
          hints: [
            `The ${engine} engine probes one process; the tracefs engine (root) traces every process`,
          ],
        },
      );
    }
    const began = performance.now();
    // Inline hooks: the threads are not pinned to the tracer's CPU (which would make them wait
    // while it reads their hits); a site an int3 serves costs more per hit for it.
    const inline =
      options.engine === 'inject'
        ? {
            inline: Injector.factory({
              timeUnitNs: options.inProcess?.timeUnitNs,
              valueScheme: options.inProcess?.valueScheme,
              ringRecords: options.ringRecords,
            }),
            pin: false,
          }
        : {};
    const tracer =
      options.command !== undefined
        ? await ProcessTracer.spawn([options.command], {
            shell: true,
            stdio: [0, options.commandStdout ?? 1, 2],
            // A session of its own: its process group ends as a user would end it.
            newSession: true,
            followExec: true,
            followForks: true,
            ...inline,
          })
        : await ProcessTracer.attach(options.pid!, {
            followExec: true,
            followForks: true,
            children: options.children,
            ...inline,
          });
    // Inline hooks' hits are read after the fact: their threads' names are read once a turn
    // of the run loop (a read per hit cost 7 us, more than the hit).
    const names = new ThreadNames({ cached: options.engine === 'inject' });
    try {
      // Sites are known once registered; no hit comes before the first poll(). A hit is named
      // by what its thread is called while it is stopped there (it may rename itself or exec).
      let served: ((hit: HitContext, site: ProbeSite) => void) | undefined;
      let bare:
        | ((
            event: 'breakpoint' | 'return',
            tid: number,
            timeNs: HookTimeNs,
            site: ProbeSite,
          ) => void)
        | undefined;
      const handler = (hit: HitContext, site: ProbeSite | undefined) => {
        if (site !== undefined) served?.(hit, site);
      };
      const entryFilter = consumer.entryFilter;
      const sites: ProbeSite[] = [];
      const skipped: SkippedSite[] = [];
      const warnings: ProbeError[] = [];
      const exec = consumer.exec;
      if (exec !== undefined) {
        await tracer.register({ id: 'exec', event: 'exec', handler: (hit) => exec(hit.pid) });
      }
      for (const [i, spec] of specs.entries()) {
        const returns = consumer.returns(spec);
        sites.push(
          ...(await tracer.register({
            id: `spec${i}`,
            event: returns ? 'return' : 'breakpoint',
            where: spec,
            unsafe: options.unsafe,
            strict: options.strict,
            debugDirs: options.debugDirs,
            returnProbes: options.returnProbes,
            optionFetches: options.optionFetches,
            exclude: options.exclude,
            bareHandler:
              consumer.bareHit === undefined
                ? undefined
                : (event, tid, timeNs, site) => {
                    if (site !== undefined) bare?.(event, tid, timeNs, site);
                  },
            // Calls an unwind took away are shown (trace) and counted (count) as such.
            unwinds: true,
            openAtThreadEnd: options.openAtThreadEnd,
            inProcess: inProcessOf(options.inProcess, returns),
            handler,
            entryFilter:
              returns && entryFilter !== undefined
                ? (hit, site) => site === undefined || entryFilter(hit, site, names.name(hit.tid))
                : undefined,
          })),
        );
        skipped.push(...tracer.skippedOf(`spec${i}`));
        warnings.push(...tracer.warningsOf(`spec${i}`));
      }
      if (options.pid !== undefined) {
        // Children forked before the run that the probes do not cover are said.
        const followed = new Set(tracer.followed());
        const uncovered = descendantsOf(options.pid).filter((pid) => !followed.has(pid));
        if (uncovered.length > 0) options.onNotice?.(uncoveredNote(options.pid, uncovered));
      }
      const named = qualifyNames(sites);
      const run = new PtraceRun(
        tracer,
        { sites: named, skipped, warnings, milliseconds: performance.now() - began },
        names,
        consumer,
        options,
      );
      run.#qualified = new Map(sites.map((site, i) => [site, named[i]!]));
      served = (hit, site) => run.#hit(hit, site);
      bare = (event, tid, timeNs, site) => run.#bareHit(event, tid, timeNs, site);
      return run;
    } catch (err) {
      names.close();
      if (options.command !== undefined) tracer.kill();
      else tracer.detach();
      throw err;
    }
  }

  #qualified = new Map<ProbeSite, ProbeSite>();
  /** The site a bare hit was last of, and its qualified one (hits come in runs of a site). */
  #bareSite: ProbeSite | undefined;
  #bareQualified: ProbeSite | undefined;
  #more = true;
  #hits = 0;
  #yieldAt = Number.POSITIVE_INFINITY;

  #hit(hit: HitContext, site: ProbeSite): void {
    if (!this.#more) return;
    this.#more = this.#consumer.hit(
      hit,
      this.#qualified.get(site) ?? site,
      this.#names.name(hit.tid),
    );
    // A busy process never lets poll() wait: end it every 100 ms all the same, so that
    // timers, signals and stop() are seen (the clock read every 64 hits: hits come a few
    // hundred ns apart from inline hooks).
    if (!this.#more || ((++this.#hits & 63) === 0 && performance.now() >= this.#yieldAt)) {
      this.#tracer.interrupt();
    }
  }

  #bareHit(event: 'breakpoint' | 'return', tid: number, timeNs: HookTimeNs, site: ProbeSite): void {
    if (!this.#more) return;
    if (site !== this.#bareSite) {
      this.#bareSite = site;
      this.#bareQualified = this.#qualified.get(site) ?? site;
    }
    this.#more = this.#consumer.bareHit!(
      event,
      tid,
      this.pid,
      timeNs,
      this.#bareQualified!,
      this.#names.name(tid),
    );
    if (!this.#more || ((++this.#hits & 63) === 0 && performance.now() >= this.#yieldAt)) {
      this.#tracer.interrupt();
    }
  }

  /** How the command ended (with `command`), once it has. */
  get exit(): Exit | undefined {
    return this.#exit;
  }

  /** With `command`: how its process group was ended, once the run let go of it. */
  get groupEnd(): GroupEnd | undefined {
    return this.#groupEnd;
  }

  /**
   * The run's command as a launched command (for an Aggregate): it has ended when it ended by
   * itself, not when the run let go of it; undefined without `command`.
   */
  launched(options: { readonly command?: string | undefined }): LaunchedCommand | undefined {
    if (options.command === undefined) return undefined;
    return {
      pid: this.pid,
      resume: () => {},
      exited: new Promise<Exit>((resolve) => {
        void this.ended.then(() => {
          if (this.#exit !== undefined) resolve(this.#exit);
        });
      }),
      terminate: async () => {
        this.stop();
        await this.ended;
        return this.#groupEnd ?? 'gone';
      },
      kill: () => this.stop(),
    };
  }

  /**
   * What inline hooks aggregated in the process so far (PtraceRunOptions.inProcess), by site
   * (as `sites` names it).
   */
  inProcess(): Map<ProbeSite, InlineAggregate> {
    const found = new Map<ProbeSite, InlineAggregate>();
    for (const [site, aggregate] of this.#tracer.inProcessAggregates()) {
      found.set(this.#qualified.get(site) ?? site, aggregate);
    }
    return found;
  }

  /** Hits inline hooks could not record (their ring buffer was full), so far. */
  get lost(): number {
    this.#lost += this.#tracer.takeLost();
    return this.#lost;
  }

  /** Whether the process ended (which ended the run). */
  get processEnded(): boolean {
    return this.#processEnded;
  }

  /** Let the process run and serve its hits until the run ends (then `ended` resolves). */
  async run(): Promise<void> {
    const onAlarm = () => {};
    // SIGALRM only ends a wait: the loop looks at the time.
    process.on('SIGALRM', onAlarm);
    // An exit of this process (an uncaught error) lets go of the process all the same.
    const onExit = () => this.#letGoNow();
    process.on('exit', onExit);
    this.#running = true;
    try {
      // poll() blocks in waitpid: these signals end it, and their listeners then run.
      interruptWaitsOn(WAKING);
      // A signal that came after the last turn of the event loop but before poll() blocked
      // interrupted nothing: a SIGALRM each second ends the wait so that its handler runs
      // (and the tracer looks at its breakpoints, see ProcessProbes.poll()).
      alarmEvery(1);
      while (!this.#stopAsked && !this.#tracer.ended && this.#more) {
        this.#yieldAt = performance.now() + 100;
        this.#names.refresh();
        this.#tracer.poll(this.#pollMs);
        this.#lost += this.#tracer.takeLost();
        for (const notice of this.#tracer.takeNotices()) this.#onNotice(notice);
        if (this.#consumer.polled?.() === false) this.#more = false;
        // Let the handlers of the signals that ended the wait run: libuv reads its signal
        // pipe in the poll phase, which a setImmediate() alone can pass over.
        await new Promise<void>((resolve) => setTimeout(resolve, 5));
      }
      if (this.#tracer.ended && !this.#stopAsked) {
        this.#processEnded = true;
        const code = this.#tracer.exitCode;
        if (this.#command && code !== undefined) {
          this.#exit =
            code >= 0
              ? { code, signal: undefined }
              : { code: undefined, signal: signalName(-code) };
        }
      }
    } finally {
      this.#running = false;
      alarmEvery(0);
      process.off('SIGALRM', onAlarm);
      try {
        await this.#letGo();
      } finally {
        process.off('exit', onExit);
      }
    }
  }

  /**
   * End the run: between two waits of the run loop, which then lets go of the process as a
   * user would end it; before the run (or after it), at once. Idempotent.
   */
  stop(): void {
    this.#stopAsked = true;
    if (!this.#running) this.#letGoNow();
  }

  /**
   * Let go of every process followed (restored and detached: children still traced after the
   * command's exit too), then end a command and what is left of it as a user would: SIGTERM
   * to its process group, SIGKILL after the grace period.
   */
  async #letGo(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      if (!this.#tracer.ended) this.#tracer.detach();
      if (this.#command) {
        this.#groupEnd = await endProcessGroup(this.pid, {
          graceMs: this.#killAfterMs,
          reap: () => this.#tracer.reap(),
        });
      }
    } finally {
      this.#names.close();
      this.#resolveEnded();
    }
  }

  /** The same, where nothing can wait (an exit): a command is killed at once. */
  #letGoNow(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      if (!this.#tracer.ended) {
        if (this.#command) this.#tracer.kill();
        else this.#tracer.detach();
      }
    } finally {
      this.#names.close();
      this.#resolveEnded();
    }
  }
}

/** What a spec's registration aggregates in the process (ProcessRegistration.inProcess). */
function inProcessOf(
  inProcess: PtraceRunOptions['inProcess'],
  returns: boolean,
): ProcessRegistration['inProcess'] {
  if (inProcess === undefined) return false;
  if (returns) return inProcess.returns;
  if (!inProcess.entries) return false;
  return inProcess.value === undefined ? true : { value: inProcess.value };
}

function signalName(number: number): NodeJS.Signals | undefined {
  for (const [name, value] of Object.entries(constants.signals)) {
    if (value === number) return name as NodeJS.Signals;
  }
  return undefined;
}
