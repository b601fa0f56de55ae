// Generated — do not edit by hand.
// Source: the x86-64 Linux UAPI headers of the build machine (Debian 12):
//   /usr/include/x86_64-linux-gnu/asm/unistd_64.h   (__NR_*)
//   /usr/include/linux/bpf.h                         (enum bpf_cmd, enum bpf_map_type, bpf_attr)
//   /usr/include/linux/mount.h                       (MS_*)
//   /usr/include/linux/prctl.h                       (PR_*)
//   /usr/include/linux/ptrace.h, <sys/wait.h>, <sys/user.h> (PTRACE_*, W*, user_regs_struct)
// constants.test.ts checks every value here against those headers when they are installed.
// These are kernel ABI numbers: they never change for x86-64 once assigned.

/** Syscall numbers for x86-64 (`__NR_*`). */
export const SYSCALL = {
  close: 3,
  mmap: 9,
  mprotect: 10,
  munmap: 11,
  rt_sigprocmask: 14,
  ioctl: 16,
  sigaltstack: 131,
  getpid: 39,
  wait4: 61,
  kill: 62,
  ftruncate: 77,
  ptrace: 101,
  mount: 165,
  gettid: 186,
  tgkill: 234,
  waitid: 247,
  perf_event_open: 298,
  process_vm_readv: 310,
  process_vm_writev: 311,
  memfd_create: 319,
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
  BPF_OBJ_GET_INFO_BY_FD: 15,
  BPF_RAW_TRACEPOINT_OPEN: 17,
  BPF_BTF_LOAD: 18,
  BPF_MAP_LOOKUP_BATCH: 24,
  BPF_MAP_UPDATE_BATCH: 26,
  BPF_LINK_CREATE: 28,
} as const;

/** `enum bpf_prog_type`: uprobes run programs of the kprobe type. */
export const BPF_PROG_TYPE = {
  BPF_PROG_TYPE_KPROBE: 2,
  BPF_PROG_TYPE_RAW_TRACEPOINT: 17,
} as const;

/** `enum bpf_attach_type` values used by upscope. */
export const BPF_ATTACH_TYPE = {
  BPF_PERF_EVENT: 41,
} as const;

/**
 * Kernel 6.6's uprobe_multi link, newer than the headers of the build machine: checked by
 * attaching with it (src/engines/bpf tests), not against a header.
 */
export const UPROBE_MULTI = {
  BPF_TRACE_UPROBE_MULTI: 48,
  /** One program at a call's entry and at its return (kernel 6.13+). */
  BPF_TRACE_UPROBE_SESSION: 57,
  BPF_F_UPROBE_MULTI_RETURN: 1,
  /** Offsets in the link_create part of `union bpf_attr`. */
  path: 16,
  offsets: 24,
  ref_ctr_offsets: 32,
  cookies: 40,
  cnt: 48,
  flags: 52,
  pid: 56,
} as const;

/** BPF helper function numbers (`BPF_FUNC_*`). */
export const BPF_FUNC = {
  map_lookup_elem: 1,
  map_update_elem: 2,
  map_delete_elem: 3,
  ktime_get_ns: 5,
  get_smp_processor_id: 8,
  get_current_pid_tgid: 14,
  get_current_comm: 16,
  get_stackid: 27,
  send_signal: 109,
  get_current_task: 35,
  probe_read_user: 112,
  probe_read_kernel: 113,
  probe_read_user_str: 114,
  ringbuf_output: 130,
  ringbuf_reserve: 131,
  ringbuf_submit: 132,
  ringbuf_discard: 133,
  get_current_task_btf: 158,
  get_attach_cookie: 174,
  find_vma: 180,
  loop: 181,
} as const;

/** Layout of the BPF_PROG_LOAD part of `union bpf_attr`. */
export const BPF_PROG_LOAD_ATTR = {
  prog_type: 0,
  insn_cnt: 4,
  insns: 8,
  license: 16,
  log_level: 24,
  log_size: 28,
  log_buf: 32,
  kern_version: 40,
  prog_flags: 44,
  prog_name: 48,
  expected_attach_type: 68,
  prog_btf_fd: 72,
  func_info_rec_size: 76,
  func_info: 80,
  func_info_cnt: 88,
} as const;

/** Layout of the BPF_BTF_LOAD part of `union bpf_attr`. */
export const BPF_BTF_LOAD_ATTR = {
  btf: 0,
  btf_log_buf: 8,
  btf_size: 16,
  btf_log_size: 20,
  btf_log_level: 24,
} as const;

/** Layout of the batch commands' part of `union bpf_attr` (BPF_MAP_UPDATE_BATCH). */
export const BPF_MAP_BATCH_ATTR = {
  in_batch: 0,
  out_batch: 8,
  keys: 16,
  values: 24,
  count: 32,
  map_fd: 36,
  elem_flags: 40,
  flags: 48,
} as const;

/** Layout of the map element commands' part of `union bpf_attr` (lookup, update, delete, next key). */
export const BPF_MAP_ELEM_ATTR = {
  map_fd: 0,
  key: 8,
  value: 16,
  next_key: 16,
  flags: 24,
} as const;

