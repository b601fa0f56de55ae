export {
  DEFAULT_RING_RECORDS,
  Injector,
  type InjectorOptions,
  RETURN_LIMITS,
} from './injector.js';
export { TscClock } from './tsc-clock.js';
