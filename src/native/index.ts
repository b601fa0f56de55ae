export type { NativeBinding } from './binding.js';
export { type MapCreateSpec, mapCreateAttr } from './bpf-attr.js';
export {
  BPF_CMD,
  BPF_MAP_CREATE_ATTR,
  BPF_MAP_TYPE,
  MOUNT_FLAGS,
  PTRACE,
  PTRACE_EVENT,
  PTRACE_O,
  SYSCALL,
  USER_REGS,
  WAIT,
} from './constants.js';
export { describeErrno, errnoName, errnoNumber } from './errno.js';
export { isNativeLoaded, loadNative } from './load.js';
