import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeSync,
} from 'node:fs';
import { InternalError, ProbeError, quote } from '../../errors/index.js';
import { pausePoint } from '../../host/index.js';
import { watchRemoval } from '../removal.js';
import { EventNamer, parseUprobeEvents, sessionGroupName, sessionInstanceName } from './names.js';
import { type EventLineSite, eventName, uprobeEventLine } from './uprobe-event-line.js';

/** The errno name of a failed file operation (`EINVAL`), or undefined for other errors. */
export function errnoOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Block the thread for `ms` milliseconds (tracefs calls are synchronous; so are retries). */
export function sleepMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Write `text` to a tracefs control file in one write(2) call. `append` opens with O_APPEND
 * (uprobe_events: add or remove one definition, never truncate); otherwise with O_TRUNC
 * (trace_clock, enable, set_event_pid: replace the value). Throws the raw fs error.
 */
export function writeControl(path: string, text: string, mode: 'append' | 'replace'): void {
  // Node's 'a' and 'w' add O_CREAT; tracefs refuses to create files (EACCES), so a missing
  // control file still fails.
  const fd = openSync(path, mode === 'append' ? 'a' : 'w');
  try {
    const bytes = Buffer.from(text);
    const written = writeSync(fd, bytes, 0, bytes.length);
    if (written !== bytes.length) {
      throw new ProbeError(
        'ERR_TRACEFS_WRITE',
        `Cannot write to ${quote(path)}: the kernel took ${written} of ${bytes.length} bytes`,
      );
    }
  } finally {
    closeSync(fd);
  }
}

/** The text of a tracefs file, or undefined when it does not exist. */
export function readControl(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw controlError(`read ${quote(path)}`, err);
  }
}

/**
 * A tracefs file refused an access: not being allowed (EACCES, EPERM) is a privileges error
 * with what to do instead; anything else a tracefs error.
 */
function controlError(action: string, err: unknown): ProbeError {
  const errno = errnoOf(err);
  if (errno === 'EACCES' || errno === 'EPERM') {
    return new ProbeError('ERR_PRIVILEGES', `Cannot ${action}: ${errno} (permission denied)`, {
      cause: err,
      hints: [
        'Kernel probes need root (or write access to tracefs): run upscope with sudo',
        'Without root, probe one process of your own: --engine ptrace with -p PID or -c CMD',
      ],
    });
  }
  return new ProbeError(
    'ERR_TRACEFS_WRITE',
    `Cannot ${action}: ${errno ?? (err as Error).message}`,
    { cause: err },
  );
}

/**
 * Run `action`, retrying while it fails with EBUSY (a reader still has a file of the instance
 * open, or an event is still in use) for up to `budgetMs`. Returns true when it succeeded,
 * false when the thing was already gone (ENOENT); throws the last error otherwise.
 */
export function retryBusy(action: () => void, budgetMs = 1000): boolean {
  const deadline = Date.now() + budgetMs;
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    try {
      action();
      return true;
    } catch (err) {
      const errno = errnoOf(err);
      if (errno === 'ENOENT') return false;
      if (errno !== 'EBUSY' || Date.now() >= deadline) throw err;
      sleepMs(delay);
    }
  }
}

/** Remove a tracefs instance directory (retrying on EBUSY); false when it was already gone. */
export function removeInstanceDir(path: string): boolean {
  return retryBusy(() => rmdirSync(path));
}

/**
 * Remove one uprobe event by appending `-:GROUP/EVENT` to uprobe_events (retrying on EBUSY);
 * false when it was already gone.
 */
export function removeEvent(tracefs: string, group: string, event: string): boolean {
  return retryBusy(() =>
    writeControl(`${tracefs}/uprobe_events`, `-:${group}/${event}\n`, 'append'),
  );
}

/** A site to define: what the uprobe_events line needs, plus what names the event. */
/** How many events are defined between two reports of define()'s progress. */
const DEFINED_EVERY = 25;

