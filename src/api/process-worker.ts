/**
 * The thread an `AsyncProcessTracer` runs its `ProcessTracer` on. ptrace requests are only
 * taken from the thread that attached, and a tracer blocks in waitpid between events: here
 * that blocks this worker, not the caller's event loop. Hits whose handler or filter lives
 * in the caller's thread are sent there while the probed thread waits; this thread meanwhile
 * serves what the handler asks of it (memory, registrations) until the handler is done.
 */
import {
  type MessagePort,
  parentPort,
  receiveMessageOnPort,
  workerData,
} from 'node:worker_threads';
import type { HitContext, ProbesOptions } from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import { loadNative } from '../native/index.js';
import type { ProbeSite } from '../plan/index.js';
import { ProcessTracer, type ProcessTracerOptions } from './process-tracer.js';
import {
  CONTROL,
  type HitMessage,
  type Reply,
  type Request,
  serializeError,
  WAKE_SIGNAL,
  type WorkerMessage,
} from './process-worker-protocol.js';

export type WorkerStart =
  | {
      readonly kind: 'spawn';
      readonly argv: readonly string[];
      readonly options: ProcessTracerOptions;
    }
  | { readonly kind: 'attach'; readonly pid: number; readonly options: ProbesOptions };

export interface WorkerData {
  readonly control: Int32Array;
  readonly rpc: MessagePort;
  readonly start: WorkerStart;
}

/** Where the worker's messages to its parent go. */
interface Outbox {
  postMessage(message: WorkerMessage): void;
}

class Server {
  readonly #tracer: ProcessTracer;
  readonly #control: Int32Array;
  readonly #rpc: MessagePort;
  readonly #out: Outbox;
  /** Events whose thread waits: handled in the caller's thread now, or the last one polled. */
  readonly #hits = new Map<number, HitContext>();
  #nextKey = 1;
  /** The seq of the poll under way. */
  #poll: number | undefined;
  /** An event the tracer gave after its poll was interrupted: the next poll's answer. */
  #ready: HitContext | undefined;
  /** Requests that cannot be served while a handler runs: after it. */
  readonly #later: Request[] = [];
  #closed = false;

  constructor(tracer: ProcessTracer, data: WorkerData, out: Outbox) {
    this.#tracer = tracer;
    this.#control = data.control;
    this.#rpc = data.rpc;
    this.#out = out;
  }

