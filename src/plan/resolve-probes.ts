import { statSync } from 'node:fs';
import {
  analyzeKernelHandling,
  atAddress,
  changesCallState,
  checkInstructionBoundary,
  type DecodedInstruction,
  decodeInstructions,
  findReturnInstructions,
  type KernelHandling,
  passableAtEntry,
  planXol,
  QUICK_FLOW,
  quick,
  quickLength,
  type ReturnScan,
  recurringKey,
  sweepInstructions,
} from '../arch/index.js';
import { InternalError, ProbeError, quote, type Span } from '../errors/index.js';
import { kernelVersion, pausePoint } from '../host/index.js';
import { closest, didYouMean, grouped } from '../internal/index.js';
import { loadNative } from '../native/index.js';
import {
  type FetchArg,
  type FetchExpr,
  globToRegExp,
  isGlob,
  type Location,
  type ProbeSpec,
  parseSpec,
  printSymbolName,
  shellWord,
} from '../spec/index.js';
import {
  CallFrames,
  cloneName,
  cxxDemanglerName,
  type DwarfReader,
  type DwarfSections,
  dwarfSections,
  type ElfFile,
  type FunctionSymbol,
  fileOffsetToRuntime,
  functionDisplayName,
  type MappedObject,
  openElf,
  preferName,
  readDynamicInfo,
  runtimeAddressesOf,
  runtimeToFileOffset,
  SymbolIndex,
  withoutParameters,
} from '../symbols/index.js';
import {
  type CallingConvention,
  callingConvention,
  type GoFacts,
  goFacts,
  isGoFunction,
  lowerForConvention,
  registerArguments,
} from './calling-convention.js';
import { closeDebugInfo, missingDebugSymbolsHints, targetSymbols } from './debug-info.js';
import {
  allIfuncImplementations,
  findIfuncImplementations,
  type IfuncImplementation,
} from './ifunc.js';
import { loadPlan, planKey, savePlan } from './plan-cache.js';
import {
  type EntryPastFirst,
  type ProbeSite,
  qualifyNames,
  type SiteKind,
  type TargetFile,
  type UsdtSite,
} from './probe-site.js';
import { resolveLineAddresses } from './resolve-line.js';
import {
  afterGoStackCheck,
  codeParts,
  codeRanges,
  planReturns,
  type ReturnPlan,
  type ReturnPlanContext,
  type ReturnProbeMode,
} from './return-plan.js';
import { ReturnScanAhead, SCAN_AHEAD_FROM } from './return-scan.js';
import { type SkippedSite, skipCounts } from './skipped-sites.js';
import {
  commandSearchOptions,
  openMappedObject,
  processObjects,
  type ResolvedTarget,
  resolveTarget,
} from './targets/index.js';
import { programUnwinder, unwinderOf } from './unwinder.js';
import { elfSymbolVaddr, type UsdtArgsContext, usdtFetches } from './usdt-args.js';
import {
  lowerVariableFetches,
  noDebugInfoHints,
  openDwarf,
  variableProbeAddress,
} from './variables.js';

/** How far the planning of a pattern's functions has got. */
export interface PlanProgress {
  readonly done: number;
  readonly total: number;
  /** The file whose functions they are, as the user named it. */
  readonly target: string;
  /**
   * Set when the step is the engine's placing of probes after the planning: `done` of `total`
   * probes placed (the tracefs engine writes one uprobe event at a time; thousands take
   * minutes), `target` the engine.
   */
  readonly attaching?: boolean | undefined;
}

export interface ResolveOptions {
  /** Resolve targets as this process sees them, and compute runtime addresses in it. */
  readonly pid?: number | undefined;
  /** Allow raw addresses that no symbol covers (the instruction boundary is then unchecked). */
  readonly unsafe?: boolean | undefined;
  readonly cwd?: string | undefined;
  /** Whose uprobes rules decide how a probed instruction is handled (default: this kernel's). */
  readonly kernel?: { readonly major: number; readonly minor: number } | undefined;
  /**
   * The engine the sites are for. The kernel's refusals apply to the kernel engines only:
   * the ptrace engine runs displaced instructions itself and checks them when it places a
   * probe. Default 'tracefs'.
   */
  readonly engine?: 'tracefs' | 'ptrace' | undefined;
  /**
   * Give sites the demangled names of C++ and Rust functions (default true). Specs match
   * demangled names either way; false leaves `demangled` undefined and aliases as stored.
   */
  readonly demangle?: boolean | undefined;
  /**
   * Directories searched for separate debug files (FILE:LINE specs) like /usr/lib/debug and
   * before it: DIR/.build-id/xx/rest.debug, DIR/<the file's directory>/<debuglink name>.
   */
  readonly debugDirs?: readonly string[] | undefined;
  /** LD_LIBRARY_PATH to search for library names (with `pid`: the process's by default). */
  readonly libraryPath?: string | undefined;
  /** The program whose RPATH/RUNPATH is searched for library names (with `pid`: its own). */
  readonly executable?: string | undefined;
  /**
   * A site a pattern matches that cannot be probed (the kernel refuses its instruction) fails
   * the spec, instead of being skipped and listed in `skipped`.
   */
  readonly strict?: boolean | undefined;
  /**
   * Called as a pattern's functions are planned (every thousand, and at the end), for a
   * progress line: planning every function of a large program takes seconds. resolveProbes()
   * lets the event loop run after each call.
   */
  readonly onProgress?: ((progress: PlanProgress) => void) | undefined;
  /**
   * Resolve every spec in this file instead of the one its target names: the file now at the
   * path where a target was resolved before (replaced on disk since, a new inode), whose
   * sites are placed again: a path to open (`displayPath` names it as before; with `pid`,
   * runtime addresses are those of the process's mapping of this very file, if it has one),
   * or a file process `pid` has mapped.
   */
  readonly targetFile?:
    | { readonly path: string; readonly displayPath: string }
    | { readonly object: MappedObject }
    | undefined;
  /**
   * How return probes catch returns (default `auto`): see ReturnProbeMode. `auto` probes in
   * place the returns of Go code and of functions an unwinder can pass through in a program
   * that links one (the program is the process with `pid`, else `executable`, else the file).
   */
  readonly returnProbes?: ReturnProbeMode | undefined;
  /** Plan the returns of function entries too (latency times each call to its return). */
  readonly returnsOfEntries?: boolean | undefined;
  /**
   * Sites of patterns that fetch nothing (a recording's entries and returns) are made lean:
   * checked as any other, but keeping only what the kernel engines read (their first
   * instruction, no aliases or instructions to show). Planning every function of a large
   * program this way keeps a few hundred bytes a site, not several kilobytes.
   */
  readonly lean?: boolean | undefined;
  /**
   * Where the writes of the plans to keep go, for the caller to run before the probes are
   * live (while the kernel attaches them), instead of at once.
   */
  readonly planWrites?: (() => void)[] | undefined;
  /**
   * false: the sites are left without their nameQualifier (see qualifyNames()), for a caller
   * that qualifies them later, while the kernel attaches them (a tenth of a second for every
   * function of a large program). Qualified by default.
   */
  readonly qualified?: boolean | undefined;
  /**
   * Fetches given apart from the specs (`--by`, `--filter`, a histogram's value), lowered at
   * each site as a spec's own are (variables by name from DWARF) into `optionFetches`, in
   * this order: a name that cannot be fetched there fails the spec as it would in it.
   */
  readonly optionFetches?: readonly OptionFetch[] | undefined;
}

/** What a run asks of its plan, as its options name it (trace, count, latency, a tracer). */
export interface RunPlanChoices {
  readonly pid?: number | undefined;
  readonly command?: string | undefined;
  readonly unsafe?: boolean | undefined;
  readonly debugDirs?: readonly string[] | undefined;
  readonly strict?: boolean | undefined;
  readonly returnProbes?: ReturnProbeMode | undefined;
}

/**
 * The options every run plans with: its process, --unsafe, --debug-dir, --strict and
 * --return-probes, and with a command, its libraries searched for as its dynamic linker will.
 */
export function runPlanOptions(run: RunPlanChoices): ResolveOptions {
  return {
    pid: run.pid,
    unsafe: run.unsafe,
    debugDirs: run.debugDirs,
    strict: run.strict,
    returnProbes: run.returnProbes,
    ...(run.command === undefined ? {} : commandSearchOptions(run.command)),
  };
}

/** A fetch given apart from the specs: its text (errors point into it) and its parse. */
export interface OptionFetch {
  readonly text: string;
  readonly fetch: FetchArg;
}

export interface ProbePlan {
  readonly sites: ProbeSite[];
  /** One per spec that could not be resolved; each names the spec and the span at fault. */
  readonly errors: ProbeError[];
  /** Things resolved with a caveat (an IFUNC skipped by a glob, ...). */
  readonly warnings: ProbeError[];
  /**
   * Sites patterns matched that cannot be probed, left out (the other sites of the pattern
   * are probed). Never with `strict`; a pattern that matched only such sites is an error.
   */
  readonly skipped: SkippedSite[];
}

/** The sites to probe, and the ones patterns matched that cannot be probed. */
export interface PlannedProbes {
  readonly sites: ProbeSite[];
  readonly skipped: SkippedSite[];
  /**
   * What the user should know of the plan, though nothing failed: the IFUNC resolvers a
   * pattern left out, the overloads a name placed probes on.
   */
  readonly warnings: ProbeError[];
}

/** How many instructions `resolve` shows at each site. */
const SHOWN_INSTRUCTIONS = 4;
/** The longest x86-64 instruction. */
const MAX_INSTRUCTION_BYTES = 15;

/** An opened target and its symbols, shared by every spec that names the same file. */
interface OpenTarget {
  readonly resolved: ResolvedTarget;
  readonly elf: ElfFile;
  readonly file: TargetFile;
  symbols(): SymbolIndex;
  /** Start addresses of the functions IFUNC resolvers pick (known entries without a symbol). */
  ifuncImplementations(): Set<bigint>;
  /** The file's DWARF (for variables by name), undefined without .debug_info. */
  dwarf(): DwarfReader | undefined;
  noDebugInfoHints(): string[];
  /** What the file says about Go (undefined: not a Go program). */
  go(): GoFacts | undefined;
  /** Why an unwinder can pass through the file's code in the program probed, else undefined. */
  unwinder(): string | undefined;
  /** Whether .eh_frame (what unwinders read) covers an address. */
  hasUnwindInfo(vaddr: bigint): boolean;
  /**
   * What the specs on this file share of a pattern's planning (a recording's entries and
   * returns are two specs of one pattern): the functions each pattern matched, grouped by
   * address, and each lean site's first instruction and how the kernel runs a probe on it.
   */
  readonly shared: {
    readonly matches: Map<string, FunctionSymbol[][]>;
    readonly entries: Map<bigint, LeanEntry>;
    /**
     * The first instructions met, decoded once each by their bytes (see recurringKey()): null
     * for one with a %rip-relative operand, decoded where it is.
     */
    readonly recurring: Map<
      number | string,
      { probed: DecodedInstruction; handling: KernelHandling } | null
    >;
    /** What planning the returns of lean sites reads, the same for every function. */
    returns?: ReturnPlanContext;
    /** The file as this very process maps it (null: it does not), for IFUNCs' picks. */
    mappedHere?: MappedObject | null;
    /** The patterns whose functions' returns the specs plan (those of `r:` specs). */
    readonly returnsPlanned: Set<string>;
    /** Per pattern: the scan of its functions' returns started ahead (see return-scan.ts). */
    readonly returnScans: Map<string, ReturnScanAhead>;
    /** The scans of functions' code made here already (entryPastStepped()), by address. */
    readonly scanned: Map<bigint, ReturnScan>;
  };
}

