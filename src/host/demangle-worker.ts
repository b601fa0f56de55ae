/**
 * The thread that demangles names for backgroundDemangler() (see background-demangler.ts):
 * demangleNames() of the names it is given, with this host's demanglers (registered by
 * demangler.js), posted back with which C++ demangler named them; then it ends. Whatever
 * fails (loading included) is posted too: the thread waiting for it is never left waiting.
 */
import { type MessagePort, workerData } from 'node:worker_threads';

interface DemangleJob {
  readonly names: Uint8Array;
  readonly starts: Uint32Array;
  readonly ends: Uint32Array;
  /** [0]: 0 while demangling, 1 once the answer (or a failure) is posted. */
  readonly control: Int32Array;
  readonly port: MessagePort;
}

const job = workerData as DemangleJob;
try {
  const { cxxDemanglerName, demangleNames } = await import('../symbols/index.js');
  await import('./demangler.js');
  const done = demangleNames(job.names, job.starts, job.ends);
  // Copied to the other thread: a few MB, a millisecond.
  job.port.postMessage({
    ok: true,
    demangler: cxxDemanglerName(),
    bytes: done.bytes,
    start: done.start,
    end: done.end,
  });
} catch (err) {
  job.port.postMessage({ ok: false, error: err instanceof Error ? err.message : String(err) });
} finally {
  Atomics.store(job.control, 0, 1);
  Atomics.notify(job.control, 0);
  job.port.close();
}
