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
  /** read() without a copy where it can: bytes the caller reads and never changes. */
  view(offset: number, length: number): Buffer;
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

  view(offset: number, length: number): Buffer {
    return this.read(offset, length);
  }

  close(): void {}
}

/**
 * Small reads of a file come from blocks of it read once and kept: planning every function of
 * a large binary reads each function's code (a few hundred bytes) several times, and a system
 * call per read was seconds of it for the tens of thousands of functions of /usr/bin/node.
 */
const BLOCK_BYTES = 1 << 20;
/** Reads larger than this go straight to the file. */
const SMALL_READ_BYTES = 64 * 1024;
/** At most this many blocks are kept (the oldest read is dropped first). */
const MAX_BLOCKS = 32;

export class FileSource implements ByteSource {
  readonly size: number;
  /** The file opened: its device and inode (a reader elsewhere checks it has the same). */
  readonly dev: bigint;
  readonly inode: bigint;
  readonly #path: string;
  #fd: number | undefined;
  readonly #blocks = new Map<number, Buffer>();

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
      const stat = fstatSync(fd, { bigint: true });
      isDirectory = stat.isDirectory();
      this.size = Number(stat.size);
      this.dev = stat.dev;
      this.inode = stat.ino;
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
    const block = this.#inBlock(offset, length);
    if (block === undefined) return this.#readAt(this.#openFd(), offset, length);
    // A copy: the caller may keep or change it.
    const copy = Buffer.allocUnsafe(length);
    copy.set(block);
    return copy;
  }

  view(offset: number, length: number): Buffer {
    return this.#inBlock(offset, length) ?? this.#readAt(this.#openFd(), offset, length);
  }

  /** The bytes in a kept block, for a small read inside one; undefined for the others. */
  #inBlock(offset: number, length: number): Buffer | undefined {
    const fd = this.#openFd();
    if (length > MAX_LENGTH) {
      throw unsupportedElf(this.#path, `reading ${length} bytes at once`);
    }
    const first = Math.floor(offset / BLOCK_BYTES);
    if (length > SMALL_READ_BYTES || first !== Math.floor((offset + length - 1) / BLOCK_BYTES)) {
      return undefined;
    }
    const block = this.#block(fd, first);
    const at = offset - first * BLOCK_BYTES;
    return at + length <= block.length ? block.subarray(at, at + length) : undefined;
  }

  #openFd(): number {
    const fd = this.#fd;
    if (fd === undefined) {
      throw new InternalError(`Cannot read ELF file ${quote(this.#path)}: it was already closed`);
    }
    return fd;
  }

  #block(fd: number, index: number): Buffer {
    let block = this.#blocks.get(index);
    if (block === undefined) {
      const from = index * BLOCK_BYTES;
      block = this.#readAt(fd, from, Math.min(BLOCK_BYTES, this.size - from));
      if (this.#blocks.size >= MAX_BLOCKS) {
        this.#blocks.delete(this.#blocks.keys().next().value as number);
      }
      this.#blocks.set(index, block);
    }
    return block;
  }

  #readAt(fd: number, offset: number, length: number): Buffer {
    // Not from the pool: a block is kept, and a pooled slice would keep its whole pool alive.
    const buffer = Buffer.allocUnsafeSlow(length);
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
    this.#blocks.clear();
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
