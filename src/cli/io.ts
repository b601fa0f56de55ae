import { writeSync } from 'node:fs';
import pc from 'picocolors';

/** Where commands write. The CLI is the only layer that prints; tests can pass their own. */
export interface Io {
  out(text: string | Uint8Array): void;
  err(text: string): void;
  readonly color: boolean;
}

/**
 * Write all of `text` to a file descriptor synchronously, so a large listing goes out in one
 * piece before the process exits, and a closed pipe (`upscope list node | head`) ends quietly.
 */
function writeAll(fd: number, text: string | Uint8Array): void {
  const bytes = typeof text === 'string' ? Buffer.from(text) : text;
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += writeSync(fd, bytes, offset, bytes.length - offset);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') continue;
      if (code === 'EPIPE') return;
      throw err;
    }
  }
}

export function processIo(): Io {
  return {
    out: (text) => writeAll(1, text),
    err: (text) => writeAll(2, text),
    color: pc.isColorSupported && process.stdout.isTTY === true,
  };
}
