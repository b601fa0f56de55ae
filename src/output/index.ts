export { formatBound, formatDuration, renderHistogram } from './histogram.js';
export { hex, renderJson, renderTable } from './json.js';
