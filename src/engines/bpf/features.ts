/**
 * What the bpf engine can use on this kernel, found by trying each thing once: a uprobe
 * handler loads, a ring buffer can be made, a uprobe_multi link can be made, a uprobe session
 * link can be made. Every object made is closed at once.
 */
import { ProbeError } from '../../errors/index.js';
import { errnoNumber } from '../../native/index.js';
import { callKfunc, exit, mov64Imm } from './insn.js';
import { BpfMap, closeFd, linkUprobeMulti, loadProgram } from './kernel.js';
import { findSessionKfunc } from './kernel-facts.js';

/** Each result: 0 when it worked, else the `-errno` the kernel gave. */
export interface BpfFeatures {
  /** A uprobe (kprobe-type) program loads. */
  readonly program: number;
  /** A `ringbuf` map can be made (Linux 5.8). */
  readonly ringBuffer: number;
  /** A uprobe_multi link can be made (Linux 6.6). */
  readonly uprobeMulti: number;
  /** A uprobe session link can be made, its handler asking bpf_session_is_return() (6.13). */
  readonly uprobeSession: number;
}

const EINVAL = -(errnoNumber('EINVAL') ?? 22);
const EBADF = -(errnoNumber('EBADF') ?? 9);

function errnoOf(err: unknown): number {
  if (err instanceof ProbeError) {
    const name = (err.details as { errno?: string } | undefined)?.errno;
    const number = name === undefined ? undefined : errnoNumber(name);
    if (number !== undefined) return -number;
    if (err.code === 'ERR_PRIVILEGES') return -(errnoNumber('EPERM') ?? 1);
  }
  return EINVAL;
}

function tryLoad(multi: boolean | 'session'): number {
  try {
    const session = multi === 'session' ? findSessionKfunc() : undefined;
    // The context is in r1 already, for a kfunc that takes it.
    const asks = session === undefined ? [] : [callKfunc(session.btfId)];
    return loadProgram([...asks, mov64Imm(0, 0), exit()], {
      name: 'upscope_probe',
      purpose: 'a feature check',
      multi,
    });
  } catch (err) {
    return errnoOf(err);
  }
}

/** Whether this process may load a uprobe handler (what every bpf aggregation needs). */
export function bpfAllowed(): boolean {
  const program = tryLoad(false);
  if (program < 0) return false;
  closeFd(program);
  return true;
}

export function probeBpfFeatures(): BpfFeatures {
  const program = tryLoad(false);
  if (program >= 0) closeFd(program);
  let ringBuffer = 0;
  try {
    BpfMap.create({
      kind: 'ringbuf',
      name: 'upscope_probe',
      keyBytes: 0,
      valueBytes: 0,
      maxEntries: 4096,
    }).close();
  } catch (err) {
    ringBuffer = errnoOf(err);
  }
  return {
    program: Math.min(program, 0),
    ringBuffer,
    uprobeMulti: tryLink(false),
    uprobeSession: tryLink(true),
  };
}

/** 0 when a uprobe_multi link (a session link with `session`) can be made, else `-errno`. */
function tryLink(session: boolean): number {
  const program = tryLoad(session ? 'session' : true);
  if (program < 0) return program;
  // A link on a directory: a kernel with such links refuses the file (EBADF); one without
  // them refuses the attach type (EINVAL).
  const link = linkUprobeMulti(program, {
    path: '/',
    offsets: [0n],
    cookies: [0n],
    retprobe: false,
    session,
  });
  if (link >= 0) closeFd(link);
  closeFd(program);
  return link >= 0 || link === EBADF ? 0 : link;
}
