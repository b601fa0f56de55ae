import {
  closeSync,
  existsSync,
  fstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  renameSync,
  rmdirSync,
  type Stats,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import {
  CALL_RECORD_BYTES,
  CALLS_HEADER_BYTES,
  type CallObserver,
  type CallRecord,
  CallRecordDecoder,
  CallTreeBuilder,
  checkCallsHeader,
  encodeCallFields,
  encodeCallRecord,
  encodeCallsHeader,
  type ThreadCalls,
} from '../aggregate/index.js';
import { RECORD } from '../arch/index.js';
import { ProbeError } from '../errors/index.js';
import type { ProbeEvent } from '../events/index.js';
import {
  type Exit,
  isRunning,
  makeDirectory,
  type ProcessIdentity,
  processIdentity,
} from '../host/index.js';
import {
  exitsByIndex,
  notLoadedNotes,
  type ProbeSite,
  type ReturnProbeMode,
  type SkippedSite,
} from '../plan/index.js';
import { openElf } from '../symbols/index.js';
import { listFunctions } from './list.js';
import { PtraceRun } from './ptrace-run.js';
import {
  type Attachment,
  type AttachOptions,
  checkTargetOptions,
  probeName,
  Tracer,
} from './tracer.js';

/** The files of a recording directory. */
export const CALLS_FILE = 'calls.bin';
export const INDEX_FILE = 'index.json';

/** A recorded function: its name and the file that holds it. */
export interface RecordedFunction {
  readonly name: string;
  readonly object: string;
  /**
   * Which of its probes the kernel single-steps (runs out of line after a trap, not
   * emulated: a first instruction such as `cmp` or `mov`, and a `ret` probed in place), on
   * the kernel engines: each call costs those traps more, and its times include them. Absent
   * when the kernel emulates them all (or on the ptrace and inject engines).
   */
  readonly stepped?: SteppedProbes | undefined;
  /**
   * Its entry is probed, its returns are not (they cannot be found safely: `upscope resolve
   * r:FUNC` says why): its calls are `call` records, counted, not timed, and what it calls is
   * under its caller in the tree.
   */
  readonly untimed?: true | undefined;
}

/** A function's probes the kernel single-steps: at its entry, at a return, or both. */
export type SteppedProbes = 'entry' | 'return' | 'entry and return';

/** The JSON index of a recording: what its records' ids mean, and how the recording went. */
export interface RecordingIndex {
  readonly format: 'upscope-calls';
  readonly version: number;
  readonly command: string | undefined;
  readonly pid: number | undefined;
  readonly engine: RecordEngine;
  readonly startedAt: string;
  /** Function ids are indexes into this list. */
  readonly functions: readonly RecordedFunction[];
  readonly objects: readonly string[];
  /**
   * The threads whose calls were recorded. A Go function's calls are recorded per goroutine
   * (one may run on several threads, and a thread runs many): such a "thread" has an id of
   * GOROUTINE_TIDS_FROM and more, and `goroutine` (its g's address, hex).
   */
  readonly threads: readonly RecordedThread[];
  /** False until the recording ended cleanly (a killed upscope leaves it false). */
  readonly complete: boolean;
  /**
   * The upscope that writes it: while it runs, a recording not yet complete is being made,
   * not left by a killed upscope.
   */
  readonly recorder?: ProcessIdentity | undefined;
  readonly records: number;
  /** Events the kernel dropped (ring buffer full): calls or returns missing from the records. */
  readonly lost: number;
  readonly exit?: { code?: number | undefined; signal?: string | undefined } | undefined;
}

/** A thread of a recording's calls: an OS thread, or a goroutine (see RecordingIndex.threads). */
export interface RecordedThread {
  readonly tid: number;
  readonly pid: number;
  readonly comm: string;
  readonly goroutine?: string | undefined;
}

/**
 * The ids of goroutines' calls in a recording begin here, above every thread's id (the
 * kernel's pid_max is at most 2^22).
 */
export const GOROUTINE_TIDS_FROM = 0x8000_0000;

/** How a recording's thread is named: `thread 4707`, `goroutine 0xc000102000`. */
export function threadLabel(thread: RecordedThread | undefined, tid: number): string {
  return thread?.goroutine === undefined ? `thread ${tid}` : `goroutine ${thread.goroutine}`;
}

/**
 * The ids of a recording's goroutines, by process and g: a goroutine's calls are one tree,
 * whichever threads ran them (a g is used again only by a goroutine that begins after the
 * one before it ended).
 */
class GoroutineIds {
  readonly #ids = new Map<number, Map<bigint, number>>();
  #count = 0;

  idOf(pid: number, g: bigint): number {
    let ofProcess = this.#ids.get(pid);
    if (ofProcess === undefined) {
      ofProcess = new Map();
      this.#ids.set(pid, ofProcess);
    }
    let id = ofProcess.get(g);
    if (id === undefined) {
      id = GOROUTINE_TIDS_FROM + this.#count++;
      ofProcess.set(g, id);
    }
    return id;
  }
}

/** `2 threads`, `9 goroutines`, `1 thread and 9 goroutines`: what a recording's calls were made on. */
export function threadsSaid(threads: readonly RecordedThread[]): string {
  const goroutines = threads.filter((t) => t.goroutine !== undefined).length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  const own = threads.length - goroutines;
  if (goroutines === 0) return plural(own, 'thread');
  const of = plural(goroutines, 'goroutine');
  return own === 0 ? of : `${plural(own, 'thread')} and ${of}`;
}

const WRITE_CHUNK = 64 * 1024;
/** Records held at most this long before they are written (a recording read as it is made). */
const FLUSH_EVERY_MS = 1000;

/**
 * Writes a recording as records come: a 64 KiB buffer flushed to calls.bin (memory stays
 * bounded), and index.json at the start (not complete) and again at the end.
 */
export class RecordingWriter {
  readonly #dir: string;
  readonly #fd: number;
  readonly #buffer = new Uint8Array(WRITE_CHUNK);
  readonly #view = new DataView(this.#buffer.buffer);
  #used = 0;
  #records = 0;
  readonly #threads = new Map<number, RecordedThread>();
  #index: RecordingIndex;
  #closed = false;
  #timer: NodeJS.Timeout | undefined;
  /** Why the last timely write failed: said by the next write. */
  #failed: unknown;

  private constructor(dir: string, fd: number, index: RecordingIndex) {
    this.#dir = dir;
    this.#fd = fd;
    this.#index = index;
  }

  /**
   * Throws ERR_USAGE when `dir` cannot take a recording (a file, or a directory of other
   * files): checked before anything is attached, and again when the writer is made.
   */
  static check(dir: string): void {
    if (!existsSync(dir)) return;
    if (!statSync(dir).isDirectory()) {
      throw new ProbeError('ERR_USAGE', `Cannot record into "${dir}": it is not a directory`, {
        hints: ['Give -o a new directory name'],
      });
    }
    const files = readdirSync(dir);
    if (files.length > 0 && !files.includes(INDEX_FILE)) {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot record into "${dir}": it holds other files, not an upscope recording`,
        { hints: ['Give -o a new or empty directory'] },
      );
    }
  }

  /**
   * check(), and makes `dir` when it is missing (with the directories above it), so that a
   * path that cannot be one (under /proc, read-only, not permitted, through a file) is said
   * before anything is attached. Returns whether it made `dir`.
   */
  static prepare(dir: string): boolean {
    RecordingWriter.check(dir);
    try {
      return makeDirectory(dir);
    } catch (err) {
      throw directoryError(dir, err);
    }
  }

  /**
   * Starts a recording in `dir`: made if missing; one that holds an older recording is
   * overwritten; any other directory with files in it is refused.
   */
  static create(
    dir: string,
    index: Omit<RecordingIndex, 'format' | 'version' | 'complete' | 'records' | 'threads'>,
  ): RecordingWriter {
    RecordingWriter.check(dir);
    try {
      makeDirectory(dir);
      const fd = openSync(join(dir, CALLS_FILE), 'w');
      writeSync(fd, encodeCallsHeader());
      const writer = new RecordingWriter(dir, fd, {
        ...index,
        format: 'upscope-calls',
        version: 1,
        complete: false,
        recorder: processIdentity(),
        records: 0,
        threads: [],
      });
      writer.#writeIndex();
      writer.#timer = setInterval(() => writer.#flushHeld(), FLUSH_EVERY_MS);
      writer.#timer.unref();
      return writer;
    } catch (err) {
      throw writeError(dir, err);
    }
  }

  /** How many records were written. */
  get records(): number {
    return this.#records;
  }

  /** Notes a thread's process and name (the first time it is seen), or a goroutine's. */
  thread(tid: number, pid: number, comm: string, goroutine?: bigint): void {
    if (tid === this.#lastTid) return;
    this.#lastTid = tid;
    if (this.#threads.has(tid)) return;
    this.#threads.set(
      tid,
      goroutine === undefined
        ? { tid, pid, comm }
        : { tid, pid, comm, goroutine: `0x${goroutine.toString(16)}` },
    );
  }

  /** The thread noted last: its records come in runs. */
  #lastTid = -1;

  write(record: CallRecord): void {
    if (this.#used + CALL_RECORD_BYTES > WRITE_CHUNK) this.#flush();
    encodeCallRecord(record, this.#buffer, this.#used);
    this.#used += CALL_RECORD_BYTES;
    this.#records++;
  }

  /**
   * write() of a record given by its fields (no object made: a recording's hot path); its
   * time a number where exact (see encodeCallFields()).
   */
  writeFields(
    kind: CallRecord['kind'],
    tid: number,
    pid: number,
    fn: number,
    timeNs: number | bigint,
  ): void {
    if (this.#used + CALL_RECORD_BYTES > WRITE_CHUNK) this.#flush();
    encodeCallFields(this.#view, this.#used, kind, tid, pid, fn, timeNs);
    this.#used += CALL_RECORD_BYTES;
    this.#records++;
  }

  /** Flushes the records and writes the final index. Idempotent. */
  finish(end: { lost: number; exit?: Exit | undefined }): RecordingIndex {
    if (this.#closed) return this.#index;
    clearInterval(this.#timer);
    this.#flush();
    closeSync(this.#fd);
    this.#closed = true;
    this.#index = {
      ...this.#index,
      complete: true,
      records: this.#records,
      lost: end.lost,
      threads: [...this.#threads.values()],
      exit: end.exit === undefined ? undefined : { code: end.exit.code, signal: end.exit.signal },
    };
    this.#writeIndex();
    return this.#index;
  }

  /** Closes the file without marking the recording complete (a failure). */
  abandon(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    try {
      this.#flush();
    } catch {
      // the failure being reported is the one that matters
    }
    closeSync(this.#fd);
  }

  /** Writes the records held, on a timer: a write that fails is said by the next flush. */
  #flushHeld(): void {
    if (this.#used === 0 || this.#closed || this.#failed !== undefined) return;
    try {
      this.#flush();
    } catch (err) {
      this.#failed = err;
    }
  }

  #flush(): void {
    if (this.#failed !== undefined) throw this.#failed;
    let at = 0;
    try {
      while (at < this.#used) at += writeSync(this.#fd, this.#buffer, at, this.#used - at);
    } catch (err) {
      throw writeError(this.#dir, err);
    }
    this.#used = 0;
  }

  #writeIndex(): void {
    const path = join(this.#dir, INDEX_FILE);
    try {
      writeFileSync(`${path}.tmp`, `${JSON.stringify(this.#index)}\n`);
      renameSync(`${path}.tmp`, path);
    } catch (err) {
      throw writeError(this.#dir, err);
    }
  }
}

/** System errors of making and writing a recording, in words. */
const WRITE_ERRORS: Readonly<Record<string, string>> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'the disk quota is exceeded',
  EACCES: 'permission denied',
  EPERM: 'the operation is not permitted there',
  EROFS: 'the file system is read-only',
  ENOTDIR: 'a part of its path is a file',
};

/** ERR_RECORDING_WRITE for a system error: `what` went wrong, in words where known. */
function recordingError(what: string, err: unknown, hint: string, words = WRITE_ERRORS) {
  const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
  return new ProbeError(
    'ERR_RECORDING_WRITE',
    `${what}: ${words[code] ?? (err as Error).message} (${code})`,
    { hints: [hint], cause: err },
  );
}

/** Why `dir` cannot be made (RecordingWriter.prepare()). */
function directoryError(dir: string, err: unknown): ProbeError {
  return recordingError(
    `Cannot record into "${dir}"`,
    err,
    'Give -o a directory that can be made and written, e.g. -o ./rec',
    {
      ...WRITE_ERRORS,
      ENOENT: "it cannot be made there (a directory of the kernel's, such as /proc, takes none)",
    },
  );
}

function writeError(dir: string, err: unknown): ProbeError {
  if (err instanceof ProbeError) return err;
  return recordingError(
    `Cannot write the recording "${dir}"`,
    err,
    'Free space there, or give -o a directory on another file system',
  );
}

/** A recording read back: its index, each thread's calls, and what was wrong with it. */
export interface Recording {
  readonly dir: string;
  readonly index: RecordingIndex;
  /** Each thread's calls (their `roots` empty when read with `keep: false`). */
  readonly threads: ThreadCalls[];
  /** Records read. */
  readonly records: number;
  /** Why part of it could not be read or may be missing (each a sentence); empty when none. */
  readonly problems: string[];
}

/** How far the reading of a recording has got. */
export interface RecordingProgress {
  /** Bytes of calls.bin read, and its size. */
  readonly bytes: number;
  readonly totalBytes: number;
  /** Records read so far. */
  readonly records: number;
}

/**
 * Reads a recording directory, a chunk at a time, into each thread's call tree. A truncated
 * or corrupt calls file gives what came before the damage, and says so in `problems`; a
 * directory that is not a recording throws ERR_NOT_A_RECORDING.
 */
export function readRecording(dir: string, options: ReadOptions = {}): Recording {
  const steps = readSteps(dir, options);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** How a recording is read: what is told of its calls, and whether their tree is kept. */
export interface ReadOptions {
  /**
   * Told of each call as it begins and ends (a report or a graph made as the records are
   * read): given the recording's index, before its records are read.
   */
  readonly observers?: ((index: RecordingIndex) => readonly CallObserver[]) | undefined;
  /**
   * Keep each thread's call tree (default true). Without it, memory is each thread's open
   * calls however large the recording is, and `threads` have no `roots`.
   */
  readonly keep?: boolean | undefined;
}

/**
 * readRecording(), giving way to other work between chunks (a server stays responsive while
 * a large recording loads) and telling `onProgress` how far it got after each one.
 */
export async function loadRecording(
  dir: string,
  options: ReadOptions & {
    readonly onProgress?: ((progress: RecordingProgress) => void) | undefined;
    readonly signal?: AbortSignal | undefined;
  } = {},
): Promise<Recording> {
  const steps = readSteps(dir, options);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    options.onProgress?.(step.value);
    await new Promise((resolve) => setImmediate(resolve));
    if (options.signal?.aborted) {
      steps.return(undefined as never);
      throw new ProbeError('ERR_USAGE', `Stopped reading the recording "${dir}"`);
    }
  }
}

/** The reading of a recording: its progress after each chunk, the recording at the end. */
function* readSteps(
  dir: string,
  options: ReadOptions,
): Generator<RecordingProgress, Recording, undefined> {
  const notOne = (why: string, hint = 'Give a directory made by "upscope record -o DIR"') =>
    new ProbeError('ERR_NOT_A_RECORDING', `Cannot read the recording "${dir}": ${why}`, {
      hints: [hint],
    });
  if (!existsSync(dir)) throw notOne('no such directory');
  if (!statSync(dir).isDirectory()) throw notOne('it is not a directory');
  // Each file a regular one before it is opened: a FIFO's open waits for a writer.
  const file = (name: string) => {
    const path = join(dir, name);
    let stat: Stats;
    try {
      stat = statSync(path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw notOne(code === 'ENOENT' ? `it has no ${name}` : `cannot read its ${name} (${code})`);
    }
    if (!stat.isFile()) throw notOne(`its ${name} is not a regular file`);
    return path;
  };
  const indexPath = file(INDEX_FILE);
  let text: string;
  try {
    text = readFileSync(indexPath, 'utf8');
  } catch (err) {
    throw notOne(`cannot read its ${INDEX_FILE} (${(err as NodeJS.ErrnoException).code})`);
  }
  let index: RecordingIndex;
  try {
    index = JSON.parse(text) as RecordingIndex;
  } catch {
    throw notOne(`its ${INDEX_FILE} is not valid JSON`);
  }
  if (index.format !== 'upscope-calls' || !Array.isArray(index.functions)) {
    throw notOne(`its ${INDEX_FILE} is not an upscope call index`);
  }
  const problems: string[] = [];
  if (!index.complete) {
    problems.push(
      index.recorder !== undefined && isRunning(index.recorder)
        ? `the recording is still being made (by upscope, process ${index.recorder.pid}): the calls written so far are shown, those that have not returned yet as not returned`
        : 'the recording did not end cleanly (upscope was killed?): its last calls may be missing',
    );
  }
  if (index.lost > 0)
    problems.push(`${index.lost} events were lost while recording: some calls are missing`);
  let fd: number;
  const calls = file(CALLS_FILE);
  try {
    fd = openSync(calls, 'r');
  } catch (err) {
    throw notOne(`cannot read its ${CALLS_FILE} (${(err as NodeJS.ErrnoException).code})`);
  }
  const builder = new CallTreeBuilder({
    keep: options.keep ?? true,
    observers: options.observers?.(index) ?? [],
  });
  let records = 0;
  try {
    const totalBytes = fstatSync(fd).size;
    const header = new Uint8Array(CALLS_HEADER_BYTES);
    const got = readSync(fd, header, 0, CALLS_HEADER_BYTES, 0);
    const wrong = checkCallsHeader(header.subarray(0, got));
    if (wrong !== undefined) throw notOne(`${CALLS_FILE} is not a calls file: ${wrong}`);
    const decoder = new CallRecordDecoder(index.functions.length);
    const visit = builder.pushFields.bind(builder);
    const chunk = new Uint8Array(1 << 20);
    let position = CALLS_HEADER_BYTES;
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, position);
      if (n === 0) break;
      position += n;
      records += decoder.decode(chunk.subarray(0, n), visit);
      if (decoder.problem !== undefined) break;
      yield { bytes: position, totalBytes, records };
    }
    if (decoder.problem !== undefined) {
      problems.push(
        `${CALLS_FILE} is corrupt: ${decoder.problem}; the ${records} records before it are shown`,
      );
    } else if (decoder.partialBytes > 0) {
      problems.push(
        `${CALLS_FILE} is truncated: it ends ${decoder.partialBytes} bytes into a record; the ${records} whole records are shown`,
      );
    }
    if (index.complete && decoder.problem === undefined && records < index.records) {
      problems.push(
        `${CALLS_FILE} is truncated: it holds ${records} of the ${index.records} records written`,
      );
    }
  } finally {
    closeSync(fd);
  }
  return { dir, index, threads: builder.finish(), records, problems };
}

/** What to record and how: the options of record() (the directory aside). */
export interface RecordCallsOptions {
  /** Start this command (a shell command line) and record it. Exclusive with `pid`. */
  readonly command?: string | undefined;
  /** Record this running process (its threads, and the children it forks meanwhile). */
  readonly pid?: number | undefined;
  /** With `pid`: also the processes it has started already (a server's workers). */
  readonly children?: boolean | undefined;
  /** With `command`: a file descriptor for its stdout (this process's stdout by default). */
  readonly commandStdout?: number | undefined;
  /**
   * With `command`: how long it has to end after SIGTERM when the recording ends first
   * (default 5000 ms), before SIGKILL.
   */
  readonly killAfterMs?: number | undefined;
  /**
   * What to record: `TARGET` (every function of it) or `TARGET:PATTERN` (`libc:mem*`,
   * `./app:parse_*`); by default every function of the command's or process's executable.
   */
  readonly targets?: readonly string[] | undefined;
  /** Leave out functions whose name matches one of these globs. */
  readonly exclude?: readonly string[] | undefined;
  /** How returns are caught (default `auto`): see AttachOptions.returnProbes. */
  readonly returnProbes?: ReturnProbeMode | undefined;
  /** Fail when a pattern matches a function that cannot be probed, instead of skipping it. */
  readonly strict?: boolean | undefined;
  readonly engine?: 'bpf' | 'tracefs' | undefined;
  readonly bufferSizeKb?: number | undefined;
  readonly debugDirs?: readonly string[] | undefined;
  /** Ends the recording (the probes are removed; a -p process runs on). */
  readonly signal?: AbortSignal | undefined;
  readonly onNotice?: ((text: string) => void) | undefined;
  /** Progress of planning the functions (seconds for every function of a large program). */
  readonly onProgress?: AttachOptions['onProgress'];
  /**
   * Called once every probe is live, before a command is let run: how many functions are
   * recorded, the sites left out and what the plan warns of. What runs from then on is recorded (on the kernel
   * engines this comes before the recording's writer is made: their hits wait in the kernel's
   * buffer).
   */
  readonly onLive?:
    | ((recording: {
        functions: number;
        skipped: readonly SkippedSite[];
        warnings: readonly ProbeError[];
        /**
         * What the user should know of what is covered: children of `pid` started before
         * and not taken (no `children`), probed files it has not loaded yet.
         */
        notes: readonly string[];
      }) => void)
    | undefined;
}

/**
 * The engines a recording can be made with: bpf and tracefs (kernel uprobes, any process),
 * ptrace and inject (one process or command: an int3 per entry and return, or hooks patched
 * into it that record with no trap).
 */
export type RecordEngine = 'bpf' | 'tracefs' | 'ptrace' | 'inject';

export interface RecordOptions extends Omit<RecordCallsOptions, 'engine'> {
  /** The directory the recording goes to. */
  readonly dir: string;
  readonly engine?: RecordEngine | undefined;
}

/**
 * The probes of a recording under way, whichever engine places them: an Attachment (bpf,
 * tracefs), or a run of the ptrace engine (ptrace, inject) in its shape.
 */
export interface RecordingProbes {
  readonly sites: readonly ProbeSite[];
  readonly skipped: readonly SkippedSite[];
  /** What the user should know of the plan (see PlannedProbes.warnings). */
  readonly warnings: readonly ProbeError[];
  /** What the user should know about which processes are covered. */
  readonly notes: readonly string[];
  /** Resolves when the probes are gone (the program ended, or close()). */
  readonly ended: Promise<void>;
  /** How the command ended (with `command`), once it has. */
  readonly exit: Exit | undefined;
  /** Whether the process (`pid`) ended, which ended the recording. */
  readonly targetExited: boolean;
  /** Why the recording failed, if it did. */
  readonly error: unknown;
  /** Events lost so far (a ring buffer full). */
  stats(): { readonly lost: number };
  /** Remove the probes (a command is ended; a -p process runs on). Idempotent. */
  close(): Promise<void>;
  /** The same where nothing can wait (this process exits): a command is killed at once. */
  closeSync(): void;
}

/** A recording under way: its probes, and `done`, the index once the traced program ended. */
export interface CallRecorder {
  readonly attachment: RecordingProbes;
  readonly functions: number;
  /** How many calls and returns were written so far. */
  records(): number;
  /** Resolves when the attachment ended and the recording is written. */
  readonly done: Promise<RecordingIndex>;
}

/**
 * A recording's warnings, once a pattern: each is planned as an entry spec and a return spec
 * (`r:`), which warn of the same things (its IFUNC resolvers, a name's overloads); the
 * return spec's warning of a kind its entry spec gave is left out.
 */
function patternWarnings(warnings: readonly ProbeError[]): ProbeError[] {
  const said = new Set(warnings.map((w) => `${w.code} ${w.source?.text}`));
  return warnings.filter((w) => {
    const text = w.source?.text;
    return text === undefined || !text.startsWith('r:') || !said.has(`${w.code} ${text.slice(2)}`);
  });
}

/** The probe specs a recording's targets mean: entry and return of each function. */
export function recordSpecs(options: Pick<RecordOptions, 'command' | 'pid' | 'targets'>): string[] {
  const targets =
    options.targets !== undefined && options.targets.length > 0
      ? options.targets
      : [mainExecutable(options)];
  return targets.flatMap((target) => {
    const spec = /:/.test(target) ? target : `${target}:*`;
    return [spec, `r:${spec}`];
  });
}

function mainExecutable(options: Pick<RecordOptions, 'command' | 'pid'>): string {
  if (options.pid !== undefined) {
    try {
      return readlinkSync(`/proc/${options.pid}/exe`).replace(/ \(deleted\)$/, '');
    } catch {
      throw new ProbeError(
        'ERR_PROCESS_NOT_FOUND',
        `Cannot record process ${options.pid}: it does not exist or cannot be read`,
        {
          hints: ['Check the pid with: ps -p PID'],
        },
      );
    }
  }
  const program = options.command?.trim().split(/\s+/)[0];
  if (program === undefined || program === '') {
    throw new ProbeError('ERR_USAGE', 'Cannot record: give -c CMD or -p PID', {
      hints: ['e.g. upscope record -c ./app -o app.calls'],
    });
  }
  return program;
}

/**
 * A recording's ring buffer per CPU, KiB (trace's is 4096): a recording's reader follows the
 * kernel's trampolines by each entry's stack pointer, and at a million calls a second a
 * pause of the reader (its first optimisations, a collection) overran half this.
 */
const RECORD_BUFFER_KB = 8192;

/** Probes on the functions of a recording, and how their events become call records. */
interface Probed {
  readonly attachment: Attachment;
  /** Function ids are indexes into this list. */
  readonly functions: RecordedFunction[];
  /** The record an event is, or undefined for an event that is none (not an entry or return). */
  readonly toRecord: (event: ProbeEvent) => CallRecord | undefined;
}

/**
 * The functions probed at `sites`, once each by name, their ids (indexes) put in `ids`; with
 * `kernel` (the sites are the kernel's uprobes), which of their probes it single-steps.
 */
function functionsOf(
  sites: readonly ProbeSite[],
  ids: Map<string, number>,
  kernel: boolean,
): RecordedFunction[] {
  const functions: RecordedFunction[] = [];
  /** Per function: 1 its entry is single-stepped, 2 one of its returns is. */
  const stepped: number[] = [];
  /** Per function: 1 its entry is probed, 2 its return. */
  const probed: number[] = [];
  for (const site of sites) {
    const name = probeName(site);
    let id = ids.get(name);
    if (id === undefined) {
      id = functions.length;
      ids.set(name, id);
      functions.push({ name, object: site.target.path });
      stepped.push(0);
      probed.push(0);
    }
    probed[id]! |= site.kind === 'return' ? 2 : 1;
    if (!kernel) continue;
    if (site.handling.strategy === 'single-step') stepped[id]! |= 1;
    if (site.returns?.mode !== 'sites') continue;
    // By index: a kept plan's exits are no objects (see exitsByIndex()).
    const exits = exitsByIndex(site.returns);
    for (let e = 0; e < exits.exitCount; e++) {
      if (exits.exitHandling(e).strategy === 'single-step') stepped[id]! |= 2;
    }
  }
  return functions.map((fn, id) => {
    const bits = stepped[id]!;
    const untimed = probed[id] === 1 ? true : undefined;
    if (bits === 0 && untimed === undefined) return fn;
    // A literal, not a spread: tens of thousands of spreads each made a hidden class of its own.
    return {
      name: fn.name,
      object: fn.object,
      stepped:
        bits === 0 ? undefined : bits === 1 ? 'entry' : bits === 2 ? 'return' : 'entry and return',
      untimed,
    };
  });
}

/**
 * Per function id, 1 where its returns are not probed (RecordedFunction.untimed): read at
 * every record, as a byte, not a property of one of two shapes of object.
 */
function untimedIds(functions: readonly RecordedFunction[]): Uint8Array {
  const untimed = new Uint8Array(functions.length);
  functions.forEach((fn, id) => {
    if (fn.untimed === true) untimed[id] = 1;
  });
  return untimed;
}

/** Whether the ELF file at `path` has a .symtab (false when it cannot be read). */
function hasSymtab(path: string): boolean {
  try {
    const elf = openElf(path);
    try {
      return elf.hasSymtab;
    } finally {
      elf.close();
    }
  } catch {
    return false;
  }
}

/** A stripped object has only its exported functions: said, with how to get the others. */
async function sayStripped(
  functions: readonly RecordedFunction[],
  options: Pick<RecordCallsOptions, 'debugDirs' | 'onNotice'>,
): Promise<void> {
  for (const object of new Set(functions.map((f) => f.object))) {
    // A file with its own symbol table is not stripped: its symbols need not be read.
    if (hasSymtab(object)) continue;
    const listing = await listFunctions(object, { demangle: false, debugDirs: options.debugDirs });
    if (!listing.stripped) continue;
    const count = functions.filter((f) => f.object === object).length;
    options.onNotice?.(
      `"${listing.target.displayPath}" is stripped: only its ${count} exported functions (.dynsym) are recorded; rebuild it with -g, or give the directory of its debug file with --debug-dir DIR (a debuginfod client or the -dbgsym package gives one)`,
    );
  }
}

/**
 * The probes of a recording, attached; `prepare` is given the functions before a command is
 * let run (a recording's writer is made then): what it made, and its failure, are the
 * attach's.
 */
async function attachFunctions<T>(
  options: RecordCallsOptions,
  prepare: (functions: RecordedFunction[]) => T,
): Promise<Probed & { readonly prepared: T }> {
  const ids = new Map<string, number>();
  let functions: RecordedFunction[] = [];
  let untimed: Uint8Array = new Uint8Array(0);
  let prepared: T | undefined;
  const attachment = await new Tracer().attach(recordSpecs(options), {
    command: options.command,
    pid: options.pid,
    children: options.children,
    killAfterMs: options.killAfterMs,
    returnProbes: options.returnProbes,
    strict: options.strict,
    commandStdout: options.commandStdout,
    engine: options.engine ?? 'bpf',
    bufferSizeKb: options.bufferSizeKb ?? RECORD_BUFFER_KB,
    debugDirs: options.debugDirs,
    exclude: options.exclude,
    signal: options.signal,
    onNotice: options.onNotice,
    onProgress: options.onProgress,
    lean: true,
    readsNoFields: true,
    openAtThreadEnd: true,
    // Named while the kernel attaches them (50,000 functions: 60 ms).
    whileLinking: (sites) => {
      functions = functionsOf(sites, ids, true);
      untimed = untimedIds(functions);
    },
    onLive: ({ sites, skipped, warnings, notes }) => {
      const unloaded = options.pid === undefined ? [] : notLoadedNotes(sites, options.pid);
      options.onLive?.({
        functions: functions.length,
        skipped,
        warnings: patternWarnings(warnings),
        notes: [...notes, ...unloaded],
      });
    },
    // The kernel engines say when the probes are live, before whileAttaching.
    whileAttaching: async () => {
      await sayStripped(functions, options);
      prepared = prepare(functions);
    },
  });
  const goroutines = new GoroutineIds();
  const toRecord = (event: ProbeEvent): CallRecord | undefined => {
    const fn = ids.get(event.probe);
    if (fn === undefined || (event.kind !== 'entry' && event.kind !== 'return')) return undefined;
    const g = event.goroutine;
    return {
      kind:
        event.kind === 'entry'
          ? untimed[fn] === 1
            ? 'call'
            : event.noReturn === true
              ? 'lone-entry'
              : 'entry'
          : event.exit === 'unwind'
            ? 'unwind'
            : 'return',
      tid: g === undefined ? event.tid : goroutines.idOf(event.pid, g),
      pid: event.pid,
      fn,
      timeNs: event.timestampNs,
      goroutine: g,
    };
  };
  // whileAttaching ran (attach() resolves only after it), so `prepared` is set.
  return { attachment, functions, toRecord, prepared: prepared as T };
}

/**
 * Records every entry and return of the functions asked for, in the command or process, to
 * `options.dir`, until it ends (or the attachment is closed).
 */
export async function recordCalls(options: RecordOptions): Promise<CallRecorder> {
  // A bad -o is said before the probes go live (and the recording says it has begun); a
  // directory made for a run that fails before it records is removed again.
  const made = RecordingWriter.prepare(options.dir);
  try {
    return await recordCallsIn(options);
  } catch (err) {
    if (made) rmdirIfEmpty(options.dir);
    throw err;
  }
}

/** Removes `dir` if nothing is in it. */
function rmdirIfEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // Not empty (a recording began), or gone: left as it is.
  }
}

