import {
  MessageChannel,
  type MessagePort,
  receiveMessageOnPort,
  Worker,
} from 'node:worker_threads';
import { type HitContext, type ProbesOptions, Registers } from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import { loadNative, type NativeBinding } from '../native/index.js';
import type { ProbeSite } from '../plan/index.js';
import type { ProcessRegistration, ProcessTracerOptions } from './process-tracer.js';
import type { WorkerData, WorkerStart } from './process-worker.js';
import {
  CONTROL,
  deserializeError,
  type HitMessage,
  type Reply,
  type Request,
  type State,
  WAKE_SIGNAL,
  type WorkerMessage,
} from './process-worker-protocol.js';

/** A request without its seq, which #send gives it. */
type Outgoing = Request extends infer R ? (R extends Request ? Omit<R, 'seq'> : never) : never;

interface Waiter {
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: Error) => void;
}

/**
 * A `ProcessTracer` on its own worker thread: ptrace requests all come from that thread (the
 * one that attached), and its waits for events block it rather than the caller's event loop.
 * poll() returns a promise. Handlers and filters still run in the caller's thread, while the
 * probed thread waits: their registers are a copy written back after them, and memory
 * reads and writes are made by the worker while the handler blocks for them (a few µs each).
 * A hit costs more than with ProcessTracer (two thread hand-offs): use that one where
 * blocking is fine (a command-line tool, a worker of your own).
 *
 * Like ProcessTracer, it restores the process when it detaches, is disposed of, or the
 * caller's process exits normally or on a handled signal; a SIGKILL of the caller's process
 * cannot be repaired from inside it (see ProcessTracer: the `upscope` CLI runs its tracer in
 * a helper process for that reason).
 *
 * ```ts
 * await using tracer = await AsyncProcessTracer.spawn(['./app']);
 * await tracer.register({ id: 'open', event: 'breakpoint', where: 'libc:open',
 *   handler: (hit) => console.log(hit.readCString(hit.regs.get('rdi'))) });
 * while ((await tracer.poll()) !== null) {}
 * ```
 */
export class AsyncProcessTracer implements AsyncDisposable {
  readonly #worker: Worker;
  readonly #control: Int32Array;
  readonly #rpc: MessagePort;
  readonly #native: NativeBinding;
  readonly #pid: number;
  readonly #workerTid: number;
  readonly #spawned: boolean;
  #seq = 0;
  readonly #waiting = new Map<number, Waiter>();
  /** Registrations by id: their filters and handlers run here, on the worker's behalf. */
  readonly #registrations = new Map<string, ProcessRegistration>();
  #state: State = { ended: false, exitCode: undefined };
  #polling = false;
  /** The event the last poll gave: its thread waits, and its registers go back at the next. */
  #polled: RemoteHit | undefined;
  /** What a handler threw: the poll under way rejects with it. */
  #failure: unknown;
  #gone: Error | undefined;

