import { join } from 'node:path';

/**
 * Where compiled test programs are cached between runs (by source and flags): inside the
 * checkout, so that the tests leave nothing in /tmp, and `npm ci` starts them afresh.
 */
export const TEST_CACHE =
  process.env['UPSCOPE_TEST_CACHE'] ??
  join(new URL('../..', import.meta.url).pathname, 'node_modules/.cache/upscope-tests');
