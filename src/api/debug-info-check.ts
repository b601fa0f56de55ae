import type { DoctorCheck } from '../host/index.js';
import {
  closeDebugInfo,
  isDebugInfo,
  lookupDebugInfo,
  missingDebugInfoHints,
  resolveTarget,
} from '../plan/index.js';
import { openElf } from '../symbols/index.js';

const HOW = {
  embedded: 'in the file itself',
  'build-id': 'by build-id',
  debuglink: 'by .gnu_debuglink',
} as const;

export interface DebugInfoCheckOptions {
  /** Directories searched like /usr/lib/debug, before it. */
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * `upscope doctor TARGET`'s "debug info" check: which file's DWARF source-line probes on TARGET
 * would read and how it was found, or where it was looked for and the package providing it.
 */
export function debugInfoCheck(target: string, options: DebugInfoCheckOptions = {}): DoctorCheck {
  const resolved = resolveTarget(target);
  const elf = openElf(resolved.path);
  try {
    const info = lookupDebugInfo(elf, resolved.path, { debugDirs: options.debugDirs });
    const title = 'Debug info';
    if (isDebugInfo(info)) {
      const lines = info.lines.present ? '' : ' (no .debug_line: no probes by source line)';
      return {
        id: 'debug-info',
        title,
        status: info.lines.present ? 'ok' : 'warn',
        detail: `${resolved.displayPath}: ${info.source.path} (${HOW[info.source.how]})${lines}`,
      };
    }
    const hints = missingDebugInfoHints(info, resolved.displayPath);
    return {
      id: 'debug-info',
      title,
      status: 'warn',
      detail: `${resolved.displayPath}: none (no .debug_line, no separate debug file); ${hints.slice(0, -1).join('; ')}`,
      fix: hints.at(-1)!,
    };
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
}
