export {
  type AttachPoint,
  type AttachPointOptions,
  attachPoints,
  exitFetches,
  FRAME_FIELDS,
  frameFetches,
  returnAddressFetch,
  stackPointerFetch,
} from './attach-points.js';
export {
  type CallingConvention,
  GO_INTEGER_REGISTERS,
  lowerForConvention,
  readsArgumentsOrResults,
} from './calling-convention.js';
export {
  closeDebugInfo,
  type DebugFileUsed,
  type DebugInfo,
  type DebugInfoOptions,
  isDebugInfo,
  lookupDebugInfo,
  type MissingDebugInfo,
  missingDebugInfoHints,
  missingDebugSymbolsHints,
  targetSymbols,
} from './debug-info.js';
export { findIfuncImplementations, type IfuncImplementation } from './ifunc.js';
export { notLoadedNotes } from './not-loaded.js';
export {
  excludeSites,
  type ProbeSite,
  qualifyNames,
  type SiteKind,
  type SourceSite,
  siteName,
  type TargetFile,
  type UsdtSite,
} from './probe-site.js';
export {
  type OptionFetch,
  type PlannedProbes,
  type PlanProgress,
  type ProbePlan,
  planProbes,
  planProbesSync,
  type ResolveOptions,
  type RunPlanChoices,
  resolveProbes,
  resolveProbesSync,
  runPlanOptions,
} from './resolve-probes.js';
export {
  type ExitsByIndex,
  exitsByIndex,
  type ReturnPlan,
  type ReturnProbeMode,
  type ReturnSitePlan,
} from './return-plan.js';
export { type SkippedSite, skipCounts, skipSummary } from './skipped-sites.js';
export * from './targets/index.js';
export { fetchAtSite, fetchForSites } from './usdt-args.js';
export {
  type FunctionVariables,
  functionVariables,
  type ListedVariable,
  noDebugInfoHints,
  openDwarf,
} from './variables.js';
