export { type FlameGraphOptions, renderFlameGraph } from './flamegraph.js';
export { type FoldedOptions, foldStacks, renderFolded } from './folded.js';
export { formatBound, formatDuration, renderHistogram } from './histogram.js';
export { hex, renderJson, renderTable } from './json.js';
export { type PprofOptions, renderPprof } from './pprof.js';
export {
  frameLabel,
  frameOf,
  NO_STACK,
  rootFirst,
  type Stack,
  type StackCount,
  type StackWeight,
  weightOf,
} from './stacks.js';
