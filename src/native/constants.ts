// Generated — do not edit by hand.
// Source: the x86-64 Linux UAPI headers of the build machine (Debian 12):
//   /usr/include/x86_64-linux-gnu/asm/unistd_64.h   (__NR_*)
//   /usr/include/linux/bpf.h                         (enum bpf_cmd, enum bpf_map_type, bpf_attr)
//   /usr/include/linux/mount.h                       (MS_*)
// constants.test.ts checks every value here against those headers when they are installed.
// These are kernel ABI numbers: they never change for x86-64 once assigned.

/** Syscall numbers for x86-64 (`__NR_*`). */
export const SYSCALL = {
  close: 3,
  mmap: 9,
  munmap: 11,
  ioctl: 16,
  getpid: 39,
  wait4: 61,
  kill: 62,
  ptrace: 101,
  mount: 165,
  gettid: 186,
  tgkill: 234,
  waitid: 247,
  perf_event_open: 298,
  process_vm_readv: 310,
  process_vm_writev: 311,
  bpf: 321,
} as const;

/** `enum bpf_cmd` values used by upscope. */
export const BPF_CMD = {
  BPF_MAP_CREATE: 0,
  BPF_MAP_LOOKUP_ELEM: 1,
  BPF_MAP_UPDATE_ELEM: 2,
  BPF_MAP_DELETE_ELEM: 3,
  BPF_MAP_GET_NEXT_KEY: 4,
  BPF_PROG_LOAD: 5,
} as const;

/** `enum bpf_map_type` values used by upscope. */
export const BPF_MAP_TYPE = {
  BPF_MAP_TYPE_HASH: 1,
  BPF_MAP_TYPE_ARRAY: 2,
  BPF_MAP_TYPE_PERF_EVENT_ARRAY: 4,
  BPF_MAP_TYPE_PERCPU_HASH: 5,
  BPF_MAP_TYPE_PERCPU_ARRAY: 6,
  BPF_MAP_TYPE_STACK_TRACE: 7,
  BPF_MAP_TYPE_RINGBUF: 27,
} as const;

/** Layout of the BPF_MAP_CREATE part of `union bpf_attr` (offsets in bytes). */
export const BPF_MAP_CREATE_ATTR = {
  map_type: 0,
  key_size: 4,
  value_size: 8,
  max_entries: 12,
  map_flags: 16,
  inner_map_fd: 20,
  numa_node: 24,
  map_name: 28,
  map_ifindex: 44,
  btf_fd: 48,
  btf_key_type_id: 52,
  btf_value_type_id: 56,
  btf_vmlinux_value_type_id: 60,
  map_extra: 64,
  sizeBytes: 72,
} as const;

/** mount(2) flags (`MS_*`). */
export const MOUNT_FLAGS = {
  MS_RDONLY: 1,
  MS_NOSUID: 2,
  MS_NODEV: 4,
  MS_NOEXEC: 8,
  MS_RELATIME: 0x200000,
} as const;
