export { makeDirectory, upscopeCacheDir } from './cache-dir.js';
export { hostCxxDemangler } from './demangler.js';
export {
  type BpfFeatureResults,
  type DoctorCheck,
  type DoctorOptions,
  type DoctorReport,
  type DoctorStatus,
  runDoctor,
} from './doctor.js';
export { type Host, type HostFs, systemHost } from './host.js';
export {
  CAPABILITY_NAMES,
  decodeCapabilities,
  effectiveCapabilities,
  isRoot,
  type KernelVersion,
  kernelVersion,
  parseKernelRelease,
  TRACING_CAPABILITIES,
} from './identity.js';
export {
  checkCommand,
  checkProgram,
  commandProgram,
  DEFAULT_KILL_AFTER_MS,
  type Exit,
  type LaunchedCommand,
  launchStopped,
  processEnded,
  procState,
  stopThenExec,
  threadsOf,
} from './launch.js';
export { debugPackageName, owningPackage } from './packages.js';
export { PAUSE_VARIABLE, PHASES, type Phase, pausePoint } from './pause-point.js';
export {
  descendantsOf,
  type EndGroupOptions,
  endProcessGroup,
  type GroupEnd,
  groupMembers,
  isRunning,
  killProcessGroup,
  listProcesses,
  memoryImageId,
  type ProcessIdentity,
  type ProcessInfo,
  processIdentity,
} from './processes.js';
export {
  isKernelThread,
  kernelThreadError,
  type PtraceRefusal,
  ptraceRefusal,
  type TracerProcess,
  tracerOf,
} from './ptrace-refusal.js';
export { ThreadNames } from './thread-names.js';
export {
  ensureTracefs,
  findTracefs,
  type MountEntry,
  parseMountinfo,
  TRACEFS_MOUNT_COMMAND,
  TRACEFS_PLACES,
} from './tracefs.js';
