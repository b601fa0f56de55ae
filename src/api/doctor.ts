import { probeBpfFeatures } from '../engines/index.js';
import { type DoctorOptions, type DoctorReport, runDoctor as examine } from '../host/index.js';
import { debugInfoCheck } from './debug-info-check.js';

export interface RunDoctorOptions extends DoctorOptions {
  /** Also check the debug info of this file (path, program or library name). */
  readonly target?: string | undefined;
  /** Directories searched for separate debug files, before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * What this machine lets upscope do (see host/doctor.ts), with the bpf engine's own needs
 * tried for real: a uprobe handler, a ring buffer, a uprobe_multi link. With a target, also
 * where its debug info is (for probes by source line).
 */
export async function runDoctor(options: RunDoctorOptions = {}): Promise<DoctorReport> {
  const report = await examine({ bpfFeatures: probeBpfFeatures, ...options });
  if (options.target === undefined) return report;
  return {
    checks: [...report.checks, debugInfoCheck(options.target, { debugDirs: options.debugDirs })],
  };
}
