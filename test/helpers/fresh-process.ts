import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

const ROOT = new URL('../..', import.meta.url).pathname;

/**
 * Run an ES module script (TypeScript allowed, paths relative to the repository root) in a new
 * Node process, so that a test sees what loading modules does from a clean start; returns the
 * JSON value the script printed last with console.log.
 */
export function runFreshProcess(lines: readonly string[]): unknown {
  const result = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', lines.join('\n')],
    { cwd: ROOT, encoding: 'utf8' },
  );
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout.trim().split('\n').pop()!);
}
