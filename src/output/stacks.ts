import type { StackFrame } from '../events/index.js';
import { hex } from './json.js';

/**
 * A user stack as results carry it: its process, and its frames innermost first, each either
 * structured or as text (`symbol+0xoff (object)`, the way stacks are named today).
 */
export interface Stack {
  readonly pid: number;
  readonly frames: readonly (StackFrame | string)[];
}

/**
 * A stack and what was counted on it: a row of `count --by ustack` (hits), of a report of
 * outstanding allocations (bytes, and how many allocations hold them), or of a recording's
 * call tree (a call path: the time spent in its last function itself, and its calls).
 */
export interface StackCount {
  readonly probe: string;
  /** Absent or empty when no user stack could be taken. */
  readonly stack?: Stack | undefined;
  readonly count: bigint;
  readonly bytes?: bigint | undefined;
  /** Nanoseconds spent on this stack: in its innermost frame, not in the calls it made. */
  readonly timeNs?: bigint | undefined;
}

/** What a stack's weight is: its hits (`count`), its bytes, or its time (`timeNs`). */
export type StackWeight = 'hits' | 'bytes' | 'time';

/** The unit a weight is counted in, as the stack formats say it. */
export function weightUnit(weight: StackWeight): 'hits' | 'bytes' | 'ns' {
  return weight === 'time' ? 'ns' : weight;
}

/** The frame of a stack that could not be taken. */
export const NO_STACK = '[no user stack]';

const NAMED = /^(.+?)(?:\+0x([0-9a-f]+))? \(([^()]+)\)$/;
const UNNAMED = /^0x([0-9a-f]+) \(([^()]+)\)$/;
const ADDRESS = /^0x([0-9a-f]+)$/;

/**
 * A frame as a structured value. Text is read as the stack symbolizer writes it:
 * `function+0xoff (object)`, `0xfileoffset (object)` when no symbol covers it, or the bare
 * runtime address when no file is mapped there; anything else is taken as a function name.
 */
export function frameOf(frame: StackFrame | string): StackFrame {
  if (typeof frame !== 'string') return frame;
  let m = ADDRESS.exec(frame);
  if (m !== null) return { address: BigInt(`0x${m[1]}`) };
  m = UNNAMED.exec(frame);
  if (m !== null) return { fileOffset: BigInt(`0x${m[1]}`), object: m[2] };
  m = NAMED.exec(frame);
  if (m !== null) {
    return {
      function: m[1],
      symbolOffset: m[2] === undefined ? 0n : BigInt(`0x${m[2]}`),
      object: m[3],
    };
  }
  return { function: frame };
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/**
 * A frame's name where frames are merged by name (folded stacks, flame graphs, pprof
 * functions): the function without its offset or symbol version; where no symbol covers the address,
 * `object+0xfileoffset`; else the address, or `[unknown]`. With `offsets`, a function's
 * offset is kept (`parse+0x1a`).
 */
export function frameLabel(frame: StackFrame, offsets = false): string {
  if (frame.function !== undefined) {
    // A symbol's version (usleep@@GLIBC_2.2.5) names no other function.
    const name = frame.function.replace(/@@?[A-Za-z0-9_.]+$/, '');
    const offset = frame.symbolOffset ?? 0n;
    return offsets && offset !== 0n ? `${name}+${hex(offset)}` : name;
  }
  if (frame.object !== undefined && frame.fileOffset !== undefined) {
    return `${baseName(frame.object)}+${hex(frame.fileOffset)}`;
  }
  if (frame.address !== undefined) return hex(frame.address);
  if (frame.object !== undefined) return `[${baseName(frame.object)}]`;
  return '[unknown]';
}

/**
 * A frame as text, the way the stack symbolizer writes it (and frameOf() reads it back):
 * `function+0xoff (object)`, `0xfileoffset (object)`, or the runtime address.
 */
export function frameText(frame: StackFrame | string): string {
  if (typeof frame === 'string') return frame;
  const object = frame.object === undefined ? '' : ` (${baseName(frame.object)})`;
  if (frame.function !== undefined) {
    const offset = frame.symbolOffset ?? 0n;
    return `${frame.function}${offset === 0n ? '' : `+${hex(offset)}`}${object}`;
  }
  if (frame.fileOffset !== undefined && object !== '') return `${hex(frame.fileOffset)}${object}`;
  if (frame.address !== undefined) return hex(frame.address);
  return `[unknown]${object}`;
}

/** A stack's weight as `weight` says; a row without bytes (or time) weighs 0 of them. */
export function weightOf(row: StackCount, weight: StackWeight): bigint {
  return weight === 'bytes'
    ? (row.bytes ?? 0n)
    : weight === 'time'
      ? (row.timeNs ?? 0n)
      : row.count;
}

/** The frames of a row, outermost (root) first; a row without a stack has one frame, NO_STACK. */
export function rootFirst(row: StackCount): StackFrame[] {
  const frames = row.stack?.frames ?? [];
  if (frames.length === 0) return [{ function: NO_STACK }];
  return frames.map(frameOf).reverse();
}
