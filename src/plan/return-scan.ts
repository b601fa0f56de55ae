/**
 * The returns of a large pattern's functions, found ahead on a worker thread. Finding every
 * `ret` and jump out of 50,000 functions decodes all their code (4.9 M instructions for
 * node's), a third of planning a recording of them; the worker does it on the other CPU while
 * this thread reads the names and plans the entries, and the returns' planning takes each
 * function's exits as the worker found them (the same findReturnInstructions(), on the same
 * parts). Whatever the worker has not done, or cannot (it failed, or is late), the planning
 * does itself as before: the worker only ever saves time.
 */
import { existsSync } from 'node:fs';
import {
  MessageChannel,
  type MessagePort,
  receiveMessageOnPort,
  Worker,
} from 'node:worker_threads';
import { type DecodedInstruction, exitInstructionAt, type ReturnScan } from '../arch/index.js';
import type { ElfFile, FunctionSymbol } from '../symbols/index.js';
import type { CodeRange } from './return-plan.js';
import {
  SCAN_BATCH,
  SCAN_PROGRESS,
  type ScanMessage,
  type ScanRequest,
  type ScanResults,
} from './return-scan-protocol.js';

/** Patterns matching fewer functions are scanned where they are planned. */
export const SCAN_AHEAD_FROM = 2000;

/** How long the planning waits for a batch before it scans its functions itself. */
const WAIT_MS = 5000;

export class ReturnScanAhead {
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #progress: Int32Array;
  /** Function's address to its place in the request. */
  readonly #places = new Map<number, number>();
  readonly #batches: (ScanResults | undefined)[] = [];
  #received = 0;
  #gone = false;

  /**
   * Starts the scan of `functions` (whose code `rangesOf` gives, as the planning reads it) in
   * the file at `path`; undefined when a worker cannot be started.
   */
  static start(
    file: { readonly path: string; readonly dev: bigint; readonly inode: bigint },
    functions: readonly FunctionSymbol[],
    rangesOf: (fn: FunctionSymbol) => readonly CodeRange[],
  ): ReturnScanAhead | undefined {
    const starts = new Uint32Array(functions.length + 1);
    const parts: number[] = [];
    const places = new Map<number, number>();
    for (let k = 0; k < functions.length; k++) {
      const fn = functions[k]!;
      places.set(Number(fn.vaddr), k);
      for (const range of rangesOf(fn)) {
        parts.push(
          Number(range.vaddr),
          range.fileOffset === undefined ? 0 : Number(range.fileOffset),
          range.fileOffset === undefined ? 0 : Number(range.size),
        );
      }
      starts[k + 1] = parts.length / 3;
    }
    const progress = new Int32Array(new SharedArrayBuffer(SCAN_PROGRESS.size * 4));
    const { port1, port2 } = new MessageChannel();
    const request: ScanRequest = {
      path: file.path,
      dev: file.dev,
      inode: file.inode,
      starts,
      parts: Float64Array.from(parts),
      progress,
      port: port2,
    };
    const { url, entry } = workerEntry();
    if (url === undefined) return undefined;
    let worker: Worker;
    try {
      worker = new Worker(url, {
        workerData: entry === undefined ? request : { ...request, entry },
        transferList: [port2],
      });
    } catch {
      return undefined;
    }
    return new ReturnScanAhead(worker, port1, progress, places);
  }

  private constructor(
    worker: Worker,
    port: MessagePort,
    progress: Int32Array,
    places: Map<number, number>,
  ) {
    this.#worker = worker;
    this.#port = port;
    this.#progress = progress;
    this.#places = places;
    // It never keeps the process alive, and its end or failure is read from the counter.
    worker.unref();
    worker.on('error', () => {});
  }

  /**
   * What the worker found of `fn`'s returns: as findReturnInstructions() on its code parts
   * says it; undefined when the worker did not scan it (the caller scans it then).
   */
  scanOf(fn: FunctionSymbol, elf: ElfFile): ReturnScan | undefined {
    const place = this.#places.get(Number(fn.vaddr));
    if (place === undefined) return undefined;
    const batch = this.#batch(Math.floor(place / SCAN_BATCH));
    if (batch === undefined) return undefined;
    const i = place - batch.first;
    if (batch.found[i] === 0) {
      const failure = batch.failures.find(([at]) => at === i);
      if (failure === undefined) return undefined;
      return { ok: false, reason: failure[1], at: failure[2] < 0 ? undefined : BigInt(failure[2]) };
    }
    const exits: { instruction: DecodedInstruction; kind: 'ret' | 'tail-call' }[] = [];
    for (let e = i === 0 ? 0 : batch.ends[i - 1]!; e < batch.ends[i]!; e++) {
      const vaddr = BigInt(batch.exits[3 * e]!);
      const fileOffset = elf.vaddrToFileOffset(vaddr);
      if (fileOffset === undefined) return undefined;
      const instruction = exitInstructionAt(vaddr, elf.view(fileOffset, batch.exits[3 * e + 1]!));
      if (instruction === undefined) return undefined;
      exits.push({ instruction, kind: batch.exits[3 * e + 2] === 0 ? 'ret' : 'tail-call' });
    }
    const startJump = batch.startJumps[i]!;
    return { ok: true, exits, startJump: startJump < 0 ? undefined : BigInt(startJump) };
  }

  /** Ends the worker, if it still runs. */
  close(): void {
    if (this.#gone) return;
    this.#gone = true;
    this.#port.close();
    void this.#worker.terminate();
  }

  /** The results of batch `n`, waited for; undefined when they will not come. */
  #batch(n: number): ScanResults | undefined {
    for (;;) {
      const known = this.#batches[n];
      if (known !== undefined || this.#gone) return known;
      const received = receiveMessageOnPort(this.#port);
      if (received !== undefined) {
        this.#received++;
        const message = received.message as ScanMessage;
        if (message.type === 'unavailable') this.close();
        else this.#batches[message.first / SCAN_BATCH] = message;
        continue;
      }
      if (Atomics.load(this.#progress, SCAN_PROGRESS.ended) === 1 && !this.#pending()) {
        this.close();
        continue;
      }
      const woke = Atomics.wait(this.#progress, SCAN_PROGRESS.posted, this.#received, WAIT_MS);
      if (woke === 'timed-out') this.close();
    }
  }

  /** Messages posted and not yet received. */
  #pending(): boolean {
    return Atomics.load(this.#progress, SCAN_PROGRESS.posted) > this.#received;
  }
}

/**
 * The worker's module: beside this one (the library's modules, or the command's bundle and
 * its worker), or under tsx a loader that registers tsx in the worker first.
 */
function workerEntry(): { url: URL | undefined; entry: string | undefined } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    return {
      url: new URL('../../scripts/tsx-worker.mjs', here),
      entry: new URL('./return-scan-worker.ts', here).href,
    };
  }
  const url = new URL('./return-scan-worker.js', here);
  return { url: existsSync(url) ? url : undefined, entry: undefined };
}
