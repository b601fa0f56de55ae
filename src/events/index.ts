export type { FieldValue, ProbeEvent, StreamStats } from './probe-event.js';
