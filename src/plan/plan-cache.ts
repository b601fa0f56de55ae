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
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { decodeInstructions, type KernelHandling } from '../arch/index.js';
import { ProbeError } from '../errors/index.js';
import { interned } from '../internal/index.js';
import type { ProbeSite, SiteKind, TargetFile } from './probe-site.js';
import type { ReturnPlan, ReturnSitePlan } from './return-plan.js';
import type { SkippedSite } from './skipped-sites.js';

/** Bumped whenever what a plan holds, or how it is made, changes. */
const FORMAT = 1;
/** Plans kept at most (the least recently made go first). */
const KEPT = 24;

/**
 * Where plans are kept: $UPSCOPE_CACHE_DIR (empty: nowhere), else $XDG_CACHE_HOME/upscope,
 * else ~/.cache/upscope; plans go in its `plans` directory.
 */
export function planCacheDir(): string | undefined {
  const own = process.env.UPSCOPE_CACHE_DIR;
  if (own !== undefined) return own === '' ? undefined : join(own, 'plans');
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'upscope', 'plans');
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
  return `${createHash('sha256').update(text).digest('hex').slice(0, 32)}.json`;
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

/** A plan as stored: columns, addresses as numbers (code addresses are far below 2^53). */
interface StoredPlan {
  readonly format: number;
  readonly kind: SiteKind;
  readonly symbolFile: string | undefined;
  /** Each distinct KernelHandling once; sites give an index. */
  readonly handlings: KernelHandling[];
  /** Each distinct return plan `why` once. */
  readonly whys: string[];
  readonly symbols: string[];
  readonly demangled: (string | null)[];
  readonly vaddrs: number[];
  readonly fileOffsets: number[];
  readonly handling: number[];
  /**
   * Per site, its returns or null: [mode (0 trampoline, 1 sites), why, frames (0 thread, 1
   * goroutine), entry vaddr, entry file offset, then per exit vaddr, file offset, kind (0
   * ret, 1 tail-call), handling].
   */
  readonly returns: (number[] | null)[];
  readonly skipped: {
    readonly symbol: string | undefined;
    readonly vaddr: number;
    readonly reason: string;
    readonly error: StoredError;
  }[];
  readonly warnings: StoredError[];
}

function storeError(error: ProbeError): StoredError {
  return { code: error.code, message: error.message, hints: error.hints };
}

function loadError(stored: StoredError, spec: string): ProbeError {
  return new ProbeError(stored.code as ProbeError['code'], stored.message, {
    hints: [...stored.hints],
    source: { text: spec, span: { start: 0, end: spec.length } },
  });
}

/** Keeps `glob`'s plan under `key`; a failure to write is no failure of planning. */
export function savePlan(key: string, kind: SiteKind, glob: CachedGlob): void {
  const dir = planCacheDir();
  if (dir === undefined) return;
  const handlings = interned<KernelHandling>((handling) => JSON.stringify(handling));
  const whys = interned<string>((why) => why);
  const plan: StoredPlan = {
    format: FORMAT,
    kind,
    symbolFile: glob.sites[0]?.symbolFile,
    handlings: handlings.values,
    whys: whys.values,
    symbols: glob.sites.map((s) => s.symbol ?? ''),
    demangled: glob.sites.map((s) => s.demangled ?? null),
    vaddrs: glob.sites.map((s) => Number(s.vaddr)),
    fileOffsets: glob.sites.map((s) => Number(s.fileOffset)),
    handling: glob.sites.map((s) => handlings.id(s.handling)),
    returns: glob.sites.map((s) => {
      const r = s.returns;
      if (r === undefined) return null;
      const row = [
        r.mode === 'trampoline' ? 0 : 1,
        whys.id(r.why),
        r.frames === 'thread' ? 0 : 1,
        Number(r.entry.vaddr),
        Number(r.entry.fileOffset),
      ];
      for (const exit of r.sites) {
        row.push(
          Number(exit.vaddr),
          Number(exit.fileOffset),
          exit.kind === 'ret' ? 0 : 1,
          handlings.id(exit.handling),
        );
      }
      return row;
    }),
    skipped: glob.skipped.map((s) => ({
      symbol: s.symbol,
      vaddr: Number(s.vaddr),
      reason: s.reason,
      error: storeError(s.error),
    })),
    warnings: glob.warnings.map(storeError),
  };
  try {
    mkdirSync(dir, { recursive: true });
    const path = join(dir, key);
    writeFileSync(`${path}.${process.pid}.tmp`, JSON.stringify(plan));
    renameSync(`${path}.${process.pid}.tmp`, path);
    prune(dir);
  } catch {
    // A read-only or full cache directory: the plan is made again next time.
  }
}