/** What the lean sites of a function share: its first instruction, how the kernel runs it. */
interface LeanEntry {
  /** Where the probe sits: the function's start, or past what entryPastStepped() passed. */
  readonly vaddr: bigint;
  readonly pastFirst: EntryPastFirst | undefined;
  readonly probed: DecodedInstruction;
  readonly instructions: readonly DecodedInstruction[];
  readonly handling: KernelHandling;
  readonly fileOffset: bigint;
  readonly runtimeAddress: bigint | undefined;
}

/**
 * Turns spec texts into probe sites: parse, find the target, expand globs, resolve symbols and
 * addresses, and check that every site is an instruction boundary in executable code. Errors
 * are collected per spec (the rest still resolve); nothing is attached and nothing is changed.
 * With `onProgress`, it lets the event loop run after each call of it (a server's streams
 * carry the progress out while a large pattern is planned).
 */
export async function resolveProbes(
  specTexts: readonly string[],
  options: ResolveOptions = {},
): Promise<ProbePlan> {
  const steps = resolveSteps(specTexts, options);
  try {
    for (;;) {
      const step = steps.next();
      if (step.done === true) return step.value;
      options.onProgress?.(step.value);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    steps.return(EMPTY_PLAN); // closes its files if onProgress threw
  }
}

/** resolveProbes() without a promise: for a tracer placing probes while a thread waits. */
export function resolveProbesSync(
  specTexts: readonly string[],
  options: ResolveOptions = {},
): ProbePlan {
  const steps = resolveSteps(specTexts, options);
  try {
    for (;;) {
      const step = steps.next();
      if (step.done === true) return step.value;
      options.onProgress?.(step.value);
    }
  } finally {
    steps.return(EMPTY_PLAN); // closes its files if onProgress threw
  }
}

const EMPTY_PLAN: ProbePlan = { sites: [], errors: [], warnings: [], skipped: [] };

/**
 * The planning, in steps: it yields how far a pattern's functions have got (only when
 * `onProgress` is given) and returns the plan.
 */
function* resolveSteps(
  specTexts: readonly string[],
  options: ResolveOptions,
): Generator<PlanProgress, ProbePlan, undefined> {
  const plan: ProbePlan = { sites: [], errors: [], warnings: [], skipped: [] };
  const targets = new Map<string, OpenTarget>();
  const parsedSpecs = specTexts.map((text) => parseSpec(text));
  /** Per target as the specs name it: the patterns `r:` specs plan the returns of. */
  const returnGlobs = new Map<string, string[]>();
  for (const { spec } of parsedSpecs) {
    if (spec?.kind !== 'return' || spec.location.type !== 'glob') continue;
    const globs = returnGlobs.get(spec.target.text) ?? [];
    globs.push(spec.location.pattern);
    returnGlobs.set(spec.target.text, globs);
  }
  try {
    for (const [k, text] of specTexts.entries()) {
      const parsed = parsedSpecs[k]!;
      const first = parsed.diagnostics.find((d) => d.severity === 'error');
      if (first !== undefined || parsed.spec === undefined) {
        const diagnostic = first ?? parsed.diagnostics[0];
        plan.errors.push(
          new ProbeError(
            diagnostic?.code ?? 'ERR_SPEC_SYNTAX',
            diagnostic?.message ?? 'Cannot parse probe spec',
            {
              source: { text, span: diagnostic?.span ?? { start: 0, end: text.length } },
              hints: diagnostic?.hints ?? [],
            },
          ),
        );
        continue;
      }
      try {
        const target = openTarget(parsed.spec, targets, options);
        for (const glob of returnGlobs.get(parsed.spec.target.text) ?? []) {
          target.shared.returnsPlanned.add(glob);
        }
        // A fault test's stop: symbols are being read, nothing is defined yet.
        pausePoint('resolving');
        plan.sites.push(...(yield* resolveLocation(parsed.spec, target, options, plan)));
      } catch (err) {
        if (!(err instanceof ProbeError)) throw err;
        plan.errors.push(err);
      }
    }
  } finally {
    for (const target of targets.values()) {
      for (const scan of target.shared.returnScans.values()) scan.close();
      closeDebugInfo(target.elf);
      target.elf.close();
    }
  }
  return options.qualified === false ? plan : { ...plan, sites: qualifyNames(plan.sites) };
}

/**
 * Like resolveProbes, but throws the first error (for callers that attach everything or
 * nothing): the sites, and those patterns skipped (to be said; errors with `strict`).
 */
export async function planProbes(
  specTexts: readonly string[],
  options: ResolveOptions = {},
): Promise<PlannedProbes> {
  return planned(await resolveProbes(specTexts, options));
}

/** planProbes() without a promise. */
export function planProbesSync(
  specTexts: readonly string[],
  options: ResolveOptions = {},
): PlannedProbes {
  return planned(resolveProbesSync(specTexts, options));
}

function planned(plan: ProbePlan): PlannedProbes {
  if (plan.errors.length > 0) throw plan.errors[0];
  // A .cold part left out loses nothing (its function is probed, and the part is not called):
  // resolve says it; a run does not.
  const warnings = plan.warnings.filter((warning) => warning.code !== 'ERR_COLD_PART');
  return { sites: plan.sites, skipped: plan.skipped, warnings };
}

function specError(
  spec: ProbeSpec,
  span: Span,
  code: ConstructorParameters<typeof ProbeError>[0],
  message: string,
  hints: string[] = [],
  cause?: unknown,
): ProbeError {
  return new ProbeError(code, message, { source: { text: spec.text, span }, hints, cause });
}

function openTarget(
  spec: ProbeSpec,
  cache: Map<string, OpenTarget>,
  options: ResolveOptions,
): OpenTarget {
  let resolved: ResolvedTarget;
  try {
    resolved =
      options.targetFile === undefined
        ? resolveTarget(spec.target.text, {
            pid: options.pid,
            cwd: options.cwd,
            libraryPath: options.libraryPath,
            executable: options.executable,
          })
        : fileTarget(options.targetFile, options.pid);
  } catch (err) {
    if (err instanceof ProbeError && err.source === undefined) {
      throw new ProbeError(err.code, err.message, {
        hints: [...err.hints],
        details: err.details,
        cause: err.cause,
        source: { text: spec.text, span: spec.target.span },
      });
    }
    throw err;
  }
  const known = cache.get(resolved.path);
  if (known !== undefined) return { ...known, resolved };
  const elf = openElf(resolved.path);
  let index: SymbolIndex | undefined;
  let ifuncStarts: Set<bigint> | undefined;
  let dwarf: DwarfReader | undefined | null = null;
  let go: GoFacts | undefined | null = null;
  let unwinder: string | undefined | null = null;
  let frames: CallFrames | undefined;
  const stat = statSync(resolved.path, { bigint: true });
  const target: OpenTarget = {
    resolved,
    elf,
    file: {
      path: resolved.path,
      displayPath: resolved.displayPath,
      dev: stat.dev,
      inode: stat.ino,
      buildId: elf.buildId(),
      elfType: elf.type,
    },
    symbols: () => {
      index ??= targetSymbols(elf, resolved.path, { debugDirs: options.debugDirs });
      return index;
    },
    ifuncImplementations: () => {
      ifuncStarts ??= allIfuncImplementations(elf, target.symbols());
      return ifuncStarts;
    },
    dwarf: () => {
      if (dwarf === null) dwarf = openDwarf(elf, resolved.path, { debugDirs: options.debugDirs });
      return dwarf;
    },
    noDebugInfoHints: () =>
      noDebugInfoHints(elf, resolved.path, resolved.displayPath, { debugDirs: options.debugDirs }),
    go: () => {
      if (go === null) go = goFacts(elf);
      return go;
    },
    unwinder: () => {
      if (unwinder === null) {
        const own = unwinderOf(elf);
        unwinder =
          own !== undefined
            ? `${resolved.displayPath} ${own}`
            : programUnwinder({ pid: options.pid, executable: options.executable });
      }
      return unwinder;
    },
    hasUnwindInfo: (vaddr) => {
      // Only .eh_frame: what an unwinder reads at run time (.debug_frame is for debuggers).
      if (frames === undefined) {
        const sections = Object.create(dwarfSections(elf)) as DwarfSections;
        Object.defineProperty(sections, 'frame', { value: new Uint8Array(0) });
        frames = new CallFrames(sections, { dataRelBase: elf.section('.got')?.addr });
      }
      return frames.covers(vaddr);
    },
    shared: {
      matches: new Map(),
      entries: new Map(),
      recurring: new Map(),
      returnsPlanned: new Set(),
      returnScans: new Map(),
      scanned: new Map(),
    },
  };
  cache.set(resolved.path, target);
  return target;
}

/** A given file as a resolved target (see ResolveOptions.targetFile). */
function fileTarget(
  file: NonNullable<ResolveOptions['targetFile']>,
  pid: number | undefined,
): ResolvedTarget {
  if ('object' in file) {
    if (pid === undefined) {
      throw new InternalError('Cannot resolve in a mapped file without the process that maps it');
    }
    return openMappedObject(pid, file.object);
  }
  const found = resolveTarget(file.path.includes('/') ? file.path : `./${file.path}`);
  const mappedObject =
    pid === undefined
      ? undefined
      : processObjects(pid).find((o) => o.dev === found.dev && o.inode === found.inode);
  return {
    ...found,
    displayPath: file.displayPath,
    ...(mappedObject === undefined ? {} : { mappedObject }),
  };
}

/** The planning of one location yields progress as resolveSteps() does. */
type Steps<T> = Generator<PlanProgress, T, undefined>;

function* resolveLocation(
  spec: ProbeSpec,
  target: OpenTarget,
  options: ResolveOptions,
  plan: ProbePlan,
): Steps<ProbeSite[]> {
  const location = spec.location;
  switch (location.type) {
    case 'symbol':
      return yield* resolveSymbol(spec, location, target, options, plan);
    case 'glob':
      return yield* resolveGlob(spec, location, target, options, plan);
    case 'vaddr':
      return [siteAtAddress(spec, location.vaddr, location.span, target, options)];
    case 'file-offset': {
      const vaddr = target.elf.fileOffsetToVaddr(location.fileOffset);
      if (vaddr === undefined) {
        throw specError(
          spec,
          location.span,
          'ERR_NOT_EXECUTABLE',
          `Cannot place probe at file offset 0x${location.fileOffset.toString(16)} of ${quote(target.file.displayPath)}: no loadable segment holds that offset`,
          [`See the segments with: readelf -lW ${target.file.displayPath}`],
        );
      }
      return [siteAtAddress(spec, vaddr, location.span, target, options)];
    }
    case 'usdt':
      return resolveUsdt(spec, location, target, options);
    case 'line':
      return resolveLineAddresses(spec, location, target, options).map((at) => ({
        ...buildSite(spec, target, at.fn, at.vaddr, location.span, options),
        source: at.source,
      }));
  }
}

function* resolveSymbol(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'symbol' }>,
  target: OpenTarget,
  options: ResolveOptions,
  plan: ProbePlan,
): Steps<ProbeSite[]> {
  const index = target.symbols();
  const byVersion = (found: readonly FunctionSymbol[]) =>
    location.version === undefined ? found : found.filter((fn) => fn.version === location.version);
  // The name as stored and the GCC clones of it (`helper.isra.0`), as gdb finds them; else a
  // C++ or Rust name as it reads demangled: `ns::Class::method`, `ns::Class::method(int)`.
  // (functionsCalled(), with whether it found them by the stored name.)
  const asStored = index.storedAs(location.name);
  const stored = asStored.length > 0;
  let matches = byVersion(stored ? asStored : index.demangledNamed(location.name));
  if (!stored) {
    if (matches.length === 0 && isGlob(location.name)) {
      return yield* resolveQuotedPattern(spec, location, target, options, plan);
    }
    noteOverloads(spec, location, matches, target, plan.warnings);
  }
  if (matches.length === 0) throw symbolNotFound(spec, location, target, options);
  // A .cold part found through the name of its function is not an entry of it (gdb leaves it
  // out too); named itself, it is probed as the instruction it starts with.
  const compact = (name: string) => name.replace(/\s+/g, '');
  const named = (fn: FunctionSymbol) =>
    fn.name === location.name ||
    (fn.demangled !== undefined && compact(fn.demangled) === compact(location.name));
  const cold = matches.filter((fn) => isColdPart(fn) && !named(fn));
  if (cold.length > 0) {
    matches = matches.filter((fn) => !cold.includes(fn));
    const message = `${cold.length === 1 ? 'a .cold part' : `${cold.length} .cold parts`} of ${quote(location.name)} in ${quote(target.file.displayPath)}: ${cold.map((fn) => shownName(fn)).join(', ')}`;
    const why =
      "A .cold part holds a function's rarely run code, split off by GCC and jumped to from the function: it is not called, so it has no entry to probe";
    const hint = `Probe it by its own name if you mean its first instruction, e.g. ${shellWord(`${spec.target.text}:${printSymbolName(shownName(cold[0]!))}`)}`;
    if (matches.length === 0) {
      throw specError(spec, location.span, 'ERR_COLD_PART', `Cannot probe ${message}`, [why, hint]);
    }
    plan.warnings.push(
      specError(spec, location.span, 'ERR_COLD_PART', `Left out ${message}`, [why, hint]),
    );
  }
  const ifunc = matches.find((fn) => fn.type === 'ifunc');
  if (ifunc !== undefined) {
    // The calls go to an implementation the resolver picked: probed there (all of them: the
    // one this CPU runs gets the calls). An offset is one into the resolver's own code.
    const implementations = findIfuncImplementations(target.elf, target.symbols(), ifunc);
    if (location.offset !== 0n || implementations.length === 0) {
      const error = ifuncError(spec, location.span, ifunc, target, implementations);
      if (location.offset === 0n) throw error;
      // Said as such: the name alone is probed at the implementations.
      throw new ProbeError(
        'ERR_IFUNC',
        `Cannot probe ${quote(`${ifunc.name}+0x${location.offset.toString(16)}`)} in ${quote(target.file.displayPath)}: ${quote(ifunc.name)} is an IFUNC (GNU indirect function) resolver, and the offset is one into its own code, which runs once, at load`,
        {
          source: { text: spec.text, span: location.offsetSpan ?? location.span },
          hints: [
            `Without the offset, ${shellWord(`${spec.target.text}:${ifunc.name}`)} probes the implementations the resolver can pick`,
            ...error.hints.slice(1),
          ],
        },
      );
    }
    const planned = implementationSites(
      spec,
      target,
      implementations,
      ifunc,
      location.span,
      options,
    );
    if (planned.sites.length === 0) throw planned.skipped[0]!.error;
    plan.skipped.push(...planned.skipped);
    const picked = pickedHere(target, ifunc, implementations);
    plan.warnings.push(
      specError(
        spec,
        location.span,
        'ERR_IFUNC',
        `Probed ${quote(ifunc.name)} at the ${implementations.length} implementations its IFUNC resolver can pick: ${implementationNames(implementations)}`,
        [
          `An IFUNC's resolver runs once, when the library is loaded, and picks the implementation ${ifunc.name} calls go to for this CPU${picked === undefined ? '' : ` (here: ${implementationName(picked)})`}: that one gets them`,
          ...unprobedPicks([[ifunc, picked]], planned.skipped, options),
        ],
      ),
    );
    return planned.sites;
  }
  const coldReturn = matches.find((fn) => isColdPart(fn));
  if (coldReturn !== undefined && spec.kind === 'return') {
    throw specError(
      spec,
      location.span,
      'ERR_COLD_PART',
      `Cannot place a return probe on ${quote(shownName(coldReturn))}: it is a .cold part, jumped to from its function, so the top of the stack there is not a return address`,
      [
        'A return probe replaces the return address at the top of the stack; here it would overwrite data of the function',
        `Probe the return of the function it belongs to: ${shellWord(`r:${spec.target.text}:${printSymbolName(cloneName(shownName(coldReturn))!.base)}`)}`,
      ],
    );
  }
  // Several functions may share a name (static functions of different files): probe each.
  const sites: ProbeSite[] = [];
  const seen = new Set<bigint>();
  for (const fn of matches) {
    if (seen.has(fn.vaddr)) continue;
    seen.add(fn.vaddr);
    if (location.offset !== 0n && fn.sizeBytes !== 0n && location.offset >= fn.sizeBytes) {
      throw specError(
        spec,
        location.offsetSpan ?? location.span,
        'ERR_OFFSET_OUT_OF_RANGE',
        `Cannot place probe at ${quote(`${fn.name}+0x${location.offset.toString(16)}`)}: the function is only 0x${fn.sizeBytes.toString(16)} bytes long`,
        [`Show its instructions with: upscope resolve '${spec.target.text}:${fn.name}'`],
      );
    }
    const span = location.offset === 0n ? location.span : (location.offsetSpan ?? location.span);
    sites.push(buildSite(spec, target, fn, fn.vaddr + location.offset, span, options));
  }
  return sites;
}

