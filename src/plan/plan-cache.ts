/**
 * Plans of whole-program patterns kept on disk, by what they depend on: planning every
 * function of a large program (each one's first instruction checked, its exits found) takes
 * seconds, and a recording of the same program plans the same functions again. A plan is
 * kept for one file (its path, device, inode, size, modification time and build id), one
 * spec and the options that change it; anything else is a new plan. Only lean sites (see
 * ResolveOptions.lean) of files that carry their own symbol table are kept.
 */
import { createHash } from 'node:crypto';
import {
  type BigIntStats,
  closeSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writevSync,
} from 'node:fs';
import { join } from 'node:path';
import { decodeInstructions, type KernelHandling } from '../arch/index.js';
import { ProbeError } from '../errors/index.js';
import { makeDirectory, upscopeCacheDir } from '../host/index.js';
import { interned } from '../internal/index.js';
import type { ProbeSite, SiteKind, TargetFile } from './probe-site.js';
import type { ExitsByIndex, ReturnPlan, ReturnSitePlan } from './return-plan.js';
import type { SkippedSite } from './skipped-sites.js';

/** Bumped whenever what a plan holds, or how it is made, changes. */
const FORMAT = 6;
/** A kept plan's file name ends so (a `.json` one is of an earlier format: removed). */
const PLAN_SUFFIX = '.plan';
/** Plans kept at most (the least recently made go first). */
const KEPT = 24;

/** Where plans are kept: the `plans` directory of upscope's cache (see upscopeCacheDir()). */
export function planCacheDir(): string | undefined {
  const dir = upscopeCacheDir();
  return dir === undefined ? undefined : join(dir, 'plans');
}

/** What a plan depends on, besides the file's identity. */
export interface PlanKeyParts {
  readonly path: string;
  readonly buildId: string | undefined;
  readonly spec: string;
  readonly options: Readonly<Record<string, unknown>>;
}

/** The plan's file name for `parts`, or undefined when the file cannot be stat'ed. */
export function planKey(parts: PlanKeyParts): string | undefined {
  let stat: BigIntStats;
  try {
    stat = statSync(parts.path, { bigint: true });
  } catch {
    return undefined;
  }
  const text = JSON.stringify([
    FORMAT,
    parts.path,
    String(stat.dev),
    String(stat.ino),
    String(stat.size),
    String(stat.mtimeNs),
    parts.buildId ?? '',
    parts.spec,
    parts.options,
  ]);
  return `${createHash('sha256').update(text).digest('hex').slice(0, 32)}${PLAN_SUFFIX}`;
}

/** What a glob resolved to: the sites, those it skipped, and its warnings. */
export interface CachedGlob {
  readonly sites: ProbeSite[];
  readonly skipped: SkippedSite[];
  readonly warnings: ProbeError[];
}

interface StoredError {
  readonly code: string;
  readonly message: string;
  readonly hints: readonly string[];
}

/**
 * A plan as stored: a little-endian u32 giving the length of a JSON header (what is few:
 * handlings, reasons, skipped sites, warnings, and the columns' lengths), the header, then
 * the columns, each a typed array (addresses as f64: code addresses are far below 2^53,
 * aligned to 8 bytes from the file's start), then the names (UTF-8, each ended by a NUL,
 * which no ELF name holds). Read, it is a few copies and one split, not a parse of every
 * number (parsing JSON was a seventh of the time to attach every function of a large program).
 */
interface PlanHeader {
  readonly format: number;
  readonly kind: SiteKind;
  readonly symbolFile: string | undefined;
  /** Each distinct KernelHandling once; sites and exits give an index. */
  readonly handlings: KernelHandling[];
  /** Each distinct return plan `why` once. */
  readonly whys: string[];
  /** Sites, and exits of them all. */
  readonly sites: number;
  readonly exits: number;
  /** The bytes of the symbols' names, then of the demangled names (`` where none). */
  readonly symbolBytes: number;
  readonly demangledBytes: number;
  readonly skipped: {
    readonly symbol: string | undefined;
    readonly vaddr: number;
    readonly reason: string;
    readonly error: StoredError;
  }[];
  readonly warnings: StoredError[];
}

