export { findIfuncImplementations, type IfuncImplementation } from './ifunc.js';
export type { ProbeSite, SiteKind, TargetFile, UsdtSite } from './probe-site.js';
export {
  type ProbePlan,
  planProbes,
  type ResolveOptions,
  resolveProbes,
} from './resolve-probes.js';
export * from './targets/index.js';
