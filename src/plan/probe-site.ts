import type { DecodedInstruction, KernelHandling } from '../arch/index.js';
import { ProbeError } from '../errors/index.js';
import { type FetchArg, globToRegExp } from '../spec/index.js';
import type { CallingConvention } from './calling-convention.js';
import type { ReturnPlan } from './return-plan.js';

/** Where a probe goes: `entry` of a function, its `return`, any `instruction`, a `usdt` note. */
export type SiteKind = 'entry' | 'return' | 'instruction' | 'usdt';

/** The file a site is in, identified as the kernel does: by device and inode. */
export interface TargetFile {
  /** The path upscope opens (may be under /proc/PID/root or /proc/PID/map_files). */
  readonly path: string;
  /** The path as the user or the process sees it. */
  readonly displayPath: string;
  readonly dev: bigint;
  readonly inode: bigint;
  readonly buildId: string | undefined;
  readonly elfType: 'exec' | 'dyn' | 'rel' | 'core' | 'unknown';
}

export interface UsdtSite {
  readonly provider: string;
  readonly name: string;
  /** The note's argument string, e.g. `-4@%edi 8@-16(%rbp)`. */
  readonly args: string;
  /** File offset of the semaphore (the kernel's ref_ctr_offset), when the probe has one. */
  readonly semaphoreFileOffset: bigint | undefined;
  /** Virtual address of the semaphore (a u16 counter) in the file, when the probe has one. */
  readonly semaphoreVaddr: bigint | undefined;
}

/** The source line a site was resolved from (FILE:LINE specs), and the debug info that said so. */
export interface SourceSite {
  /** The source file as the line table names it (absolute when the table says where). */
  readonly file: string;
  readonly line: number;
  /** 0 when the compiler did not say. */
  readonly column: number;
  /** The file whose DWARF was read: the target itself, or its separate debug file. */
  readonly debugFile: {
    readonly path: string;
    readonly how: 'embedded' | 'build-id' | 'debuglink';
  };
}

/**
 * A fully resolved probe site: plain data, the same on any machine for the same file, and
 * everything an engine needs to attach (file + offset) and a user needs to trust it.
 */