/** Leaves the KEPT newest plans. */
function prune(dir: string): void {
  const plans = readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .map((name) => ({ name, at: statSync(join(dir, name)).mtimeMs }))
    .sort((a, b) => b.at - a.at);
  for (const old of plans.slice(KEPT)) rmSync(join(dir, old.name), { force: true });
}

/** Where the sites of a kept plan are placed now. */
export interface PlanPlace {
  readonly spec: string;
  readonly file: TargetFile;
  /** The file to read an exit's instruction from, when it is shown. */
  readonly path: string;
  readonly runtimeAddress: (fileOffset: bigint) => bigint | undefined;
}

/** The plan kept under `key`, or undefined (none, or one that cannot be read). */
export function loadPlan(key: string, place: PlanPlace): CachedGlob | undefined {
  const dir = planCacheDir();
  if (dir === undefined) return undefined;
  let plan: StoredPlan;
  try {
    plan = JSON.parse(readFileSync(join(dir, key), 'utf8')) as StoredPlan;
  } catch {
    return undefined;
  }
  if (plan.format !== FORMAT || !Array.isArray(plan.vaddrs)) return undefined;
  const none: readonly never[] = Object.freeze([]);
  const sites: ProbeSite[] = [];
  for (let i = 0; i < plan.vaddrs.length; i++) {
    const vaddr = BigInt(plan.vaddrs[i]!);
    const fileOffset = BigInt(plan.fileOffsets[i]!);
    const row = plan.returns[i];
    sites.push({
      spec: place.spec,
      kind: plan.kind,
      target: place.file,
      symbol: plan.symbols[i],
      demangled: plan.demangled[i] ?? undefined,
      aliases: none,
      symbolFile: plan.symbolFile,
      symbolOffset: 0n,
      vaddr,
      fileOffset,
      usdt: undefined,
      instructions: none,
      handling: plan.handlings[plan.handling[i]!]!,
      fetches: none,
      runtimeAddress: place.runtimeAddress(fileOffset),
      returns:
        row === null || row === undefined
          ? undefined
          : returnsOf(row, plan, place.path, vaddr, fileOffset),
    });
  }
  return {
    sites,
    skipped: plan.skipped.map((s) => ({
      spec: place.spec,
      target: place.file.displayPath,
      symbol: s.symbol,
      vaddr: BigInt(s.vaddr),
      reason: s.reason,
      error: loadError(s.error, place.spec),
    })),
    warnings: plan.warnings.map((w) => loadError(w, place.spec)),
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

function returnsOf(
  row: readonly number[],
  plan: StoredPlan,
  path: string,
  vaddr: bigint,
  fileOffset: bigint,
): ReturnPlan {
  const sites: ReturnSitePlan[] = [];
  for (let at = 5; at + 3 < row.length; at += 4) {
    sites.push(
      new KeptExit(
        BigInt(row[at]!),
        BigInt(row[at + 1]!),
        row[at + 2] === 0 ? 'ret' : 'tail-call',
        plan.handlings[row[at + 3]!]!,
        path,
      ),
    );
  }
  return {
    mode: row[0] === 0 ? 'trampoline' : 'sites',
    why: plan.whys[row[1]!]!,
    frames: row[2] === 0 ? 'thread' : 'goroutine',
    // The site's own numbers where the call begins at the function's start (no bigint more).
    entry: {
      vaddr: row[3] === Number(vaddr) ? vaddr : BigInt(row[3]!),
      fileOffset: row[4] === Number(fileOffset) ? fileOffset : BigInt(row[4]!),
    },
    sites,
  };
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
