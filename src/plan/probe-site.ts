import type { DecodedInstruction, KernelHandling } from '../arch/index.js';
import type { FetchArg } from '../spec/index.js';
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
  readonly symbolOffset: bigint;
  readonly vaddr: bigint;
  readonly fileOffset: bigint;
  readonly usdt: UsdtSite | undefined;
  /** The first instructions at the site (at least the probed one). */
  readonly instructions: readonly DecodedInstruction[];
  /** How the kernel's uprobes will run the probed instruction (cost class). */
  readonly handling: KernelHandling;
  readonly fetches: readonly FetchArg[];
  /** With -p: the address of the site in that process. */
  readonly runtimeAddress: bigint | undefined;
  /** For a FILE:LINE spec: the line, and where its debug info came from. */
  readonly source?: SourceSite | undefined;
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
   * For a return probe (and, when asked for, a function entry timed to its return): how its
   * returns are caught, by a trampoline or at the instructions it leaves by.
   */
  readonly returns?: ReturnPlan | undefined;
}
