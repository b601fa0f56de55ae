export { goroutineDepth, PendingCalls, threadDepth } from './call-frames.js';
export {
  type BucketRange,
  type BucketScheme,
  bucketIndex,
  bucketRange,
  type Histogram,
  HistogramAccumulator,
  type HistogramRow,
  histogramRows,
  linearSteps,
  mean,
  NEGATIVE_BUCKETS,
  percentile,
} from './histogram.js';
