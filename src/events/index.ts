export type { FieldValue, ProbeEvent, StreamStats } from './probe-event.js';
export type { StackFrame } from './stack-frame.js';