export interface ProbeSite {
  /** The spec text this site came from. */
  readonly spec: string;
  readonly kind: SiteKind;
  readonly target: TargetFile;
  /** The function holding the site: its symbol as stored (mangled), with version, if any. */
  readonly symbol: string | undefined;
  /** The function's demangled name, for C++ and Rust (`ns::Class::method(int)`), if any. */
  readonly demangled: string | undefined;
  /** Other names for the same function address (demangled, unless demangling is off). */
  readonly aliases: readonly string[];
  /**
   * The separate debug file whose .symtab names the function, when the target is stripped
   * (found by build-id or .gnu_debuglink); undefined when the target names it itself.
   */
  readonly symbolFile?: string | undefined;
  readonly symbolOffset: bigint;
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
  readonly usdt: UsdtSite | undefined;
  /** The first instructions at the site (at least the probed one). */
  readonly instructions: readonly DecodedInstruction[];
  /** How the kernel's uprobes will run the probed instruction (cost class). */
  readonly handling: KernelHandling;
  readonly fetches: readonly FetchArg[];
  /** The fetches given apart from the spec (ResolveOptions.optionFetches), lowered here. */
  readonly optionFetches?: readonly FetchArg[] | undefined;
  /** With -p: the address of the site in that process. */
  readonly runtimeAddress: bigint | undefined;
  /** For a FILE:LINE spec: the line, and where its debug info came from. */
  readonly source?: SourceSite | undefined;
  /**
   * What tells this site from another site of the plan with the same name (two Rust functions
   * whose legacy names demangle alike, static functions of two files, two files' functions):
   * its address (`0x14650`), its file, or both; undefined when its name is its own.
   */
  readonly nameQualifier?: string | undefined;
  /**
   * Whether the instruction after the probed one is also reached otherwise than through it:
   * a jump in the site's function lands there (or, away from the function's entry, the
   * function jumps through a register or table). The ptrace engine may watch that
   * instruction too when it is not (see arch's guard). Resolved for the ptrace engine only;
   * undefined when not known.
   */
  readonly nextIsJumpTarget?: boolean | undefined;
  /**
   * The addresses in the 32 bytes after the site that a direct jump or call of its function
   * lands on, and the site itself where a jump (not a call) lands there (a loop whose head it
   * is): the inject engine patches over the first bytes of a function only where none does.
   * Resolved for the ptrace engine only; undefined when not known (no extent for the
   * function, or code that does not decode to its end).
   */
  readonly jumpTargetsNear?: readonly bigint[] | undefined;
  /**
   * How the function holding the site passes arguments and results: what `argN` and
   * `retvalN` were read as (C's ABI, or Go's). Undefined outside any function.
   */
  readonly convention?: CallingConvention | undefined;
  /**
   * For the entry of a Go function: how far in the probe sits, after the stack check that
   * runs the function's start again when its stack grows (`symbolOffset` stays 0: the probe
   * is on the function). Undefined elsewhere.
   */
  readonly afterStackCheck?: bigint | undefined;
  /**
   * For a function's entry (or the entry a return probe opens its calls at) on a kernel
   * engine, when the kernel cannot take a probe on its first instruction (it refuses it, or
   * would mishandle it) and that instruction changes nothing a probe reads: the probe sits on
   * the first instruction it can take, `offset` in (`symbolOffset` stays 0), past
   * `instruction`, for `reason` (the kernel's, for the first). Also when the kernel would
   * single-step the first (a trap more each call) and the first it emulates is a few
   * instructions on, past ones that change only the flags, %rax or %r11 (`changes`), where
   * the probe reads nothing else. Undefined elsewhere.
   */
  readonly pastFirst?: EntryPastFirst | undefined;
  /**
   * For a return probe (and, when asked for, a function entry timed to its return): how its
   * returns are caught, by a trampoline or at the instructions it leaves by.
   */
  readonly returns?: ReturnPlan | undefined;
}

/** Where an entry probe sits when it cannot sit on the first instruction (ProbeSite.pastFirst). */
export interface EntryPastFirst {
  readonly offset: bigint;
  /** The instructions passed, as objdump writes them (`; ` between: a VEX one and the next). */
  readonly instruction: string;
  /** Why the kernel cannot take a probe on the first (or would single-step it). */
  readonly reason: string;
  /**
   * What the instructions passed change, when they change more than vector registers: `only
   * the flags`, or `only the flags and %rax or %r11, ...`.
   */
  readonly changes?: string | undefined;
}

/**
 * A site's name in events and counts, without qualifier: `parse_request`, `main+0x1a`,
 * `ns::Class::method(int)` (demangled), the address without a symbol, or `provider:name` for
 * a USDT probe.
 */
export function siteName(site: ProbeSite): string {
  if (site.usdt !== undefined) return `${site.usdt.provider}:${site.usdt.name}`;
  if (site.symbol === undefined) return `0x${site.vaddr.toString(16)}`;
  const name =
    site.demangled ?? (site.symbol.includes('@') ? site.symbol.replace(/@.*$/, '') : site.symbol);
  return site.symbolOffset === 0n ? name : `${name}+0x${site.symbolOffset.toString(16)}`;
}

/**
 * The sites with a nameQualifier on each whose name another site of a different place shares:
 * the address when they are in one file, the file when at one address, both otherwise. Two
 * sites at the same place (one function named by two specs, its entry and its return) keep
 * one name. Entries and returns are qualified together: a function's entry and return always
 * have one name, even where another function of its name has its entry probed and not its
 * return (a recording pairs them by name).
 */
