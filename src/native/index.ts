export type { NativeBinding } from './binding.js';
export { type MapCreateSpec, mapCreateAttr } from './bpf-attr.js';
export { BPF_CMD, BPF_MAP_CREATE_ATTR, BPF_MAP_TYPE, MOUNT_FLAGS, SYSCALL } from './constants.js';
export { describeErrno, errnoName, errnoNumber } from './errno.js';
export { isNativeLoaded, loadNative } from './load.js';
