import { execFileSync } from 'node:child_process';
import type { TestContext } from 'node:test';
import { compileProgram } from './compile.js';
import { requireHost, STRICT } from './require-host.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

let sdtAvailable: boolean | undefined;

/**
 * Skip the test (printing why) when gcc or <sys/sdt.h> (Debian's systemtap-sdt-dev, installed
 * by scripts/setup-host.sh) is missing; under CI a missing header fails it.
 */
export function requireSdt(t: TestContext): boolean {
  if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return false;
  sdtAvailable ??= (() => {
    try {
      execFileSync('gcc', ['-E', '-x', 'c', '-'], {
        input: '#include <sys/sdt.h>\n',
        stdio: 'pipe',
      });
      return true;
    } catch {
      return false;
    }
  })();
  if (sdtAvailable) return true;
  const reason =
    'needs <sys/sdt.h> (apt-get install systemtap-sdt-dev, or run scripts/setup-host.sh)';
  if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
  console.log(`# skipped "${t.name}": ${reason}`);
  t.skip(reason);
  return false;
}

/** test/programs/usdt-target.c with usdt-gated.c (its probe with a semaphore), at `opt`. */
export function compileUsdtTarget(opt: '-O0' | '-O2', extra: readonly string[] = []): string {
  return compileProgram('usdt-target', {
    flags: [opt, ...extra],
    link: [`${PROGRAMS}usdt-gated.c`],
  });
}