export function qualifyNames<T extends ProbeSite>(sites: readonly T[]): T[] {
  // By index: a name's last site, and each site's previous one of its name (-1: none). An
  // array per name, a set per name, and a lookup by object, were each a part of planning every
  // function of a large program (whose entries and returns share every name).
  const last = new Map<string, number>();
  const previous = new Int32Array(sites.length);
  sites.forEach((site, index) => {
    const name = siteName(site);
    previous[index] = last.get(name) ?? -1;
    last.set(name, index);
  });
  const out = [...sites];
  for (const index of last.values()) {
    if (previous[index] === -1 || onePlace(sites, index, previous)) continue;
    const group: number[] = [];
    for (let at = index; at !== -1; at = previous[at]!) group.push(at);
    const members = group.map((index) => sites[index]!);
    const files = new Set(members.map((s) => s.target.path)).size;
    const addresses = new Set(members.map(placeOf)).size;
    for (const index of group) {
      const site = sites[index]!;
      const address = `0x${placeOf(site).toString(16)}`;
      const nameQualifier =
        files === 1
          ? address
          : addresses === 1
            ? site.target.displayPath
            : `${site.target.displayPath} ${address}`;
      out[index] = withQualifier(site, nameQualifier);
    }
  }
  return out;
}

/**
 * Whether the sites of a name (its last, and each one's previous) are all at one place, as
 * most sites that share a name are (a function's entry and return): said without a set made
 * for each name.
 */
function onePlace(sites: readonly ProbeSite[], last: number, previous: Int32Array): boolean {
  const first = sites[last]!;
  const place = placeOf(first);
  for (let at = previous[last]!; at !== -1; at = previous[at]!) {
    const site = sites[at]!;
    if (site.target.path !== first.target.path || placeOf(site) !== place) return false;
  }
  return true;
}

/**
 * Where a site's calls begin: a return probe's entry (where its calls are timed from, the
 * function's entry probe's place: past a Go stack check, or a first instruction the kernel
 * would single-step), else the site itself. A function's entry and return are one place.
 */
function placeOf(site: ProbeSite): bigint {
  return site.kind === 'return' ? (site.returns?.entry.vaddr ?? site.vaddr) : site.vaddr;
}

/**
 * A copy of `site` with `nameQualifier`: its properties assigned, unless its instructions are
 * decoded when first read (a copy would decode them); then its properties as they are, which
 * is slower (thousands of a large C++ program's functions share a name with another). Not a
 * spread: V8 gives each object a spread makes in a loop a hidden class of its own, and the
 * 10,656 qualified functions of node made every later read of a site's fields megamorphic.
 */
function withQualifier<T extends ProbeSite>(site: T, nameQualifier: string): T {
  if (Object.getOwnPropertyDescriptor(site, 'instructions')?.get === undefined) {
    return Object.assign({}, site, { nameQualifier });
  }
  const copy = Object.defineProperties({}, Object.getOwnPropertyDescriptors(site)) as T;
  return Object.assign(copy, { nameQualifier });
}

/** The sites whose function no `exclude` glob matches; throws when none is left. */
export function excludeSites(
  sites: ProbeSite[],
  exclude: readonly string[] | undefined,
): ProbeSite[] {
  if (exclude === undefined || exclude.length === 0) return sites;
  const globs = exclude.map((glob) => globToRegExp(glob));
  const kept = sites.filter((site) => {
    const names = [site.symbol?.replace(/@.*/, ''), site.demangled, siteName(site)];
    return !names.some((name) => name !== undefined && globs.some((g) => g.test(name)));
  });
  if (kept.length === 0) {
    throw new ProbeError(
      'ERR_NO_MATCH',
      `Cannot attach: --exclude ${exclude.map((g) => `"${g}"`).join(', ')} left no function of the ${sites.length} matched`,
      { hints: ['Exclude fewer functions, or name other targets'] },
    );
  }
  return kept;
}
