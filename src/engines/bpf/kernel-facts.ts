/**
 * What the bpf engine needs to know of the running kernel's types, from its BTF
 * (/sys/kernel/btf/vmlinux: 5 MB, 30-40 ms to read and index here), kept in upscope's cache
 * for that kernel build, so that a run pays it once per kernel, not once per run.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ProbeError } from '../../errors/index.js';
import { makeDirectory, upscopeCacheDir } from '../../host/index.js';
import { KernelBtf, type SessionKfunc } from './btf.js';

/** Bumped whenever what the facts hold, or how they are found, changes. */
const FORMAT = 3;

export interface KernelFacts {
  readonly format: number;
  /** Where task_struct's `pid` (the thread's id) is. */
  readonly taskPid: number;
  /** Where task_struct's `tgid` (its process's id) is. */
  readonly taskTgid: number;
  /** The arguments of the sched_process_exit tracepoint: 2 where it passes `group_dead`. */
  readonly exitArgs: number;
  /** bpf_session_is_return() (uprobe sessions, kernel 6.13+), or null where there is none. */
  readonly sessionKfunc: SessionKfunc | null;
  /** Where the stack walker's members are (see unwind-program.ts), or one this kernel lacks. */
  readonly walker: WalkerOffsets | { readonly missing: string };
}

/**
 * The kernel struct members the BPF stack walker reads (see unwind-program.ts), each the sum
 * of the offsets of a path of members: `mmXolArea` is mm_struct.uprobes_state.xol_area.
 */
const WALKER = {
  vmStart: [['vm_area_struct', 'vm_start']],
  vmEnd: [['vm_area_struct', 'vm_end']],
  vmPgoff: [['vm_area_struct', 'vm_pgoff']],
  vmFile: [['vm_area_struct', 'vm_file']],
  vmFlags: [['vm_area_struct', 'vm_flags']],
  fInode: [['file', 'f_inode']],
  iIno: [['inode', 'i_ino']],
  iSb: [['inode', 'i_sb']],
  sDev: [['super_block', 's_dev']],
  taskUtask: [['task_struct', 'utask']],
  taskMm: [['task_struct', 'mm']],
  mmStartCode: [['mm_struct', 'start_code']],
  mmArgStart: [['mm_struct', 'arg_start']],
  utaskReturnInstances: [['uprobe_task', 'return_instances']],
  riStack: [['return_instance', 'stack']],
  riOrigRetVaddr: [['return_instance', 'orig_ret_vaddr']],
  riNext: [['return_instance', 'next']],
  mmXolArea: [
    ['mm_struct', 'uprobes_state'],
    ['uprobes_state', 'xol_area'],
  ],
  xolVaddr: [['xol_area', 'vaddr']],
} as const satisfies Record<string, readonly (readonly [string, string])[]>;

/** The byte offsets of the stack walker's members. */
export type WalkerOffsets = { readonly [K in keyof typeof WALKER]: number };

function walkerOffsets(btf: KernelBtf): KernelFacts['walker'] {
  try {
    return Object.fromEntries(
      Object.entries(WALKER).map(([name, path]) => [
        name,
        path.reduce((sum, [struct, member]) => sum + btf.offsetOf(struct, member), 0),
      ]),
    ) as WalkerOffsets;
  } catch (err) {
    return { missing: err instanceof Error ? err.message : String(err) };
  }
}

let known: KernelFacts | undefined;

/** The running kernel's facts (see loadKernelFacts()), found once a run. */
export function kernelFacts(): KernelFacts {
  known ??= loadKernelFacts(upscopeCacheDir());
  return known;
}

/**
 * The running kernel's facts: those kept in `cacheDir` for this build, else read from its
 * BTF and kept there (nowhere when undefined). Throws ProbeError ERR_NOT_SUPPORTED where its
 * BTF cannot be read.
 */
export function loadKernelFacts(cacheDir: string | undefined): KernelFacts {
  const path = cacheDir === undefined ? undefined : factsPath(cacheDir);
  const kept = path === undefined ? undefined : readKept(path);
  if (kept !== undefined) return kept;
  const btf = KernelBtf.vmlinux();
  const exitArgs = btf.tracepointArgs('sched_process_exit');
  if (exitArgs === undefined) throw new Error('no sched_process_exit tracepoint in the kernel BTF');
  const kfunc = btf.functionId('bpf_session_is_return');
  const facts: KernelFacts = {
    format: FORMAT,
    taskPid: btf.offsetOf('task_struct', 'pid'),
    taskTgid: btf.offsetOf('task_struct', 'tgid'),
    exitArgs,
    sessionKfunc:
      kfunc === undefined ? null : { btfId: kfunc, takesContext: btf.parameterCount(kfunc) > 0 },
    walker: walkerOffsets(btf),
  };
  if (path !== undefined) keep(path, facts);
  return facts;
}

/**
 * The facts' file in `dir` for this kernel build (its release, version string with the
 * build's date and number, and the size of its BTF), or undefined where it cannot be named.
 */
export function factsPath(dir: string): string | undefined {
  try {
    const build = [
      readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim(),
      readFileSync('/proc/sys/kernel/version', 'utf8').trim(),
      String(statSync('/sys/kernel/btf/vmlinux').size),
    ].join('\n');
    return join(
      dir,
      `kernel-${createHash('sha256').update(build).digest('hex').slice(0, 24)}.json`,
    );
  } catch {
    return undefined;
  }
}

function readKept(path: string): KernelFacts | undefined {
  try {
    const facts = JSON.parse(readFileSync(path, 'utf8')) as KernelFacts;
    const kfunc = facts.sessionKfunc;
    const walker = facts.walker as Record<string, unknown> | undefined;
    const valid =
      facts.format === FORMAT &&
      Number.isInteger(facts.taskPid) &&
      Number.isInteger(facts.taskTgid) &&
      Number.isInteger(facts.exitArgs) &&
      (kfunc === null ||
        (Number.isInteger(kfunc?.btfId) && typeof kfunc?.takesContext === 'boolean')) &&
      typeof walker === 'object' &&
      walker !== null &&
      (typeof walker.missing === 'string' ||
        Object.keys(WALKER).every((name) => Number.isInteger(walker[name])));
    return valid ? facts : undefined;
  } catch {
    return undefined;
  }
}

/** Keeps `facts` at `path`, and drops those of other kernels; a failure to is no failure. */
function keep(path: string, facts: KernelFacts): void {
  const dir = dirname(path);
  const temporary = `${path}.${process.pid}.tmp`;
  try {
    makeDirectory(dir);
    writeFileSync(temporary, `${JSON.stringify(facts)}\n`);
    renameSync(temporary, path);
    for (const name of readdirSync(dir)) {
      if (/^kernel-\w+\.json$/.test(name) && join(dir, name) !== path) {
        rmSync(join(dir, name), { force: true });
      }
    }
  } catch {
    try {
      rmSync(temporary, { force: true });
    } catch {
      // a cache directory this user cannot even look in: nothing was written there
    }
  }
}

/**
 * The running kernel's bpf_session_is_return() (kernel 6.13+, found in its BTF, or in what
 * upscope kept of it: see kernelFacts()); throws ProbeError ERR_NOT_SUPPORTED where it has
 * none.
 */
export function findSessionKfunc(): SessionKfunc {
  const found = kernelFacts().sessionKfunc;
  if (found === null) {
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      'the kernel has no bpf_session_is_return() (uprobe sessions came in Linux 6.13)',
    );
  }
  return found;
}
