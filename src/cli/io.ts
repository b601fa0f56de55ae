import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  type Stats,
  writeSync,
} from 'node:fs';
import pc from 'picocolors';
import { ProbeError } from '../errors/index.js';
import { grouped } from '../internal/index.js';

/** Where commands write. The CLI is the only layer that prints; tests can pass their own. */
export interface Io {
  out(text: string | Uint8Array): void;
  err(text: string): void;
  readonly color: boolean;
  /**
   * Aborted when the reader of the output went away (EPIPE: `upscope trace ... | head`): a
   * run ends on it as on Ctrl-C, and what is written after it is dropped.
   */
  readonly outputClosed?: AbortSignal | undefined;
}

/** The most a write to a pipe may hold and still reach the reader in one piece (PIPE_BUF). */
const PIPE_BUF = 4096;

/**
 * Write all of `text` to a file descriptor synchronously, so a large listing goes out in one
 * piece before the process exits, and a closed pipe (`upscope list node | head`) ends quietly
 * (unless `quietEpipe` is false: then every error throws).
 */
function writeAll(fd: number, text: string | Uint8Array, quietEpipe = true): void {
  const bytes = typeof text === 'string' ? Buffer.from(text) : text;
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += writeSync(fd, bytes, offset, bytes.length - offset);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') continue;
      if (code === 'EPIPE' && quietEpipe) return;
      throw err;
    }
  }
}

/**
 * The bytes of `text` in pieces that each end at a line's end and hold at most PIPE_BUF
 * bytes where they can (a longer line goes alone): each written to a pipe in one write(2),
 * which the kernel does not interleave with another writer's (a traced command's output); a
 * Unix stream socket queues such a write whole too (one buffer, under its size).
 */
function* wholeLines(bytes: Uint8Array): Generator<Uint8Array> {
  let start = 0;
  while (bytes.length - start > PIPE_BUF) {
    const cut = bytes.lastIndexOf(0x0a, start + PIPE_BUF - 1);
    const end = cut >= start ? cut + 1 : bytes.indexOf(0x0a, start + PIPE_BUF);
    if (end <= 0) break;
    yield bytes.subarray(start, end);
    start = end;
  }
  if (start < bytes.length) yield bytes.subarray(start);
}

/**
 * Whether `fd` is a pipe or a socket: another process may write to it too (a traced command
 * with --command-output inherit; a spawner's stdout, which Node and libuv make a socketpair).
 */
function isPipe(fd: number): boolean {
  try {
    const stats = fstatSync(fd);
    return stats.isFIFO() || stats.isSocket();
  } catch {
    return false;
  }
}

export function processIo(): Io {
  const closed = new AbortController();
  const pipe = isPipe(1);
  return {
    out: (text) => {
      if (closed.signal.aborted) return;
      const bytes = typeof text === 'string' ? Buffer.from(text) : text;
      try {
        for (const piece of pipe ? wholeLines(bytes) : [bytes]) writeAll(1, piece, false);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EPIPE') throw err;
        closed.abort();
      }
    },
    err: (text) => writeAll(2, text),
    color: pc.isColorSupported && process.stdout.isTTY === true,
    outputClosed: closed.signal,
  };
}

/** An Io writing its output to a file; close() when done (idempotent). */
export interface FileIo extends Io {
  close(): void;
}

/** What a failed write or open means, in words, for the errno codes a user can meet. */
const ERRNO_WORDS: Readonly<Record<string, string>> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'the disk quota is exceeded',
  EFBIG: 'the file is too large',
  EIO: 'an input/output error',
  EPIPE: 'the reader closed the pipe',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EROFS: 'the file system is read-only',
  ENOENT: 'its directory does not exist',
  ENOTDIR: 'a part of its path is not a directory',
  EISDIR: 'it is a directory',
};

const ERRNO_HINTS: Readonly<Record<string, string>> = {
  ENOSPC: 'Free space on that file system, or give -o a path on another one',
  EDQUOT: 'Free space within your quota, or give -o a path on another file system',
  EFBIG: 'Give -o a path on a file system that allows larger files, or trace for less time',
  EIO: 'Check the device (dmesg), or give -o a path on another file system',
};

function outputError(path: string, action: string, err: unknown): ProbeError {
  const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
  const words = ERRNO_WORDS[code] ?? (err as Error).message;
  const hint = ERRNO_HINTS[code];
  return new ProbeError('ERR_OUTPUT_FILE', `Cannot ${action} "${path}": ${words} (${code})`, {
    hints: hint === undefined ? [] : [hint],
    cause: err,
  });
}

/**
 * Open `path` for `--output` and return an Io whose out() writes there (err() and color as
 * `io`'s; color is off in files). The file is created with mode 0666 less the umask, as a shell's
 * `>` does, and an existing regular file is truncated (as perf record -o). Refused: a symbolic
 * link at that path (O_NOFOLLOW, so that a link planted in /tmp cannot send the output
 * elsewhere), and anything that is not a regular file (a FIFO, device, socket): shell
 * redirection (`> PATH`, `| COMMAND`) serves those. A failed write throws ERR_OUTPUT_FILE
 * (and every later out() throws it again): callers stop, detach and let it reach main().
 */
