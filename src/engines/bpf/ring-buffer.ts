/**
 * A BPF ring buffer read in place: the kernel maps its data pages twice in a row, so a record
 * that wraps around the end is still contiguous, and the reader walks records in the mapping
 * without copies, then hands the space back by advancing the consumer position.
 */

import { ProbeError } from '../../errors/index.js';
import { describeErrno, loadNative, type NativeMemory } from '../../native/index.js';
import { BpfMap } from './kernel.js';

const PAGE_BYTES = 4096;
const PROT_READ = 1;
const PROT_WRITE = 2;
/** Header bits of a record: being written, and thrown away. */
const BUSY_BIT = 0x8000_0000;
const DISCARD_BIT = 0x4000_0000;
const HEADER_BYTES = 8;

/** The smallest size the kernel takes (a power of two of pages) holding `bytes`. */
export function ringBytes(bytes: number): number {
  let size = PAGE_BYTES;
  while (size < bytes) size *= 2;
  return size;
}

function mapError(errno: number): ProbeError {
  return new ProbeError(
    'ERR_NOT_SUPPORTED',
    `Cannot map the BPF ring buffer: ${describeErrno(errno)}`,
    { hints: ['Give a smaller --buffer-size, or raise the locked-memory limit (ulimit -l)'] },
  );
}

/**
 * One reader of a `ringbuf` map. read() calls back with the mapping's view and each record's
 * start and length; the record's bytes are valid only during the callback.
 */
export class RingBuffer {
  readonly map: BpfMap;
  readonly bytes: number;
  readonly #consumer: NativeMemory;
  readonly #producer: NativeMemory;
  readonly #consumerView: DataView;
  readonly #producerView: DataView;
  /** The data pages (mapped twice), from the producer mapping's second page. */
  readonly data: Uint8Array;
  readonly view: DataView;
  #closed = false;

  private constructor(map: BpfMap, consumer: NativeMemory, producer: NativeMemory) {
    this.map = map;
    this.bytes = map.spec.maxEntries;
    this.#consumer = consumer;
    this.#producer = producer;
    this.#consumerView = new DataView(consumer.bytes.buffer, consumer.bytes.byteOffset, 8);
    this.#producerView = new DataView(producer.bytes.buffer, producer.bytes.byteOffset, 8);
    this.data = producer.bytes.subarray(PAGE_BYTES);
    this.view = new DataView(this.data.buffer, this.data.byteOffset, this.data.byteLength);
  }

  /** A ring buffer of at least `bytes` (rounded up to a power of two of pages), mapped. */
  static create(name: string, bytes: number): RingBuffer {
    const map = BpfMap.create({
      kind: 'ringbuf',
      name,
      keyBytes: 0,
      valueBytes: 0,
      maxEntries: ringBytes(bytes),
    });
    const native = loadNative();
    const size = map.spec.maxEntries;
    const consumer = native.mmap(PAGE_BYTES, PROT_READ | PROT_WRITE, map.fd, 0);
    if (typeof consumer === 'number') {
      map.close();
      throw mapError(consumer);
    }
    const producer = native.mmap(PAGE_BYTES + 2 * size, PROT_READ, map.fd, PAGE_BYTES);
    if (typeof producer === 'number') {
      consumer.free();
      map.close();
      throw mapError(producer);
    }
    return new RingBuffer(map, consumer, producer);
  }

  /**
   * Every record written since the last read, in the order they were reserved, up to the
   * first one still being written. Returns how many were handed to `onRecord`.
   */
  read(onRecord: (view: DataView, start: number, length: number) => void): number {
    if (this.#closed) return 0;
    const mask = this.bytes - 1;
    // Positions grow without wrapping (they are 64-bit); numbers hold them exactly for years.
    let consumed = Number(this.#consumerView.getBigUint64(0, true));
    const produced = Number(this.#producerView.getBigUint64(0, true));
    let records = 0;
    try {
      while (consumed < produced) {
        const at = consumed & mask;
        const header = this.view.getUint32(at, true);
        if ((header & BUSY_BIT) !== 0) break;
        const length = header & ~(BUSY_BIT | DISCARD_BIT);
        if ((header & DISCARD_BIT) === 0) {
          onRecord(this.view, at + HEADER_BYTES, length);
          records++;
        }
        consumed += (length + HEADER_BYTES + 7) & ~7;
      }
    } finally {
      // On x86-64 a plain store is a release: the kernel sees the space free after the reads.
      this.#consumerView.setBigUint64(0, BigInt(consumed), true);
    }
    return records;
  }

  /** Bytes written and not yet read. */
  pending(): number {
    const consumed = this.#consumerView.getBigUint64(0, true);
    return Number(this.#producerView.getBigUint64(0, true) - consumed);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#producer.free();
    this.#consumer.free();
    this.map.close();
  }
}
