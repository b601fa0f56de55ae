/**
 * What the bpf engine can use on this kernel, found by trying each thing once: a uprobe
 * handler loads, a ring buffer can be made, a uprobe_multi link can be made. Every object made
 * is closed at once.
 */
import { ProbeError } from '../../errors/index.js';
import { errnoNumber } from '../../native/index.js';
import { exit, mov64Imm } from './insn.js';
import { BpfMap, closeFd, linkUprobeMulti, loadProgram } from './kernel.js';

/** Each result: 0 when it worked, else the `-errno` the kernel gave. */
export interface BpfFeatures {
  /** A uprobe (kprobe-type) program loads. */
  readonly program: number;
  /** A `ringbuf` map can be made (Linux 5.8). */
  readonly ringBuffer: number;
  /** A uprobe_multi link can be made (Linux 6.6). */
  readonly uprobeMulti: number;
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

function tryLoad(multi: boolean): number {
  try {
    return loadProgram([mov64Imm(0, 0), exit()], {
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
  let uprobeMulti: number;
  const multi = tryLoad(true);
  if (multi < 0) {
    uprobeMulti = multi;
  } else {
    // A link on a directory: a kernel with uprobe_multi refuses the file (EBADF); one
    // without it refuses the attach type (EINVAL).
    const link = linkUprobeMulti(multi, {
      path: '/',
      offsets: [0n],
      cookies: [0n],
      retprobe: false,
    });
    if (link >= 0) closeFd(link);
    uprobeMulti = link >= 0 || link === EBADF ? 0 : link;
    closeFd(multi);
  }
  return { program: Math.min(program, 0), ringBuffer, uprobeMulti };
}