  run(): void {
    const control = this.#control;
    while (!this.#closed) {
      const seen = Atomics.load(control, CONTROL.requests);
      for (let request = this.#take(); request !== undefined; request = this.#take()) {
        this.#later.push(request);
      }
      while (this.#later.length > 0 && !this.#closed) this.#serve(this.#later.shift()!);
      if (this.#closed) break;
      if (this.#poll === undefined || this.#tracer.ended) {
        if (this.#poll !== undefined) this.#answerPoll(null);
        Atomics.wait(control, CONTROL.requests, seen);
        continue;
      }
      this.#pollOnce(seen);
    }
  }

  /** Wait for the next event in waitpid; a request comes in with WAKE_SIGNAL, which ends it. */
  #pollOnce(seen: number): void {
    const control = this.#control;
    if (this.#ready !== undefined) {
      const ready = this.#ready;
      this.#ready = undefined;
      this.#answerPoll(ready);
      return;
    }
    Atomics.store(control, CONTROL.inWait, 1);
    // A request made before inWait was set was not signalled: serve it first.
    if (Atomics.load(control, CONTROL.requests) !== seen) {
      Atomics.store(control, CONTROL.inWait, 0);
      return;
    }
    let hit: HitContext | null;
    try {
      hit = this.#tracer.poll();
    } finally {
      Atomics.store(control, CONTROL.inWait, 0);
    }
    if (hit === null) {
      if (this.#tracer.ended) this.#answerPoll(null);
      return;
    }
    if (this.#poll === undefined) this.#ready = hit;
    else this.#answerPoll(hit);
  }

  #answerPoll(hit: HitContext | null): void {
    const seq = this.#poll!;
    this.#poll = undefined;
    if (hit === null) {
      this.#reply(seq, null);
      return;
    }
    const key = this.#nextKey++;
    this.#hits.set(key, hit);
    this.#reply(seq, message(key, hit, undefined));
  }

  /** The next request, if one has come; the caller learns it was taken. */
  #take(): Request | undefined {
    const got = receiveMessageOnPort(this.#rpc);
    if (got === undefined) return undefined;
    const request = got.message as Request;
    Atomics.store(this.#control, CONTROL.taken, request.seq);
    Atomics.notify(this.#control, CONTROL.taken);
    return request;
  }

  #reply(seq: number, value: unknown, error?: unknown): void {
    const tracer = this.#tracer;
    const reply: Reply = {
      seq,
      state: { ended: tracer.ended, exitCode: tracer.exitCode },
      value,
      error: error === undefined ? undefined : serializeError(error),
    };
    this.#rpc.postMessage(reply);
    Atomics.add(this.#control, CONTROL.replies, 1);
    Atomics.notify(this.#control, CONTROL.replies);
  }

  /** Serve a request between polls, where anything may be done. */
  #serve(request: Request): void {
    if (this.#serveNow(request)) return;
    try {
      switch (request.op) {
        case 'poll': {
          const polled = request.key === undefined ? undefined : this.#hits.get(request.key);
          if (polled !== undefined && request.regs !== undefined)
            polled.regs.bytes.set(request.regs);
          if (request.key !== undefined) this.#hits.delete(request.key);
          this.#poll = request.seq;
          return;
        }
        case 'detach':
        case 'kill':
          if (request.op === 'detach') this.#tracer.detach();
          else this.#tracer.kill();
          this.#closed = true;
          this.#reply(request.seq, null);
          return;
        default:
          this.#reply(request.seq, null);
      }
    } catch (err) {
      this.#reply(request.seq, undefined, err);
    }
  }

  /** Serve a request that can be served at once, even while a handler runs; false if not. */
  #serveNow(request: Request): boolean {
    try {
      switch (request.op) {
        case 'read':
          this.#reply(request.seq, this.#hit(request.key).read(request.vaddr, request.length));
          return true;
        case 'readCString':
          this.#reply(
            request.seq,
            this.#hit(request.key).readCString(request.vaddr, request.maxBytes),
          );
          return true;
        case 'write':
          this.#hit(request.key).write(request.vaddr, request.bytes);
          this.#reply(request.seq, null);
          return true;
        case 'unregister':
          this.#tracer.unregister(request.id);
          this.#reply(request.seq, null);
          return true;
        case 'interrupt':
          if (this.#poll !== undefined) this.#answerPoll(null);
          this.#tracer.interrupt();
          this.#reply(request.seq, null);
          return true;
        case 'register':
          this.#reply(request.seq, this.#tracer.registerSync(this.#registration(request)));
          return true;
        case 'done':
          // A hit whose handler ran after its thread went on (it was interrupted): nothing to do.
          return true;
        default:
          return false;
      }
    } catch (err) {
      this.#reply(request.seq, undefined, err);
      return true;
    }
  }

  #hit(key: number): HitContext {
    const hit = this.#hits.get(key);
    if (hit === undefined) {
      throw new ProbeError(
        'ERR_USAGE',
        `Cannot reach the memory of process ${this.#tracer.pid} through this event: its thread has gone on (use a hit only in its handler, or until the next poll)`,
      );
    }
    return hit;
  }

  /** The registration as the tracer takes it: what runs in the caller's thread is asked for. */
  #registration(request: Extract<Request, { op: 'register' }>) {
    // The request's own fields as they are; the two it says are asked for become functions.
    const { handler, filter, ...fields } = request.registration;
    return {
      ...fields,
      handler: handler
        ? (hit: HitContext, site: ProbeSite | undefined) => {
            this.#ask(hit, site);
          }
        : undefined,
      filter: !handler && filter ? (hit: HitContext) => this.#ask(hit, undefined) : undefined,
    };
  }

  /**
   * Send a hit to the caller's thread, and serve its requests until it is done with it: the
   * probed thread waits meanwhile. Returns the filter's verdict.
   */
  #ask(hit: HitContext, site: ProbeSite | undefined): boolean {
    const control = this.#control;
    const key = this.#nextKey++;
    this.#hits.set(key, hit);
    this.#out.postMessage({ type: 'hit', hit: message(key, hit, site) });
    try {
      for (;;) {
        const seen = Atomics.load(control, CONTROL.requests);
        for (let request = this.#take(); request !== undefined; request = this.#take()) {
          if (request.op === 'done' && request.key === key) {
            hit.regs.bytes.set(request.regs);
            if (request.retval !== undefined) hit.retval = request.retval;
            return request.pass;
          }
          if (this.#serveNow(request)) continue;
          // Served once the tracer's poll returns, which it does after this event.
          this.#later.push(request);
          this.#tracer.interrupt();
        }
        Atomics.wait(control, CONTROL.requests, seen);
      }
    } finally {
      this.#hits.delete(key);
    }
  }
}

function message(key: number, hit: HitContext, site: ProbeSite | undefined): HitMessage {
  return {
    key,
    id: hit.id,
    event: hit.event,
    pid: hit.pid,
    tid: hit.tid,
    timeNs: hit.timeNs,
    where: hit.where,
    regs: hit.regs.bytes.slice(),
    retval: hit.retval,
    entry: hit.entry?.bytes.slice(),
    entryTimeNs: hit.entryTimeNs,
    exit: hit.exit,
    detail: hit.detail,
    site,
  };
}

async function main(data: WorkerData): Promise<void> {
  const out = parentPort!;
  const native = loadNative();
  try {
    const status = native.wakeOnSignal(WAKE_SIGNAL);
    if (status < 0) {
      throw new ProbeError(
        'ERR_INTERNAL',
        `Cannot install the tracer thread's wake-up signal (${-status})`,
      );
    }
    const { start } = data;
    const tracer =
      start.kind === 'spawn'
        ? await ProcessTracer.spawn(start.argv, start.options)
        : await ProcessTracer.attach(start.pid, start.options);
    out.postMessage({
      type: 'started',
      pid: tracer.pid,
      tid: native.threadId(),
    } satisfies WorkerMessage);
    new Server(tracer, data, out).run();
  } catch (err) {
    out.postMessage({ type: 'failed', error: serializeError(err) } satisfies WorkerMessage);
  } finally {
    Atomics.store(data.control, CONTROL.gone, 1);
    Atomics.notify(data.control, CONTROL.replies);
    Atomics.notify(data.control, CONTROL.taken);
    data.rpc.close();
  }
}

await main(workerData as WorkerData);