async function recordCallsIn(options: RecordOptions): Promise<CallRecorder> {
  if (options.engine === 'ptrace' || options.engine === 'inject') {
    return recordInProcess({ ...options, engine: options.engine });
  }
  const {
    attachment,
    functions,
    toRecord,
    prepared: writer,
  } = await attachFunctions({ ...options, engine: options.engine }, (functions) =>
    RecordingWriter.create(options.dir, {
      command: options.command,
      pid: options.pid,
      engine: options.engine ?? 'bpf',
      startedAt: new Date().toISOString(),
      functions,
      objects: [...new Set(functions.map((f) => f.object))],
      lost: 0,
    }),
  );
  let failure: unknown;
  attachment.on('*', (event) => {
    if (failure !== undefined) return;
    const record = toRecord(event);
    if (record === undefined) return;
    writer.thread(record.tid, event.pid, event.comm, record.goroutine);
    try {
      writer.write(record);
    } catch (err) {
      failure = err; // a full disk: the recording ends, and says why
      void attachment.close();
    }
  });
  const done = attachment.ended.then(() => {
    if (failure !== undefined) {
      writer.abandon();
      throw failure;
    }
    return writer.finish({ lost: attachment.stats().lost, exit: attachment.exit });
  });
  return { attachment, functions: functions.length, records: () => writer.records, done };
}