/** A .cold part: GCC's split-off rarely run blocks of a function (`f.cold`, `f.part.0.cold`). */
function isColdPart(fn: FunctionSymbol): boolean {
  return fn.name.endsWith('.cold') && cloneName(fn.name)?.cold === true;
}

/** A function's name as shown: demangled when it is a C++ or Rust name. */
function shownName(fn: FunctionSymbol): string {
  return fn.demangled ?? fn.name;
}

/**
 * A quoted location with `*` or `?` that no function is named exactly (`'ns::Box<int>::*'`):
 * a pattern, as it would be unquoted, but without the version or offset a pattern cannot take.
 */
function* resolveQuotedPattern(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'symbol' }>,
  target: OpenTarget,
  options: ResolveOptions,
  plan: ProbePlan,
): Steps<ProbeSite[]> {
  if (location.version !== undefined || location.offset !== 0n) {
    throw specError(
      spec,
      location.offsetSpan ?? location.span,
      'ERR_SPEC_INVALID',
      `Cannot place a probe at ${quote(location.name)} with ${location.version === undefined ? 'an offset' : 'a version'}: no function has that name, and a pattern cannot take one`,
      ['Name one function, or leave the version and offset out of the pattern'],
    );
  }
  return yield* resolveGlob(
    spec,
    { type: 'glob', pattern: location.name, span: location.span },
    target,
    options,
    plan,
  );
}

/** A plain C++ name that matched several overloads: all are probed, and the user is told. */
function noteOverloads(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'symbol' }>,
  matches: readonly FunctionSymbol[],
  target: OpenTarget,
  warnings: ProbeError[],
): void {
  // A GCC clone of a function is not another overload of it.
  const overloads = [
    ...new Set(
      matches.map((fn) => {
        const name = fn.demangled ?? fn.name;
        return cloneName(name)?.base ?? name;
      }),
    ),
  ];
  if (overloads.length < 2) return;
  const shown = overloads.slice(0, 8).join(', ') + (overloads.length > 8 ? ', ...' : '');
  warnings.push(
    specError(
      spec,
      location.span,
      'ERR_OVERLOADED',
      `Placed probes on ${overloads.length} overloads of ${quote(location.name)} in ${quote(target.file.displayPath)}: ${shown}`,
      [
        `Probe one by its parameters, e.g. ${shellWord(`${spec.kindExplicit ? `${spec.kind === 'return' ? 'r' : 'p'}:` : ''}${spec.target.text}:${printSymbolName(overloads[0]!)}`)}`,
      ],
    ),
  );
}

/** What to say about a stripped file whose debug symbols were not found. */
function strippedHints(target: OpenTarget, options: ResolveOptions): string[] {
  // Stripped all the same: its MiniDebugInfo could not be inflated (see miniDebugInfo()).
  const mini = target.elf.section('.gnu_debugdata') === undefined ? [] : [MINI_UNREAD];
  return [
    'The file is stripped: only .dynsym (exported functions) is available',
    ...mini,
    ...missingDebugSymbolsHints(target.elf, target.file.path, target.file.displayPath, {
      debugDirs: options.debugDirs,
    }),
  ];
}

const MINI_UNREAD =
  'Its MiniDebugInfo (.gnu_debugdata), which names the rest, was not read: it needs xz (Debian: xz-utils; Fedora: xz)';

/** Libraries nearly every program links, left out of linkedLibrariesHint(). */
const COMMON_LIBRARIES =
  /^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^.]*)\.so/;

/**
 * For a file with no function to probe (a stripped program whose code is in the libraries
 * it links, as sqlite3's is in libsqlite3.so.0): those libraries (but the C and C++ runtime)
 * with how many functions each has, in one hint; none otherwise.
 */
function linkedLibrariesHint(target: OpenTarget, options: ResolveOptions): string[] {
  if (target.symbols().length > 0) return [];
  const found: string[] = [];
  for (const name of readDynamicInfo(target.elf)?.needed ?? []) {
    if (COMMON_LIBRARIES.test(name)) continue;
    try {
      const { path } = resolveTarget(name, {
        pid: options.pid,
        executable: target.resolved.path,
        libraryPath: options.libraryPath,
      });
      const elf = openElf(path);
      try {
        const functions = new SymbolIndex(elf).length;
        if (functions > 0) found.push(`${name} (${grouped(functions)} functions)`);
      } finally {
        elf.close();
      }
    } catch {
      // Not found, or not an ELF file: left out.
    }
  }
  if (found.length === 0) return [];
  const first = found[0]!.replace(/ .*/, '');
  return [
    `It names no function, but the libraries it links do: ${found.slice(0, 4).join(', ')}${found.length > 4 ? ', ...' : ''}; probe those, e.g. ${shellWord(`${first}:*`)}`,
  ];
}

