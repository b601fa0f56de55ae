/**
 * Counting by user stack on the ptrace engine: the stopped thread's stack walked here, with
 * the same unwind tables and rules as the bpf engine's walker in the kernel (arch/x86-64's
 * unwindStack), its memory read through the tracer, and named as the bpf engine's stacks are.
 */
import { type Located, unwindStack } from '../arch/index.js';
import type { HitContext } from '../engines/index.js';
import { findMapping, isFileMapping, type MapEntry } from '../symbols/index.js';
import { type StackFile, StackFiles } from './stack-files.js';
import { type FrameRef, type NamedFrame, StackNamer } from './stack-namer.js';

/** Frames a stack keeps, as on the bpf engine (the last for the mark of a cut). */
const MAX_FRAMES = 63;

/** One walked stack: its process, its frames, and a key that tells it from other stacks. */
export interface WalkedStack {
  readonly pid: number;
  readonly frames: readonly FrameRef[];
  readonly id: string;
}

export class PtraceStacks {
  readonly files = new StackFiles();
  readonly namer: StackNamer;
  readonly #maps = new Map<number, MapEntry[]>();
  readonly #fileIds = new Map<StackFile, number>();

  constructor(
    options: {
      readonly inlines?: boolean | undefined;
      readonly sources?: boolean | undefined;
    } = {},
  ) {
    this.namer = new StackNamer(this.files, options);
  }

  /** The stack of the thread stopped at `hit`, innermost frame first. */
  walk(hit: HitContext): WalkedStack {
    const pid = hit.pid;
    const read = hit.readStackU64 ?? hit.readU64;
    const { frames, stop } = unwindStack<StackFile>(
      { pc: hit.regs.rip, sp: hit.regs.rsp, bp: hit.regs.get('rbp') },
      {
        maxFrames: MAX_FRAMES,
        read64: (address) => {
          try {
            return read(address);
          } catch {
            return undefined;
          }
        },
        locate: (pc) => this.#locate(pid, pc),
      },
    );
    const refs: FrameRef[] = frames.map((frame) =>
      frame.file === undefined || frame.fileOffset === undefined
        ? { kind: 'pc', pc: frame.pc }
        : { kind: 'file', file: frame.file, fileOffset: frame.fileOffset },
    );
    if (stop !== undefined) refs.push({ kind: 'cut', reason: stop });
    const id = refs
      .map((ref) => {
        switch (ref.kind) {
          case 'file':
            return `${this.#fileId(ref.file)}:${ref.fileOffset}`;
          case 'pc':
            return `@${ref.pc}`;
          case 'cut':
            return `!${ref.reason}`;
          default:
            return '?';
        }
      })
      .join(',');
    return { pid, frames: refs, id: `${pid}|${id}` };
  }

  name(stack: WalkedStack): NamedFrame[] {
    return this.namer.name(stack.pid, stack.frames);
  }

  #fileId(file: StackFile): number {
    let id = this.#fileIds.get(file);
    if (id === undefined) {
      id = this.#fileIds.size;
      this.#fileIds.set(file, id);
    }
    return id;
  }

  /** Where `pc` is in process `pid` (its map read again when no area holds the pc). */
  #locate(pid: number, pc: bigint): Located<StackFile> | undefined {
    let maps = this.#maps.get(pid);
    let entry = maps === undefined ? undefined : findMapping(maps, pc);
    if (entry === undefined) {
      maps = this.namer.snapshot(pid);
      if (maps !== undefined) this.#maps.set(pid, maps);
      entry = maps === undefined ? undefined : findMapping(maps, pc);
    }
    if (entry === undefined || !entry.executable) return undefined;
    if (entry.path === '[uprobes]') return { kind: 'uprobes' };
    if (!isFileMapping(entry)) return { kind: 'anonymous' };
    const file = this.files.fromProcess(pid, entry);
    if (file === undefined) return undefined;
    return {
      kind: 'file',
      file,
      fileOffset: pc - entry.start + entry.offset,
      table: file.table(),
    };
  }

  close(): void {
    this.namer.close();
    this.files.close();
  }
}