/** The records of the ring of a recording on the inject engine (48 MiB). */
const RECORD_RING_RECORDS = 1 << 18;

/**
 * The records of an inject ring of `kb` KiB at most (a power of two, 1,024 at least), or the
 * default for a recording.
 */
function ringRecordsOf(kb: number | undefined): number {
  if (kb === undefined) return RECORD_RING_RECORDS;
  const records = Math.floor((kb * 1024) / RECORD.bytes);
  return Math.max(1024, 2 ** Math.floor(Math.log2(Math.max(records, 1))));
}

/**
 * recordCalls() on the ptrace engine (an int3 at each entry and return, served while the
 * thread is stopped) or inject (hooks patched into the process that record each entry and
 * return into a ring it shares with upscope, no trap): one command or process, the loop of a
 * PtraceRun, whose records are written as it reads them.
 */
async function recordInProcess(
  options: RecordOptions & { readonly engine: 'ptrace' | 'inject' },
): Promise<CallRecorder> {
  // As Tracer.attach() checks them for the kernel engines (--children without -p, ...).
  checkTargetOptions(options, 'record');
  const ids = new Map<string, number>();
  // A hit's site is one of a few objects: its function's id found once for each.
  const idOf = new Map<ProbeSite, number | undefined>();
  const fnOf = (site: ProbeSite): number | undefined => {
    const known = idOf.get(site);
    if (known !== undefined || idOf.has(site)) return known;
    const fn = ids.get(probeName(site));
    idOf.set(site, fn);
    return fn;
  };
  let writer: RecordingWriter | undefined;
  let failure: unknown;
  let untimed: Uint8Array = new Uint8Array(0);
  const goroutines = new GoroutineIds();
  /** One record of a hit; false ends the run (a full disk: the recording ends, and says why). */
  const write = (
    kind: CallRecord['kind'],
    thread: number,
    pid: number,
    timeNs: number | bigint,
    site: ProbeSite,
    comm: string,
    goroutine?: bigint,
  ): boolean => {
    if (failure !== undefined || writer === undefined) return false;
    const fn = fnOf(site);
    if (fn === undefined) return true;
    const tid = goroutine === undefined ? thread : goroutines.idOf(pid, goroutine);
    writer.thread(tid, pid, comm, goroutine);
    try {
      writer.writeFields(
        kind === 'entry' && untimed[fn] === 1 ? 'call' : kind,
        tid,
        pid,
        fn,
        timeNs,
      );
    } catch (err) {
      failure = err;
      return false;
    }
    return true;
  };
  const run = await PtraceRun.start(
    recordSpecs(options),
    {
      command: options.command,
      pid: options.pid,
      children: options.children,
      returnProbes: options.returnProbes,
      strict: options.strict,
      commandStdout: options.commandStdout,
      killAfterMs: options.killAfterMs,
      debugDirs: options.debugDirs,
      exclude: options.exclude,
      engine: options.engine,
      // Two records a call: a ring four times the default (48 MiB shared with the process)
      // takes what comes while upscope's reading warms up (at 500,000 calls a second on one
      // thread: 35,000 records lost with the default ring, none with this one).
      ringRecords: options.engine === 'inject' ? ringRecordsOf(options.bufferSizeKb) : undefined,
      onNotice: options.onNotice,
      // A thread's end leaves its calls open (the tree says so), no unwind.
      openAtThreadEnd: true,
    },
    {
      returns: (spec) => spec.startsWith('r:'),
      bareHit: (event, tid, pid, timeNs, site, comm) =>
        write(event === 'return' ? 'return' : 'entry', tid, pid, timeNs, site, comm),
      hit: (hit, site, comm) =>
        write(
          hit.event !== 'return' ? 'entry' : hit.exit === 'unwind' ? 'unwind' : 'return',
          hit.tid,
          hit.pid,
          hit.timeNs,
          site,
          comm,
          // A Go function's calls by goroutine (%r14 under Go's register ABI; at an unwind,
          // the entry's registers).
          site.convention?.kind === 'go-register' ? hit.regs.get('r14') : undefined,
        ),
    },
  );
  const functions = functionsOf(run.sites, ids, false);
  untimed = untimedIds(functions);
  try {
    await sayStripped(functions, options);
    writer = RecordingWriter.create(options.dir, {
      command: options.command,
      pid: options.pid,
      engine: options.engine,
      startedAt: new Date().toISOString(),
      functions,
      objects: [...new Set(functions.map((f) => f.object))],
      lost: 0,
    });
  } catch (err) {
    run.stop();
    await run.ended;
    throw err;
  }
  // Children left out are said by the run itself (onNotice).
  options.onLive?.({
    functions: functions.length,
    skipped: run.skipped,
    warnings: patternWarnings(run.warnings),
    notes: options.pid === undefined ? [] : notLoadedNotes(run.sites, options.pid),
  });
  const created = writer;
  const probes: RecordingProbes = {
    sites: run.sites,
    skipped: run.skipped,
    warnings: patternWarnings(run.warnings),
    notes: [],
    ended: run.ended,
    get exit() {
      return run.exit;
    },
    get targetExited() {
      return options.pid !== undefined && run.processEnded;
    },
    get error() {
      return failure;
    },
    stats: () => ({ lost: run.lost }),
    close: async () => {
      run.stop();
      await run.ended;
    },
    closeSync: () => run.stop(),
  };
  const running = run.run().catch((err: unknown) => {
    failure ??= err;
  });
  const done = running.then(() => {
    if (failure !== undefined) {
      created.abandon();
      throw failure;
    }
    return created.finish({ lost: run.lost, exit: run.exit });
  });
  return { attachment: probes, functions: functions.length, records: () => created.records, done };
}

