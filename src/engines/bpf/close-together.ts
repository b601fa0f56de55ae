import { Worker } from 'node:worker_threads';
import { closeFd } from './kernel.js';

/** Who closes each descriptor: no one yet, a thread of its own, this thread; then done. */
const OPEN = 0;
const CLAIMED = 1;
const KEPT = 2;
const CLOSED = 3;

/** How long the threads get to start before this thread closes what they have not claimed. */
const START_MS = 3000;

/**
 * A closing thread: it claims its descriptor (unless this thread took it back first, so a
 * number reused meanwhile is never closed) and closes it. CommonJS, evaluated: nothing to
 * bundle or find on disk.
 */
const CLOSER = `
const { workerData } = require('node:worker_threads');
const { closeSync } = require('node:fs');
const slots = new Int32Array(workerData.slots);
if (Atomics.compareExchange(slots, workerData.index, ${OPEN}, ${CLAIMED}) === ${OPEN}) {
  Atomics.notify(slots, workerData.index);
  try { closeSync(workerData.fd); } catch {}
  Atomics.store(slots, workerData.index, ${CLOSED});
  Atomics.notify(slots, workerData.index);
}
`;

/**
 * Close uretprobe links at the same time, each on a thread of its own, and return once all
 * are closed. Closing one waits until no return trampoline holds on to uprobes
 * (uprobe_unregister_sync: synchronize_srcu on uretprobes_srcu), and a call that has not
 * returned holds on until a per-thread timer lets go of it, a timer the kernel puts off at
 * every trampoline it sets. So while one link's removal waits, another link's uretprobes
 * that keep firing (a thread in a function that never returns, calling functions of two
 * files) make it wait for ever. Closed together, each first takes its uprobes away, then
 * all wait: no trampoline is set meanwhile, the timer runs out, and all end.
 *
 * The first is closed here; a thread that cannot start within START_MS has its link closed
 * here too, after the others (as one by one: it may then wait as before).
 */
export function closeTogether(fds: readonly number[]): void {
  if (fds.length < 2) {
    for (const fd of fds) closeFd(fd);
    return;
  }
  const slots = new Int32Array(new SharedArrayBuffer(4 * fds.length));
  slots[0] = KEPT;
  for (let index = 1; index < fds.length; index++) {
    try {
      const worker = new Worker(CLOSER, {
        eval: true,
        workerData: { fd: fds[index], index, slots: slots.buffer },
        stdout: true,
        stderr: true,
      });
      worker.on('error', () => {});
      worker.unref();
    } catch {
      // No thread: closed here below.
    }
  }
  const deadline = performance.now() + START_MS;
  for (let index = 1; index < fds.length; index++) {
    const left = deadline - performance.now();
    if (left > 0) Atomics.wait(slots, index, OPEN, left);
    Atomics.compareExchange(slots, index, OPEN, KEPT);
  }
  closeFd(fds[0]!);
  for (let index = 1; index < fds.length; index++) {
    if (slots[index] === KEPT) closeFd(fds[index]!);
    else while (Atomics.load(slots, index) !== CLOSED) Atomics.wait(slots, index, CLAIMED);
  }
}
