/**
 * Counting by user stack on the bpf engine: which files' unwind tables the kernel gets before
 * the probes are attached (the probed files, the -p process's mapped objects, the -c
 * command's program, interpreter and libraries), those it gets as the walker meets them (a
 * library loaded later, another process's), and the names of the stacks it counted.
 */
import { existsSync, readlinkSync } from 'node:fs';
import {
  EntryStop,
  ExecStop,
  type ProcessMapping,
  type StackFrameKey,
  type StackOptions,
  type UnwindMaps,
} from '../engines/index.js';
import { commandProgram, memoryImageId, procState } from '../host/index.js';
import { fileHead, type ProbeSite, readProcessMaps, resolveTarget } from '../plan/index.js';
import {
  interpreterOf,
  isFileMapping,
  type MapEntry,
  readDynamicInfo,
  readScriptHeader,
  splitDev,
} from '../symbols/index.js';
import { kernelDev, type StackFile, StackFiles } from './stack-files.js';
import { type FrameRef, type NamedFrame, StackNamer } from './stack-namer.js';

/** Room kept in the kernel's tables for files met after the start. */
const SPARE_ROWS = 1 << 20;
const SPARE_PAGES = 1 << 18;
const RULES = 1 << 16;
const FILES = 4096;

export interface BpfStacksOptions {
  /** The one process counted (-p, or the -c command once started), if any. */
  readonly pid?: number | undefined;
  /** The -c command line: its program and libraries are loaded before it runs. */
  readonly command?: string | undefined;
  readonly sites: readonly ProbeSite[];
  readonly inlines?: boolean | undefined;
  /** Name frames with their source file and line too (see StackNamerOptions). */
  readonly sources?: boolean | undefined;
}

/** The files a command will map: its program, its interpreter, and the libraries they need. */
function commandFiles(files: StackFiles, command: string): StackFile[] {
  const program = commandProgram(command);
  return program === undefined ? [] : programFiles(files, execedFile(program));
}

/**
 * The file the kernel runs when `program` is exec'd: itself, or for a script (`#!`) the
 * interpreter its first line names (a script's interpreter may be a script too, 4 deep at
 * most, as the kernel allows).
 */
function execedFile(program: string): string {
  let path = program;
  for (let depth = 0; depth < 4; depth++) {
    const header = readScriptHeader(fileHead(path, 256));
    if (header === undefined || header.program === '') return path;
    path = header.program;
  }
  return path;
}

/** The files a program maps as it starts: itself, its interpreter, the libraries they need. */
function programFiles(files: StackFiles, program: string): StackFile[] {
  const found: StackFile[] = [];
  const seen = new Set<string>();
  const queue: { name: string; path: string | undefined }[] = [{ name: program, path: program }];
  const libraryPath = process.env['LD_LIBRARY_PATH'];
  while (queue.length > 0) {
    const next = queue.shift()!;
    let path = next.path;
    if (path === undefined) {
      try {
        path = resolveTarget(next.name, { executable: program, libraryPath }).path;
      } catch {
        continue;
      }
    }
    if (seen.has(path)) continue;
    seen.add(path);
    const file = files.fromPath(path);
    if (file === undefined) continue;
    found.push(file);
    const interpreter = interpreterOf(file.elf);
    if (interpreter !== undefined) queue.push({ name: interpreter, path: interpreter });
    for (const needed of readDynamicInfo(file.elf)?.needed ?? []) {
      queue.push({ name: needed, path: undefined });
    }
  }
  return found;
}

/** The executable files process `pid` maps now. */
function processFiles(files: StackFiles, pid: number): StackFile[] {
  const found: StackFile[] = [];
  let maps: ReturnType<typeof readProcessMaps>;
  try {
    maps = readProcessMaps(pid);
  } catch {
    return found;
  }
  for (const entry of maps) {
    if (!entry.executable || !isFileMapping(entry)) continue;
    const file = files.fromProcess(pid, entry);
    if (file !== undefined && !found.includes(file)) found.push(file);
  }
  return found;
}

/** The executable mappings of a memory map, as the kernel's walker keeps them. */
function executableMappings(entries: readonly MapEntry[]): ProcessMapping[] {
  const found: ProcessMapping[] = [];
  for (const entry of entries) {
    if (!entry.executable) continue;
    const file = isFileMapping(entry);
    found.push({
      start: entry.start,
      end: entry.end,
      fileBase: file ? entry.start - entry.offset : 0n,
      dev: file ? kernelDev(entry.devMajor, entry.devMinor) : 0,
      ino: file ? entry.inode : 0n,
      uprobes: entry.path === '[uprobes]',
    });
  }
  return found;
}

