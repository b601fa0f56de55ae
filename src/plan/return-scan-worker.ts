/**
 * The worker that finds the returns of a pattern's functions while the main thread plans
 * their entries (see return-scan.ts): findReturnInstructions() on each function's code, read
 * from the file opened again here, the results sent back a batch at a time.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { workerData } from 'node:worker_threads';
import { type CodePart, findReturnInstructions } from '../arch/index.js';
import {
  SCAN_BATCH,
  SCAN_PROGRESS,
  type ScanMessage,
  type ScanRequest,
} from './return-scan-protocol.js';

/** The file is read in blocks of this size, the latest few kept. */
const BLOCK_BYTES = 1 << 20;
const MAX_BLOCKS = 16;

const request = workerData as ScanRequest;

function post(message: ScanMessage, transfer: ArrayBuffer[] = []): void {
  request.port.postMessage(message, transfer);
  Atomics.add(request.progress, SCAN_PROGRESS.posted, 1);
  Atomics.notify(request.progress, SCAN_PROGRESS.posted);
}

/** A file's bytes by offset, from blocks read once. */
class BlockReader {
  readonly #fd: number;
  readonly #blocks = new Map<number, Buffer>();

  constructor(fd: number) {
    this.#fd = fd;
  }

  view(offset: number, length: number): Uint8Array {
    const first = Math.floor(offset / BLOCK_BYTES);
    if (first !== Math.floor((offset + length - 1) / BLOCK_BYTES))
      return this.#read(offset, length);
    let block = this.#blocks.get(first);
    if (block === undefined) {
      block = this.#read(first * BLOCK_BYTES, BLOCK_BYTES);
      if (this.#blocks.size >= MAX_BLOCKS) {
        this.#blocks.delete(this.#blocks.keys().next().value as number);
      }
      this.#blocks.set(first, block);
    }
    const at = offset - first * BLOCK_BYTES;
    if (at + length > block.length)
      throw new Error(`the file ends before offset ${offset + length}`);
    return block.subarray(at, at + length);
  }

  /** Up to `length` bytes at `offset` (fewer at the file's end). */
  #read(offset: number, length: number): Buffer {
    const buffer = Buffer.allocUnsafeSlow(length);
    let done = 0;
    while (done < length) {
      const n = readSync(this.#fd, buffer, done, length - done, offset + done);
      if (n === 0) break;
      done += n;
    }
    return buffer.subarray(0, done);
  }
}

function scan(fd: number): void {
  const { starts, parts } = request;
  const reader = new BlockReader(fd);
  const count = starts.length - 1;
  for (let first = 0; first < count; first += SCAN_BATCH) {
    const n = Math.min(SCAN_BATCH, count - first);
    const found = new Uint8Array(n);
    const ends = new Uint32Array(n);
    const exits: number[] = [];
    const failures: [number, string, number][] = [];
    for (let i = 0; i < n; i++) {
      const code: CodePart[] = [];
      for (let j = starts[first + i]!; j < starts[first + i + 1]!; j++) {
        const size = parts[3 * j + 2]!;
        code.push({
          vaddr: BigInt(parts[3 * j]!),
          bytes: size === 0 ? new Uint8Array(0) : reader.view(parts[3 * j + 1]!, size),
        });
      }
      const result = findReturnInstructions(code);
      if (result.ok) {
        found[i] = 1;
        for (const exit of result.exits) {
          exits.push(
            Number(exit.instruction.vaddr),
            exit.instruction.length,
            exit.kind === 'ret' ? 0 : 1,
          );
        }
      } else {
        failures.push([i, result.reason, result.at === undefined ? -1 : Number(result.at)]);
      }
      ends[i] = exits.length / 3;
    }
    const packed = Float64Array.from(exits);
    post({ type: 'results', first, found, ends, exits: packed, failures }, [
      found.buffer,
      ends.buffer,
      packed.buffer,
    ]);
  }
}

try {
  const fd = openSync(request.path, 'r');
  try {
    const stat = fstatSync(fd, { bigint: true });
    if (stat.dev !== request.dev || stat.ino !== request.inode) {
      post({ type: 'unavailable', why: `${request.path} is not the file being planned` });
    } else {
      scan(fd);
    }
  } finally {
    closeSync(fd);
  }
} catch (err) {
  post({ type: 'unavailable', why: err instanceof Error ? err.message : String(err) });
} finally {
  Atomics.store(request.progress, SCAN_PROGRESS.ended, 1);
  Atomics.notify(request.progress, SCAN_PROGRESS.posted);
}
