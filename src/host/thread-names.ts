import { closeSync, openSync, readSync } from 'node:fs';

/** Descriptors kept open at most; past that they are closed and opened again as needed. */
const MAX_OPEN = 256;

/**
 * The name (comm) threads have now, read from /proc each time it is asked for, through a
 * descriptor kept per thread (a read of it costs about a microsecond; opening the file again
 * each time about five times that): a thread may rename itself (prctl PR_SET_NAME) or exec at
 * any time, and a tracer that stops it at a hit names the hit by what it is called then.
 * A thread that is gone keeps the last name read.
 */
export class ThreadNames {
  readonly #fds = new Map<number, number>();
  readonly #last = new Map<number, string>();
  /** With `cached`: the threads whose name was read since the last refresh(). */
  readonly #fresh = new Set<number>();
  readonly #buffer = Buffer.alloc(64);
  readonly #cached: boolean;
  /** With `cached`: the thread asked for last and its name (hits come in runs of a thread). */
  #lastTid = -1;
  #lastName = '';

  /**
   * `cached`: a name read since the last refresh() is given again, not read (for hits read
   * after the fact, as inline hooks' are, where the name now is not the name at the hit
   * either, and a read per hit would cost more than the hit); else it is read each time.
   */
  constructor(options: { readonly cached?: boolean } = {}) {
    this.#cached = options.cached === true;
  }

  /** With `cached`: names are read again when next asked for. */
  refresh(): void {
    this.#fresh.clear();
    this.#lastTid = -1;
  }

  name(tid: number): string {
    if (this.#cached) {
      if (tid === this.#lastTid) return this.#lastName;
      const name = this.#fresh.has(tid) ? (this.#last.get(tid) ?? '') : this.#read(tid);
      this.#fresh.add(tid);
      this.#lastTid = tid;
      this.#lastName = name;
      return name;
    }
    return this.#read(tid);
  }

  #read(tid: number): string {
    for (let attempt = 0; attempt < 2; attempt++) {
      let fd = this.#fds.get(tid);
      if (fd === undefined) {
        if (this.#fds.size >= MAX_OPEN) this.close();
        try {
          fd = openSync(`/proc/${tid}/comm`, 'r');
        } catch {
          break;
        }
        this.#fds.set(tid, fd);
      }
      try {
        const length = readSync(fd, this.#buffer, 0, this.#buffer.length, 0);
        const name = this.#buffer.toString('utf8', 0, length).replace(/\n$/, '');
        this.#last.set(tid, name);
        return name;
      } catch {
        // The thread has gone (ESRCH), and its tid may be another thread's now: open again.
        this.#forget(tid);
      }
    }
    return this.#last.get(tid) ?? '';
  }

  /** Close every descriptor (names read so far are kept for threads that have gone). */
  close(): void {
    for (const tid of [...this.#fds.keys()]) this.#forget(tid);
    if (this.#last.size >= MAX_OPEN * 16) {
      this.#last.clear();
      this.#fresh.clear();
      this.#lastTid = -1;
    }
  }

  #forget(tid: number): void {
    const fd = this.#fds.get(tid);
    this.#fds.delete(tid);
    if (fd === undefined) return;
    try {
      closeSync(fd);
    } catch {
      // Already closed: nothing to release.
    }
  }
}
