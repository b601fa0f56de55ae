import { constants } from 'node:buffer';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { InternalError, ProbeError, quote } from '../../errors/index.js';
import { invalidElf, unsupportedElf } from './elf-error.js';
import { fileAccessError } from './file-access.js';

/** The largest Buffer this Node can allocate. */
const MAX_LENGTH = constants.MAX_LENGTH;

/**
 * Where an ELF file's bytes come from: a buffer in memory, or a file read with positional
 * reads. Callers check offsets against `size` before reading.
 */
export interface ByteSource {
  readonly size: number;
  /** Exactly `length` bytes at `offset`; the caller has checked the range is inside the file. */
  read(offset: number, length: number): Buffer;
  close(): void;
}

export class BufferSource implements ByteSource {
  readonly size: number;
  readonly #bytes: Buffer;

  constructor(bytes: Uint8Array) {
    this.#bytes = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.size = bytes.byteLength;
  }

  read(offset: number, length: number): Buffer {
    return this.#bytes.subarray(offset, offset + length);
  }

  close(): void {}
}

export class FileSource implements ByteSource {
  readonly size: number;
  readonly #path: string;
  #fd: number | undefined;

  constructor(path: string) {
    this.#path = path;
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (err) {
      throw openError(path, err);
    }
    let isDirectory: boolean;
    try {
      const stat = fstatSync(fd);
      isDirectory = stat.isDirectory();
      this.size = stat.size;
    } catch (err) {
      closeSync(fd);
      throw openError(path, err);
    }
    if (isDirectory) {
      closeSync(fd);
      throw new ProbeError(
        'ERR_FILE_READ',
        `Cannot open ELF file ${quote(path)}: it is a directory`,
        {
          details: { path },
        },
      );
    }
    this.#fd = fd;
  }

  read(offset: number, length: number): Buffer {
    const fd = this.#fd;
    if (fd === undefined) {
      throw new InternalError(`Cannot read ELF file ${quote(this.#path)}: it was already closed`);
    }
    if (length > MAX_LENGTH) {
      throw unsupportedElf(this.#path, `reading ${length} bytes at once`);
    }
    const buffer = Buffer.allocUnsafe(length);
    let done = 0;
    while (done < length) {
      let n: number;
      try {
        n = readSync(fd, buffer, done, length - done, offset + done);
      } catch (err) {
        throw new ProbeError(
          'ERR_FILE_READ',
          `Cannot read ELF file ${quote(this.#path)}: ${errnoText(err)} at offset ${offset + done}`,
          { details: { path: this.#path }, cause: err },
        );
      }
      if (n === 0) {
        throw invalidElf(
          this.#path,
          `the file ended at offset ${offset + done} while reading (did it shrink?)`,
        );
      }
      done += n;
    }
    return buffer;
  }

  close(): void {
    if (this.#fd === undefined) return;
    const fd = this.#fd;
    this.#fd = undefined;
    closeSync(fd);
  }
}

function errnoText(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  switch (code) {
    case 'ENOENT':
      return 'no such file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'it is a directory';
    case 'EIO':
      return 'input/output error';
    default:
      return typeof code === 'string' ? code : String((err as Error | undefined)?.message ?? err);
  }
}

function openError(path: string, err: unknown): ProbeError {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === 'EACCES' || code === 'EPERM') {
    return fileAccessError(`open ELF file ${quote(path)}`, path, err);
  }
  const message = `Cannot open ELF file ${quote(path)}: ${errnoText(err)}`;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    return new ProbeError('ERR_TARGET_NOT_FOUND', message, { details: { path }, cause: err });
  }
  return new ProbeError('ERR_FILE_READ', message, { details: { path }, cause: err });
}