  private constructor(
    worker: Worker,
    control: Int32Array,
    rpc: MessagePort,
    started: { pid: number; tid: number },
    spawned: boolean,
  ) {
    this.#worker = worker;
    this.#control = control;
    this.#rpc = rpc;
    this.#native = loadNative();
    this.#pid = started.pid;
    this.#workerTid = started.tid;
    this.#spawned = spawned;
    rpc.on('message', (reply: Reply) => this.#settle(reply));
    worker.on('message', (message: WorkerMessage) => {
      if (message.type === 'hit') this.#onHit(message.hit);
    });
    // Replies the worker sent before it ended are read first: its exit may be seen before
    // them (detach() and kill() answer, then the thread ends), and would fail their callers.
    worker.on('exit', () => {
      this.#drain();
      this.#lose(threadGone());
    });
  }

  /** Start `argv` traced, held before its first instruction until the first poll(). */
  static spawn(
    argv: readonly string[],
    options: ProcessTracerOptions = {},
  ): Promise<AsyncProcessTracer> {
    return AsyncProcessTracer.#start({ kind: 'spawn', argv: [...argv], options: { ...options } });
  }

  /** Trace every thread of running process `pid`, held until the first poll(). */
  static attach(pid: number, options: ProbesOptions = {}): Promise<AsyncProcessTracer> {
    return AsyncProcessTracer.#start({ kind: 'attach', pid, options: { ...options } });
  }

  static async #start(start: WorkerStart): Promise<AsyncProcessTracer> {
    const control = new Int32Array(new SharedArrayBuffer(CONTROL.size * 4));
    const { port1, port2 } = new MessageChannel();
    const data: WorkerData = { control, rpc: port2, start };
    const { url, entry } = workerEntry();
    const worker = new Worker(url, {
      workerData: entry === undefined ? data : { ...data, entry },
      transferList: [port2],
    });
    let onMessage: ((message: WorkerMessage) => void) | undefined;
    let onError: ((err: Error) => void) | undefined;
    let onExit: (() => void) | undefined;
    const started = await new Promise<{ pid: number; tid: number }>((resolve, reject) => {
      onMessage = (message) => {
        if (message.type === 'started') resolve(message);
        else if (message.type === 'failed') reject(deserializeError(message.error));
      };
      onError = reject;
      onExit = () =>
        reject(new ProbeError('ERR_INTERNAL', 'The tracer thread ended before it started'));
      worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    })
      .catch(async (err: unknown) => {
        port1.close();
        await worker.terminate();
        throw err;
      })
      .finally(() => {
        worker.off('message', onMessage!).off('error', onError!).off('exit', onExit!);
      });
    return new AsyncProcessTracer(worker, control, port1, started, start.kind === 'spawn');
  }

  get pid(): number {
    return this.#pid;
  }

  /** True once the process has exited or the tracer detached. */
  get ended(): boolean {
    return this.#state.ended;
  }

  /** The exit status once the process exited (negative: the signal that killed it). */
  get exitCode(): number | undefined {
    return this.#state.exitCode;
  }

  /**
   * Register interest in an event (see ProcessTracer.register). From a handler, the probe is
   * in place before the probed thread goes on, whether the promise has resolved yet or not.
   */
  async register(registration: ProcessRegistration): Promise<readonly ProbeSite[]> {
    if (this.#registrations.has(registration.id)) {
      throw new ProbeError('ERR_USAGE', `Cannot register "${registration.id}": that id is taken`);
    }
    this.#registrations.set(registration.id, registration);
    const request = {
      op: 'register',
      registration: {
        id: registration.id,
        event: registration.event,
        where: registration.where,
        unsafe: registration.unsafe,
        debugDirs: registration.debugDirs,
        strict: registration.strict,
        returnProbes: registration.returnProbes,
        unwinds: registration.unwinds,
        openAtThreadEnd: registration.openAtThreadEnd,
        handler: registration.handler !== undefined,
        filter: registration.filter !== undefined,
      },
    } as const;
    try {
      // A spec is resolved in the worker (reading symbols takes a while): not blocking here.
      return (
        typeof registration.where === 'string' ? await this.#call(request) : this.#callNow(request)
      ) as readonly ProbeSite[];
    } catch (err) {
      this.#registrations.delete(registration.id);
      throw err;
    }
  }

  /** Unregister one registration (all its sites), or all; also from a handler. */
  unregister(id: string | 'all'): void {
    this.#callNow({ op: 'unregister', id });
    if (id === 'all') this.#registrations.clear();
    else this.#registrations.delete(id);
  }

