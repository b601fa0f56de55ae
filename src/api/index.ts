/**
 * upscope's programmatic API. Everything here works without privileges except where noted:
 * resolving specs and listing symbols only read files and /proc.
 */
export {
  ERROR_CODES,
  type ErrorCategory,
  type ErrorCode,
  ProbeError,
  isNotSupported,
  isProbeError,
} from '../errors/index.js';
export { type DoctorReport, runDoctor } from '../host/index.js';
export {
  type ProbePlan,
  type ProbeSite,
  type ResolveOptions,
  type SiteKind,
  planProbes,
  resolveProbes,
} from '../plan/index.js';
export { type FetchArg, type ProbeSpec, parseSpec, printSpec } from '../spec/index.js';
export {
  type FunctionListing,
  type ListOptions,
  type ListedFunction,
  type ObjectListing,
  listFunctions,
  listObjects,
} from './list.js';
export { type Symbolized, symbolizeAddress } from './symbolize.js';