export function fileIo(io: Io, path: string): FileIo {
  // lstat first, so that opening a device or FIFO (which can block or act) is not even tried;
  // the fstat after open catches one swapped in between.
  let existing: Stats | undefined;
  try {
    existing = lstatSync(path);
  } catch {
    existing = undefined;
  }
  if (existing?.isSymbolicLink() === true) throw symlinkError(path);
  if (existing !== undefined && !existing.isFile()) throw notRegularError(path, existing);
  let fd: number;
  try {
    fd = openSync(
      path,
      constants.O_WRONLY |
        constants.O_CREAT |
        constants.O_TRUNC |
        constants.O_NOFOLLOW |
        constants.O_NONBLOCK, // libuv adds O_CLOEXEC itself
      0o666,
    );
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw symlinkError(path);
    if (code === 'ENXIO') throw notRegularError(path, undefined);
    throw outputError(path, 'open the output file', err);
  }
  const stats = fstatSync(fd);
  if (!stats.isFile()) {
    closeSync(fd);
    throw notRegularError(path, stats);
  }
  let failure: ProbeError | undefined;
  let open = true;
  return {
    out: (text) => {
      if (failure !== undefined) throw failure;
      try {
        writeAll(fd, text, false);
      } catch (err) {
        failure = outputError(path, 'write the output to', err);
        throw failure;
      }
    },
    err: (text) => io.err(text),
    color: false,
    outputClosed: undefined,
    close: () => {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}

function symlinkError(path: string): ProbeError {
  return new ProbeError(
    'ERR_OUTPUT_FILE',
    `Cannot write the output to "${path}": it is a symbolic link, and upscope does not follow one there (a link planted in a shared directory could send the output anywhere)`,
    { hints: ['Remove the link, or give -o the path it points to'] },
  );
}

function notRegularError(path: string, stats: Stats | undefined): ProbeError {
  const kind =
    stats === undefined || stats.isFIFO()
      ? 'a FIFO'
      : stats.isCharacterDevice() || stats.isBlockDevice()
        ? 'a device'
        : stats.isDirectory()
          ? 'a directory'
          : stats.isSocket()
            ? 'a socket'
            : 'not a regular file';
  return new ProbeError(
    'ERR_OUTPUT_FILE',
    `Cannot write the output to "${path}": it is ${kind}, and -o writes regular files only`,
    { hints: [`Use the shell for pipes and devices: upscope ... > ${path}`] },
  );
}

/** Run `body` with an Io writing to `path` (stdout's `io` when undefined); the file is closed after. */
export async function withOutput<T>(
  io: Io,
  path: string | undefined,
  body: (io: Io) => Promise<T>,
): Promise<T> {
  if (path === undefined) return body(io);
  const out = fileIo(io, path);
  try {
    return await body(out);
  } finally {
    out.close();
  }
}

/**
 * One line of progress on stderr, rewritten in place (at most every `everyMs`), on a terminal
 * only: a script or a pipe reading stderr never sees it. clear() takes it away, before what
 * comes next is written.
 */
export function progressLine(io: Io, everyMs = 250): { show(text: string): void; clear(): void } {
  const terminal = process.stderr.isTTY === true;
  let lastMs = 0;
  let shown = false;
  return {
    show(text) {
      const now = Date.now();
      if (!terminal || now - lastMs < everyMs) return;
      lastMs = now;
      shown = true;
      io.err(`\r\u001b[K${text}`);
    },
    clear() {
      if (shown) io.err('\r\u001b[K');
      shown = false;
    },
  };
}

/**
 * A progress line for the planning of a pattern's functions (`upscope: planning 12,000 of
 * 78,645 functions of /usr/bin/node`) and of the placing of probes where it is slow (tracefs),
 * cleared when the last one is done.
 */
export function planProgress(io: Io): (progress: PlanStep) => void {
  const line = progressLine(io);
  return (progress) => {
    if (progress.done >= progress.total) line.clear();
    else line.show(`upscope: ${planProgressText(progress)}`);
  };
}

/** How far the planning of a pattern's functions got (ResolveOptions.onProgress's argument). */
export interface PlanStep {
  readonly done: number;
  readonly total: number;
  readonly target: string;
  /** The step places probes (done of total) on the engine `target` names. */
  readonly attaching?: boolean | undefined;
}

/**
 * `planning 12,000 of 78,645 functions of /usr/bin/node`, or `attaching 1,200 of 3,534
 * probes (tracefs)`: said on a terminal and in the page.
 */
export function planProgressText({ done, total, target, attaching }: PlanStep): string {
  const counts = `${grouped(done)} of ${grouped(total)}`;
  return attaching === true
    ? `attaching ${counts} probes (${target})`
    : `planning ${counts} functions of ${target}`;
}
