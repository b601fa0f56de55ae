export {
  categoryOf,
  ERROR_CODES,
  type ErrorCategory,
  type ErrorCode,
  EXIT_STATUS,
} from './codes.js';
export {
  InternalError,
  isNotSupported,
  isProbeError,
  ProbeError,
  type ProbeErrorOptions,
  quote,
  type Span,
} from './probe-error.js';
export { exitStatusOf, renderCaret, renderError, renderWarning } from './render.js';