export interface TracefsSite extends EventLineSite {
  /** The function holding the site; names the event (`malloc`, `parse_request_1a`). */
  readonly symbol?: string | undefined;
  readonly symbolOffset?: bigint;
  /** Names the event when there is no symbol (`addr_401136`); the file offset otherwise. */
  readonly vaddr?: bigint;
}

/** An event this session defined in uprobe_events. */
export interface DefinedEvent {
  readonly group: string;
  readonly event: string;
  /** The line written to uprobe_events (the kernel lists it with the offset padded). */
  readonly line: string;
  readonly site: TracefsSite;
}

export interface TracefsSessionOptions {
  /** Where tracefs is mounted: ensureTracefs() from host/. */
  readonly tracefs: string;
  /** The process owning the group and instance; this process by default. */
  readonly ownerPid?: number;
}

export interface InstanceOptions {
  /** Ring-buffer size per CPU, in KiB; the kernel's default when absent. */
  readonly bufferSizeKb?: number;
}

export interface FilterOptions {
  /** Also trace tasks the listed ones create later (forks and threads): options/event-fork. */
  readonly followForks: boolean;
}

/** One CPU's ring-buffer counters (`per_cpu/cpuN/stats` of the instance). */
export interface CpuStats {
  readonly cpu: number;
  /** Events in the buffer now. */
  readonly entries: number;
  /** Events overwritten before they were read (the buffer was full). */
  readonly overrun: number;
  readonly commitOverrun: number;
  /** Events dropped because the buffer was full and not overwritable. */
  readonly dropped: number;
  /** Events read so far. */
  readonly read: number;
}

/** Hits of one event, from uprobe_profile. */
export interface EventHits {
  readonly event: string;
  readonly hits: number;
  /** Missed hits, when the kernel reports them (its uprobe_profile lists hits only). */
  readonly misses: number | undefined;
}

export interface SessionStats {
  readonly cpus: readonly CpuStats[];
  /** Sums over the CPUs. */
  readonly entries: number;
  readonly overrun: number;
  readonly dropped: number;
  readonly read: number;
  /** One row per event of this session still defined. */
  readonly events: readonly EventHits[];
}

/** One entry of tracefs error_log: the kernel's complaint about one command. */
interface ErrorLogEntry {
  readonly message: string;
  readonly command: string;
  /** Column of the kernel's caret in the command, when it gave one. */
  readonly caret: number | undefined;
  readonly text: string;
}

/** The entries of error_log text, oldest first. */
function parseErrorLog(text: string): ErrorLogEntry[] {
  const lines = text.split('\n');
  const entries: ErrorLogEntry[] = [];
  for (let i = 0; i < lines.length; i++) {
    const head = /^\[[^\]]*\]\s*[^:]+: error: (.*)$/.exec(lines[i]!);
    const command = /^(\s*Command: )(.*)$/.exec(lines[i + 1] ?? '');
    if (head === null || command === null) continue;
    const caretLine = lines[i + 2] ?? '';
    const column = /^\s*\^\s*$/.test(caretLine)
      ? caretLine.indexOf('^') - command[1]!.length
      : undefined;
    entries.push({
      message: head[1]!.trim(),
      command: command[2]!,
      caret: column !== undefined && column >= 0 ? column : undefined,
      text: lines.slice(i, column === undefined ? i + 2 : i + 3).join('\n'),
    });
  }
  return entries;
}

function parseCpuStats(cpu: number, text: string): CpuStats {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^([a-z ]+):\s*(\d+)\s*$/.exec(line);
    if (match !== null) values.set(match[1]!, Number(match[2]));
  }
  return {
    cpu,
    entries: values.get('entries') ?? 0,
    overrun: values.get('overrun') ?? 0,
    commitOverrun: values.get('commit overrun') ?? 0,
    dropped: values.get('dropped events') ?? 0,
    read: values.get('read events') ?? 0,
  };
}

