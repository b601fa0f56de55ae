export {
  type BucketRange,
  type BucketScheme,
  bucketRange,
  type Histogram,
  type HistogramRow,
  histogramRows,
  linearSteps,
  mean,
  NEGATIVE_BUCKETS,
  percentile,
} from './histogram.js';