function symbolNotFound(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'symbol' }>,
  target: OpenTarget,
  options: ResolveOptions,
): ProbeError {
  const index = target.symbols();
  const name = location.name;
  const where = quote(target.file.displayPath);
  const versions = index.named(name).map((fn) => functionDisplayName(fn, { demangle: false }));
  if (location.version !== undefined && versions.length > 0) {
    return specError(
      spec,
      location.span,
      'ERR_SYMBOL_NOT_FOUND',
      `Cannot resolve symbol ${quote(`${name}@${location.version}`)} in ${where}: ${name} has no version ${location.version}`,
      [`Its versions: ${versions.join(', ')}`],
    );
  }
  const other = index.anySymbolNamed(name);
  if (other?.defined) {
    return specError(
      spec,
      location.span,
      'ERR_NOT_A_FUNCTION',
      `Cannot probe ${quote(name)} in ${where}: it is a symbol of type ${other.type}, not a function`,
      ['Probes go on code; list the functions with: upscope list ' + spec.target.text],
    );
  }
  const hints: string[] = [];
  if (other !== undefined && !other.defined) {
    hints.push(
      `${target.file.displayPath} imports ${quote(name)} from a shared library; probe it there, e.g. libc:${name}`,
    );
  }
  const suggestions = closest(
    name,
    index.functions.map((fn) =>
      fn.demangled === undefined ? fn.name : (withoutParameters(fn.demangled) ?? fn.demangled),
    ),
    3,
  );
  const suggestion = didYouMean(suggestions);
  if (suggestion !== undefined) hints.push(suggestion);
  if (index.stripped) hints.push(...strippedHints(target, options));
  hints.push(`List candidates with: upscope list ${spec.target.text} '${name.slice(0, 3)}*'`);
  const table = index.stripped
    ? '.dynsym'
    : index.goPclntab
      ? 'its .gopclntab (a stripped Go program: its Go functions by the names its runtime gives them)'
      : index.debugFile !== undefined
        ? `the .symtab of its debug file ${index.debugFile} or its .dynsym`
        : '.symtab or .dynsym';
  return specError(
    spec,
    location.span,
    'ERR_SYMBOL_NOT_FOUND',
    `Cannot resolve symbol ${quote(location.version === undefined ? name : `${name}@${location.version}`)} in ${where}: not in ${table}`,
    hints,
  );
}

function ifuncError(
  spec: ProbeSpec,
  span: Span,
  fn: FunctionSymbol,
  target: OpenTarget,
  implementations: readonly IfuncImplementation[],
): ProbeError {
  const hints = [
    `An IFUNC's resolver runs once, when the library is loaded, and picks the implementation ${fn.name} calls go to; a probe on it would fire once per process, not per call`,
  ];
  if (implementations.length > 0) {
    hints.push(`Its implementations: ${implementationNames(implementations)}`);
    hints.push(`Probe one, e.g. ${spec.target.text}:${implementationName(implementations[0]!)}`);
    if (implementations.some((impl) => impl.name === undefined)) {
      hints.push(
        "Their names are in the file's debug symbols (on Debian, its -dbg or -dbgsym package)",
      );
    }
  }
  return specError(
    spec,
    span,
    'ERR_IFUNC',
    `Cannot probe ${quote(fn.name)} in ${quote(target.file.displayPath)}: it is an IFUNC (GNU indirect function) resolver, not the function that runs`,
    hints,
  );
}

/**
 * What the warning of a pattern's IFUNC resolvers says: why their implementations are probed,
 * and the first one's, named.
 */
function ifuncPatternHints(
  spec: ProbeSpec,
  first: FunctionSymbol,
  implementations: readonly IfuncImplementation[],
): string[] {
  const resolve = shellWord(`${spec.target.text}:${first.name}`);
  return [
    'An IFUNC resolver runs once, when the library is loaded, and picks the implementation the calls go to for this CPU: the implementations are probed instead',
    implementations.length > 0
      ? `${first.name}'s are ${implementationNames(implementations)}; upscope resolve ${resolve} shows them`
      : `upscope resolve ${resolve} shows ${first.name}'s`,
  ];
}

/** Implementations as they are named: their symbols, else their addresses. */
function implementationNames(implementations: readonly IfuncImplementation[]): string {
  return implementations.map(implementationName).join(', ');
}

function implementationName(impl: IfuncImplementation): string {
  return impl.name ?? `0x${impl.vaddr.toString(16)}`;
}

/**
 * The implementation of an IFUNC this CPU runs, where the file is mapped in this very process
 * (libc, and the other libraries upscope itself loads): dlsym gives the resolver's pick, as
 * the dynamic linker makes it for any process here. Undefined where it is not mapped here.
 */
function pickedHere(
  target: OpenTarget,
  resolver: FunctionSymbol,
  implementations: readonly IfuncImplementation[],
): IfuncImplementation | undefined {
  try {
    // This process's maps are read once per file.
    if (target.shared.mappedHere === undefined) {
      target.shared.mappedHere =
        processObjects(process.pid).find(
          (o) => o.dev === target.file.dev && o.inode === target.file.inode,
        ) ?? null;
    }
    const object = target.shared.mappedHere;
    if (object === null) return undefined;
    const address = loadNative().symbolAddress(resolver.name.replace(/@.*$/, ''));
    if (address === undefined) return undefined;
    const at = runtimeToFileOffset(object.mappings, address);
    if (at === undefined) return undefined;
    const vaddr = target.elf.fileOffsetToVaddr(at.fileOffset);
    return implementations.find((impl) => impl.vaddr === vaddr);
  } catch {
    return undefined; // no native layer here: the pick is not said
  }
}

/**
 * What to say of the implementations this CPU runs that could not be probed: their calls are
 * not seen (the kernel refuses a VEX first instruction and would mishandle an EVEX one; the
 * ptrace engine runs both).
 */
function unprobedPicks(
  picks: readonly (readonly [FunctionSymbol, IfuncImplementation | undefined])[],
  skipped: readonly SkippedSite[],
  options: ResolveOptions,
): string[] {
  const lost = picks.flatMap(([resolver, picked]) => {
    if (picked === undefined) return [];
    const skip = skipped.find((s) => s.vaddr === picked.vaddr);
    return skip === undefined
      ? []
      : [`${resolver.name}'s ${implementationName(picked)} (${skip.reason})`];
  });
  if (lost.length === 0) return [];
  const ptrace =
    options.engine === 'ptrace'
      ? ''
      : `; --engine ptrace probes ${lost.length === 1 ? 'it' : 'them'}`;
  const one = lost.length === 1;
  return [
    `The implementation${one ? '' : 's'} this CPU runs could not be probed, and ${one ? 'its' : 'their'} calls are not seen: ${lost.slice(0, 5).join(', ')}${lost.length > 5 ? ', ...' : ''}${ptrace}`,
  ];
}

/**
 * The sites of an IFUNC's implementations, and those that cannot be probed (left out, as a
 * pattern leaves out a function). One no symbol names is probed at its address, named for
 * its resolver (a stripped library's implementations are local functions, named only in its
 * debug file).
 */
function implementationSites(
  spec: ProbeSpec,
  target: OpenTarget,
  implementations: readonly IfuncImplementation[],
  resolver: FunctionSymbol,
  span: Span,
  options: ResolveOptions,
  lean = false,
): { sites: ProbeSite[]; skipped: SkippedSite[] } {
  const sites: ProbeSite[] = [];
  const skipped: SkippedSite[] = [];
  for (const impl of implementations) {
    try {
      if (impl.fn !== undefined) {
        sites.push(
          lean
            ? leanSite(spec, target, impl.fn, span, options)
            : buildSite(spec, target, impl.fn, impl.vaddr, span, options),
        );
      } else {
        const site = buildSite(spec, target, undefined, impl.vaddr, span, options, undefined, true);
        sites.push({ ...site, nameQualifier: `an implementation of ${resolver.name}` });
      }
    } catch (err) {
      const reason = skipReasonOf(err);
      if (reason === undefined) throw err;
      skipped.push({
        spec: spec.text,
        target: target.file.displayPath,
        symbol: impl.name,
        vaddr: impl.vaddr,
        reason,
        error: err as ProbeError,
      });
    }
  }
  return { sites, skipped };
}

/** Matches of a pattern from which their names are demangled at once. */
const DEMANGLE_AT_ONCE_MATCHES = 2000;

/** Functions planned between two progress calls. */
const PROGRESS_EVERY = 1000;

