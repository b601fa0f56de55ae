export { DEFAULT_RING_RECORDS, Injector, type InjectorOptions } from './injector.js';
export { TscClock } from './tsc-clock.js';
