import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const GOLDEN = new URL('../fixtures/output/golden/', import.meta.url).pathname;

/** Whether this run rewrites goldens (on purpose, then the diff is reviewed). */
export const UPDATING = process.env['UPDATE_GOLDENS'] === '1';

/**
 * Check output against its golden file, test/fixtures/output/golden/NAME. Goldens change only
 * when asked: `UPDATE_GOLDENS=1 node scripts/run-tests.mjs FILTER` writes them instead.
 */
export function assertGolden(name: string, actual: string | Uint8Array): void {
  const path = join(GOLDEN, name);
  const bytes = typeof actual === 'string' ? Buffer.from(actual) : Buffer.from(actual);
  if (UPDATING) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, bytes);
    return;
  }
  assert.ok(
    existsSync(path),
    `no golden ${name}: write it with UPDATE_GOLDENS=1 node scripts/run-tests.mjs, and review it`,
  );
  const expected = readFileSync(path);
  if (typeof actual === 'string') {
    assert.equal(actual, expected.toString('utf8'), `output differs from golden ${name}`);
  } else {
    assert.ok(bytes.equals(expected), `output differs from golden ${name}`);
  }
}
