export {
  type AttachPoint,
  type AttachPointOptions,
  attachPoints,
  FRAME_FIELDS,
  frameFetches,
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
} from './debug-info.js';
export { findIfuncImplementations, type IfuncImplementation } from './ifunc.js';
export { notLoadedNotes } from './not-loaded.js';
export type { ProbeSite, SiteKind, SourceSite, TargetFile, UsdtSite } from './probe-site.js';
export {
  type ProbePlan,
  planProbes,
  planProbesSync,
  type ResolveOptions,
  resolveProbes,
  resolveProbesSync,
} from './resolve-probes.js';
export type { ReturnPlan, ReturnProbeMode, ReturnSitePlan } from './return-plan.js';
export * from './targets/index.js';
export { fetchAtSite, fetchForSites } from './usdt-args.js';
export {
  type FunctionVariables,
  functionVariables,
  type ListedVariable,
  noDebugInfoHints,
  openDwarf,
} from './variables.js';
