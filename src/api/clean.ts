import { accessSync, constants } from 'node:fs';
import { type CleanResult, cleanStaleGroups } from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import { ensureTracefs } from '../host/index.js';

/**
 * Remove every upscope event group and tracefs instance whose owner process is gone (left by
 * an upscope killed with SIGKILL). Never touches another tool's events or a live session's.
 * Needs root, or write access to tracefs; mounts tracefs when root and it is missing.
 * `notice` is told of a removal that takes seconds (many probes left enabled).
 */
export function cleanStale(options: { notice?: (text: string) => void } = {}): CleanResult {
  const tracefs = ensureTracefs();
  try {
    accessSync(`${tracefs}/uprobe_events`, constants.W_OK);
  } catch (cause) {
    throw new ProbeError(
      'ERR_PRIVILEGES',
      `Cannot clean upscope's tracefs groups: ${tracefs}/uprobe_events is not writable by uid ${process.geteuid?.()}`,
      { cause, hints: ['Run as root (sudo upscope clean)'] },
    );
  }
  return cleanStaleGroups(tracefs, { notice: options.notice });
}
