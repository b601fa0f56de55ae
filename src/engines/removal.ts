import { Worker } from 'node:worker_threads';
import { closeFd } from './bpf/kernel.js';

/**
 * Closing uprobe links without waiting on other links' return trampolines. Removing a link
 * waits until no return trampoline holds on to uprobes (uprobe_unregister_sync:
 * synchronize_srcu on uretprobes_srcu, every uprobe of the system), and a call that has not
 * returned holds on until a per-thread timer lets go of it, a timer the kernel puts off at
 * every trampoline it sets on that thread. So a thread in a function that never returns,
 * entered under a return probe, that goes on calling functions with return probes, holds up
 * the removal of any link for as long as those other return probes stay.
 */

/** Who closes a job's descriptors: no one yet, its thread, this thread; then done. */
const OPEN = 0;
const CLAIMED = 1;
const KEPT = 2;
const CLOSED = 3;

/** How long the threads get to take their jobs before this thread closes what they have not. */
const CLAIM_MS = 3000;

/**
 * A closing thread: for each job posted, or the one in its workerData, it claims the job
 * (unless this thread took it back first, so a number reused meanwhile is never closed) and
 * closes its descriptors in order. CommonJS, evaluated: nothing to bundle or find on disk.
 */
const CLOSER = `
const { parentPort, workerData } = require('node:worker_threads');
const { closeSync } = require('node:fs');
function run({ fds, slot }) {
  const state = new Int32Array(slot);
  if (Atomics.compareExchange(state, 0, ${OPEN}, ${CLAIMED}) !== ${OPEN}) return;
  Atomics.notify(state, 0);
  for (const fd of fds) {
    try { closeSync(fd); } catch {}
  }
  Atomics.store(state, 0, ${CLOSED});
  Atomics.notify(state, 0);
}
if (workerData !== null) run(workerData);
else parentPort.on('message', run);
`;

interface CloseJob {
  readonly fds: readonly number[];
  readonly state: Int32Array;
}

function newJob(fds: readonly number[]): CloseJob {
  return { fds, state: new Int32Array(new SharedArrayBuffer(4)) };
}

function closerThread(job: CloseJob | undefined): Worker {
  const worker = new Worker(CLOSER, {
    eval: true,
    workerData: job === undefined ? null : { fds: job.fds, slot: job.state.buffer },
    stdout: true,
    stderr: true,
  });
  worker.on('error', () => {});
  worker.unref();
  return worker;
}

/** Wait until each job is taken by its thread, or take it back here after CLAIM_MS. */
function claimOrKeep(jobs: readonly CloseJob[]): void {
  const deadline = performance.now() + CLAIM_MS;
  for (const { state } of jobs) {
    const left = deadline - performance.now();
    if (left > 0) Atomics.wait(state, 0, OPEN, left);
    Atomics.compareExchange(state, 0, OPEN, KEPT);
  }
}

/** Return once every job's descriptors are closed: those taken back, here, in order. */
function closeAll(jobs: readonly CloseJob[]): void {
  for (const { fds, state } of jobs) {
    if (Atomics.load(state, 0) === KEPT) {
      for (const fd of fds) closeFd(fd);
      Atomics.store(state, 0, CLOSED);
    }
    while (Atomics.load(state, 0) !== CLOSED) Atomics.wait(state, 0, CLAIMED);
  }
}

/**
 * Close uretprobe links at the same time, each on a thread of its own, and return once all
 * are closed. One by one, the removal of the first would wait on the trampolines the others
 * keep setting (see above); closed together, each first takes its uprobes away, then all
 * wait: no trampoline is set meanwhile, the timer runs out, and all end. The first is closed
 * here; a link whose thread does not start within CLAIM_MS is closed here too, after the
 * others (as one by one: it may then wait as before).
 */
export function closeTogether(fds: readonly number[]): void {
  if (fds.length < 2) {
    for (const fd of fds) closeFd(fd);
    return;
  }
  const jobs = fds.slice(1).map((fd) => {
    const job = newJob([fd]);
    try {
      closerThread(job);
    } catch {
      // No thread: closed here below.
    }
    return job;
  });
  claimOrKeep(jobs);
  closeFd(fds[0]!);
  closeAll(jobs);
}

/**
 * Closing threads a ClosingLater starts at most. Each closes its jobs one after the other, and
 * each close waits out grace periods (20-80 ms here); closes on several threads wait them out
 * together. One thread fell behind a server forking 50 short-lived children a second (250
 * children's links, 4-7 s still to close at the end of a 5 s run).
 */
const CLOSERS = 8;

