import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A file to give a traced program as its stdout (a descriptor of this process), so that its
 * output does not mix with the test runner's; text() closes it, reads it and removes it.
 */
export function capture(): { fd: number; text: () => string } {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-capture-'));
  const path = join(dir, 'out');
  const fd = openSync(path, 'w+');
  return {
    fd,
    text: () => {
      closeSync(fd);
      const out = readFileSync(path, 'utf8');
      rmSync(dir, { recursive: true, force: true });
      return out;
    },
  };
}
