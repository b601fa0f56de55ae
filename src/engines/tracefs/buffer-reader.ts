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
import { PageCursor } from './page-decoder.js';

/**
 * Receives one record of CPU `cpu`'s buffer: its bytes are `bytes[start, end)`, read through
 * `view` (which spans `bytes` from offset 0). Both are a page the reader reuses once its
 * records are delivered: copy what must outlive the call.
 */
export type CpuRecordVisitor = (
  cpu: number,
  view: DataView,
  bytes: Uint8Array,
  start: number,
  end: number,
  timestampNs: bigint,
) => void;

/** A page buffer, and how many bytes the last read put in it. */
interface Page {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  length: number;
}

/** One CPU's pages read and not yet delivered, in its buffer's order (time order). */
interface CpuQueue {
  readonly cpu: number;
  readonly fd: number;
  /** pages[0] is the one the cursor is on, once opened. */
  readonly pages: Page[];
  readonly cursor: PageCursor;
  opened: boolean;
  /** The cursor stands on a record not yet delivered. */
  ready: boolean;
}

/**
 * Reads the ring buffers of one or more instances: every CPU's `trace_pipe_raw`, opened
 * without blocking, page by page, decoding the binary pages (never the text of trace_pipe). A
 * read takes whatever the kernel has, full pages or not, and stops at EAGAIN: call drain() on
 * a timer, and once more after the probes are disabled, with `all`.
 *
 * Records are delivered in time order across CPUs and instances (each CPU's buffer is in
 * order; drain() merges them; the instances must share a trace_clock), so that a thread that
 * moves between CPUs is seen in the order it ran.
 */
export class BufferReader {
  readonly #queues: CpuQueue[] = [];
  readonly #header: HeaderPage;
  readonly #pageBytes: number;
  readonly #free: Page[] = [];
  #lost = 0;

  constructor(tracefs: string, instanceDirs: string | readonly string[]) {
    const dirs = typeof instanceDirs === 'string' ? [instanceDirs] : instanceDirs;
    this.#header = parseHeaderPage(readFileSync(join(tracefs, 'events/header_page'), 'utf8'));
    const minimum = this.#header.data.offset + this.#header.data.sizeBytes;
    let pageBytes = minimum;
    for (const dir of dirs) {
      const subbuf = join(dir, 'buffer_subbuf_size_kb');
      if (existsSync(subbuf)) {
        pageBytes = Math.max(pageBytes, Number(readFileSync(subbuf, 'utf8').trim()) * 1024);
      }
    }
    this.#pageBytes = pageBytes;
    let opening = '';
    try {
      for (const dir of dirs) {
        opening = dir;
        const cpus = readdirSync(join(dir, 'per_cpu'))
          .map((name) => /^cpu(\d+)$/.exec(name)?.[1])
          .filter((n): n is string => n !== undefined)
          .map(Number)
          .sort((a, b) => a - b);
        for (const cpu of cpus) {
          const path = join(dir, 'per_cpu', `cpu${cpu}`, 'trace_pipe_raw');
          const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
          this.#queues.push({
            cpu,
            fd,
            pages: [],
            cursor: new PageCursor(this.#header),
            opened: false,
            ready: false,
          });
        }
      }
    } catch (cause) {
      this.close();
      throw new ProbeError(
        'ERR_TRACEFS_WRITE',
        `Cannot open the ring buffer of ${opening}: ${(cause as Error).message}`,
        { cause },
      );
    }
  }

  /** Events the kernel reported dropped, from the counts pages carry. */
  get lost(): number {
    return this.#lost;
  }

  /**
   * Read everything the kernel has now and hand records to `visit` in time order: all of
   * them with `all` (after the probes are disabled), else those up to the time the read
   * began. A CPU whose reader was behind could still hold records older than the newest
   * seen elsewhere; those after that time wait for the next drain(), so that what is
   * delivered is never followed by an older record. Returns how many were delivered.
   */
  drain(visit: CpuRecordVisitor, all = false): number {
    const upTo = all ? undefined : process.hrtime.bigint();
    for (const queue of this.#queues) {
      this.#read(queue);
      if (!queue.ready) this.#advance(queue);
    }
    return this.#merge(visit, upTo);
  }

  /** Read the CPU's pages until the kernel has no more. */
  #read(queue: CpuQueue): void {
    for (;;) {
      const page = this.#free.pop() ?? this.#newPage();
      let got: number;
      try {
        got = readSync(queue.fd, page.bytes, 0, page.bytes.length, null);
      } catch (err) {
        this.#free.push(page);
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EAGAIN' || code === 'EWOULDBLOCK') return;
        throw new ProbeError(
          'ERR_TRACEFS_WRITE',
          `Cannot read the ring buffer of CPU ${queue.cpu}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      if (got <= 0) {
        this.#free.push(page);
        return;
      }
      page.length = got;
      queue.pages.push(page);
    }
  }

  /** Put the queue's cursor on its next record, opening pages as needed. */
  #advance(queue: CpuQueue): void {
    const { cursor, pages } = queue;
    for (;;) {
      if (queue.opened) {
        if (cursor.next()) {
          queue.ready = true;
          return;
        }
        this.#free.push(pages.shift()!);
        queue.opened = false;
      }
      const page = pages[0];
      if (page === undefined) {
        queue.ready = false;
        return;
      }
      const bytes =
        page.length === page.bytes.length ? page.bytes : page.bytes.subarray(0, page.length);
      const summary = cursor.open(bytes, page.view);
      queue.opened = true;
      // A page that lost events without room to say how many is covered by the per-CPU
      // overrun count, which stats() takes when it is larger.
      if (summary.lostCount !== undefined) this.#lost += summary.lostCount;
    }
  }

  #newPage(): Page {
    const bytes = new Uint8Array(this.#pageBytes);
    return { bytes, view: new DataView(bytes.buffer), length: 0 };
  }

  #merge(visit: CpuRecordVisitor, upTo: bigint | undefined): number {
    const queues = this.#queues.filter((q) => q.ready);
    let count = 0;
    for (;;) {
      // The queue whose next record is oldest (few CPUs have records at once: a scan will do).
      let best: CpuQueue | undefined;
      let bestStamp = 0n;
      for (const queue of queues) {
        if (!queue.ready) continue;
        const stamp = queue.cursor.timestampNs;
        if (best === undefined || stamp < bestStamp) {
          best = queue;
          bestStamp = stamp;
        }
      }
      if (best === undefined || (upTo !== undefined && bestStamp > upTo)) break;
      const page = best.pages[0]!;
      const { start, end } = best.cursor;
      count++;
      visit(best.cpu, page.view, page.bytes, start, end, bestStamp);
      this.#advance(best);
    }
    return count;
  }

  close(): void {
    for (const queue of this.#queues.splice(0)) {
      try {
        closeSync(queue.fd);
      } catch {
        // Already closed: nothing to release.
      }
    }
  }
}