/** The columns of a stored plan, in the order stored (f64 ones first). */
interface PlanColumns {
  readonly vaddr: Float64Array;
  readonly fileOffset: Float64Array;
  /** Per site, where its calls begin (its returns' entry); 0 without returns. */
  readonly entryVaddr: Float64Array;
  readonly entryOffset: Float64Array;
  readonly exitVaddr: Float64Array;
  readonly exitOffset: Float64Array;
  readonly handling: Int32Array;
  /** Per site: -1 no returns, 0 trampoline, 1 sites. */
  readonly returnMode: Int32Array;
  readonly why: Int32Array;
  /** 0 thread, 1 goroutine. */
  readonly frames: Int32Array;
  /** 1 where the function jumps back to where its calls begin (ReturnPlan.loopsAtEntry). */
  readonly loops: Int32Array;
  /** Per site, its first exit; one more at the end (the number of exits). */
  readonly exitStart: Int32Array;
  /** 0 ret, 1 tail-call. */
  readonly exitKind: Int32Array;
  readonly exitHandling: Int32Array;
}

/** The columns' element types and lengths, for `sites` sites and `exits` exits. */
function columnShapes(sites: number, exits: number): [keyof PlanColumns, 'f64' | 'i32', number][] {
  return [
    ['vaddr', 'f64', sites],
    ['fileOffset', 'f64', sites],
    ['entryVaddr', 'f64', sites],
    ['entryOffset', 'f64', sites],
    ['exitVaddr', 'f64', exits],
    ['exitOffset', 'f64', exits],
    ['handling', 'i32', sites],
    ['returnMode', 'i32', sites],
    ['why', 'i32', sites],
    ['frames', 'i32', sites],
    ['loops', 'i32', sites],
    ['exitStart', 'i32', sites + 1],
    ['exitKind', 'i32', exits],
    ['exitHandling', 'i32', exits],
  ];
}

function storeError(error: ProbeError): StoredError {
  return { code: error.code, message: error.message, hints: error.hints };
}

/**
 * A kept error, made again. It is data here, never thrown from this place: made without a
 * stack trace (V8 captures one per error made: the 1,933 sites node's `_ZN[1-9S]*` returns
 * leave out took 30 ms).
 */
