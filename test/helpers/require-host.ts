import { execFileSync } from 'node:child_process';
import type { TestContext } from 'node:test';

export interface HostRequirements {
  /** Must run as root (uid 0). */
  readonly root?: boolean;
  /** Commands that must be on PATH (gcc, readelf, ...). */
  readonly commands?: readonly string[];
}

/** True when running in CI, where a missing requirement is a failure, not a skip. */
export const STRICT = process.env['CI'] === 'true' || process.env['PROBE_TEST_STRICT'] === '1';

function hasCommand(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * Skip the test (printing why) when the machine lacks what it needs; under CI=true the same
 * lack fails the test instead. Returns false when the test was skipped.
 */
export function requireHost(t: TestContext, needs: HostRequirements): boolean {
  const missing: string[] = [];
  if (needs.root === true && process.getuid?.() !== 0) missing.push('root');
  for (const command of needs.commands ?? []) {
    if (!hasCommand(command)) missing.push(`command "${command}"`);
  }
  if (missing.length === 0) return true;
  const reason = `needs ${missing.join(', ')}`;
  if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
  console.log(`# skipped "${t.name}": ${reason}`);
  t.skip(reason);
  return false;
}
