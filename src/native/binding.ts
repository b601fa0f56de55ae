/**
 * The syscalls Node lacks, as plain functions over numbers and bytes: no policy, no
 * ProbeErrors (those are made by callers, through errno.ts). Every call returns what the
 * kernel returned: a result >= 0, or `-errno`.
 */
export interface NativeBinding {
  /** bpf(2): `cmd` from BPF_CMD, `attr` the bytes of the union bpf_attr for that command. */
  bpf(cmd: number, attr: Uint8Array): number;
  /** close(2). */
  close(fd: number): number;
  /** mount(2). */
  mount(source: string, target: string, fstype: string, flags: number, data: string | null): number;
  /** The calling thread's errno as the C library left it after the last native call. */
  getErrno(): number;
}