  /**
   * Let the thread stopped at the last event go on (with the registers its handler left), then
   * wait for the next event with no handler, at most `timeoutMs` (forever when undefined):
   * null on timeout, after interrupt(), or once the process has ended. Handlers run while it
   * waits; one that throws makes it reject.
   */
  async poll(timeoutMs?: number): Promise<HitContext | null> {
    if (this.#polling) {
      throw new ProbeError('ERR_USAGE', 'Cannot poll: a poll() is under way (await it first)');
    }
    if (this.#gone !== undefined || this.#state.ended) return null;
    const last = this.#polled;
    this.#polled = undefined;
    this.#polling = true;
    const timer =
      timeoutMs === undefined ? undefined : setTimeout(() => this.interrupt(), timeoutMs);
    try {
      const got = (await this.#call({
        op: 'poll',
        key: last?.key,
        regs: last?.regs.bytes,
      })) as HitMessage | null;
      if (this.#failure !== undefined) {
        const failure = this.#failure;
        this.#failure = undefined;
        throw failure;
      }
      if (got === null) return null;
      this.#polled = new RemoteHit(got, (request) => this.#callNow(request));
      return this.#polled;
    } finally {
      clearTimeout(timer);
      this.#polling = false;
    }
  }

  /** Events with no handler, until the process ends (each thread goes on at the next). */
  async *events(): AsyncGenerator<HitContext> {
    for (let hit = await this.poll(); hit !== null; hit = await this.poll()) yield hit;
  }

  /** Make the poll() under way resolve null (once the event being handled is done). */
  interrupt(): void {
    if (this.#gone === undefined && !this.#state.ended) {
      this.#call({ op: 'interrupt' }).catch(() => {});
    }
  }

  /** Remove every probe, put back every byte changed, and let the process run on untraced. */
  async detach(): Promise<void> {
    await this.#close('detach');
  }

  /** Kill the process (SIGKILL). */
  async kill(): Promise<void> {
    await this.#close('kill');
  }

  /** A spawned process is killed, an attached one detached from. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.#close(this.#spawned ? 'kill' : 'detach');
  }

  async #close(op: 'detach' | 'kill'): Promise<void> {
    if (this.#gone === undefined) {
      if (this.#polling) this.interrupt();
      await this.#call({ op });
    }
    this.#rpc.close();
    await this.#worker.terminate();
  }

  /** Run the filter and handler of a hit in this thread; the probed thread waits for `done`. */
  #onHit(message: HitMessage): void {
    const hit = new RemoteHit(message, (request) => this.#callNow(request));
    let pass = false;
    try {
      const registration = this.#registrations.get(message.id);
      if (registration !== undefined) {
        const { filter, handler } = registration;
        pass = filter === undefined || filter(hit);
        if (pass && handler !== undefined) handler(hit, message.site);
      }
    } catch (err) {
      this.#failure ??= err;
      this.interrupt();
    }
    if (this.#gone !== undefined) return;
    this.#post({ op: 'done', key: message.key, regs: hit.regs.bytes, retval: hit.retval, pass });
  }

  /** A request whose reply comes later (the worker may first have to leave waitpid). */
  #call(request: Outgoing): Promise<unknown> {
    if (this.#gone !== undefined) return Promise.reject(this.#gone);
    return new Promise((resolve, reject) => {
      this.#waiting.set(this.#post(request), { resolve, reject });
    });
  }

  /** A request answered at once: this thread blocks until the worker has served it. */
  #callNow(request: Outgoing): unknown {
    if (this.#gone !== undefined) throw this.#gone;
    const seq = this.#post(request);
    let result: { value: unknown } | undefined;
    let failure: Error | undefined;
    this.#waiting.set(seq, {
      resolve: (value) => {
        result = { value };
      },
      reject: (err) => {
        failure = err;
      },
    });
    const control = this.#control;
    while (result === undefined && failure === undefined) {
      const replies = Atomics.load(control, CONTROL.replies);
      const got = receiveMessageOnPort(this.#rpc);
      if (got !== undefined) {
        this.#settle(got.message as Reply);
        continue;
      }
      if (Atomics.load(control, CONTROL.gone) === 1) {
        this.#lose(threadGone());
        break;
      }
      Atomics.wait(control, CONTROL.replies, replies, 10);
    }
    if (failure !== undefined) throw failure;
    return result?.value;
  }

  /** Send a request and make sure the worker takes it; returns its seq. */
  #post(request: Outgoing): number {
    const seq = ++this.#seq;
    const control = this.#control;
    this.#rpc.postMessage({ ...request, seq });
    Atomics.add(control, CONTROL.requests, 1);
    Atomics.notify(control, CONTROL.requests);
    // In waitpid only a signal reaches it; one sent just before it went in is lost: again.
    while (
      Atomics.load(control, CONTROL.inWait) === 1 &&
      Atomics.load(control, CONTROL.taken) < seq &&
      Atomics.load(control, CONTROL.gone) === 0
    ) {
      const taken = Atomics.load(control, CONTROL.taken);
      this.#native.tgkill(process.pid, this.#workerTid, WAKE_SIGNAL);
      Atomics.wait(control, CONTROL.taken, taken, 1);
    }
    return seq;
  }

  #settle(reply: Reply): void {
    this.#state = reply.state;
    const waiter = this.#waiting.get(reply.seq);
    if (waiter === undefined) return;
    this.#waiting.delete(reply.seq);
    if (reply.error !== undefined) waiter.reject(deserializeError(reply.error));
    else waiter.resolve(reply.value);
  }

  /** Settle every reply waiting on the port. */
  #drain(): void {
    for (;;) {
      let got: { message: unknown } | undefined;
      try {
        got = receiveMessageOnPort(this.#rpc);
      } catch {
        return; // the port is closed
      }
      if (got === undefined) return;
      this.#settle(got.message as Reply);
    }
  }

  #lose(err: Error): void {
    this.#gone ??= err;
    this.#state = { ended: true, exitCode: this.#state.exitCode };
    for (const waiter of this.#waiting.values()) waiter.reject(err);
    this.#waiting.clear();
  }
}

