export type { NativeBinding, NativeMemory } from './binding.js';
export { type MapCreateSpec, mapCreateAttr } from './bpf-attr.js';
export {
  BPF_ATTACH_TYPE,
  BPF_ATTR_BYTES,
  BPF_BTF_LOAD_ATTR,
  BPF_CMD,
  BPF_FUNC,
  BPF_LINK_CREATE_ATTR,
  BPF_MAP_BATCH_ATTR,
  BPF_MAP_CREATE_ATTR,
  BPF_MAP_ELEM_ATTR,
  BPF_MAP_TYPE,
  BPF_PROG_LOAD_ATTR,
  BPF_PROG_TYPE,
  BPF_RAW_TRACEPOINT_ATTR,
  MOUNT_FLAGS,
  PERF_EVENT_ATTR,
  PERF_EVENT_IOC,
  PRCTL,
  PTRACE,
  PTRACE_EVENT,
  PTRACE_O,
  SYSCALL,
  UPROBE_MULTI,
  USER_REGS,
  WAIT,
} from './constants.js';
export { describeErrno, errnoName, errnoNumber } from './errno.js';
export { isNativeLoaded, loadNative } from './load.js';