function loadError(stored: StoredError, spec: string): ProbeError {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new ProbeError(stored.code as ProbeError['code'], stored.message, {
      hints: [...stored.hints],
      source: { text: spec, span: { start: 0, end: spec.length } },
    });
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/** Keeps `glob`'s plan under `key`; a failure to write is no failure of planning. */
export function savePlan(key: string, kind: SiteKind, glob: CachedGlob): void {
  const dir = planCacheDir();
  if (dir === undefined) return;
  const path = join(dir, key);
  const temporary = `${path}.${process.pid}.tmp`;
  try {
    makeDirectory(dir);
    // The parts as they are, not joined into one buffer first (a copy of megabytes).
    const parts = encodePlan(kind, glob);
    const fd = openSync(temporary, 'w');
    try {
      const written = writevSync(fd, parts);
      if (written !== parts.reduce((n, part) => n + part.length, 0)) throw new Error('short');
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, path);
    prune(dir);
  } catch {
    // A read-only or full cache directory: the plan is made again next time.
    try {
      rmSync(temporary, { force: true });
    } catch {
      // nothing was written there
    }
  }
}

/** `glob`'s plan as stored (see PlanHeader), in parts. */
function encodePlan(kind: SiteKind, glob: CachedGlob): Buffer[] {
  const sites = glob.sites;
  // Most sites are emulated: their key is what is emulated (JSON for each was 75 ms of
  // keeping the plan of 50,000 functions).
  const handlings = interned<KernelHandling>((h) =>
    h.strategy === 'emulate' ? h.what : JSON.stringify(h),
  );
  const whys = interned<string>((why) => why);
  const exits = sites.reduce((n, s) => n + (s.returns?.sites.length ?? 0), 0);
  const shapes = columnShapes(sites.length, exits);
  const columns = Object.fromEntries(
    shapes.map(([name, type, length]) => [
      name,
      type === 'f64' ? new Float64Array(length) : new Int32Array(length),
    ]),
  ) as unknown as PlanColumns;
  let exit = 0;
  sites.forEach((site, i) => {
    columns.vaddr[i] = Number(site.vaddr);
    columns.fileOffset[i] = Number(site.fileOffset);
    columns.handling[i] = handlings.id(site.handling);
    columns.exitStart[i] = exit;
    const r = site.returns;
    if (r === undefined) {
      columns.returnMode[i] = -1;
      return;
    }
    columns.returnMode[i] = r.mode === 'trampoline' ? 0 : 1;
    columns.why[i] = whys.id(r.why);
    columns.frames[i] = r.frames === 'thread' ? 0 : 1;
    columns.loops[i] = r.loopsAtEntry === true ? 1 : 0;
    columns.entryVaddr[i] = Number(r.entry.vaddr);
    columns.entryOffset[i] = Number(r.entry.fileOffset);
    for (const e of r.sites) {
      columns.exitVaddr[exit] = Number(e.vaddr);
      columns.exitOffset[exit] = Number(e.fileOffset);
      columns.exitKind[exit] = e.kind === 'ret' ? 0 : 1;
      columns.exitHandling[exit] = handlings.id(e.handling);
      exit++;
    }
  });
  columns.exitStart[sites.length] = exit;
  const symbols = Buffer.from(sites.map((s) => `${s.symbol ?? ''}\0`).join(''));
  const demangled = Buffer.from(sites.map((s) => `${s.demangled ?? ''}\0`).join(''));
  const header: PlanHeader = {
    format: FORMAT,
    kind,
    symbolFile: sites[0]?.symbolFile,
    handlings: handlings.values,
    whys: whys.values,
    sites: sites.length,
    exits,
    symbolBytes: symbols.length,
    demangledBytes: demangled.length,
    skipped: glob.skipped.map((s) => ({
      symbol: s.symbol,
      vaddr: Number(s.vaddr),
      reason: s.reason,
      error: storeError(s.error),
    })),
    warnings: glob.warnings.map(storeError),
  };
  const json = Buffer.from(JSON.stringify(header));
  const length: Buffer = Buffer.alloc(4);
  length.writeUInt32LE(json.length);
  const parts: Buffer[] = [length, json, Buffer.alloc(align8(4 + json.length) - 4 - json.length)];
  for (const [name] of shapes) {
    const column = columns[name];
    parts.push(Buffer.from(column.buffer, column.byteOffset, column.byteLength));
  }
  parts.push(symbols, demangled);
  return parts;
}

function align8(n: number): number {
  return Math.ceil(n / 8) * 8;
}

/** A stored plan's header and columns, or undefined where it is not one of this format. */
function decodePlan(
  bytes: Buffer,
):
  | { header: PlanHeader; columns: PlanColumns; symbols: string[]; demangled: string[] }
  | undefined {
  if (bytes.length < 4) return undefined;
  const headerBytes = bytes.readUInt32LE(0);
  if (4 + headerBytes > bytes.length) return undefined;
  const header = JSON.parse(bytes.toString('utf8', 4, 4 + headerBytes)) as PlanHeader;
  if (header.format !== FORMAT) return undefined;
  // A copy of the columns, aligned for typed arrays whatever the file's buffer is.
  let at = align8(4 + headerBytes);
  const shapes = columnShapes(header.sites, header.exits);
  const columnBytes = shapes.reduce(
    (n, [, type, length]) => n + length * (type === 'f64' ? 8 : 4),
    0,
  );
  if (at + columnBytes + header.symbolBytes + header.demangledBytes !== bytes.length) {
    return undefined;
  }
  const data = new ArrayBuffer(columnBytes);
  new Uint8Array(data).set(bytes.subarray(at, at + columnBytes));
  let offset = 0;
  const columns = Object.fromEntries(
    shapes.map(([name, type, length]) => {
      const column =
        type === 'f64'
          ? new Float64Array(data, offset, length)
          : new Int32Array(data, offset, length);
      offset += column.byteLength;
      return [name, column];
    }),
  ) as unknown as PlanColumns;
  at += columnBytes;
  /** The next `length` bytes' names (the last one's NUL left out before the split). */
  const names = (length: number) => {
    const text = length === 0 ? [] : bytes.toString('utf8', at, at + length - 1).split('\0');
    at += length;
    return text;
  };
  const symbols = names(header.symbolBytes);
  const demangled = names(header.demangledBytes);
  if (symbols.length !== header.sites || demangled.length !== header.sites) return undefined;
  return { header, columns, symbols, demangled };
}

/** Leaves the KEPT newest plans. */
function prune(dir: string): void {
  const names = readdirSync(dir);
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    rmSync(join(dir, name), { force: true });
  }
  const plans = names
    .filter((name) => name.endsWith(PLAN_SUFFIX))
    .map((name) => ({ name, at: statSync(join(dir, name)).mtimeMs }))
    .sort((a, b) => b.at - a.at);
  for (const old of plans.slice(KEPT)) rmSync(join(dir, old.name), { force: true });
}