/** uprobe_profile rows: `  PATH EVENT HITS [MISSES]`, in the order of uprobe_events. */
function parseProfile(text: string): { event: string; hits: number; misses?: number }[] {
  const rows = [];
  for (const line of text.split('\n')) {
    const match = /^\s*\S+\s+(\S+)\s+(\d+)(?:\s+(\d+))?\s*$/.exec(line);
    if (match === null) continue;
    rows.push({
      event: match[1]!,
      hits: Number(match[2]),
      ...(match[3] === undefined ? {} : { misses: Number(match[3]) }),
    });
  }
  return rows;
}

const MAX_INSTANCES_PER_PROCESS = 64;
/** Reads of uprobe_events and uprobe_profile that may find them changed in between. */
const HITS_READS = 5;

/**
 * upscope's control of tracefs for one session: its uprobe events in the group
 * `upscope_<ownerPid>` and its own instance `instances/upscope_<ownerPid>` (own ring buffer,
 * `trace_clock` mono, pid filter). Every call is synchronous. `close()` removes everything
 * the session made and may be called any number of times.
 *
 * Order of use: `define()` the events, `createInstance()`, `filterPids()` if needed,
 * `enable()`; read the instance's buffers (through `instancePath`); `stats()`; `close()`.
 * Everything is reached through a descriptor of the mount held until close(), so that an
 * unmount meanwhile changes nothing.
 */
export class TracefsSession {
  /** Where tracefs is mounted (as given; named in messages). */
  readonly tracefs: string;
  readonly ownerPid: number;
  /** The uprobe event group: `upscope_<ownerPid>`. */
  readonly group: string;
  /** A descriptor of tracefs's root, held from the start to the end of close(). */
  #rootFd: number | undefined;
  #root: string;
  #instance: string | undefined;
  readonly #events: DefinedEvent[] = [];
  #closed = false;

  constructor(options: TracefsSessionOptions) {
    this.tracefs = options.tracefs;
    this.ownerPid = options.ownerPid ?? process.pid;
    this.group = sessionGroupName(this.ownerPid);
    // Everything goes through a descriptor of the mount, so that what the session made can
    // still be removed when tracefs is unmounted under it (umount -l keeps a mount in use
    // alive, reachable only through descriptors opened before).
    try {
      this.#rootFd = openSync(this.tracefs, constants.O_RDONLY | constants.O_DIRECTORY);
      this.#root = `/proc/self/fd/${this.#rootFd}`;
    } catch {
      // Not there: the first access fails with what is missing.
      this.#root = this.tracefs;
    }
  }

  /**
   * The path the session reaches tracefs by: through its descriptor of the mount
   * (`/proc/self/fd/N`), which stays valid if tracefs is unmounted meanwhile.
   */
  get root(): string {
    return this.#root;
  }