export class BpfStacks {
  readonly files = new StackFiles();
  readonly namer: StackNamer;
  readonly #pid: number | undefined;
  readonly #command: boolean;
  readonly #preload: StackFile[];
  #maps: UnwindMaps | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** A command's program file (see #holdAtEntry), and the stop armed at its entry. */
  readonly #program: StackFile | undefined;
  #hold: EntryStop | undefined;
  /**
   * A command's stop at each exec it makes after its first (a wrapper script that execs the
   * program it sets up), and the execs followed so far (the first one by #watchExec()).
   */
  #execStop: ExecStop | undefined;
  #execsFollowed = 1;
  /** Which exec of the command is being followed to its program's entry, if one is. */
  #following: 'first' | 'later' | undefined;
  #ticks = 0;
  #closed = false;

  constructor(options: BpfStacksOptions) {
    this.#pid = options.pid;
    this.#command = options.command !== undefined;
    this.namer = new StackNamer(this.files, {
      inlines: options.inlines,
      sources: options.sources,
    });
    const preload: StackFile[] = [];
    const add = (file: StackFile | undefined) => {
      if (file !== undefined && !preload.includes(file)) preload.push(file);
    };
    const program = options.command === undefined ? undefined : commandProgram(options.command);
    this.#program = program === undefined ? undefined : this.files.fromPath(execedFile(program));
    if (options.command !== undefined) {
      for (const file of commandFiles(this.files, options.command)) add(file);
    } else if (options.pid !== undefined) {
      for (const file of processFiles(this.files, options.pid)) add(file);
    }
    for (const site of options.sites) {
      const { major, minor } = splitDev(site.target.dev);
      const identity = { dev: kernelDev(major, minor), ino: site.target.inode };
      // A file read through /proc (another namespace's, or replaced) is shown as the process names it.
      const shown = site.target.path.startsWith('/proc/') ? site.target.displayPath : undefined;
      add(this.files.get(identity) ?? this.files.fromPath(site.target.path, shown));
    }
    if (options.command === undefined && options.pid === undefined) {
      // Every process: the probed files' libraries are the ones most stacks go through.
      for (const site of [...preload]) {
        for (const needed of readDynamicInfo(site.elf)?.needed ?? []) {
          try {
            add(this.files.fromPath(resolveTarget(needed, { executable: site.path }).path));
          } catch {
            // not found here: loaded when met
          }
        }
      }
    }
    this.#preload = preload;
  }

  /** What BpfCounts needs: room for the first tables and the spare, and loading them. */
  stackOptions(): StackOptions {
    let rows = 0;
    let pages = 0;
    for (const file of this.#preload) {
      const table = file.table();
      if (table === undefined) continue;
      rows += table.starts.length;
      pages += (table.starts.at(-1)! >>> 12) - (table.starts[0]! >>> 12) + 2;
    }
    return {
      capacity: { rows: rows + SPARE_ROWS, pages: pages + SPARE_PAGES, rules: RULES, files: FILES },
      prepare: (maps) => {
        this.#maps = maps;
        for (const file of this.#preload) {
          this.files.setId(maps.addFile(file.identity, file.table()), file);
        }
        // A process given by its pid: its mappings are in the kernel before the first walk.
        if (this.#pid !== undefined && !this.#command) this.#sync(this.#pid);
      },
    };
  }

  /**
   * Start watching: the walker's unknown files are loaded as they are met (every 25 ms), and
   * the process's memory map is taken again while it lives (every 25 ms in its first second,
   * when libraries are loaded, then every second), so that pcs are named after it has ended,
   * and given to the walker (for walks that find the map locked: see UnwindMaps.syncProcess),
   * as are those of the processes a walk asked for (every second again while they live).
   * A command's first map is taken at the first tick: at the start it is still the launcher.
   */
  start(launched: boolean): void {
    const pid = this.#pid;
    if (pid !== undefined && !launched) this.namer.snapshot(pid);
    this.#timer = setInterval(() => this.#tick(), 25);
    this.#timer.unref();
    if (pid !== undefined && launched) {
      try {
        this.#execStop = ExecStop.open(pid);
      } catch {
        // later execs are synced at the ticks alone
      }
      this.#watchExec(pid);
    }
  }

  /**
   * A command's mappings given to the walker as soon as it has exec'd: its first walks may
   * find the memory map locked already (a thread it starts maps memory). Where its program is
   * known, the command is held at the program's entry (EntryStop) while they are read, so that
   * the walker has them before any of the program's code runs, however late this process gets
   * to look (a loaded machine); else they are read as soon as the exec is seen. Looked at every
   * millisecond: for the exec up to 2000 times, then for the stop up to 2000 times (a program
   * that never stops there is not the one held: another file at its path, or a command that
   * execs another program first), then for a stop made as the probe was taken out.
   */
  #watchExec(pid: number): void {
    const launcher = memoryImageId(pid);
    this.#awaitEntry(pid, launcher, this.#program, 'exec');
  }