function* resolveGlob(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'glob' }>,
  target: OpenTarget,
  options: ResolveOptions,
  plan: ProbePlan,
): Steps<ProbeSite[]> {
  const leanAsked =
    options.lean === true &&
    options.engine !== 'ptrace' &&
    spec.fetches.length === 0 &&
    (options.optionFetches === undefined || options.optionFetches.length === 0);
  // A lean plan of a file with its own symbols is kept, and taken again while nothing it
  // depends on changed (see plan-cache.ts). No Go program's plan is kept: one kept for this
  // file says it is none, without its string tables searched for Go's runtime (node's
  // took 25 ms of the 0.9 s to take a kept plan of its 49,981 _ZN[1-9S]* functions).
  let key =
    leanAsked && options.strict !== true && target.elf.hasSymtab
      ? planKey({
          path: target.resolved.path,
          buildId: target.file.buildId,
          spec: spec.text,
          options: {
            kind: spec.kind,
            returnProbes: options.returnProbes ?? 'auto',
            // An entry's plan with its returns (latency) is not one without (count).
            returnsOfEntries: options.returnsOfEntries === true,
            kernel: options.kernel ?? kernelVersion(),
            demangle: options.demangle !== false,
            // The names a plan keeps are the demangler's.
            demangler: options.demangle !== false ? cxxDemanglerName() : null,
            unsafe: options.unsafe === true,
            unwinder: target.unwinder() ?? null,
          },
        })
      : undefined;
  const kept =
    key === undefined
      ? undefined
      : loadPlan(key, {
          spec: spec.text,
          pattern: location.pattern,
          file: target.file,
          path: target.resolved.path,
          runtimeAddress:
            target.resolved.mappedObject === undefined
              ? () => undefined
              : runtimeAddressesOf(target.resolved.mappedObject),
        });
  if (kept !== undefined) {
    plan.skipped.push(...kept.skipped);
    plan.warnings.push(...kept.warnings);
    return kept.sites;
  }
  const lean = leanAsked && target.go() === undefined;
  if (!lean) key = undefined;
  const skippedBefore = plan.skipped.length;
  const warningsBefore = plan.warnings.length;
  let groups = target.shared.matches.get(location.pattern);
  if (groups === undefined) {
    groups = matchGlob(target.symbols(), location.pattern);
    target.shared.matches.set(location.pattern, groups);
  }
  if (lean) scanReturnsAhead(spec, location.pattern, groups, target, options);
  if (groups.length === 0) {
    const hints: string[] = [];
    if (target.symbols().stripped) hints.push(...strippedHints(target, options));
    hints.push(...linkedLibrariesHint(target, options));
    hints.push(`List the functions with: upscope list ${spec.target.text}`);
    throw specError(
      spec,
      location.span,
      'ERR_NO_MATCH',
      `Cannot expand ${quote(location.pattern)} in ${quote(target.file.displayPath)}: no function name matches`,
      hints,
    );
  }
  const sites: ProbeSite[] = [];
  /** The IFUNC resolvers matched: probed at their implementations, after the loop. */
  const resolvers: FunctionSymbol[] = [];
  const unprobeable: SkippedSite[] = [];
  const coldParts: string[] = [];
  const progress = options.onProgress !== undefined;
  let done = 0;
  for (const group of groups) {
    if (progress && done % PROGRESS_EVERY === 0 && done > 0) {
      yield { done, total: groups.length, target: target.file.displayPath };
    }
    done++;
    const main = namedBy(group);
    if (main.type === 'ifunc') {
      resolvers.push(main);
      continue;
    }
    if (isColdPart(main)) {
      coldParts.push(shownName(main));
      continue;
    }
    try {
      sites.push(
        lean
          ? leanSite(spec, target, main, location.span, options)
          : buildSite(spec, target, main, main.vaddr, location.span, options),
      );
    } catch (err) {
      // One function of many that cannot be probed is left out, not the whole pattern.
      const reason = skipReasonOf(err);
      if (reason === undefined) throw err;
      unprobeable.push({
        spec: spec.text,
        target: target.file.displayPath,
        symbol: functionDisplayName(main, { demangle: options.demangle !== false }),
        vaddr: main.vaddr,
        reason,
        error: err as ProbeError,
      });
    }
  }
  if (progress) yield { done, total: groups.length, target: target.file.displayPath };
  if (resolvers.length > 0) {
    // Each implementation once, and none the pattern matched itself; in address order.
    const matched = new Set(groups.map((group) => group[0]!.vaddr));
    /** The resolvers whose implementations were found, with them; those with none found. */
    const probed: [FunctionSymbol, IfuncImplementation[]][] = [];
    const unknown: FunctionSymbol[] = [];
    const picks: [FunctionSymbol, IfuncImplementation | undefined][] = [];
    let added = 0;
    for (const resolver of resolvers) {
      const all = findIfuncImplementations(target.elf, target.symbols(), resolver);
      if (all.length === 0) {
        unknown.push(resolver);
        continue;
      }
      probed.push([resolver, all]);
      picks.push([resolver, pickedHere(target, resolver, all)]);
      const implementations = all.filter((impl) => !matched.has(impl.vaddr));
      for (const impl of implementations) matched.add(impl.vaddr);
      const more = implementationSites(
        spec,
        target,
        implementations,
        resolver,
        location.span,
        options,
        lean,
      );
      sites.push(...more.sites);
      unprobeable.push(...more.skipped);
      added += more.sites.length;
    }
    if (added > 0) sites.sort((a, b) => (a.vaddr < b.vaddr ? -1 : a.vaddr > b.vaddr ? 1 : 0));
    const named = (fns: readonly FunctionSymbol[]) =>
      `${fns
        .map((fn) => fn.name)
        .slice(0, 5)
        .join(', ')}${fns.length > 5 ? ', ...' : ''}`;
    const resolversOf = (n: number) => `${n} IFUNC resolver${n === 1 ? '' : 's'}`;
    if (probed.length > 0) {
      plan.warnings.push(
        specError(
          spec,
          location.span,
          'ERR_IFUNC',
          `Probed ${resolversOf(probed.length)} matched by ${quote(location.pattern)} at their implementations (${added} more functions): ${named(probed.map(([resolver]) => resolver))}`,
          [
            ...ifuncPatternHints(spec, ...probed[0]!),
            ...unprobedPicks(picks, unprobeable, options),
          ],
        ),
      );
    }
    if (unknown.length > 0) {
      // A resolver that does not load its implementations' addresses with a lea.
      const hints = [
        'An IFUNC resolver runs once, when the library is loaded, and picks the implementation the calls go to: a probe on it would fire once per process, not per call',
        'Their implementations were not found in their code: probe them by name or address (upscope list shows the functions)',
      ];
      if (sites.length === 0 && unprobeable.length === 0) {
        throw specError(
          spec,
          location.span,
          'ERR_IFUNC',
          `Cannot probe the ${resolversOf(unknown.length)} matched by ${quote(location.pattern)}: ${named(unknown)}`,
          hints,
        );
      }
      plan.warnings.push(
        specError(
          spec,
          location.span,
          'ERR_IFUNC',
          `Skipped ${resolversOf(unknown.length)} matched by ${quote(location.pattern)}: ${named(unknown)}`,
          hints,
        ),
      );
    }
  }
  if (unprobeable.length > 0) {
    checkSkips(spec, location, target, options, sites.length, unprobeable);
    plan.skipped.push(...unprobeable);
  }
  if (coldParts.length > 0) {
    const left = `${coldParts.length} .cold part${coldParts.length === 1 ? '' : 's'} matched by ${quote(location.pattern)}: ${coldParts.slice(0, 5).join(', ')}${coldParts.length > 5 ? ', ...' : ''}`;
    const why =
      "A .cold part holds a function's rarely run code, jumped to from it, not called: it has no entry to probe";
    if (sites.length === 0 && resolvers.length === 0) {
      throw specError(spec, location.span, 'ERR_COLD_PART', `Cannot probe ${left}`, [
        why,
        'Probe one by its own name if you mean its first instruction',
      ]);
    }
    plan.warnings.push(specError(spec, location.span, 'ERR_COLD_PART', `Left out ${left}`, [why]));
  }
  if (key !== undefined) {
    // Written on the way to attaching, before the probes are live (a command interrupted
    // soon after, by a Ctrl-C or a benchmark's end, would not have kept it otherwise): now,
    // or by the caller while the kernel attaches (planWrites).
    const kept = {
      sites,
      skipped: plan.skipped.slice(skippedBefore),
      warnings: plan.warnings.slice(warningsBefore),
    };
    const write = () => savePlan(key, spec.kind === 'return' ? 'return' : 'entry', kept);
    if (options.planWrites !== undefined) options.planWrites.push(write);
    else write();
  }
  return sites;
}

/**
 * Starts finding the returns of a pattern's functions on a worker (see return-scan.ts), when
 * this spec or a later one plans them at their exits and they are many.
 */
function scanReturnsAhead(
  spec: ProbeSpec,
  pattern: string,
  groups: readonly FunctionSymbol[][],
  target: OpenTarget,
  options: ResolveOptions,
): void {
  const { returnScans } = target.shared;
  const planned =
    spec.kind === 'return' ||
    options.returnsOfEntries === true ||
    target.shared.returnsPlanned.has(pattern);
  const mode = options.returnProbes ?? 'auto';
  if (
    !planned ||
    groups.length < SCAN_AHEAD_FROM ||
    returnScans.has(pattern) ||
    mode === 'trampoline' ||
    (mode === 'auto' && target.unwinder() === undefined)
  ) {
    return;
  }
  const functions: FunctionSymbol[] = [];
  for (const group of groups) {
    const main = namedBy(group);
    if (main.type !== 'ifunc' && !isColdPart(main) && main.sizeBytes > 0n) functions.push(main);
  }
  const symbols = target.symbols();
  const scan = ReturnScanAhead.start(target.file, functions, (fn) =>
    codeRanges(fn, target.elf, symbols),
  );
  if (scan !== undefined) returnScans.set(pattern, scan);
}

/** The function of a group of aliases a pattern's site is planned by (its preferred name). */
function namedBy(group: readonly FunctionSymbol[]): FunctionSymbol {
  return group.reduce((best, fn) => (preferName(fn, best) ? fn : best));
}

/** The functions a glob matches, grouped by address (aliases together), in address order. */
function matchGlob(index: SymbolIndex, glob: string): FunctionSymbol[][] {
  const pattern = globToRegExp(glob);
  // Only the names that could match are demangled (most of planning a pattern over a big
  // C++ program was demangling every name).
  const matched = index.matching(glob, pattern);
  // The names matched at once, when many are to be named (one by one, a name costs twice as
  // much).
  if (matched.length >= DEMANGLE_AT_ONCE_MATCHES) index.demangleSome(matched);
  const byAddress = new Map<bigint, FunctionSymbol[]>();
  for (const k of matched) {
    const fn = index.function(k);
    const group = byAddress.get(fn.vaddr);
    if (group === undefined) byAddress.set(fn.vaddr, [fn]);
    else group.push(fn);
  }
  return [...byAddress.values()];
}

/** Details key of a site's error that a pattern may skip the site for: its reason, short. */
const SKIP_REASON = 'skipReason';

function skipReasonOf(err: unknown): string | undefined {
  if (!(err instanceof ProbeError)) return undefined;
  const reason = err.details?.[SKIP_REASON];
  return typeof reason === 'string' ? reason : undefined;
}

/**
 * A pattern that skipped sites: an error when it has nothing else (the first site's error
 * says why, with the counts) or with `strict`; else the skips are for the plan to say.
 */
function checkSkips(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'glob' }>,
  target: OpenTarget,
  options: ResolveOptions,
  probed: number,
  skipped: readonly SkippedSite[],
): void {
  const total = probed + skipped.length;
  const where = `matching ${quote(location.pattern)} in ${quote(target.file.displayPath)}`;
  const list = `upscope resolve '${spec.text}'`;
  if (probed === 0) {
    const first = skipped[0]!.error;
    throw specError(
      spec,
      location.span,
      'ERR_UNPROBEABLE_INSTRUCTION',
      `Cannot place a probe on any of the ${total} function${total === 1 ? '' : 's'} ${where}: ${skipCounts(skipped)}`,
      [`The first: ${first.message}`, ...first.hints, `See them all with: ${list}`],
    );
  }
  if (options.strict === true) {
    throw specError(
      spec,
      location.span,
      'ERR_UNPROBEABLE_INSTRUCTION',
      `Cannot place probes on ${skipped.length} of the ${total} functions ${where} (--strict): ${skipCounts(skipped)}`,
      [`See them with: ${list}`, 'Without --strict, they are skipped and the rest are probed'],
    );
  }
}

function resolveUsdt(
  spec: ProbeSpec,
  location: Extract<Location, { type: 'usdt' }>,
  target: OpenTarget,
  options: ResolveOptions,
): ProbeSite[] {
  const notes = target.elf.usdtNotes();
  const provider = isGlob(location.provider) ? globToRegExp(location.provider) : undefined;
  const name = isGlob(location.name) ? globToRegExp(location.name) : undefined;
  const matches = notes.filter(
    (note) =>
      (provider === undefined
        ? note.provider === location.provider
        : provider.test(note.provider)) &&
      (name === undefined ? note.name === location.name : name.test(note.name)),
  );
  if (matches.length === 0) {
    const all = [...new Set(notes.map((note) => `${note.provider}:${note.name}`))];
    const hints =
      all.length === 0
        ? [
            `${target.file.displayPath} has no .note.stapsdt section: it was built without USDT probes`,
          ]
        : [
            didYouMean(closest(`${location.provider}:${location.name}`, all, 3)) ??
              `Its probes: ${all.slice(0, 8).join(', ')}`,
          ];
    throw specError(
      spec,
      location.span,
      'ERR_SYMBOL_NOT_FOUND',
      `Cannot find USDT probe ${quote(`${location.provider}:${location.name}`)} in ${quote(target.file.displayPath)}: no such note`,
      hints,
    );
  }
  return matches.map((note) => {
    const semaphoreVaddr = note.semaphore === 0n ? undefined : note.semaphore;
    const semaphoreFileOffset =
      semaphoreVaddr === undefined ? undefined : target.elf.vaddrToFileOffset(semaphoreVaddr);
    const usdt: UsdtSite = {
      provider: note.provider,
      name: note.name,
      args: note.args,
      semaphoreFileOffset,
      semaphoreVaddr,
    };
    const fn = target.symbols().containing(note.vaddr);
    return buildSite(spec, target, fn, note.vaddr, location.span, options, usdt);
  });
}

function siteAtAddress(
  spec: ProbeSpec,
  vaddr: bigint,
  span: Span,
  target: OpenTarget,
  options: ResolveOptions,
): ProbeSite {
  const fn = target.symbols().containing(vaddr);
  const knownStart = fn === undefined && target.ifuncImplementations().has(vaddr);
  if (fn === undefined && !knownStart && options.unsafe !== true) {
    throw specError(
      spec,
      span,
      'ERR_UNSAFE_ADDRESS',
      `Cannot place probe at 0x${vaddr.toString(16)} in ${quote(target.file.displayPath)}: no function symbol covers that address, so the instruction boundary cannot be checked`,
      [
        'A probe in the middle of an instruction corrupts the program',
        'Pass --unsafe if you know the address starts an instruction',
      ],
    );
  }
  if (fn?.type === 'ifunc' && vaddr === fn.vaddr) {
    const implementations = findIfuncImplementations(target.elf, target.symbols(), fn);
    throw ifuncError(spec, span, fn, target, implementations);
  }
  return buildSite(spec, target, fn, vaddr, span, options, undefined, knownStart);
}