/**
 * Links closed on threads of their own while this thread goes on: those of a process that
 * ended, whose removal would otherwise stop the run for as long as another process holds it
 * up (see above). A job's links are closed in the order given, on one thread; a job given
 * while every thread is busy goes to a new one (up to CLOSERS). wait() returns once all are
 * closed.
 */
export class ClosingLater {
  readonly #threads: { readonly worker: Worker; last: CloseJob | undefined }[] = [];
  readonly #jobs: CloseJob[] = [];
  #next = 0;

  close(fds: readonly number[]): void {
    if (fds.length === 0) return;
    const job = newJob(fds);
    // Jobs closed already are let go (a long run may close thousands).
    for (let i = this.#jobs.length - 1; i >= 0; i--) {
      if (Atomics.load(this.#jobs[i]!.state, 0) === CLOSED) this.#jobs.splice(i, 1);
    }
    this.#jobs.push(job);
    try {
      const thread = this.#thread();
      thread.worker.postMessage({ fds, slot: job.state.buffer });
      thread.last = job;
    } catch {
      // No thread: closed by wait().
    }
  }

  /** An idle thread, else a new one, else the next busy one in turn. */
  #thread(): { readonly worker: Worker; last: CloseJob | undefined } {
    const idle = this.#threads.find(
      (t) => t.last === undefined || Atomics.load(t.last.state, 0) === CLOSED,
    );
    if (idle !== undefined) return idle;
    if (this.#threads.length < CLOSERS) {
      const thread = { worker: closerThread(undefined), last: undefined };
      this.#threads.push(thread);
      return thread;
    }
    return this.#threads[this.#next++ % this.#threads.length]!;
  }

  /** How many closing threads it has started (and not ended). */
  get threads(): number {
    return this.#threads.length;
  }

  /**
   * Return once every link given to close() is closed (those the threads have not taken
   * within CLAIM_MS closed here), and end the threads.
   */
  wait(): void {
    const jobs = this.#jobs.splice(0);
    claimOrKeep(jobs);
    closeAll(jobs);
    for (const { worker } of this.#threads.splice(0)) void worker.terminate();
  }
}

/** What to say, and where, when the removal of probes stops going on (see watchRemoval()). */
export interface RemovalNotice {
  /** A file descriptor written to from another thread (the main one waits in the kernel). */
  readonly fd: number;
  /** How long a step of the removal may take before the text is written. */
  readonly afterMs: number;
  readonly text: string;
}

let removalNotice: RemovalNotice | undefined;

/** Say `notice` when a removal of probes waits (undefined: say nothing, the default). */
export function setRemovalNotice(notice: RemovalNotice | undefined): void {
  removalNotice = notice;
}

/**
 * The watch: while the removal's step count moves, it waits; once it has not moved for
 * afterMs (and the removal has not ended), it writes the text, once.
 */
const WATCHER = `
const { workerData } = require('node:worker_threads');
const { writeSync } = require('node:fs');
const state = new Int32Array(workerData.state);
let seen = Atomics.load(state, 0);
for (;;) {
  const woken = Atomics.wait(state, 0, seen, workerData.afterMs);
  if (Atomics.load(state, 1) === 1) break;
  if (woken === 'timed-out') {
    try { writeSync(workerData.fd, workerData.text); } catch {}
    break;
  }
  seen = Atomics.load(state, 0);
}
`;

/**
 * Run `remove` (which calls `step` after each part it removes) with a thread that says the
 * notice set by setRemovalNotice() when a part takes longer than its afterMs: a removal that
 * waits on a return trampoline (see above) would otherwise wait in silence, and neither
 * Ctrl-C nor SIGKILL ends it. Only when `mayWait` (return probes are among what is removed).
 */
export function watchRemoval<T>(mayWait: boolean, remove: (step: () => void) => T): T {
  const notice = removalNotice;
  if (!mayWait || notice === undefined) return remove(() => {});
  const state = new Int32Array(new SharedArrayBuffer(8));
  try {
    const watcher = new Worker(WATCHER, {
      eval: true,
      workerData: {
        state: state.buffer,
        fd: notice.fd,
        afterMs: notice.afterMs,
        text: notice.text,
      },
      stdout: true,
      stderr: true,
    });
    watcher.on('error', () => {});
    watcher.unref();
  } catch {
    // No watch: removed in silence, as before.
  }
  const step = () => {
    Atomics.add(state, 0, 1);
    Atomics.notify(state, 0);
  };
  try {
    return remove(step);
  } finally {
    Atomics.store(state, 1, 1);
    step();
  }
}
