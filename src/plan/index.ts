export { findIfuncImplementations, type IfuncImplementation } from './ifunc.js';
export { notLoadedNotes } from './not-loaded.js';
export type { ProbeSite, SiteKind, TargetFile, UsdtSite } from './probe-site.js';
export {
  type ProbePlan,
  planProbes,
  planProbesSync,
  type ResolveOptions,
  resolveProbes,
  resolveProbesSync,
} from './resolve-probes.js';
export * from './targets/index.js';
