export {
  callGraph,
  depthFirst,
  type FunctionStats,
  functionStats,
  type GraphNode,
  type ReplayCall,
  type ReplayOptions,
  replayCalls,
} from './call-analysis.js';
export { goroutineDepth, PendingCalls, threadDepth } from './call-frames.js';
export {
  CALL_RECORD_BYTES,
  CALLS_HEADER_BYTES,
  CALLS_VERSION,
  type CallRecord,
  CallRecordDecoder,
  type CallRecordKind,
  checkCallsHeader,
  encodeCallFields,
  encodeCallRecord,
  encodeCallsHeader,
} from './call-records.js';
export {
  type CallEnd,
  type CallNode,
  CallTreeBuilder,
  KERNEL_TRAMPOLINE_DEPTH,
  type ThreadCalls,
} from './call-tree.js';
export {
  addToHistogram,
  type BucketRange,
  type BucketScheme,
  bucketIndex,
  bucketRange,
  type Histogram,
  HistogramAccumulator,
  type HistogramPart,
  type HistogramRow,
  histogramRows,
  linearSteps,
  mean,
  NEGATIVE_BUCKETS,
  percentile,
} from './histogram.js';
