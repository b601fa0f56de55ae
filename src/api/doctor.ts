import { probeBpfFeatures } from '../engines/index.js';
import { type DoctorOptions, type DoctorReport, runDoctor as examine } from '../host/index.js';

/**
 * What this machine lets upscope do (see host/doctor.ts), with the bpf engine's own needs
 * tried for real: a uprobe handler, a ring buffer, a uprobe_multi link.
 */
export function runDoctor(options: DoctorOptions = {}): Promise<DoctorReport> {
  return examine({ bpfFeatures: probeBpfFeatures, ...options });
}
