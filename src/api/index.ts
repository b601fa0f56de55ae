/**
 * upscope's programmatic API. Everything here works without privileges except where noted:
 * resolving specs and listing symbols only read files and /proc.
 */

export {
  type BucketRange,
  type BucketScheme,
  bucketRange,
  type CallEnd,
  CallGraphs,
  type CallNode,
  type CallObserver,
  type CallRecord,
  type CallRecordKind,
  CallTimeline,
  CallTreeBuilder,
  callGraph,
  type FunctionStats,
  FunctionStatsBuilder,
  functionStats,
  type GraphNode,
  type Histogram,
  HistogramAccumulator,
  type HistogramRow,
  histogramRows,
  mean,
  type ObservedThread,
  percentile,
  type ReplayCall,
  type ReplayOptions,
  replayCalls,
  type ThreadCalls,
  walkCalls,
} from '../aggregate/index.js';
export type {
  AllocatorKind,
  AttachMode,
  AttachReport,
  HandlerErrors,
  LeakCounters,
} from '../engines/index.js';
export {
  alarmEvery,
  alarmIn,
  bpfAllowed,
  evaluateFetch,
  type FetchSource,
  interruptWaitsOn,
  signalOnParentDeath,
} from '../engines/index.js';
export {
  ERROR_CODES,
  type ErrorCategory,
  type ErrorCode,
  isNotSupported,
  isProbeError,
  ProbeError,
} from '../errors/index.js';
export type { FieldValue, ProbeEvent, StreamStats } from '../events/index.js';
export type { DoctorReport, GroupEnd } from '../host/index.js';
export {
  DEFAULT_KILL_AFTER_MS,
  descendantsOf,
  endProcessGroup,
  groupMembers,
  listProcesses,
  type ProcessInfo,
  ThreadNames,
} from '../host/index.js';
export {
  type AttachPoint,
  attachPoints,
  type CallingConvention,
  fetchAtSite,
  notLoadedNotes,
  type PlannedProbes,
  type ProbePlan,
  type ProbeSite,
  planProbes,
  qualifyNames,
  type ResolveOptions,
  type ReturnPlan,
  type ReturnProbeMode,
  resolveProbes,
  type SiteKind,
  type SkippedSite,
  type SourceSite,
  skipCounts,
  skipSummary,
} from '../plan/index.js';
export {
  type FetchArg,
  type ProbeSpec,
  parseComparisonOrThrow,
  parseFetchOrThrow,
  parseSpec,
  printFetchExpr,
  printSpec,
  readsReturnValue,
} from '../spec/index.js';
export { type FunctionSymbol, functionDisplayName, splitDev } from '../symbols/index.js';
export {
  Aggregate,
  type AggregateOptions,
  type AggregationEngine,
  type CountKeyPart,
  type CountOptions,
  countHits,
  type HistogramOptions,
  histogramOf,
  type LatencyCall,
  type LatencyOptions,
  type LatencyUnit,
  latencyOf,
  type ProbeCount,
  type ProbeHistogram,
  parseCountBy,
  UNIT_NS,
} from './aggregate.js';
export { AsyncProcessTracer } from './async-process-tracer.js';
export { cleanStale } from './clean.js';
export { type Coverage, type CoverageOptions, coverage, uncoveredNote } from './coverage.js';
export { runDoctor } from './doctor.js';
export { type InjectHook, injectHookOf, inlineReadsOf } from './inject-plan.js';
export {
  type AllocatorTarget,
  type LeakBlock,
  type LeakReading,
  type LeakSnapshot,
  Leaks,
  type LeaksOptions,
  leaks,
} from './leaks.js';
export {
  type FunctionListing,
  type ListedFunction,
  type ListOptions,
  listFunctions,
  listObjects,
  type ObjectListing,
} from './list.js';
export {
  type ListLinesOptions,
  listSourceLines,
  type SourceLine,
  type SourceLineListing,
} from './list-lines.js';
export {
  type ListedUsdtProbe,
  type ListUsdtOptions,
  listUsdtProbes,
  type UsdtListing,
  type UsdtObjectListing,
} from './list-usdt.js';
export { type ListVariablesOptions, listVariables, type VariableListing } from './list-vars.js';
export {
  type HitContext,
  type ProbeEventKind,
  type ProcessRegistration,
  ProcessTracer,
  type ProcessTracerOptions,
} from './process-tracer.js';
export {
  type PtraceConsumer,
  PtraceRun,
  type PtraceRunOptions,
} from './ptrace-run.js';
export { PtraceStacks, type WalkedStack } from './ptrace-stacks.js';
export {
  CALLS_FILE,
  type CallRecorder,
  CallRecords,
  GOROUTINE_TIDS_FROM,
  INDEX_FILE,
  loadRecording,
  type ReadOptions,
  type RecordCallsOptions,
  type RecordEngine,
  type RecordedFunction,
  type RecordedThread,
  type Recording,
  type RecordingIndex,
  type RecordingProbes,
  type RecordingProgress,
  RecordingWriter,
  type RecordOptions,
  readRecording,
  record,
  recordCalls,
  recordSpecs,
  type SteppedProbes,
  threadLabel,
  threadsSaid,
} from './recording.js';
export { type Symbolized, symbolizeAddress } from './symbolize.js';
export {
  Attachment,
  type AttachOptions,
  type ConsumerOptions,
  checkTargetOptions,
  probeName,
  Tracer,
} from './tracer.js';
export {
  type CallPathView,
  type CountRowView,
  type DoctorView,
  type ErrorView,
  type FunctionReportView,
  type FunctionRow,
  type FunctionsView,
  type LatencyRowView,
  type LeakStackView,
  type LeaksRequest,
  type LeakView,
  type MeasureKind,
  type MeasurementView,
  type MeasureRequest,
  type MeasureState,
  type OpenRequest,
  type ProcessRow,
  type RecordingState,
  type RecordingTreeView,
  type RecordingView,
  type RecordRequest,
  type ResolveView,
  type ResultView,
  type ResultViewKind,
  type StackRowView,
  type StreamMessage,
  type TargetChoice,
  TOKEN_HEADER,
  type TraceEventView,
  type UsdtRow,
  type ValidateView,
} from './ui-contract.js';
