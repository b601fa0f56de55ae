export { ERROR_CODES, EXIT_STATUS, type ErrorCategory, type ErrorCode, categoryOf } from './codes.js';
export {
  InternalError,
  ProbeError,
  type ProbeErrorOptions,
  type Span,
  isNotSupported,
  isProbeError,
  quote,
} from './probe-error.js';
export { exitStatusOf, renderCaret, renderError } from './render.js';
