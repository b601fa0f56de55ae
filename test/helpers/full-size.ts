/**
 * Whether the tests run at the sizes their issues name (UPSCOPE_FULL_SIZE=1, set by
 * `npm run reliability`'s "full" part): 1,000,000 calls, 20 runs in a row, 10 rounds. The
 * suite runs the same tests smaller, at sizes that still catch the defects they were written
 * for, so that `npm test` stays short.
 */
export const FULL_SIZE = process.env['UPSCOPE_FULL_SIZE'] === '1';

/** `suite` in the suite, `full` at the size the issue names. */
export function sized<T>(suite: T, full: T): T {
  return FULL_SIZE ? full : suite;
}