/** Where a file offset of the target is in the process planned for (with `pid`), if mapped. */
function runtimeAddressOf(target: OpenTarget, fileOffset: bigint): bigint | undefined {
  const mapped = target.resolved.mappedObject;
  return mapped === undefined ? undefined : fileOffsetToRuntime(mapped, fileOffset);
}

/** What a lean site has none of. */
const NONE: readonly never[] = Object.freeze([]);

/**
 * buildSite() of a function's entry or return that fetches nothing, in a program not built by
 * Go (see ResolveOptions.lean): the same checks, and only what a kernel engine reads kept.
 */
function leanSite(
  spec: ProbeSpec,
  target: OpenTarget,
  fn: FunctionSymbol,
  span: Span,
  options: ResolveOptions,
): ProbeSite {
  const elf = target.elf;
  const vaddr = fn.vaddr;
  const segment = elf.loadSegmentOf(vaddr);
  const fileOffset = elf.vaddrToFileOffset(vaddr);
  if (segment === undefined || !segment.executable || fileOffset === undefined) {
    // The same refusal, said the same way.
    return buildSite(spec, target, fn, vaddr, span, options);
  }
  let entry = target.shared.entries.get(vaddr);
  if (entry === undefined) {
    const available = Math.min(
      Number(segment.vaddr + segment.fileSize - vaddr),
      MAX_INSTRUCTION_BYTES,
    );
    const bytes = elf.view(fileOffset, available);
    const key = recurringKey(bytes);
    const known = key === undefined ? undefined : target.shared.recurring.get(key);
    let probed: DecodedInstruction;
    let handling: KernelHandling;
    if (known !== undefined && known !== null) {
      probed = atAddress(known.probed, vaddr);
      handling = known.handling;
    } else {
      const decoded = decodeInstructions(bytes, vaddr, { maxCount: 1 })[0];
      if (decoded === undefined || decoded.invalid) {
        return buildSite(spec, target, fn, vaddr, span, options);
      }
      probed = decoded;
      try {
        handling = kernelHandling(spec, span, target, vaddr, probed, options);
      } catch (err) {
        // Probed past its first instruction, or refused as buildSite() says.
        if (err instanceof ProbeError && err.code === 'ERR_UNPROBEABLE_INSTRUCTION') {
          return buildSite(spec, target, fn, vaddr, span, options);
        }
        throw err;
      }
      if (key !== undefined && known === undefined) {
        target.shared.recurring.set(key, probed.ripRelative ? null : { probed, handling });
      }
    }
    const stepped =
      handling.strategy === 'single-step' ? entryPastStepped(target, fn, options) : undefined;
    // Where the probe sits: the first instruction, or the one the stepped ones are passed to.
    const at = stepped ?? { vaddr, past: undefined, probed, handling, fileOffset };
    entry = {
      vaddr: at.vaddr,
      pastFirst: at.past,
      probed: at.probed,
      instructions: [at.probed],
      handling: at.handling,
      fileOffset: at.fileOffset,
      runtimeAddress: runtimeAddressOf(target, at.fileOffset),
    };
    target.shared.entries.set(vaddr, entry);
  }
  const kind: SiteKind = spec.kind === 'return' ? 'return' : 'entry';
  let returns: ReturnPlan | undefined;
  if (kind === 'return' || options.returnsOfEntries === true) {
    target.shared.returns ??= {
      elf,
      symbols: target.symbols(),
      displayPath: target.file.displayPath,
      goProgram: false,
      convention: callingConvention(undefined, fn),
      unwinder: target.unwinder,
      hasUnwindInfo: target.hasUnwindInfo,
      mode: options.returnProbes ?? 'auto',
      kernelEngine: true,
      kernel: options.kernel ?? kernelVersion(),
      retHandlings: new Map(),
      scannedAhead: (scanned) => {
        const here = target.shared.scanned.get(scanned.vaddr);
        if (here !== undefined) return here;
        for (const scan of target.shared.returnScans.values()) {
          const found = scan.scanOf(scanned, elf);
          if (found !== undefined) return found;
        }
        return undefined;
      },
    };
    returns = planReturns(fn, entry.vaddr, target.shared.returns, { text: spec.text, span });
  }
  return {
    spec: spec.text,
    kind,
    target: target.file,
    symbol: functionDisplayName(fn, { demangle: false }),
    demangled: options.demangle !== false ? fn.demangled : undefined,
    aliases: NONE,
    symbolFile: target.symbols().debugFile,
    symbolOffset: 0n,
    vaddr: entry.vaddr,
    fileOffset: entry.fileOffset,
    usdt: undefined,
    instructions: entry.instructions,
    handling: entry.handling,
    fetches: NONE,
    runtimeAddress: entry.runtimeAddress,
    pastFirst: entry.pastFirst,
    returns,
  };
}

/** Validate a site (executable, instruction boundary) and describe it. */
function buildSite(
  spec: ProbeSpec,
  target: OpenTarget,
  fn: FunctionSymbol | undefined,
  entry: bigint,
  span: Span,
  options: ResolveOptions,
  usdt?: UsdtSite,
  /** The address is a function start known without a symbol (an IFUNC implementation). */
  functionStart = false,
): ProbeSite {
  const variables = {
    elf: target.elf,
    displayPath: target.file.displayPath,
    dwarf: target.dwarf,
    noDebugInfoHints: target.noDebugInfoHints,
  };
  const go = target.go();
  const goCode = isGoFunction(go, fn);
  const convention: CallingConvention | undefined =
    fn === undefined ? undefined : callingConvention(go, fn);
  // A Go function runs its start again when its stack grows: its entry is after that check.
  const afterStackCheck =
    goCode && fn !== undefined ? afterGoStackCheck(fn, target.elf, target.symbols()) : undefined;
  const atFunctionStart =
    usdt === undefined && spec.kind !== 'return' && fn !== undefined && entry === fn.vaddr;
  let vaddr = !atFunctionStart
    ? entry
    : afterStackCheck !== undefined
      ? afterStackCheck
      : goCode
        ? entry
        : variableProbeAddress(spec.fetches, variables, entry);
  // An entry the kernel cannot probe on its first instruction, probed on the second; one
  // it would single-step, on the first it emulates when that is near.
  const atStart = usdt === undefined && fn !== undefined && vaddr === fn.vaddr && !goCode;
  const pastFirst = atStart
    ? (entryPastFirst(target, fn, options) ??
      (fetchesKeptPast(spec, options) ? entryPastStepped(target, fn, options)?.past : undefined))
    : undefined;
  if (pastFirst !== undefined) vaddr = fn!.vaddr + pastFirst.offset;
  const afterGoCheck = atFunctionStart && afterStackCheck !== undefined;
  const movedEntry = afterGoCheck || pastFirst !== undefined;
  const elf = target.elf;
  const where = quote(target.file.displayPath);
  const hex = `0x${vaddr.toString(16)}`;
  const segment = elf.loadSegmentOf(vaddr);
  const fileOffset = elf.vaddrToFileOffset(vaddr);
  if (segment === undefined || !segment.executable || fileOffset === undefined) {
    throw new ProbeError(
      'ERR_NOT_EXECUTABLE',
      `Cannot place probe at ${hex} in ${where}: ${segment === undefined ? 'no loadable segment holds that address' : 'the address is not in an executable segment'}`,
      {
        source: { text: spec.text, span },
        hints: [`See the segments with: readelf -lW ${target.file.displayPath}`],
        details: { [SKIP_REASON]: 'not in code' },
      },
    );
  }
  const decoded = decodeSite(spec, target, fn, vaddr, span, options);
  const probed = decoded.first;
  const handling = kernelHandling(spec, span, target, vaddr, probed, options);
  if (options.engine === 'ptrace') {
    // What the ptrace engine will not run out of line is refused here, where a pattern can
    // skip it, rather than when the probe is placed.
    const xol = planXol(probed.bytes, vaddr, vaddr);
    if (xol.kind === 'refuse') {
      throw new ProbeError(
        'ERR_UNPROBEABLE_INSTRUCTION',
        `Cannot place probe at ${hex} in ${where}: the ptrace engine cannot run "${xol.text}" out of line: ${xol.reason}`,
        {
          source: { text: spec.text, span },
          hints: [
            `Probe a neighbouring instruction instead; see them with: objdump -d --start-address=0x${vaddr.toString(16)} ${target.file.displayPath}`,
          ],
          details: { [SKIP_REASON]: xol.reason.replace(/,.*$/, '') },
        },
      );
    }
  }
  const kind: SiteKind =
    usdt !== undefined
      ? 'usdt'
      : spec.kind === 'return'
        ? 'return'
        : functionStart || movedEntry || (fn !== undefined && vaddr === fn.vaddr && !isColdPart(fn))
          ? 'entry'
          : 'instruction';
  const demangle = options.demangle !== false;
  const aliases =
    fn === undefined
      ? []
      : target
          .symbols()
          .at(fn.vaddr)
          .filter((other) => other.name !== fn.name)
          .map((other) => (demangle ? (other.demangled ?? other.name) : other.name))
          .filter((name) => !demangle || name !== fn.demangled);
  const returns =
    fn !== undefined &&
    (kind === 'return' || (kind === 'entry' && options.returnsOfEntries === true))
      ? planReturns(
          fn,
          afterStackCheck ?? (pastFirst === undefined ? fn.vaddr : vaddr),
          {
            elf,
            symbols: target.symbols(),
            displayPath: target.file.displayPath,
            goProgram: go !== undefined,
            convention: convention!,
            unwinder: target.unwinder,
            hasUnwindInfo: target.hasUnwindInfo,
            mode: options.returnProbes ?? 'auto',
            kernelEngine: options.engine !== 'ptrace',
            kernel: options.kernel ?? kernelVersion(),
          },
          { text: spec.text, span },
        )
      : undefined;
  const lowered = lowerVariableFetches(spec, spec.fetches, variables, { vaddr, kind });
  const optionFetches = options.optionFetches?.map(
    (option) =>
      lowerVariableFetches({ ...spec, text: option.text }, [option.fetch], variables, {
        vaddr,
        kind,
      })[0]!,
  );
  const site: Omit<ProbeSite, 'instructions'> = {
    ...(optionFetches === undefined ? {} : { optionFetches }),
    spec: spec.text,
    kind,
    target: target.file,
    symbol: fn === undefined ? undefined : functionDisplayName(fn, { demangle: false }),
    demangled: demangle ? fn?.demangled : undefined,
    aliases: [...new Set(aliases)],
    symbolFile: fn === undefined ? undefined : target.symbols().debugFile,
    symbolOffset: fn === undefined || movedEntry ? 0n : vaddr - fn.vaddr,
    vaddr,
    fileOffset,
    usdt,
    handling,
    fetches: checkFetches(
      spec,
      usdt !== undefined || convention === undefined
        ? lowered
        : lowered.map((fetch) => lowerForConvention(fetch, convention, spec.text)),
      kind,
      convention,
      usdt && {
        probe: `${usdt.provider}:${usdt.name}`,
        path: target.file.displayPath,
        args: usdt.args,
        vaddr,
        symbolVaddr: (name) => elfSymbolVaddr(elf, name),
        spec: spec.text,
        span,
      },
    ),
    runtimeAddress: runtimeAddressOf(target, fileOffset),
    ...(options.engine === 'ptrace'
      ? {
          nextIsJumpTarget: nextIsJumpTarget(target.elf, fn, vaddr, probed),
          jumpTargetsNear: jumpTargetsNear(target.elf, fn, vaddr),
        }
      : {}),
    convention,
    afterStackCheck: afterGoCheck ? vaddr - fn!.vaddr : undefined,
    pastFirst,
    returns,
  };
  return withShownInstructions(site, decoded);
}

