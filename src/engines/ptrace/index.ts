export { evaluateFetch, type FetchSource } from './fetch.js';
export {
  addInlineAggregates,
  type HookTimeNs,
  type InlineAggregate,
  type InlineHit,
  type InlineHooks,
  type InlineHooksFactory,
  type InlineMemory,
  type InlineRead,
  type InlineReads,
  type InlineValue,
  NO_INLINE_READS,
} from './inline-hooks.js';
export { INLINE_STRING_BYTES, type InlineReadPlan, planInlineReads } from './inline-reads.js';
export {
  type ForeignBreakpointNotice,
  type HitContext,
  type ProbeEventKind,
  type ProbesOptions,
  ProcessProbes,
  type Registration,
  type ReturnSites,
} from './process-probes.js';
export { type RegisterName, Registers } from './registers.js';
export { alarmEvery, alarmIn, interruptWaitsOn, signalOnParentDeath } from './signals.js';
export type { SpawnOptions } from './tracee.js';
