export { BufferReader, type CpuRecordVisitor } from './buffer-reader.js';
export {
  type DecodedEvent,
  decodeEvent,
  type FieldValue,
  integerReader,
  type Reader,
  recordPid,
  recordType,
  text as recordText,
} from './decode-event.js';
export {
  type EventField,
  type EventFormat,
  type HeaderPage,
  type HeaderPageField,
  parseEventFormat,
  parseHeaderPage,
} from './event-format.js';
export {
  EventNamer,
  groupOwnerPid,
  instanceOwnerPid,
  type ListedEvent,
  parseUprobeEvents,
  sessionGroupName,
  sessionInstanceName,
  UPSCOPE_PREFIX,
} from './names.js';
export { type DecodedPage, decodePage, type PageRecord } from './page-decoder.js';
export { removalTime, SAY_REMOVAL_FROM } from './removal.js';
export {
  type CleanOptions,
  type CleanResult,
  cleanStaleGroups,
  processExists,
} from './stale-groups.js';
export {
  type CpuStats,
  type DefinedEvent,
  type EventHits,
  type FilterOptions,
  type InstanceOptions,
  type SessionStats,
  TracefsSession,
  type TracefsSessionOptions,
  type TracefsSite,
} from './tracefs-session.js';
export {
  type MovedSite,
  type StreamOptions,
  type StreamSite,
  TracefsStream,
} from './tracefs-stream.js';
export {
  type EventLineSite,
  eventName,
  kernelFetchArg,
  uprobeEventLine,
} from './uprobe-event-line.js';
