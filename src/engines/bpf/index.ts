export {
  type AggregateOptions,
  type AggregateSite,
  BpfAggregation,
  BpfCounts,
  BpfLatency,
  BpfValueHistograms,
  type CountRow,
  type HandlerErrors,
  SPAN_BUFFER_BYTES,
  type StackFrameKey,
  type StackOptions,
  type TimedCall,
  type TimedFunction,
} from './aggregations.js';
export { KernelBtf } from './btf.js';
export { EntryStop, ExecStop } from './entry-stop.js';
export { type BpfFeatures, bpfAllowed, probeBpfFeatures } from './features.js';
export { type FollowSpec, MAX_FOLLOWED } from './follow.js';
export { BpfMap, loadProgram, verifierReason } from './kernel.js';
export { ALLOCATOR_KINDS, type AllocatorKind, releases } from './leak-programs.js';
export {
  type AllocationRecord,
  type AllocatorSite,
  BpfLeaks,
  type LeakCounters,
  type LeakOptions,
} from './leaks.js';
export { type CountKey, CUT_MARK, type Filters, isStringType } from './programs.js';
export type { RingBuffer } from './ring-buffer.js';
export { setUnseenChildNotice } from './scope.js';
export type { AttachMode, AttachReport, MovedProbe, MoveProbe } from './session.js';
export { BpfStream, type BpfStreamOptions, type BpfStreamSite } from './stream.js';
export { MAX_STREAM_FETCHES, STREAM_STRING_BYTES } from './stream-programs.js';
export type { ProcessMapping, UnwindCapacity, UnwindMaps } from './unwind-maps.js';