/** Where the sites of a kept plan are placed now. */
export interface PlanPlace {
  readonly spec: string;
  /** The spec's pattern of functions (a recording's entries and returns share one). */
  readonly pattern: string;
  readonly file: TargetFile;
  /** The file to read an exit's instruction from, when it is shown. */
  readonly path: string;
  /**
   * Where a file offset is in the process planned for, or undefined (none given, or the
   * offset not mapped): a number in, as the plan keeps it.
   */
  readonly runtimeAddress: (fileOffset: number) => bigint | undefined;
}

/** Per file and pattern, the sites of its first plan taken, and their addresses (see loadPlan()). */
const takenSites = new WeakMap<
  TargetFile,
  Map<string, { readonly sites: readonly ProbeSite[]; readonly vaddr: Float64Array }>
>();
/** How far ahead of the last site matched loadPlan() looks for a site's address in another plan. */
const WALK_AHEAD = 8;

/** The plan kept under `key`, or undefined (none, or one that cannot be read). */
export function loadPlan(key: string, place: PlanPlace): CachedGlob | undefined {
  const dir = planCacheDir();
  if (dir === undefined) return undefined;
  let plan: ReturnType<typeof decodePlan>;
  try {
    plan = decodePlan(readFileSync(join(dir, key)));
  } catch {
    return undefined;
  }
  if (plan === undefined) return undefined;
  const { header, columns, symbols, demangled } = plan;
  const none: readonly never[] = Object.freeze([]);
  const sites: ProbeSite[] = [];
  // The sites of the first plan of this file and pattern taken (a recording takes the plan
  // of its functions' entries, then of their returns): a site at an address that plan has,
  // of the same symbol, takes its names and numbers (one string for each name is hashed in
  // the maps of names, and no bigint is made twice). Both plans list their functions in one
  // order: that plan is walked along, not looked up.
  let byPattern = takenSites.get(place.file);
  if (byPattern === undefined) {
    byPattern = new Map();
    takenSites.set(place.file, byPattern);
  }
  const earlier = byPattern.get(place.pattern);
  if (earlier === undefined) byPattern.set(place.pattern, { sites, vaddr: columns.vaddr });
  let next = 0;
  for (let i = 0; i < header.sites; i++) {
    const address = columns.vaddr[i]!;
    const symbol = symbols[i]!;
    const demangledName = demangled[i] || undefined;
    let known: ProbeSite | undefined;
    if (earlier !== undefined) {
      const last = Math.min(next + WALK_AHEAD, earlier.vaddr.length);
      for (let at = next; at < last; at++) {
        if (earlier.vaddr[at] !== address) continue;
        const there = earlier.sites[at]!;
        // The same symbol, demangled or not alike (its demangled name is then the same).
        if (
          there.symbol === symbol &&
          (there.demangled === undefined) === (demangledName === undefined)
        ) {
          known = there;
        }
        next = at + 1;
        break;
      }
    }
    const vaddr = known?.vaddr ?? BigInt(address);
    const offset = columns.fileOffset[i]!;
    const fileOffset = known?.fileOffset ?? BigInt(offset);
    const site: ProbeSite = {
      spec: place.spec,
      kind: header.kind,
      target: place.file,
      symbol: known?.symbol ?? symbol,
      demangled: known === undefined ? demangledName : known.demangled,
      aliases: none,
      symbolFile: header.symbolFile,
      symbolOffset: 0n,
      vaddr,
      fileOffset,
      usdt: undefined,
      instructions: none,
      handling: header.handlings[columns.handling[i]!]!,
      fetches: none,
      runtimeAddress: known !== undefined ? known.runtimeAddress : place.runtimeAddress(offset),
      returns:
        columns.returnMode[i] === -1
          ? undefined
          : new KeptReturns(i, plan, place.path, vaddr, fileOffset),
    };
    sites.push(site);
  }
  return {
    sites,
    skipped: header.skipped.map((s) => ({
      spec: place.spec,
      target: place.file.displayPath,
      symbol: s.symbol,
      vaddr: BigInt(s.vaddr),
      reason: s.reason,
      error: loadError(s.error, place.spec),
    })),
    warnings: header.warnings.map((w) => loadError(w, place.spec)),
  };
}

