export { formatAddress, type ListenAddress, parseListenAddress } from './address.js';
export { type Handler, HttpEndpoint, type Route } from './http-endpoint.js';
export {
  OtlpExporter,
  type OtlpOptions,
  type OtlpStats,
  parseOtlpUrl,
  type TimedSpan,
} from './otlp.js';
export {
  PrometheusServer,
  type PrometheusServerOptions,
  scrapeText,
} from './prometheus-server.js';
