import {
  closeSync,
  constants,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
} from 'node:fs';
import { join } from 'node:path';
import { ProbeError } from '../../errors/index.js';
import { type HeaderPage, parseHeaderPage } from './event-format.js';
import { walkPage } from './page-decoder.js';

/**
 * Receives one record of CPU `cpu`'s buffer: its bytes are `bytes[start, end)`, read through
 * `view` (which spans `bytes` from offset 0). Both are the reader's reused page: copy what
 * must outlive the call.
 */
export type CpuRecordVisitor = (
  cpu: number,
  view: DataView,
  bytes: Uint8Array,
  start: number,
  end: number,
  timestampNs: bigint,
) => void;

/**
 * Reads an instance's ring buffer: every CPU's `trace_pipe_raw`, opened without blocking, page
 * by page, decoding the binary pages (never the text of trace_pipe). A read takes whatever the
 * kernel has, full pages or not, and stops at EAGAIN: call drain() on a timer, and once more
 * after the probes are disabled.
 */
export class BufferReader {
  readonly #fds: { cpu: number; fd: number }[] = [];
  readonly #header: HeaderPage;
  readonly #page: Uint8Array;
  readonly #view: DataView;
  #lost = 0;

  constructor(tracefs: string, instanceDir: string) {
    this.#header = parseHeaderPage(readFileSync(join(tracefs, 'events/header_page'), 'utf8'));
    const subbuf = join(instanceDir, 'buffer_subbuf_size_kb');
    const pageBytes = existsSync(subbuf)
      ? Number(readFileSync(subbuf, 'utf8').trim()) * 1024
      : this.#header.data.offset + this.#header.data.sizeBytes;
    this.#page = new Uint8Array(
      Math.max(pageBytes, this.#header.data.offset + this.#header.data.sizeBytes),
    );
    this.#view = new DataView(this.#page.buffer);
    const cpus = readdirSync(join(instanceDir, 'per_cpu'))
      .map((name) => /^cpu(\d+)$/.exec(name)?.[1])
      .filter((n): n is string => n !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    try {
      for (const cpu of cpus) {
        const path = join(instanceDir, 'per_cpu', `cpu${cpu}`, 'trace_pipe_raw');
        this.#fds.push({ cpu, fd: openSync(path, constants.O_RDONLY | constants.O_NONBLOCK) });
      }
    } catch (cause) {
      this.close();
      throw new ProbeError(
        'ERR_TRACEFS_WRITE',
        `Cannot open the ring buffer of ${instanceDir}: ${(cause as Error).message}`,
        { cause },
      );
    }
  }

  /** Events the kernel reported dropped, from the counts pages carry. */
  get lost(): number {
    return this.#lost;
  }

  /**
   * Read everything the kernel has now and hand each record to `visit`, in page order per
   * CPU; returns how many records there were.
   */
  drain(visit: CpuRecordVisitor): number {
    let count = 0;
    const bytes = this.#page;
    const view = this.#view;
    const header = this.#header;
    for (const { cpu, fd } of this.#fds) {
      const onRecord = (start: number, end: number, timestampNs: bigint) => {
        count++;
        visit(cpu, view, bytes, start, end, timestampNs);
      };
      for (;;) {
        let got: number;
        try {
          got = readSync(fd, bytes, 0, bytes.length, null);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'EAGAIN' || code === 'EWOULDBLOCK') break;
          throw new ProbeError(
            'ERR_TRACEFS_WRITE',
            `Cannot read the ring buffer of CPU ${cpu}: ${(err as Error).message}`,
            { cause: err },
          );
        }
        if (got <= 0) break;
        const page = walkPage(
          got === bytes.length ? bytes : bytes.subarray(0, got),
          view,
          header,
          onRecord,
        );
        // A page that lost events without room to say how many is covered by the per-CPU
        // overrun count, which stats() takes when it is larger.
        if (page.lostCount !== undefined) this.#lost += page.lostCount;
      }
    }
    return count;
  }

  close(): void {
    for (const { fd } of this.#fds.splice(0)) {
      try {
        closeSync(fd);
      } catch {
        // Already closed: nothing to release.
      }
    }
  }
}