/**
 * The calls of a command or process as they are made: an async iterable of call records
 * (entries and returns, per thread in the order they were made), which a CallTreeBuilder
 * turns into each thread's call tree. See record().
 */
export class CallRecords implements AsyncIterable<CallRecord> {
  /** The probes; `attachment.stats()` says what was lost, `attachment.exit` how it ended. */
  readonly attachment: Attachment;
  /** The functions recorded: a record's `fn` is an index into this list. */
  readonly functions: readonly RecordedFunction[];
  readonly #toRecord: (event: ProbeEvent) => CallRecord | undefined;

  constructor(probed: Probed) {
    this.attachment = probed.attachment;
    this.functions = probed.functions;
    this.#toRecord = probed.toRecord;
  }

  /** A function id's name. */
  name(fn: number): string {
    return this.functions[fn]?.name ?? `#${fn}`;
  }

  /**
   * Every record until the command or process ends (or close()); throws if reading failed.
   * Records wait for the iterator from the start: iterate once, and soon.
   */
  async *[Symbol.asyncIterator](): AsyncGenerator<CallRecord, void, undefined> {
    for await (const batch of this.attachment.batches()) {
      for (const event of batch) {
        const record = this.#toRecord(event);
        if (record !== undefined) yield record;
      }
    }
  }

  /** Remove the probes (a command is ended; a -p process runs on). Idempotent. */
  close(): Promise<void> {
    return this.attachment.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Puts an entry and a return probe on every function asked for (by default every function of
 * the command's or process's executable; root, or CAP_BPF and CAP_PERFMON, with the bpf
 * engine) and gives each entry and return as a call record, as upscope record writes them:
 *
 * ```ts
 * const calls = await record({ command: './app 5' });
 * const trees = new CallTreeBuilder();
 * for await (const r of calls) trees.push(r);
 * for (const thread of trees.finish()) console.log(thread.tid, thread.roots.length);
 * ```
 */
export async function record(options: RecordCallsOptions): Promise<CallRecords> {
  return new CallRecords(await attachFunctions(options, () => undefined));
}
