/**
 * The one place that turns errno numbers into words. Syscalls through the native layer return
 * `-errno`; callers describe a failure with `describeErrno()` and build their ProbeError from it.
 */
import { getSystemErrorMap } from 'node:util';

/** Errors the kernel returns that are not in the C library's list. */
const KERNEL_ONLY: Readonly<Record<number, readonly [string, string]>> = {
  512: ['ERESTARTSYS', 'Interrupted system call, to be restarted'],
  524: ['ENOTSUPP', 'Operation not supported by this kernel'],
};

let table: Map<number, [string, string]> | undefined;

function lookup(errno: number): readonly [string, string] | undefined {
  table ??= getSystemErrorMap();
  return table.get(-Math.abs(errno)) ?? KERNEL_ONLY[Math.abs(errno)];
}

/** The symbolic name of an errno value (`EPERM`), accepting `errno` or `-errno`. */
export function errnoName(errno: number): string {
  return lookup(errno)?.[0] ?? `errno ${Math.abs(errno)}`;
}

/** `EPERM (Operation not permitted)`, accepting `errno` or `-errno`. */
export function describeErrno(errno: number): string {
  const known = lookup(errno);
  return known === undefined ? `errno ${Math.abs(errno)}` : `${known[0]} (${known[1]})`;
}

/** The errno number of a name (`EPERM` -> 1), or undefined when unknown. */
export function errnoNumber(name: string): number | undefined {
  table ??= getSystemErrorMap();
  for (const [negative, [known]] of table) if (known === name) return -negative;
  for (const [number, [known]] of Object.entries(KERNEL_ONLY))
    if (known === name) return Number(number);
  return undefined;
}