  /** The events defined and not yet removed, in the order they were defined. */
  get events(): readonly DefinedEvent[] {
    return [...this.#events];
  }

  /** The instance's name (`upscope_<pid>`), once createInstance() has run. */
  get instanceName(): string | undefined {
    return this.#instance;
  }

  /** The instance's directory under tracefs, once createInstance() has run. */
  get instanceDir(): string | undefined {
    return this.#instance === undefined ? undefined : `${this.tracefs}/instances/${this.#instance}`;
  }

  /**
   * The same directory as the session reaches it, through its descriptor of the mount
   * (root): what to read and write the instance's files by.
   */
  get instancePath(): string | undefined {
    return this.#instance === undefined ? undefined : `${this.#root}/instances/${this.#instance}`;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Define one uprobe event per site in the session's group, appending one line per site to
   * uprobe_events (never truncating it: other tools' events stay). Event names come from
   * eventName() and are made unique in the group (`_2`, `_3`...). When the kernel refuses a
   * line, the events this call defined are removed again and a ProbeError
   * ERR_KERNEL_REFUSED_PROBE carries the kernel's error_log message, the line and its caret.
   */
  /**
   * Define an event for each site, in order; `onDefined` hears how many are defined so far,
   * now and then and after the last.
   */
  define(
    sites: readonly TracefsSite[],
    onDefined?: (done: number, total: number) => void,
  ): DefinedEvent[] {
    this.#assertOpen('define events');
    const eventsFile = `${this.#root}/uprobe_events`;
    const listed = parseUprobeEvents(readControl(eventsFile) ?? '');
    const namer = new EventNamer(listed.filter((e) => e.group === this.group).map((e) => e.event));
    const added: DefinedEvent[] = [];
    for (const site of sites) {
      const base = eventName(site.symbol, site.symbolOffset ?? 0n, site.vaddr ?? site.fileOffset);
      const event = namer.take(base);
      const line = uprobeEventLine(site, this.group, event);
      if (/[\n\0]/.test(line)) {
        this.#removeQuietly(added);
        throw new ProbeError(
          'ERR_KERNEL_REFUSED_PROBE',
          `Cannot define uprobe event ${quote(`${this.group}/${event}`)}: its line holds a line break or NUL (in ${quote(site.target.path)}?), which uprobe_events cannot take`,
        );
      }
      try {
        writeControl(eventsFile, `${line}\n`, 'append');
      } catch (err) {
        const refusal = this.#refusal(line, err);
        this.#removeQuietly(added);
        throw refusal;
      }
      const defined = { group: this.group, event, line, site };
      added.push(defined);
      this.#events.push(defined);
      // Fault tests stop here: one event defined, the rest not yet.
      pausePoint('attaching');
      if (onDefined !== undefined && added.length % DEFINED_EVERY === 0) {
        onDefined(added.length, sites.length);
      }
    }
    onDefined?.(added.length, sites.length);
    return added;
  }

  /**
   * Create the session's instance (`instances/upscope_<pid>`, or `upscope_<pid>_<n>` when this
   * process already has one) with `trace_clock` mono, so that timestamps compare with
   * process.hrtime.bigint(), and the ring-buffer size asked for. Returns its directory; a
   * second call returns the same one.
   */
  createInstance(options: InstanceOptions = {}): string {
    this.#assertOpen('create an instance');
    if (this.#instance === undefined) {
      const name = this.#makeInstanceDir();
      this.#instance = name;
      try {
        this.#write(`${this.instancePath}/trace_clock`, 'mono');
        if (options.bufferSizeKb !== undefined) {
          const size = options.bufferSizeKb;
          if (!Number.isSafeInteger(size) || size <= 0) {
            throw new ProbeError(
              'ERR_TRACEFS_WRITE',
              `Cannot size the ring buffer of instance ${quote(name)}: ${quote(size)} KiB is not a positive whole number`,
            );
          }
          this.#write(`${this.instancePath}/buffer_size_kb`, String(size));
        }
      } catch (err) {
        removeInstanceDir(`${this.#root}/instances/${name}`);
        this.#instance = undefined;
        throw err;
      }
    }
    return this.instanceDir!;
  }

  /** Enable events (all of this session's by default) in the session's instance. */
  enable(events: readonly DefinedEvent[] = this.#events): void {
    this.#assertOpen('enable events');
    for (const event of events) {
      this.#write(this.#enableFile(event), '1');
      this.#disabled.delete(event);
    }
  }

  /**
   * Disable events (all of this session's by default) in the session's instance, return
   * probes first: the kernel disables one only once no return trampoline holds on to
   * uprobes, and a call of a function that never returns (main) held on for as long as the
   * program kept setting trampolines (see BpfSession.detach()).
   */
  disable(events: readonly DefinedEvent[] = this.#events): void {
    if (this.#instance === undefined) return;
    const ordered = returnsFirst(events, events.length > 1 ? this.#hitsIfRead() : []);
    watchRemoval(ordered.some(isReturn), (step) => {
      for (const event of ordered) {
        this.#disableOne(event);
        step();
        // Fault tests stop here: one event disabled, the rest still recording.
        pausePoint('detaching');
      }
    });
  }

  /** The events disabled since they were last enabled (close() leaves them be). */
  readonly #disabled = new Set<DefinedEvent>();

  #disableOne(event: DefinedEvent): void {
    try {
      writeControl(this.#enableFile(event), '0', 'replace');
    } catch (err) {
      if (errnoOf(err) !== 'ENOENT') throw this.#writeError(this.#enableFile(event), '0', err);
    }
    this.#disabled.add(event);
  }

  /**
   * Record events only from these tasks (the kernel compares each task's pid, i.e. thread
   * id: list every thread of a running process), in the instance's `set_event_pid`, replacing
   * any earlier list; an empty list removes the filter. With `followForks`, tasks the listed
   * ones create afterwards (children and threads) are added by the kernel (`event-fork`).
   */
  filterPids(pids: readonly number[], options: FilterOptions): void {
    this.#assertOpen('filter by pid');
    const dir = this.#requireInstance('filter by pid');
    for (const pid of pids) {
      if (!Number.isSafeInteger(pid) || pid <= 0) {
        throw new ProbeError(
          'ERR_TRACEFS_WRITE',
          `Cannot filter events by pid: ${quote(pid)} is not a pid`,
        );
      }
    }
    // Fork-following first, so that a task forked while the list is written is kept.
    this.#write(`${dir}/options/event-fork`, options.followForks ? '1' : '0');
    this.#write(`${dir}/set_event_pid`, pids.join(' '));
  }

  /**
   * Never record events of these tasks (thread ids), nor of the threads and children they
   * create afterwards (`event-fork`), in the instance's `set_event_notrace_pid`, replacing any
   * earlier list: upscope's own threads, in a trace of every process.
   */
  excludePids(pids: readonly number[]): void {
    this.#assertOpen('leave out pids');
    const dir = this.#requireInstance('leave out pids');
    for (const pid of pids) {
      if (!Number.isSafeInteger(pid) || pid <= 0) {
        throw new ProbeError(
          'ERR_TRACEFS_WRITE',
          `Cannot leave out the events of pid ${quote(pid)}: it is not a pid`,
        );
      }
    }
    this.#write(`${dir}/options/event-fork`, '1');
    this.#write(`${dir}/set_event_notrace_pid`, pids.join(' '));
  }

  /**
   * The instance's ring-buffer counters per CPU and their sums (zero before createInstance()),
   * and each event's hits from uprobe_profile.
   */
  stats(): SessionStats {
    const cpus: CpuStats[] = [];
    const dir = this.instancePath;
    if (dir !== undefined && existsSync(`${dir}/per_cpu`)) {
      for (const entry of readdirSync(`${dir}/per_cpu`)) {
        const cpu = /^cpu(\d+)$/.exec(entry);
        if (cpu === null) continue;
        const text = readControl(`${dir}/per_cpu/${entry}/stats`);
        if (text !== undefined) cpus.push(parseCpuStats(Number(cpu[1]), text));
      }
      cpus.sort((a, b) => a.cpu - b.cpu);
    }
    const sum = (key: 'entries' | 'overrun' | 'dropped' | 'read') =>
      cpus.reduce((total, cpu) => total + cpu[key], 0);
    return {
      cpus,
      entries: sum('entries'),
      overrun: sum('overrun'),
      dropped: sum('dropped'),
      read: sum('read'),
      events: this.#hitsIfRead(),
    };
  }

  /**
   * Disable this session's events, remove its instance and its events. Safe to call again
   * (it does nothing once everything is gone); never fails for something already removed.
   * Throws ERR_TRACEFS_WRITE only when something stays after retrying (a later close() or
   * `upscope clean` after this process exits removes it).
   */
  close(): void {
    this.#closed = true;
    const failures: string[] = [];
    const attempt = (what: string, action: () => void) => {
      try {
        action();
      } catch (err) {
        failures.push(`${what}: ${errnoOf(err) ?? (err as Error).message}`);
      }
    };
    if (this.#instance !== undefined) {
      const name = this.#instance;
      const enabled = this.#events.filter((event) => !this.#disabled.has(event));
      watchRemoval(enabled.some(isReturn), (step) => {
        for (const event of returnsFirst(enabled, this.#hitsIfRead())) {
          attempt(`disable ${event.event}`, () => this.#disableOne(event));
          step();
          pausePoint('detaching');
        }
      });
      attempt(`remove instance ${name}`, () => {
        removeInstanceDir(`${this.#root}/instances/${name}`);
        this.#instance = undefined;
      });
    }
    for (const event of [...this.#events]) {
      attempt(`remove event ${event.group}/${event.event}`, () => {
        removeEvent(this.#root, event.group, event.event);
        this.#events.splice(this.#events.indexOf(event), 1);
      });
    }
    if (failures.length === 0 && this.#rootFd !== undefined) {
      closeSync(this.#rootFd);
      this.#rootFd = undefined;
      this.#root = this.tracefs;
    }
    if (failures.length > 0) {
      throw new ProbeError(
        'ERR_TRACEFS_WRITE',
        `Cannot remove everything session ${quote(this.group)} defined: ${failures.join('; ')}`,
        { hints: ['Run "upscope clean" after this process exits to remove what is left'] },
      );
    }
  }

  #assertOpen(action: string): void {
    if (this.#closed) throw new InternalError(`Cannot ${action}: the tracefs session is closed`);
  }

  #requireInstance(action: string): string {
    const dir = this.instancePath;
    if (dir === undefined) {
      throw new InternalError(`Cannot ${action}: createInstance() has not run`);
    }
    return dir;
  }

  #enableFile(event: DefinedEvent): string {
    const dir = this.#requireInstance('enable or disable events');
    return `${dir}/events/${event.group}/${event.event}/enable`;
  }

  #makeInstanceDir(): string {
    for (let ordinal = 1; ordinal <= MAX_INSTANCES_PER_PROCESS; ordinal++) {
      const name = sessionInstanceName(this.ownerPid, ordinal);
      try {
        mkdirSync(`${this.#root}/instances/${name}`);
        return name;
      } catch (err) {
        if (errnoOf(err) === 'EEXIST') continue;
        throw new ProbeError(
          'ERR_TRACEFS_WRITE',
          `Cannot create tracefs instance ${quote(name)}: ${errnoOf(err) ?? (err as Error).message}`,
          { cause: err, hints: [`Check that ${quote(`${this.tracefs}/instances`)} exists`] },
        );
      }
    }
    throw new ProbeError(
      'ERR_TRACEFS_WRITE',
      `Cannot create a tracefs instance for pid ${this.ownerPid}: ${MAX_INSTANCES_PER_PROCESS} already exist`,
      { hints: ['Run "upscope clean" to remove stale ones'] },
    );
  }

  #write(path: string, value: string): void {
    try {
      writeControl(path, value, 'replace');
    } catch (err) {
      throw this.#writeError(path, value, err);
    }
  }

  #writeError(path: string, value: string, err: unknown): ProbeError {
    if (err instanceof ProbeError) return err;
    return controlError(`write ${quote(value)} to ${quote(this.#shown(path))}`, err);
  }

  /** A path under the session's root as the user knows it (under the mount point). */
  #shown(path: string): string {
    return path.startsWith(`${this.#root}/`)
      ? `${this.tracefs}${path.slice(this.#root.length)}`
      : path;
  }

  /** The kernel refused `line`: its error_log entry for it as a ProbeError. */
  #refusal(line: string, err: unknown): ProbeError {
    const errno = errnoOf(err) ?? 'error';
    const log = parseErrorLog(readControl(`${this.#root}/error_log`) ?? '');
    const entry = log.reverse().find((e) => e.command === line);
    const prefix = 'Line written: ';
    const hints = [`${prefix}${line}`];
    if (entry?.caret !== undefined) hints.push(`${' '.repeat(prefix.length + entry.caret)}^`);
    const reason =
      entry?.message ?? `the kernel answered ${errno} and error_log has no entry for it`;
    const name = /^[pr]:(\S+)/.exec(line)?.[1] ?? line;
    return new ProbeError(
      'ERR_KERNEL_REFUSED_PROBE',
      `Cannot define uprobe event ${quote(name)}: ${reason}`,
      {
        hints,
        details: { line, errno, ...(entry === undefined ? {} : { errorLog: entry.text }) },
        cause: err,
      },
    );
  }

  /** Remove events after a failed define(); what stays is left to close(). */
  #removeQuietly(events: readonly DefinedEvent[]): void {
    for (const event of events) {
      try {
        removeEvent(this.#root, event.group, event.event);
        this.#events.splice(this.#events.indexOf(event), 1);
      } catch {
        // Still listed in #events: close() tries again and reports it.
      }
    }
  }

  /**
   * #hits(), or none (hits and misses unknown) when the two files kept changing: the end of a
   * run is not failed for counts it only reports.
   */
  #hitsIfRead(): EventHits[] {
    try {
      return this.#hits();
    } catch (err) {
      if (err instanceof ProbeError) return [];
      throw err;
    }
  }

  /**
   * Hits per event of this session. uprobe_profile names an event without its group, in
   * uprobe_events' order: the events of one name (this session's and another's of the same
   * name) are in the same order in both. Matched name by name, the events other tools add or
   * remove between the two reads do not matter unless they share a name with one of ours
   * (tests running side by side, each defining and removing events all the time, changed
   * one file or the other between the reads: matched as a whole, the reads failed).
   */
  #hits(): EventHits[] {
    const ours = new Set(this.#events.map((e) => e.event));
    for (let attempt = 0; attempt < HITS_READS; attempt++) {
      const listed = parseUprobeEvents(readControl(`${this.#root}/uprobe_events`) ?? '');
      const profile = parseProfile(readControl(`${this.#root}/uprobe_profile`) ?? '');
      const named = new Map<string, { hits: number; misses?: number }[]>();
      for (const row of profile) {
        if (!ours.has(row.event)) continue;
        const rows = named.get(row.event);
        if (rows === undefined) named.set(row.event, [row]);
        else rows.push(row);
      }
      const taken = new Map<string, number>();
      const rows: EventHits[] = [];
      for (const e of listed) {
        if (!ours.has(e.event)) continue;
        const at = taken.get(e.event) ?? 0;
        taken.set(e.event, at + 1);
        const row = named.get(e.event)?.[at];
        if (row !== undefined && e.group === this.group) {
          rows.push({ event: e.event, hits: row.hits, misses: row.misses });
        }
      }
      // An event of one of these names came or went between the reads: read again.
      const same = [...named].every(([event, rows]) => taken.get(event) === rows.length);
      if (same && taken.size === named.size) return rows;
    }
    throw new ProbeError(
      'ERR_TRACEFS_WRITE',
      'Cannot read probe hits: uprobe_events and uprobe_profile kept changing while read',
    );
  }
}

/** A return probe's event (a uretprobe: `r:` in uprobe_events). */
const isReturn = (event: DefinedEvent) => event.line.startsWith('r');

/**
 * `events` with the return probes (`r:` lines) first, the most hit of them first (each one
 * disabled waits for as long as the others set trampolines on a thread with a call that
 * never returns: the hot ones gone, that ends, unless two or more go on being hit; the kernel
 * disables events one at a time under a lock, so no order or thread helps then), then the
 * others in their order.
 */
function returnsFirst(events: readonly DefinedEvent[], hits: readonly EventHits[]): DefinedEvent[] {
  const hitsOf = new Map(hits.map((h) => [h.event, h.hits]));
  const returns = events
    .filter(isReturn)
    .sort((a, b) => (hitsOf.get(b.event) ?? 0) - (hitsOf.get(a.event) ?? 0));
  return [...returns, ...events.filter((event) => !isReturn(event))];
}
