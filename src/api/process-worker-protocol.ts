/**
 * What a `WorkerProcessTracer` and its worker thread say to each other. Requests go one way
 * over a MessagePort (`rpc`), each answered there by a reply with its `seq`; hits and
 * interest in them go the other way as the worker's messages. A shared Int32Array
 * (`control`) wakes either side without an event loop: the worker counts the requests it has
 * taken and the replies it has sent, and says when it sits in waitpid (only a signal ends
 * that wait).
 */

import type { ProbeEventKind } from '../engines/index.js';
import type { ErrorCode } from '../errors/index.js';
import { ProbeError } from '../errors/index.js';
import type { ProbeSite } from '../plan/index.js';

/** Cells of `control`. */
export const CONTROL = {
  /** Bumped by the caller after each request (the worker waits on it when idle). */
  requests: 0,
  /** The seq of the last request the worker took. */
  taken: 1,
  /** Bumped by the worker after each reply (a synchronous caller waits on it). */
  replies: 2,
  /** 1 while the worker waits in waitpid: a request must then be signalled. */
  inWait: 3,
  /** 1 once the worker has stopped serving (it ended, or failed). */
  gone: 4,
  size: 5,
} as const;

/**
 * The signal that ends the worker's waitpid (sent to its thread alone with tgkill). One of
 * the real-time signals glibc leaves to programs; its handler, installed by the worker, does
 * nothing.
 */
export const WAKE_SIGNAL = 63;

export interface RegistrationRequest {
  readonly id: string;
  readonly event: ProbeEventKind;
  readonly where: bigint | string | undefined;
  readonly unsafe: boolean | undefined;
  readonly debugDirs: readonly string[] | undefined;
  readonly strict: boolean | undefined;
  readonly returnProbes?: 'auto' | 'sites' | 'trampoline' | undefined;
  readonly unwinds?: boolean | undefined;
  readonly openAtThreadEnd?: boolean | undefined;
  /** What runs in the caller's thread: the worker asks it at each hit. */
  readonly handler: boolean;
  readonly filter: boolean;
}

export type Request =
  | { readonly seq: number; readonly op: 'register'; readonly registration: RegistrationRequest }
  | { readonly seq: number; readonly op: 'unregister'; readonly id: string }
  /** Let the thread of the last event go on (with `regs` written back), and wait for the next. */
  | { readonly seq: number; readonly op: 'poll'; readonly key?: number; readonly regs?: Uint8Array }
  /** End the poll under way: it answers null. */
  | { readonly seq: number; readonly op: 'interrupt' }
  | {
      readonly seq: number;
      readonly op: 'read';
      readonly key: number;
      readonly vaddr: bigint;
      readonly length: number;
    }
  | {
      readonly seq: number;
      readonly op: 'readCString';
      readonly key: number;
      readonly vaddr: bigint;
      readonly maxBytes: number;
    }
  | {
      readonly seq: number;
      readonly op: 'write';
      readonly key: number;
      readonly vaddr: bigint;
      readonly bytes: Uint8Array;
    }
  /** A hit handled in the caller's thread: what it changed, and (for a filter) its verdict. */
  | {
      readonly seq: number;
      readonly op: 'done';
      readonly key: number;
      readonly regs: Uint8Array;
      readonly retval: bigint | undefined;
      readonly pass: boolean;
    }
  | { readonly seq: number; readonly op: 'detach' | 'kill' };

/** A hit, as it crosses threads. `key` names it in later requests while its thread waits. */
export interface HitMessage {
  readonly key: number;
  readonly id: string;
  readonly event: ProbeEventKind;
  readonly pid: number;
  readonly tid: number;
  readonly timeNs: bigint;
  readonly where: bigint | undefined;
  readonly regs: Uint8Array;
  readonly retval: bigint | undefined;
  readonly entry: Uint8Array | undefined;
  readonly entryTimeNs: bigint | undefined;
  readonly exit?: 'tail-call' | 'unwind' | undefined;
  readonly detail: number | undefined;
  /** The site of the registration's spec that fired (none for an address). */
  readonly site: ProbeSite | undefined;
}

export interface State {
  readonly ended: boolean;
  readonly exitCode: number | undefined;
}

export interface Reply {
  readonly seq: number;
  readonly state: State;
  readonly value?: unknown;
  readonly error?: SerializedError | undefined;
}

/** What the worker posts to its parent. */
export type WorkerMessage =
  | { readonly type: 'started'; readonly pid: number; readonly tid: number }
  | { readonly type: 'failed'; readonly error: SerializedError }
  /** Run the registration's filter and handler on this hit, then send `done`. */
  | { readonly type: 'hit'; readonly hit: HitMessage };

export interface SerializedError {
  readonly code: ErrorCode;
  readonly message: string;
}

export function serializeError(err: unknown): SerializedError {
  if (err instanceof ProbeError) return { code: err.code, message: err.message };
  return { code: 'ERR_INTERNAL', message: err instanceof Error ? err.message : String(err) };
}

export function deserializeError(error: SerializedError): ProbeError {
  return new ProbeError(error.code, error.message);
}