function threadGone(): ProbeError {
  return new ProbeError(
    'ERR_TARGET_GONE',
    'Cannot reach the tracer thread: it has ended (after detach() or kill(), or it failed); start a new tracer',
  );
}

/** A hit in the caller's thread: a copy of the registers, and memory through the worker. */
class RemoteHit implements HitContext {
  readonly key: number;
  readonly id: string;
  readonly event: HitContext['event'];
  readonly pid: number;
  readonly tid: number;
  readonly timeNs: bigint;
  readonly where: bigint | undefined;
  readonly regs: Registers;
  retval: bigint | undefined;
  readonly entry: Registers | undefined;
  readonly entryTimeNs: bigint | undefined;
  readonly exit: 'tail-call' | 'unwind' | undefined;
  readonly detail: number | undefined;
  readonly #call: (request: Outgoing) => unknown;

  constructor(message: HitMessage, call: (request: Outgoing) => unknown) {
    this.key = message.key;
    this.id = message.id;
    this.event = message.event;
    this.pid = message.pid;
    this.tid = message.tid;
    this.timeNs = message.timeNs;
    this.where = message.where;
    this.regs = new Registers(message.regs);
    this.retval = message.retval;
    this.entry = message.entry === undefined ? undefined : new Registers(message.entry);
    this.entryTimeNs = message.entryTimeNs;
    this.exit = message.exit;
    this.detail = message.detail;
    this.#call = call;
  }

  readU64(vaddr: bigint): bigint {
    const bytes = this.read(vaddr, 8);
    return new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  }

  read(vaddr: bigint, length: number): Uint8Array {
    return this.#call({ op: 'read', key: this.key, vaddr, length }) as Uint8Array;
  }

  readCString(vaddr: bigint, maxBytes = 4096): string {
    return this.#call({ op: 'readCString', key: this.key, vaddr, maxBytes }) as string;
  }

  write(vaddr: bigint, bytes: Uint8Array): void {
    this.#call({ op: 'write', key: this.key, vaddr, bytes });
  }
}

/**
 * The worker's module: the compiled one beside this file, or (running from source under tsx)
 * a loader that registers tsx in the worker first, which `--import tsx` does not.
 */
function workerEntry(): { url: URL; entry: string | undefined } {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return { url: new URL('./process-worker.js', here), entry: undefined };
  return {
    url: new URL('../../scripts/tsx-worker.mjs', here),
    entry: new URL('./process-worker.ts', here).href,
  };
}