/** Layout of the BPF_LINK_CREATE part of `union bpf_attr` (a perf event's link). */
export const BPF_LINK_CREATE_ATTR = {
  prog_fd: 0,
  target_fd: 4,
  attach_type: 8,
  flags: 12,
  bpf_cookie: 16,
} as const;

/** Offsets in the raw_tracepoint part of `union bpf_attr` (BPF_RAW_TRACEPOINT_OPEN). */
export const BPF_RAW_TRACEPOINT_ATTR = {
  name: 0,
  prog_fd: 8,
} as const;

/** `sizeof(union bpf_attr)` in the build machine's headers; newer kernels take it as it is. */
export const BPF_ATTR_BYTES = 144;

/** Layout of `struct perf_event_attr` (PERF_ATTR_SIZE_VER7, 128 bytes). */
export const PERF_EVENT_ATTR = {
  type: 0,
  size: 4,
  config: 8,
  sample_period: 16,
  /** The bit fields: `disabled` is bit 0. */
  flags: 40,
  wakeup_events: 48,
  config1: 56,
  config2: 64,
  sizeBytes: 128,
} as const;

/** perf event ioctls and perf_event_open flags. */
export const PERF_EVENT_IOC = {
  PERF_EVENT_IOC_ENABLE: 0x2400,
  PERF_EVENT_IOC_DISABLE: 0x2401,
  PERF_EVENT_IOC_SET_BPF: 0x40042408,
  PERF_FLAG_FD_CLOEXEC: 8,
} as const;

/** `enum bpf_map_type` values used by upscope. */
export const BPF_MAP_TYPE = {
  BPF_MAP_TYPE_HASH: 1,
  BPF_MAP_TYPE_ARRAY: 2,
  BPF_MAP_TYPE_PERF_EVENT_ARRAY: 4,
  BPF_MAP_TYPE_PERCPU_HASH: 5,
  BPF_MAP_TYPE_PERCPU_ARRAY: 6,
  BPF_MAP_TYPE_STACK_TRACE: 7,
  BPF_MAP_TYPE_LRU_HASH: 9,
  BPF_MAP_TYPE_LPM_TRIE: 11,
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

/** ptrace(2) requests used by upscope. */
export const PTRACE = {
  PTRACE_CONT: 7,
  PTRACE_KILL: 8,
  PTRACE_SINGLESTEP: 9,
  PTRACE_GETREGS: 12,
  PTRACE_SETREGS: 13,
  PTRACE_DETACH: 17,
  PTRACE_SETOPTIONS: 0x4200,
  PTRACE_GETEVENTMSG: 0x4201,
  PTRACE_GETSIGINFO: 0x4202,
  PTRACE_SEIZE: 0x4206,
  PTRACE_INTERRUPT: 0x4207,
  PTRACE_LISTEN: 0x4208,
  PTRACE_GETSIGMASK: 0x420a,
  PTRACE_SETSIGMASK: 0x420b,
  PTRACE_SECCOMP_GET_FILTER: 0x420c,
} as const;

/** PTRACE_SETOPTIONS / PTRACE_SEIZE options (`PTRACE_O_*`). */
export const PTRACE_O = {
  PTRACE_O_TRACESYSGOOD: 0x1,
  PTRACE_O_TRACEFORK: 0x2,
  PTRACE_O_TRACEVFORK: 0x4,
  PTRACE_O_TRACECLONE: 0x8,
  PTRACE_O_TRACEEXEC: 0x10,
  PTRACE_O_TRACEVFORKDONE: 0x20,
  PTRACE_O_TRACEEXIT: 0x40,
  PTRACE_O_EXITKILL: 0x100000,
} as const;

/** The event in bits 16-23 of a ptrace-stop's wait status (`PTRACE_EVENT_*`). */
export const PTRACE_EVENT = {
  PTRACE_EVENT_FORK: 1,
  PTRACE_EVENT_VFORK: 2,
  PTRACE_EVENT_CLONE: 3,
  PTRACE_EVENT_EXEC: 4,
  PTRACE_EVENT_VFORK_DONE: 5,
  PTRACE_EVENT_EXIT: 6,
  PTRACE_EVENT_STOP: 128,
} as const;

/** waitpid(2) options. */
export const WAIT = {
  WNOHANG: 1,
  WUNTRACED: 2,
  __WALL: 0x40000000,
} as const;

/** prctl(2) options (`<linux/prctl.h>`). */
export const PRCTL = {
  PR_SET_PDEATHSIG: 1,
} as const;

/** Byte offsets in `struct user_regs_struct` (PTRACE_GETREGS), and its size. */
export const USER_REGS = {
  r15: 0,
  r14: 8,
  r13: 16,
  r12: 24,
  rbp: 32,
  rbx: 40,
  r11: 48,
  r10: 56,
  r9: 64,
  r8: 72,
  rax: 80,
  rcx: 88,
  rdx: 96,
  rsi: 104,
  rdi: 112,
  orig_rax: 120,
  rip: 128,
  cs: 136,
  eflags: 144,
  rsp: 152,
  ss: 160,
  fs_base: 168,
  gs_base: 176,
  ds: 184,
  es: 192,
  fs: 200,
  gs: 208,
  sizeBytes: 216,
} as const;
