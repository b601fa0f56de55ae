export { globToRegExp, isGlob } from './glob.js';
export {
  MAX_ARG_INDEX,
  MAX_DEREF_DEPTH,
  MAX_FETCHES,
  parseSpec,
  parseSpecOrThrow,
} from './parse-spec.js';
export { printFetchExpr, printSpec } from './print-spec.js';
export { REGISTER_NAMES, type RegisterBase, type RegisterInfo, registerInfo } from './registers.js';
export {
  type Diagnostic,
  type DiagnosticCode,
  FETCH_TYPES,
  type FetchArg,
  type FetchExpr,
  type FetchType,
  type Location,
  type ParseSpecResult,
  type ProbeKind,
  type ProbeSpec,
  type Span,
  type VariableStep,
} from './types.js';
