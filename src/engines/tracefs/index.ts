export {
  type EventLineSite,
  eventName,
  kernelFetchArg,
  uprobeEventLine,
} from './uprobe-event-line.js';