/** Instructions an entry probe is moved past at most (see entryPastFirst()). */
const MAX_PASSED = 4;

/**
 * Where a function's entry probe goes on a kernel engine when the kernel cannot take one on
 * its first instruction (it refuses it, or would mishandle it: a VEX or EVEX instruction,
 * as the AVX2 and AVX-512 implementations of memset and strchr begin with): on the first
 * instruction it can take, past at most MAX_PASSED that it cannot and that change nothing a
 * probe reads (changesCallState(): `vzeroupper`, vector loads), when nothing in the function
 * jumps into those or to the probe (it would be hit again in the same call). Undefined
 * otherwise: the first instruction's refusal stands.
 */
function entryPastFirst(
  target: OpenTarget,
  fn: FunctionSymbol,
  options: ResolveOptions,
): EntryPastFirst | undefined {
  if (options.engine === 'ptrace' || fn.sizeBytes === 0n) return undefined;
  const elf = target.elf;
  const segment = elf.loadSegmentOf(fn.vaddr);
  const offset = elf.vaddrToFileOffset(fn.vaddr);
  if (segment === undefined || !segment.executable || offset === undefined) return undefined;
  if (fn.vaddr + fn.sizeBytes > segment.vaddr + segment.fileSize) return undefined;
  const code = elf.read(offset, Number(fn.sizeBytes));
  const run = decodeInstructions(code, fn.vaddr, { maxCount: MAX_PASSED + 1 });
  const kernel = { kernel: options.kernel ?? kernelVersion() };
  const refusal = (instruction: DecodedInstruction) => {
    const handling = analyzeKernelHandling(instruction, kernel);
    return handling.strategy === 'refuse' ||
      (handling.strategy === 'unsafe' && options.unsafe !== true)
      ? handling
      : undefined;
  };
  const first = run[0];
  const why = first === undefined || first.invalid ? undefined : refusal(first);
  if (why === undefined) return undefined;
  let passed = 0;
  for (; passed < run.length; passed++) {
    const instruction = run[passed]!;
    if (instruction.invalid) return undefined;
    if (passed > 0 && refusal(instruction) === undefined) break;
    if (changesCallState(instruction.bytes, instruction.vaddr) !== undefined) return undefined;
  }
  // None the kernel can take within reach (or the function ends first).
  if (passed === run.length) return undefined;
  const probe = run[passed]!.vaddr;
  // A jump into what was passed, or to the probe, would hit it twice in one call; an indirect
  // one (but a tail call through a GOT slot) might land there.
  let moved = true;
  sweepInstructions(code, fn.vaddr, (instruction) => {
    const target = instruction.branchTarget;
    // Read without spelling the instruction (its text is made when asked).
    const indirect =
      instruction.mnemonic === 'jmp' && target === undefined && !instruction.ripRelative;
    if (
      instruction.invalid ||
      (target !== undefined && target > fn.vaddr && target <= probe) ||
      indirect
    ) {
      moved = false;
    }
    return moved;
  });
  if (!moved) return undefined;
  return {
    offset: probe - fn.vaddr,
    instruction: run
      .slice(0, passed)
      .map((instruction) => instruction.text)
      .join('; '),
    reason: why.reason,
  };
}

/**
 * The longest function whose entry entryPastStepped() moves: the whole of its code is swept
 * for jumps back into what is passed, and a longer one's trap is a smaller part of its call
 * (97% of the entries of node's 49,981 `_ZN[1-9S]*` functions it would move are in functions
 * this long or shorter, and the others took most of the sweeping).
 */
const MAX_MOVED_SIZE = 1024n;

/** An entry probe moved past instructions the kernel would single-step (entryPastStepped()). */
interface SteppedEntry {
  readonly past: EntryPastFirst;
  /** Where the probe sits, the instruction there and how the kernel runs it (emulated). */
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
  readonly probed: DecodedInstruction;
  readonly handling: KernelHandling;
}

/**
 * The instructions an entry probe was moved past, spelled when asked (resolve shows them;
 * spelling them for every function of a large program would cost a decoder's call each).
 */
class PassedInstructions implements EntryPastFirst {
  readonly reason = 'the kernel single-steps it: a trap more each call';
  readonly #bytes: Uint8Array;
  readonly #vaddr: bigint;

  constructor(
    readonly offset: bigint,
    bytes: Uint8Array,
    vaddr: bigint,
    readonly changes: string,
  ) {
    this.#bytes = bytes;
    this.#vaddr = vaddr;
  }