/** A kept exit: its instruction spelled when asked, from the file (no closure per exit). */
class KeptExit implements ReturnSitePlan {
  constructor(
    readonly vaddr: bigint,
    readonly fileOffset: bigint,
    readonly kind: 'ret' | 'tail-call',
    readonly handling: KernelHandling,
    readonly path: string,
  ) {}

  get text(): string {
    return spellAt(this.path, this.vaddr, this.fileOffset);
  }
}

/**
 * A kept plan of a function's returns. Its exits are made when first read (`resolve` reads
 * them): attaching reads them by index from the plan's columns (node's `_ZN[1-9S]*` returns
 * have 71,337 exits, an object and two bigints each when made).
 */
class KeptReturns implements ReturnPlan, ExitsByIndex {
  readonly mode: 'trampoline' | 'sites';
  readonly why: string;
  readonly frames: 'thread' | 'goroutine';
  readonly entry: { readonly vaddr: bigint; readonly fileOffset: bigint };
  readonly loopsAtEntry: true | undefined;
  #sites: ReturnSitePlan[] | undefined;
  readonly #index: number;
  readonly #plan: { readonly header: PlanHeader; readonly columns: PlanColumns };
  readonly #path: string;

  constructor(
    index: number,
    plan: { readonly header: PlanHeader; readonly columns: PlanColumns },
    path: string,
    vaddr: bigint,
    fileOffset: bigint,
  ) {
    this.#index = index;
    this.#plan = plan;
    this.#path = path;
    const { header, columns } = plan;
    this.mode = columns.returnMode[index] === 0 ? 'trampoline' : 'sites';
    this.why = header.whys[columns.why[index]!]!;
    this.frames = columns.frames[index] === 0 ? 'thread' : 'goroutine';
    this.loopsAtEntry = columns.loops[index] === 1 ? true : undefined;
    const entryVaddr = columns.entryVaddr[index]!;
    const entryOffset = columns.entryOffset[index]!;
    // The site's own numbers where the call begins at the function's start (no bigint more).
    this.entry = {
      vaddr: entryVaddr === Number(vaddr) ? vaddr : BigInt(entryVaddr),
      fileOffset: entryOffset === Number(fileOffset) ? fileOffset : BigInt(entryOffset),
    };
  }

  get sites(): readonly ReturnSitePlan[] {
    this.#sites ??= this.#exits();
    return this.#sites;
  }

  get byIndex(): ExitsByIndex {
    return this;
  }

  get exitCount(): number {
    const starts = this.#plan.columns.exitStart;
    return starts[this.#index + 1]! - starts[this.#index]!;
  }

  exitVaddr(index: number): bigint {
    return BigInt(this.#plan.columns.exitVaddr[this.#exit(index)]!);
  }

  exitFileOffset(index: number): bigint {
    return BigInt(this.#plan.columns.exitOffset[this.#exit(index)]!);
  }

  exitKind(index: number): 'ret' | 'tail-call' {
    return this.#plan.columns.exitKind[this.#exit(index)] === 0 ? 'ret' : 'tail-call';
  }

  exitHandling(index: number): KernelHandling {
    return this.#plan.header.handlings[this.#plan.columns.exitHandling[this.#exit(index)]!]!;
  }

  /** The plan's index of this function's exit `index`. */
  #exit(index: number): number {
    return this.#plan.columns.exitStart[this.#index]! + index;
  }

  #exits(): ReturnSitePlan[] {
    return Array.from(
      { length: this.exitCount },
      (_, e) =>
        new KeptExit(
          this.exitVaddr(e),
          this.exitFileOffset(e),
          this.exitKind(e),
          this.exitHandling(e),
          this.#path,
        ),
    );
  }
}

/** The instruction at `fileOffset` of the file at `path`, as objdump writes it. */
function spellAt(path: string, vaddr: bigint, fileOffset: bigint): string {
  const bytes = new Uint8Array(15);
  let got = 0;
  try {
    const fd = openSync(path, 'r');
    try {
      got = readSync(fd, bytes, 0, bytes.length, Number(fileOffset));
    } finally {
      closeSync(fd);
    }
  } catch {
    return '(unreadable)';
  }
  return decodeInstructions(bytes.subarray(0, got), vaddr, { maxCount: 1 })[0]?.text ?? '(bad)';
}
