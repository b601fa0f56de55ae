import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads';
import {
  type BackgroundDemangling,
  cxxDemanglerName,
  type DemangledNames,
} from '../symbols/index.js';

/**
 * How long settling waits for the other thread at most: it takes 0.2-0.3 s for 50,000 names
 * here, start-up included; one that does not answer in this time is not waited for again.
 */
const WAIT_LIMIT_MS = 5000;

/** The names posted back by demangle-worker.ts. */
type Answer =
  | {
      readonly ok: true;
      readonly demangler: string;
      readonly bytes: Uint8Array;
      readonly start: Int32Array;
      readonly end: Int32Array;
    }
  | { readonly ok: false; readonly error: string };

/**
 * The host's background demangler (see useBackgroundDemangler()): demangleNames() on a worker
 * thread with the same demanglers, the names copied to it (a few MB for 50,000), the answer
 * taken without the event loop (receiveMessageOnPort), so planning, which runs without
 * yielding, can take it when it needs it. An answer from another demangler than this
 * thread's is not taken (the names would differ from those demangled here).
 */
export function backgroundDemangler(
  strings: Uint8Array,
  starts: Uint32Array,
  ends: Uint32Array,
): BackgroundDemangling | undefined {
  const { url, entry } = workerEntry();
  if (!existsSync(fileURLToPath(url))) return undefined;
  const count = starts.length;
  let total = 0;
  for (let i = 0; i < count; i++) total += ends[i]! - starts[i]! + 1;
  const names = new Uint8Array(total);
  const ownStarts = new Uint32Array(count);
  const ownEnds = new Uint32Array(count);
  let at = 0;
  for (let i = 0; i < count; i++) {
    ownStarts[i] = at;
    names.set(strings.subarray(starts[i]!, ends[i]!), at);
    at += ends[i]! - starts[i]!;
    ownEnds[i] = at;
    names[at++] = 0;
  }
  const control = new Int32Array(new SharedArrayBuffer(4));
  const { port1, port2 } = new MessageChannel();
  const job = { names, starts: ownStarts, ends: ownEnds, control, port: port2 };
  const worker = new Worker(url, {
    workerData: entry === undefined ? job : { ...job, entry },
    transferList: [port2, names.buffer, ownStarts.buffer, ownEnds.buffer],
  });
  // It ends by itself once it has answered; its end or failure holds nothing up.
  worker.unref();
  worker.on('error', () => {});
  let answer: DemangledNames | null | undefined;
  const take = (): DemangledNames | undefined => {
    if (answer === undefined) {
      const message = receiveMessageOnPort(port1)?.message as Answer | undefined;
      answer =
        message?.ok === true && message.demangler === cxxDemanglerName()
          ? {
              bytes: Buffer.from(
                message.bytes.buffer,
                message.bytes.byteOffset,
                message.bytes.length,
              ),
              start: message.start,
              end: message.end,
            }
          : null;
      port1.close();
    }
    return answer ?? undefined;
  };
  return {
    poll: () => (answer !== undefined || Atomics.load(control, 0) === 1 ? take() : undefined),
    wait: () => {
      if (answer === undefined && Atomics.wait(control, 0, 0, WAIT_LIMIT_MS) === 'timed-out') {
        answer = null;
        port1.close();
        void worker.terminate();
      }
      return take();
    },
  };
}

/**
 * The worker's module: beside the command's bundle (dist/cli.mjs), in dist/ for the
 * library, or its TypeScript source run through tsx (tests).
 */
function workerEntry(): { url: URL; entry: string | undefined } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    return {
      url: new URL('../../scripts/tsx-worker.mjs', here),
      entry: new URL('./demangle-worker.ts', here).href,
    };
  }
  return {
    url: new URL(
      here.endsWith('/cli.mjs') ? './demangle-worker.mjs' : './demangle-worker.js',
      here,
    ),
    entry: undefined,
  };
}
