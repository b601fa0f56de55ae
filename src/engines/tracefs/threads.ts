import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** clone(2)'s flag for a thread of the same process. */
const CLONE_THREAD = 0x10000n;
/** Threads remembered at most; past that the table starts again from /proc. */
const MAX_THREADS = 1 << 16;

interface Thread {
  comm: string;
  tgid: number;
}

/**
 * The name (comm) and process of each thread events came from, kept the way perf keeps them
 * from its COMM and FORK records: from the kernel's task_newtask and task_rename events
 * (read in time order with the probes' events), and for the threads running before the trace
 * began, from /proc at its start (snapshot(), after the task events are enabled and before the
 * probes are: a thread renamed later has its rename event after the hits it made under its
 * old name). A thread seen without either is looked up in /proc when first seen, or in tracefs'
 * saved_cmdlines and saved_tgids once it has exited. Probe events then need not carry the
 * name, which costs the probed thread a string copy on every hit.
 */
export class ThreadTable {
  readonly #tracefs: string;
  readonly #threads = new Map<number, Thread>();

  constructor(tracefs: string) {
    this.#tracefs = tracefs;
  }

  /** task_newtask: `parent` made `child`, named `comm`, a thread of its own process or not. */
  created(parent: number, child: number, comm: string, cloneFlags: bigint): void {
    const tgid = (cloneFlags & CLONE_THREAD) !== 0n ? this.tgid(parent) : child;
    this.#set(child, { comm, tgid });
  }

  /** task_rename: `tid` took a new name (an exec, or prctl PR_SET_NAME). */
  renamed(tid: number, comm: string): void {
    const known = this.#threads.get(tid);
    if (known === undefined) this.#set(tid, { comm, tgid: this.#lookup(tid).tgid });
    else known.comm = comm;
  }

  /**
   * Remember the name and process of these threads as they are now (every thread of every
   * process without `tids`); a thread that has gone is left to the lookup when first seen.
   */
  snapshot(tids?: readonly number[]): void {
    if (tids !== undefined) {
      for (const tid of tids) {
        const comm = readText(`/proc/${tid}/comm`);
        const tgid = /^Tgid:\s+(\d+)/m.exec(readText(`/proc/${tid}/status`))?.[1];
        if (comm !== '' && tgid !== undefined) {
          this.#set(tid, { comm: comm.replace(/\n$/, ''), tgid: Number(tgid) });
        }
      }
      return;
    }
    for (const pid of listNumbers('/proc')) {
      if (this.#threads.size >= MAX_THREADS) return;
      for (const tid of listNumbers(`/proc/${pid}/task`)) {
        const comm = readText(`/proc/${pid}/task/${tid}/comm`);
        if (comm !== '') this.#set(tid, { comm: comm.replace(/\n$/, ''), tgid: pid });
      }
    }
  }

  comm(tid: number): string {
    return (this.#threads.get(tid) ?? this.#learn(tid)).comm;
  }

  tgid(tid: number): number {
    return (this.#threads.get(tid) ?? this.#learn(tid)).tgid;
  }

  #learn(tid: number): Thread {
    const thread = this.#lookup(tid);
    this.#set(tid, thread);
    return thread;
  }

  #set(tid: number, thread: Thread): void {
    if (this.#threads.size >= MAX_THREADS && !this.#threads.has(tid)) this.#threads.clear();
    this.#threads.set(tid, thread);
  }

  /** What /proc says of a live thread, else what tracefs saved of it. */
  #lookup(tid: number): Thread {
    const status = readText(`/proc/${tid}/status`);
    const comm = readText(`/proc/${tid}/comm`);
    if (status !== '' && comm !== '') {
      const tgid = Number(/^Tgid:\s+(\d+)/m.exec(status)?.[1] ?? tid);
      return { comm: comm.replace(/\n$/, ''), tgid };
    }
    const savedComm = new RegExp(`^\\s*${tid} (.*)$`, 'm').exec(
      readText(join(this.#tracefs, 'saved_cmdlines')),
    );
    const savedTgid = new RegExp(`^${tid} (\\d+)$`, 'm').exec(
      readText(join(this.#tracefs, 'saved_tgids')),
    );
    return {
      comm: savedComm?.[1] ?? '',
      tgid: savedTgid === null ? tid : Number(savedTgid[1]),
    };
  }
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** The numeric entries of a /proc directory (pids, tids); none when it is gone. */
function listNumbers(dir: string): number[] {
  try {
    return readdirSync(dir)
      .filter((name) => /^\d+$/.test(name))
      .map(Number);
  } catch {
    return [];
  }
}
