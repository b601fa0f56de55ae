import { ProbeError } from '../errors/index.js';
import { type Host, systemHost } from './host.js';
import { effectiveCapabilities } from './identity.js';

/** A process that traces another: its pid and its name (`comm`). */
export interface TracerProcess {
  readonly pid: number;
  readonly comm: string;
}

/**
 * Why the kernel refused to let this process ptrace `pid` (PTRACE_SEIZE failed with EPERM),
 * as far as /proc tells, most specific first:
 * - `traced`: another tracer holds it (TracerPid in its status): only one may;
 * - `kernel-thread`: it has no user space to trace (PF_KTHREAD in its flags);
 * - `yama-admin-only`: Yama's ptrace_scope 3 forbids every attach, root's too;
 * - `privileges`: none of those, and we lack CAP_SYS_PTRACE: another user's process, or
 *   Yama's ptrace_scope 1 or 2 (`yamaScope` says which);
 * - `unknown`: we have CAP_SYS_PTRACE and none of the above holds (a security module, a
 *   process on its way out).
 */
export type PtraceRefusal =
  | { readonly kind: 'traced'; readonly tracer: TracerProcess }
  | { readonly kind: 'kernel-thread' }
  | { readonly kind: 'yama-admin-only' }
  | { readonly kind: 'privileges'; readonly yamaScope: number | undefined }
  | { readonly kind: 'unknown' };

/** PF_KTHREAD in the flags field of /proc/PID/stat (include/linux/sched.h). */
const PF_KTHREAD = 0x00200000;

/** The tracer of process `pid` (TracerPid in its status), or undefined when it has none. */
export function tracerOf(pid: number, host: Host = systemHost()): TracerProcess | undefined {
  const status = host.fs.readFile(`/proc/${pid}/status`);
  const tracer = Number(/^TracerPid:\s*(\d+)\s*$/m.exec(status ?? '')?.[1] ?? 0);
  if (tracer === 0) return undefined;
  const comm = host.fs.readFile(`/proc/${tracer}/comm`)?.replace(/\n$/, '') ?? '?';
  return { pid: tracer, comm };
}

/** Whether `pid` is a kernel thread (PF_KTHREAD), from /proc/PID/stat. */
export function isKernelThread(pid: number, host: Host = systemHost()): boolean {
  const stat = host.fs.readFile(`/proc/${pid}/stat`);
  if (stat === undefined) return false;
  // Fields after the name (in parentheses, any bytes): state ppid pgrp session tty_nr tpgid flags.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const flags = Number(fields[6]);
  return Number.isInteger(flags) && (flags & PF_KTHREAD) !== 0;
}

/**
 * The error for probing kernel thread `pid` (`what` failed): it has no user space, so no
 * file of it is ever loaded; the same whatever the engine.
 */
export function kernelThreadError(what: string): ProbeError {
  return new ProbeError(
    'ERR_KERNEL_THREAD',
    `${what}: it is a kernel thread, which has no user-space code to probe`,
    {
      hints: [
        'Give the pid of a user process (ps -e lists them; kernel threads are in [brackets])',
      ],
    },
  );
}

/** Why PTRACE_SEIZE of `pid` was refused with EPERM (see PtraceRefusal). */
export function ptraceRefusal(pid: number, host: Host = systemHost()): PtraceRefusal {
  const tracer = tracerOf(pid, host);
  if (tracer !== undefined) return { kind: 'traced', tracer };
  if (isKernelThread(pid, host)) return { kind: 'kernel-thread' };
  const scope = host.fs.readFile('/proc/sys/kernel/yama/ptrace_scope')?.trim();
  const yamaScope = scope === undefined || !/^\d+$/.test(scope) ? undefined : Number(scope);
  if (yamaScope === 3) return { kind: 'yama-admin-only' };
  if (!effectiveCapabilities(host).has('CAP_SYS_PTRACE')) return { kind: 'privileges', yamaScope };
  return { kind: 'unknown' };
}