  get instruction(): string {
    return decodeInstructions(this.#bytes, this.#vaddr)
      .map((instruction) => instruction.text)
      .join('; ');
  }
}

/**
 * Where a function's entry probe goes on a kernel engine when the kernel would single-step its
 * first instruction (a trap more each call: 10 µs and more where traps are slow, as in a
 * virtual machine): on the first instruction after it that the kernel emulates (a jcc, push,
 * call or nop; not a ret or jmp, where returns are probed), past at most MAX_PASSED that
 * change only the flags, %rax or %r11 (passableAtEntry(): a test or cmp; a mov, lea or xor
 * into %rax), so that every argument, the stack and memory are as at the entry. Only when the
 * probe reads nothing else (see fetchesKeptPast()), nothing in the function (its .cold parts
 * too) jumps into what is passed or to the probe, and no other function starts there.
 */
function entryPastStepped(
  target: OpenTarget,
  fn: FunctionSymbol,
  options: ResolveOptions,
): SteppedEntry | undefined {
  if (options.engine === 'ptrace' || fn.sizeBytes === 0n || fn.sizeBytes > MAX_MOVED_SIZE) {
    return undefined;
  }
  const elf = target.elf;
  const segment = elf.loadSegmentOf(fn.vaddr);
  const offset = elf.vaddrToFileOffset(fn.vaddr);
  if (segment === undefined || !segment.executable || offset === undefined) return undefined;
  if (fn.vaddr + fn.sizeBytes > segment.vaddr + segment.fileSize) return undefined;
  const size = Number(fn.sizeBytes);
  const start = elf.view(offset, Math.min(size, (MAX_PASSED + 1) * MAX_INSTRUCTION_BYTES));
  let at = 0;
  let scratch = false;
  let probed: DecodedInstruction | undefined;
  let handling: KernelHandling | undefined;
  /** Where each instruction passed after the first, and the probe, begin. */
  const boundaries: bigint[] = [];
  for (let passed = 0; passed <= MAX_PASSED && at < start.length; passed++) {
    if (passed > 0) boundaries.push(fn.vaddr + BigInt(at));
    const pass = passableAtEntry(start, at, start.length);
    if (pass !== undefined) {
      if (passed === MAX_PASSED) return undefined;
      scratch ||= pass.change === 'scratch';
      at += pass.length;
      continue;
    }
    if (passed === 0 || !mayBeEmulated(start, at)) return undefined;
    const next = decodeInstructions(start.subarray(at), fn.vaddr + BigInt(at), { maxCount: 1 })[0];
    if (next === undefined || next.invalid || next.mnemonic === 'ret' || next.mnemonic === 'jmp') {
      return undefined;
    }
    const kernel = analyzeKernelHandling(next, { kernel: options.kernel ?? kernelVersion() });
    if (kernel.strategy !== 'emulate') return undefined;
    probed = next;
    handling = kernel;
    break;
  }
  if (probed === undefined || handling === undefined) return undefined;
  const probe = probed.vaddr;
  // Another function starting in what is passed, or at the probe, would be seen as this one.
  const symbols = target.symbols();
  if (boundaries.some((vaddr) => symbols.at(vaddr).length > 0)) return undefined;
  // A jump into what was passed, or to the probe, would hit it twice in one call, or miss
  // it; one through a jump table might land there. The quick decoder finds the direct ones;
  // an indirect jmp (a tail call, or a table's) or an instruction it does not know, and the
  // sweep that finds the function's exits tells (kept for its returns' planning).
  const low = Number(fn.vaddr);
  const high = Number(probe);
  if (!Number.isSafeInteger(high)) return undefined;
  const parts = codeParts(fn, elf, symbols);
  let unsure = false;
  for (const part of parts) {
    const code = part.bytes;
    const base = Number(part.vaddr);
    for (let i = 0; i < code.length && !unsure; ) {
      const length = quickLength(code, i, code.length);
      if (length === 0) {
        unsure = true;
      } else if (quick.flow === QUICK_FLOW.jmpIndirect) {
        const through = indirectJump(code, i);
        if (through === 'table') return undefined;
        if (through === 'register') unsure = true;
      } else if (quick.flow !== QUICK_FLOW.none && quick.flow !== QUICK_FLOW.ret) {
        const jumpTarget = base + i + length + quick.displacement;
        if (jumpTarget > low && jumpTarget <= high) return undefined;
      }
      i += length;
    }
  }
  if (unsure) {
    let into = false;
    const scan = findReturnInstructions(parts, (jumpTarget) => {
      if (jumpTarget === undefined || (jumpTarget > low && jumpTarget <= high)) into = true;
    });
    target.shared.scanned.set(fn.vaddr, scan);
    if (!scan.ok || into) return undefined;
  }
  return steppedEntry(fn, start, at, scratch, probed, handling, offset);
}

/** The entry `at` bytes into `fn`, past the instructions `start` begins with. */
function steppedEntry(
  fn: FunctionSymbol,
  start: Uint8Array,
  at: number,
  scratch: boolean,
  probed: DecodedInstruction,
  handling: KernelHandling,
  fileOffset: bigint,
): SteppedEntry {
  return {
    past: new PassedInstructions(
      BigInt(at),
      start.slice(0, at),
      fn.vaddr,
      scratch ? 'only the flags and %rax or %r11, in which no argument arrives' : 'only the flags',
    ),
    vaddr: probed.vaddr,
    fileOffset: fileOffset + BigInt(at),
    probed,
    handling,
  };
}

/**
 * What an indirect jmp (`ff /4`, which quickLength() has read) at `code[at]` jumps through,
 * by its bytes: a memory operand with an index register (a jump table's entry), one without
 * (a pointer at a fixed place or in a structure: a tail call), or a register (either: the
 * sweep that finds the function's exits tells which).
 */
function indirectJump(code: Uint8Array, at: number): 'table' | 'pointer' | 'register' {
  let i = at;
  // notrack (CET's mark of a jump table's jmp), then REX.
  if (code[i] === 0x3e) return 'table';
  let rex = 0;
  if ((code[i]! & 0xf0) === 0x40) rex = code[i++]!;
  const modrm = code[i + 1] ?? 0;
  if (modrm >> 6 === 3) return 'register';
  if ((modrm & 7) !== 4) return 'pointer';
  const index = ((code[i + 2] ?? 0) >> 3) & 7;
  return index !== 4 || (rex & 2) !== 0 ? 'table' : 'pointer';
}

/**
 * Whether the kernel may emulate the instruction at `code[at]`, by its bytes: a direct jcc or
 * call, a push of a register, a nop (analyzeKernelHandling() says for sure; this spares a
 * decoder's call on the instructions it never emulates).
 */
function mayBeEmulated(code: Uint8Array, at: number): boolean {
  if (quickLength(code, at, code.length) === 0) return true;
  if (quick.flow === QUICK_FLOW.jcc || quick.flow === QUICK_FLOW.call) return true;
  let i = at;
  if (code[i] === 0x66) i++;
  if ((code[i]! & 0xf0) === 0x40) i++;
  const op = code[i] ?? 0;
  return (op >= 0x50 && op <= 0x57) || op === 0x90 || op === 0x0f;
}

/**
 * Whether what a probe fetches is the same past instructions that change only the flags,
 * %rax and %r11: arguments, the stack pointer, the thread's name, memory they point at (and
 * for a return probe, what it returns, read at the return).
 */
function fetchesKeptPast(spec: ProbeSpec, options: ResolveOptions): boolean {
  const kept = (expr: FetchExpr): boolean =>
    expr.kind === 'arg' ||
    (expr.kind === 'retval' && spec.kind === 'return') ||
    expr.kind === 'sp' ||
    expr.kind === 'comm' ||
    expr.kind === 'constant' ||
    (expr.kind === 'deref' && kept(expr.inner));
  return (
    spec.fetches.every((fetch) => kept(fetch.expr)) &&
    (options.optionFetches ?? []).every((fetch) => kept(fetch.fetch.expr))
  );
}

/**
 * How the kernel handles a uprobe on `probed` at `vaddr`; throws (a reason a pattern skips
 * the site for) where a kernel engine cannot place one.
 */
function kernelHandling(
  spec: ProbeSpec,
  span: Span,
  target: OpenTarget,
  vaddr: bigint,
  probed: DecodedInstruction,
  options: ResolveOptions,
): KernelHandling {
  const handling = analyzeKernelHandling(probed, {
    kernel: options.kernel ?? kernelVersion(),
  });
  if (
    options.engine !== 'ptrace' &&
    (handling.strategy === 'refuse' || (handling.strategy === 'unsafe' && options.unsafe !== true))
  ) {
    const where = quote(target.file.displayPath);
    const hex = `0x${vaddr.toString(16)}`;
    const hints = [
      `Probe a neighbouring instruction instead; see them with: objdump -d --start-address=0x${vaddr.toString(16)} ${target.file.displayPath}`,
    ];
    // The ptrace engine runs the displaced instruction itself, out of line or emulated.
    const bytes = probed.bytes;
    if (planXol(bytes, vaddr, vaddr).kind !== 'refuse') {
      hints.push(
        'Or probe it with --engine ptrace (with -p PID or -c COMMAND), which runs the instruction itself',
      );
    }
    throw new ProbeError(
      'ERR_UNPROBEABLE_INSTRUCTION',
      `Cannot place probe at ${hex} in ${where}: ${handling.strategy === 'refuse' ? 'the kernel refuses uprobes on' : 'the kernel mishandles a uprobe on'} "${probed.text}": ${handling.reason}`,
      {
        source: { text: spec.text, span },
        hints,
        details: { [SKIP_REASON]: handling.label },
      },
    );
  }
  return handling;
}

/** Where a site keeps its DecodedSite until its instructions are asked for. */
const DECODED = Symbol('decoded');

/**
 * One getter for every site (a getter made per site would give each its own hidden class):
 * the site's instructions, decoded on first use and kept.
 */
function shownInstructions(this: { [DECODED]?: DecodedSite | readonly DecodedInstruction[] }) {
  const state = this[DECODED]!;
  if (!('shown' in state)) return state;
  const shown = state.shown();
  this[DECODED] = shown;
  return shown;
}

/** `site` with `instructions` decoded when first read (see DecodedSite). */
function withShownInstructions(
  site: Omit<ProbeSite, 'instructions'>,
  decoded: DecodedSite,
): ProbeSite {
  Object.defineProperty(site, DECODED, { value: decoded, writable: true });
  return Object.defineProperty(site as ProbeSite, 'instructions', {
    get: shownInstructions,
    enumerable: true,
    configurable: true,
  });
}

/**
 * Whether the instruction after `probed` is reached otherwise than through it (see
 * ProbeSite.nextIsJumpTarget): a direct jump of the function lands there, or (away from the
 * function's entry, where a table's targets are cases of a switch) the function jumps
 * through a register or memory. Undefined without the function's extent.
 */
function nextIsJumpTarget(
  elf: ElfFile,
  fn: FunctionSymbol | undefined,
  vaddr: bigint,
  probed: DecodedInstruction,
): boolean | undefined {
  if (fn === undefined || fn.sizeBytes === 0n || probed.invalid) return undefined;
  const offset = elf.vaddrToFileOffset(fn.vaddr);
  if (offset === undefined) return undefined;
  const next = vaddr + BigInt(probed.length);
  let target = false;
  let indirect = false;
  sweepInstructions(elf.read(offset, Number(fn.sizeBytes)), fn.vaddr, (instruction) => {
    if (instruction.invalid) return false;
    if (instruction.branchTarget === next) target = true;
    if (/^((notrack|bnd) )?jmp \*/.test(instruction.text)) indirect = true;
    return !target;
  });
  return target || (indirect && vaddr !== fn.vaddr);
}

/** How far after a site jumpTargetsNear() looks (an inline hook's patch is at most this long). */
const NEAR_BYTES = 32n;

/**
 * The addresses in the NEAR_BYTES after `vaddr` that a direct jump or call of the site's
 * function lands on, and `vaddr` itself where a jump (not a call) lands there (see
 * ProbeSite.jumpTargetsNear); undefined without the function's extent.
 */
function jumpTargetsNear(
  elf: ElfFile,
  fn: FunctionSymbol | undefined,
  vaddr: bigint,
): bigint[] | undefined {
  if (fn === undefined || fn.sizeBytes === 0n) return undefined;
  const offset = elf.vaddrToFileOffset(fn.vaddr);
  if (offset === undefined) return undefined;
  const targets = new Set<bigint>();
  let whole = true;
  sweepInstructions(elf.read(offset, Number(fn.sizeBytes)), fn.vaddr, (instruction) => {
    if (instruction.invalid) {
      whole = false;
      return false;
    }
    const target = instruction.branchTarget;
    if (target !== undefined && target > vaddr && target < vaddr + NEAR_BYTES) targets.add(target);
    // A jump (not a call) back to the site itself: a loop whose head it is.
    if (target === vaddr && instruction.mnemonic !== 'call') targets.add(target);
    return true;
  });
  // Code that does not decode to its end may hide a jump.
  return whole ? [...targets].sort((a, b) => (a < b ? -1 : 1)) : undefined;
}

/** Decode from the function start and insist the site is an instruction boundary. */
function decodeSite(
  spec: ProbeSpec,
  target: OpenTarget,
  fn: FunctionSymbol | undefined,
  vaddr: bigint,
  span: Span,
  options: ResolveOptions,
): DecodedSite {
  const elf = target.elf;
  const hex = `0x${vaddr.toString(16)}`;
  const where = quote(target.file.displayPath);
  const segment = elf.loadSegmentOf(vaddr)!;
  const segmentEnd = segment.vaddr + segment.fileSize;
  const readCode = (from: bigint, to: bigint): Uint8Array => {
    const end = to > segmentEnd ? segmentEnd : to;
    return elf.read(elf.vaddrToFileOffset(from)!, Number(end - from));
  };
  if (fn !== undefined && vaddr !== fn.vaddr) {
    const end =
      fn.sizeBytes === 0n ? vaddr + BigInt(MAX_INSTRUCTION_BYTES) : fn.vaddr + fn.sizeBytes;
    const check = checkInstructionBoundary(readCode(fn.vaddr, end), fn.vaddr, vaddr);
    if (!check.ok) {
      const name = functionDisplayName(fn);
      if (check.reason === 'inside-instruction') {
        const c = check.containing;
        throw specError(
          spec,
          span,
          'ERR_NOT_INSTRUCTION_BOUNDARY',
          `Cannot place probe at ${name}+0x${(vaddr - fn.vaddr).toString(16)} (${hex}) in ${where}: it falls inside the instruction "${c.text}" at ${name}+0x${(c.vaddr - fn.vaddr).toString(16)}`,
          [
            `The nearest instruction boundaries are ${name}+0x${(check.previous - fn.vaddr).toString(16)} and ${name}+0x${(check.next - fn.vaddr).toString(16)}`,
            'A breakpoint inside an instruction would corrupt the program',
          ],
        );
      }
      throw specError(
        spec,
        span,
        'ERR_DECODE',
        `Cannot place probe at ${hex} in ${where}: the code of ${name} before it cannot be decoded`,
        ['The function may contain data; pass --unsafe only if you know the address is right'],
      );
    }
  }
  // Read now: the file is closed by the time a site's instructions are shown.
  const bytes = readCode(vaddr, vaddr + BigInt(MAX_INSTRUCTION_BYTES * SHOWN_INSTRUCTIONS));
  const first = decodeInstructions(bytes, vaddr, { maxCount: 1 })[0];
  if (first === undefined || first.invalid) {
    if (options.unsafe !== true || first === undefined) {
      throw new ProbeError(
        'ERR_DECODE',
        `Cannot place probe at ${hex} in ${where}: the bytes there are not a valid instruction`,
        {
          source: { text: spec.text, span },
          details: { [SKIP_REASON]: 'not an instruction' },
        },
      );
    }
  }
  return {
    first,
    shown: () => {
      const rest = decodeInstructions(bytes, vaddr, { maxCount: SHOWN_INSTRUCTIONS }).slice(1);
      return [first, ...rest.filter((insn) => !insn.invalid)];
    },
  };
}

/**
 * The probed instruction, decoded at once (every check needs it), and the ones shown after
 * it, decoded only when asked: a site of a pattern over a whole program is seldom shown, and
 * decoding them all made a large part of planning's time and memory.
 */
interface DecodedSite {
  readonly first: DecodedInstruction;
  readonly shown: () => DecodedInstruction[];
}

/**
 * Fetch arguments that cannot make sense at this kind of site are refused here; at a USDT
 * site, `argN` become the note's arguments (all of them when no fetch is given).
 */
function checkFetches(
  spec: ProbeSpec,
  fetches: readonly FetchArg[],
  kind: SiteKind,
  convention: CallingConvention | undefined,
  usdt?: UsdtArgsContext,
): FetchArg[] {
  const registers = registerArguments(convention ?? { kind: 'sysv', why: '' });
  for (const fetch of spec.fetches) {
    let expr = fetch.expr;
    while (expr.kind === 'deref') expr = expr.inner;
    if (expr.kind === 'arg' && expr.index >= registers && kind !== 'entry' && !usdt) {
      throw specError(
        spec,
        expr.span,
        'ERR_SPEC_INVALID',
        `Cannot fetch arg${expr.index} here: arguments passed on the stack are only where the function starts`,
        ['Put the probe on the function entry, or fetch a stack slot with +OFF(%sp)'],
      );
    }
  }
  return usdt === undefined ? [...fetches] : usdtFetches(fetches, usdt);
}
