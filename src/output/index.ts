export {
  type CountsTextOptions,
  type HistogramsTextOptions,
  jsonNumber,
  renderCountsJson,
  renderCountsText,
  renderHistogramsJson,
  renderHistogramsText,
} from './aggregate-text.js';
export { type Call, CallPairer, type Instant } from './calls.js';
export {
  type CallStacksOptions,
  callEvents,
  callStacks,
  type FunctionName,
  firstCallNs,
  functionReportRows,
  REPORT_SORTS,
  type ReportSort,
  renderCallGraphJson,
  renderCallGraphText,
  renderFunctionReportJson,
  renderFunctionReportText,
  renderReplayJson,
  renderReplayText,
  sortFunctionStats,
} from './calls-text.js';
export { type ChromeTraceOptions, ChromeTraceSink, renderChromeTrace } from './chrome-trace.js';
export { type EventFormatter, eventJsonFormatter, eventTextFormatter } from './events-text.js';
export { formatValue, type HexFields, jsonFields, jsonValue } from './fields.js';
export { type FlameGraphOptions, renderFlameGraph } from './flamegraph.js';
export { type FoldedOptions, foldStacks, renderFolded } from './folded.js';
export {
  type CountSinkOptions,
  countSink,
  FORMAT_INFO,
  FORMATS,
  type Format,
  type HistogramSinkOptions,
  histogramSink,
  isStackFormat,
  parseFormat,
  type ResultKind,
  renderStacks,
  type StackFormat,
  type StacksDocumentOptions,
  type TraceSinkOptions,
  traceSink,
} from './formats.js';
export { formatBound, formatDuration, renderHistogram } from './histogram.js';
export { hex, renderJson, renderTable } from './json.js';
export {
  type LeakCounterValues,
  type LeakGrowth,
  type LeakReport,
  type LeakStackRow,
  leakFrameText,
  leakStackCounts,
  renderLeaksJson,
  renderLeaksText,
} from './leaks.js';
export { type PprofOptions, renderPprof } from './pprof.js';
export {
  type Health,
  labelName,
  type MetricFamily,
  type MetricSample,
  PrometheusExporter,
  type PrometheusInput,
  type PrometheusOptions,
  renderPrometheus,
} from './prometheus.js';
export type { Sink, Write } from './sink.js';
export {
  renderSpeedscopeStacks,
  renderSpeedscopeTrace,
  type SpeedscopeStacksOptions,
  type SpeedscopeTraceOptions,
  SpeedscopeTraceSink,
} from './speedscope.js';
export {
  frameLabel,
  frameOf,
  frameText,
  NO_STACK,
  rootFirst,
  type Stack,
  type StackCount,
  type StackWeight,
  weightOf,
  weightUnit,
} from './stacks.js';
export type { CountRow, HistogramRow, Reading } from './values.js';
