/**
 * What the main thread and the worker that finds functions' returns ahead of the planning
 * (return-scan.ts, return-scan-worker.ts) send each other: plain numbers and strings, no
 * objects of the planning's own.
 */
import type { MessagePort } from 'node:worker_threads';

/** The functions of one message of results. */
export const SCAN_BATCH = 1024;

/** Slots of the shared counter: messages posted so far, and whether the worker has ended. */
export const SCAN_PROGRESS = { posted: 0, ended: 1, size: 2 } as const;

/** What the worker is given. */
export interface ScanRequest {
  /** The file, opened again by the worker, which checks it is still this one (dev, inode). */
  readonly path: string;
  readonly dev: bigint;
  readonly inode: bigint;
  /** Function k's code parts are parts[3j .. 3j+2] for starts[k] <= j < starts[k+1]. */
  readonly starts: Uint32Array;
  /** Per part: its address, its offset in the file, its size (0: no bytes in the file). */
  readonly parts: Float64Array;
  /** SCAN_PROGRESS's slots, in shared memory (the main thread waits on them). */
  readonly progress: Int32Array;
  readonly port: MessagePort;
}

/** The results of SCAN_BATCH functions (fewer in the last), from function `first` on. */
export interface ScanResults {
  readonly type: 'results';
  readonly first: number;
  /** Per function: 1, its returns were found; 0, its scan failed (see failures). */
  readonly found: Uint8Array;
  /** Per function: the end of its exits in `exits` (each three numbers). */
  readonly ends: Uint32Array;
  /** Per exit: its address, its length, and 0 for a `ret` or 1 for a tail call. */
  readonly exits: Float64Array;
  /** Per function: ReturnScan.startJump, or -1 for none. */
  readonly startJumps: Float64Array;
  /** Per failed function: its place in the batch, why, and where (-1: nowhere in particular). */
  readonly failures: readonly (readonly [number, string, number])[];
}

/** The worker could not do the scan (the file changed, or an error): the planning does it. */
export interface ScanUnavailable {
  readonly type: 'unavailable';
  readonly why: string;
}

export type ScanMessage = ScanResults | ScanUnavailable;