  /**
   * Follow process `pid` from image `launcher` to the entry of `program` (see #watchExec()):
   * from its exec (`exec`), or from a stop at a later exec (`stop`: see #laterExec()).
   */
  #awaitEntry(
    pid: number,
    launcher: bigint | undefined,
    program: StackFile | undefined,
    from: 'exec' | 'stop',
  ): void {
    this.#following = from === 'exec' ? 'first' : 'later';
    const hold = this.#holdAtEntry(pid, program);
    let phase: 'exec' | 'stop' | 'late' = from;
    let looks = 0;
    const finish = () => {
      clearInterval(timer);
      this.#letGo(pid, launcher);
      this.#following = undefined;
      // An exec made meanwhile, stopped at already: followed now.
      if (this.#execStop !== undefined) this.#laterExec(pid);
    };
    if (from === 'stop') {
      // Out of the stop at its exec, on to the program's entry (where none can be held, its
      // mappings now: the program and its dynamic linker).
      if (hold === undefined) this.#sync(pid);
      continueProcess(pid);
      if (hold === undefined) {
        this.#following = undefined;
        return;
      }
    }
    const timer = setInterval(() => {
      looks++;
      const image = memoryImageId(pid);
      if (image === undefined) return finish(); // it has ended
      if (phase === 'exec') {
        if (image === launcher) {
          if (looks >= 2000 || this.#closed) finish();
          return;
        }
        if (hold === undefined) {
          this.#sync(pid);
          return finish();
        }
        phase = 'stop';
        looks = 0;
      }
      const stopped = procState(pid) === 'T';
      if (phase === 'stop') {
        if (!stopped && looks < 2000 && !this.#closed) return;
        this.#sync(pid);
        if (stopped) return finish();
        // Not stopped there: the probe out, then a last look for a stop it made meanwhile.
        this.#letGo(pid, launcher);
        phase = 'late';
        looks = 0;
        return;
      }
      if (stopped || looks >= 100) finish();
    }, 1);
    timer.unref();
  }

  /** Take the hold's probe out (if armed), and continue the command if it is stopped in its program. */
  #letGo(pid: number, launcher: bigint | undefined): void {
    this.#hold?.close();
    this.#hold = undefined;
    // Stopped at (or on its way to a stop at) a later exec: that exec is followed next.
    if ((this.#execStop?.execs() ?? 0) > this.#execsFollowed) return;
    const image = memoryImageId(pid);
    if (image === undefined || image === launcher || procState(pid) !== 'T') return;
    continueProcess(pid);
  }

  /**
   * At a tick: the command stopped at a later exec (ExecStop counted one more than were
   * followed, and it is stopped): its program's files given to the walker, then followed to
   * its entry as the first one was. An exec a stop of its own came before is left to the next
   * tick; one followed already leaves it alone (a stop of its own, after).
   */
  #laterExec(pid: number): void {
    const execs = this.#execStop?.execs() ?? 0;
    if (execs <= this.#execsFollowed || procState(pid) !== 'T') return;
    this.#execsFollowed = execs;
    let program: StackFile | undefined;
    try {
      program = this.files.fromPath(readlinkSync(`/proc/${pid}/exe`));
    } catch {
      program = undefined;
    }
    if (program !== undefined) this.#load(programFiles(this.files, program.path));
    // No launcher image: whatever image it is stopped in then, it is let go.
    this.#awaitEntry(pid, undefined, program, 'stop');
  }

  /** Give the walker the tables of `files` it does not have yet. */
  #load(files: readonly StackFile[]): void {
    const maps = this.#maps;
    if (maps === undefined) return;
    for (const file of files) {
      if (maps.fileId(file.identity) !== undefined) continue;
      try {
        this.files.setId(maps.addFile(file.identity, file.table()), file);
      } catch {
        return; // the files map is full
      }
    }
  }

  /**
   * Arm the stop at the entry of the command's program (undefined where the program is not
   * known, not an ELF file with an entry, or the kernel refuses the probe: the exec is then
   * watched for without a hold).
   */
  #holdAtEntry(pid: number, program: StackFile | undefined): EntryStop | undefined {
    if (program === undefined || program.elf.entry === 0n) return undefined;
    const offset = program.elf.vaddrToFileOffset(program.elf.entry);
    if (offset === undefined) return undefined;
    try {
      this.#hold = EntryStop.open(pid, program.path, offset);
    } catch {
      return undefined;
    }
    return this.#hold;
  }

  #tick(): void {
    this.#ticks++;
    this.loadMissing();
    const pid = this.#pid;
    if (pid !== undefined && this.#execStop !== undefined && this.#following === undefined) {
      this.#laterExec(pid);
    }
    if (pid !== undefined && (this.#ticks <= 40 || this.#ticks % 40 === 0)) {
      if (existsSync(`/proc/${pid}`)) this.#sync(pid);
    }
    if (this.#ticks % 40 === 0) {
      for (const other of this.#maps?.syncedProcesses() ?? []) {
        if (other !== pid) this.#sync(other);
      }
    }
  }

  /**
   * Give the walker process `pid`'s executable mappings as they are now (its image id read
   * first: an exec in between makes the walker ignore them until the next sync), or forget
   * them when it has ended.
   */
  #sync(pid: number): void {
    const maps = this.#maps;
    if (maps === undefined || this.#closed) return;
    const image = memoryImageId(pid);
    const entries = image === undefined ? undefined : this.namer.snapshot(pid);
    try {
      if (image === undefined || entries === undefined) maps.forgetProcess(pid);
      else maps.syncProcess(pid, image, executableMappings(entries));
    } catch {
      // the maps are closed (the run is ending)
    }
  }

  /** Load the tables of the files the walker met without one. */
  loadMissing(): void {
    const maps = this.#maps;
    if (maps === undefined || this.#closed) return;
    let missing: ReturnType<UnwindMaps['takeMissing']>;
    try {
      missing = maps.takeMissing();
    } catch {
      return;
    }
    let resync: number[] = [];
    try {
      resync = maps.takeResync();
    } catch {
      // closed
    }
    for (const pid of resync) this.#sync(pid);
    for (const { pid, dev, ino } of missing) {
      const identity = { dev, ino };
      let file = this.files.get(identity);
      if (file === undefined && !this.files.tried(identity)) {
        const entries = this.namer.snapshot(pid) ?? [];
        const entry = entries.find(
          (e) => e.inode === ino && kernelDev(e.devMajor, e.devMinor) === dev,
        );
        if (entry !== undefined) file = this.files.fromProcess(pid, entry);
        if (file === undefined) this.files.markMissing(identity);
      }
      try {
        const id = maps.addFile(identity, file?.table());
        if (file !== undefined) this.files.setId(id, file);
      } catch {
        // the files map is full: the walker keeps ending stacks in this file
      }
    }
  }

  /** A counted stack's frames, named (innermost first). */
  name(pid: number, frames: readonly StackFrameKey[]): NamedFrame[] {
    const refs: FrameRef[] = frames.map((frame) => {
      if (frame.kind !== 'file') return frame;
      const file = this.files.byId(frame.fileId);
      if (file === undefined) return { kind: 'unknown' };
      return { kind: 'file', file, fileOffset: frame.fileOffset };
    });
    return this.namer.name(pid, refs);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  close(): void {
    this.stop();
    this.#closed = true;
    this.#hold?.close();
    // A command stopped at a later exec not followed yet (its stop perhaps not delivered
    // yet: a SIGCONT cancels it), or held on its way from one to its entry, goes on; a stop of
    // its own stays.
    const pid = this.#pid;
    const execs = this.#execStop?.execs() ?? 0;
    this.#execStop?.close();
    if (pid !== undefined) {
      if (execs > this.#execsFollowed) continueProcess(pid);
      else if (this.#following === 'later' && procState(pid) === 'T') continueProcess(pid);
    }
    this.namer.close();
    this.files.close();
  }
}

function continueProcess(pid: number): void {
  try {
    process.kill(pid, 'SIGCONT');
  } catch {
    // it has ended
  }
}
