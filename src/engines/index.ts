export { type EventLineSite, eventName, kernelFetchArg, uprobeEventLine } from './tracefs/index.js';
