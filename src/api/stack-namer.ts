/**
 * Names of stack frames, as `count --by ustack` shows them: `function+0xoff (file)` for each
 * frame, and for the folded key the function's name alone (`file+0xvaddr` where no symbol
 * names it), so that stacks of two runs fold together. Frames in a file are named from the
 * file itself (see stack-files.ts); a pc in anonymous memory from the process's JIT maps
 * (`/tmp/perf-PID.map`, jitdump), read again as they grow; any other pc from the last snapshot
 * of the process's memory map.
 */
import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { type StopReason, stopFrameText, stopReasonOf } from '../arch/index.js';
import type { StackFrame } from '../events/index.js';
import { frameOf, hex } from '../output/index.js';
import { readProcessMaps } from '../plan/index.js';
import {
  findMapping,
  isFileMapping,
  JitSymbols,
  type MapEntry,
  parseJitDump,
  parsePerfMap,
} from '../symbols/index.js';
import { namespacePid, type StackFile, type StackFiles } from './stack-files.js';

/** A frame to name: in a file (at a file offset), at a bare pc, or the mark of a cut. */
export type FrameRef =
  | { readonly kind: 'file'; readonly file: StackFile; readonly fileOffset: bigint }
  | { readonly kind: 'pc'; readonly pc: bigint }
  | { readonly kind: 'cut'; readonly reason: StopReason | number }
  /** In a file that could not be opened. */
  | { readonly kind: 'unknown' };

export interface NamedFrame {
  /** As the frame is shown: `parse+0x1a (app)`. */
  readonly text: string;
  /** As the folded key has it: `parse`. */
  readonly key: string;
  /** With `sources`: where the frame is in the source, when debug info says. */
  readonly source?: { readonly file: string; readonly line: number } | undefined;
}

export interface StackNamerOptions {
  /** Expand functions inlined at each frame into frames of their own (from DWARF). */
  readonly inlines?: boolean | undefined;
  /** Give each frame in a file its source file and line, where debug info (DWARF) has them. */
  readonly sources?: boolean | undefined;
}

/**
 * A growing file read from where the last read stopped, through a descriptor opened when it
 * was found (a path under /proc/PID/root is gone once the process has ended).
 */
interface Tail {
  readonly path: string;
  readonly fd: number;
  offset: number;
  pending: string;
}

function openTail(path: string): Tail | undefined {
  try {
    return { path, fd: openSync(path, 'r'), offset: 0, pending: '' };
  } catch {
    return undefined;
  }
}

/** What is known of one process: its last memory map, and its JIT code's names. */
class ProcessRecord {
  maps: MapEntry[] | undefined;
  readonly jit = new JitSymbols();
  perfMap: Tail | undefined;
  jitDump: (Tail & { readonly named: Map<bigint, string> }) | undefined;
  jitChecked = false;

  constructor(readonly pid: number) {}
}

/** Folded stacks separate frames with ';': a name must not hold one. */
function keyText(name: string): string {
  return name.replace(/;/g, ':').replace(/\n/g, ' ');
}

export class StackNamer {
  readonly #files: StackFiles;
  readonly #inlines: boolean;
  readonly #sources: boolean;
  readonly #processes = new Map<number, ProcessRecord>();

  constructor(files: StackFiles, options: StackNamerOptions = {}) {
    this.#files = files;
    this.#inlines = options.inlines === true;
    this.#sources = options.sources === true;
  }

  #process(pid: number): ProcessRecord {
    let record = this.#processes.get(pid);
    if (record === undefined) {
      record = new ProcessRecord(pid);
      this.#processes.set(pid, record);
    }
    return record;
  }

  /** Keep the process's memory map as it is now (the last one stays when it cannot be read). */
  snapshot(pid: number): MapEntry[] | undefined {
    const record = this.#process(pid);
    try {
      const maps = readProcessMaps(pid);
      if (maps.length > 0) record.maps = maps;
      this.#findJitFiles(record);
    } catch {
      // ended, or not ours to read
    }
    return record.maps;
  }

  /** Close the JIT files kept open. */
  close(): void {
    for (const record of this.#processes.values()) {
      for (const tail of [record.perfMap, record.jitDump]) {
        if (tail !== undefined) closeSync(tail.fd);
      }
      record.perfMap = undefined;
      record.jitDump = undefined;
    }
  }

  /** The last snapshot of the process's memory map, if any. */
  mapsOf(pid: number): MapEntry[] | undefined {
    return this.#processes.get(pid)?.maps;
  }

  /** The names of a stack's frames, innermost first (a frame may become several: inlines). */
  name(pid: number, frames: readonly FrameRef[]): NamedFrame[] {
    const named: NamedFrame[] = [];
    let caller = false;
    for (const frame of frames) {
      named.push(...this.frame(pid, frame, caller));
      caller = true;
    }
    return named;
  }

  /**
   * One frame's names. A caller's frame is at a return address, which may be past the end of
   * a call that does not return: its function is looked up at the byte before.
   */
  frame(pid: number, frame: FrameRef, caller: boolean): NamedFrame[] {
    switch (frame.kind) {
      case 'cut': {
        const reason = typeof frame.reason === 'number' ? stopReasonOf(frame.reason) : frame.reason;
        const text = reason === undefined ? '[stack cut]' : stopFrameText(reason);
        return [{ text, key: text }];
      }
      case 'file':
        return this.#fileFrame(frame.file, frame.fileOffset, caller);
      case 'unknown':
        return [{ text: '[unknown]', key: '[unknown]' }];
      case 'pc':
        return this.#pcFrame(pid, frame.pc, caller);
    }
  }

  #fileFrame(file: StackFile, fileOffset: bigint, caller: boolean): NamedFrame[] {
    const vaddr = file.elf.fileOffsetToVaddr(fileOffset);
    const object = file.object;
    if (vaddr === undefined) {
      const text = `${object}+${hex(fileOffset)}`;
      return [{ text, key: text }];
    }
    const lookup = caller && vaddr > 0n ? vaddr - 1n : vaddr;
    const fn = file.functionAt(lookup);
    if (fn === undefined) {
      const text = `${object}+${hex(vaddr)}`;
      return [{ text, key: text }];
    }
    const name = fn.demangled ?? fn.name;
    const offset = vaddr - fn.vaddr;
    const source = this.#sources ? file.sourceAt(lookup) : undefined;
    const own = {
      text: `${name}${offset === 0n ? '' : `+${hex(offset)}`} (${object})`,
      key: keyText(name),
      ...(source === undefined ? {} : { source }),
    };
    if (!this.#inlines) return [own];
    const inlined = file.inlinedAt(lookup).map((inner) => ({
      text: `${inner} (inlined) (${object})`,
      key: keyText(inner),
    }));
    return [...inlined, own];
  }

  #pcFrame(pid: number, pc: bigint, caller: boolean): NamedFrame[] {
    const record = this.#process(pid);
    let entry = record.maps === undefined ? undefined : findMapping(record.maps, pc);
    if (entry === undefined && existsSync(`/proc/${pid}`)) {
      this.snapshot(pid);
      entry = record.maps === undefined ? undefined : findMapping(record.maps, pc);
    }
    if (entry !== undefined && isFileMapping(entry)) {
      const file = this.#files.fromProcess(pid, entry);
      if (file !== undefined) return this.#fileFrame(file, pc - entry.start + entry.offset, caller);
      const object = entry.path.slice(entry.path.lastIndexOf('/') + 1);
      const text = `${object}+${hex(pc - entry.start + entry.offset)}`;
      return [{ text, key: text }];
    }
    const jit = this.jitName(pid, pc);
    if (jit !== undefined) {
      return [
        {
          text: `${jit.name}${jit.offset === 0n ? '' : `+${hex(jit.offset)}`}`,
          key: keyText(jit.name),
        },
      ];
    }
    const text = hex(pc);
    return [{ text, key: text }];
  }

  /**
   * The JIT code at `address` in the process: from its perf map and jitdump file, read from
   * where the last read stopped (they grow while the process runs).
   */
  jitName(pid: number, address: bigint): { name: string; offset: bigint } | undefined {
    const record = this.#process(pid);
    const known = record.jit.lookup(address);
    if (known !== undefined) return known;
    this.#readJit(record);
    return record.jit.lookup(address);
  }

  /** The JIT files of the process read so far: its perf map and jitdump file, if found. */
  jitSources(pid: number): string[] {
    const record = this.#processes.get(pid);
    if (record === undefined) return [];
    return [record.perfMap?.path, record.jitDump?.path].filter((p): p is string => p !== undefined);
  }

  #findJitFiles(record: ProcessRecord): void {
    if (record.perfMap === undefined) {
      const nsPid = namespacePid(record.pid);
      for (const path of [
        `/proc/${record.pid}/root/tmp/perf-${nsPid}.map`,
        `/tmp/perf-${record.pid}.map`,
      ]) {
        record.perfMap = openTail(path);
        if (record.perfMap !== undefined) break;
      }
    }
    if (record.jitDump === undefined && record.maps !== undefined) {
      // A runtime writing jitdump maps the file, so that perf finds it: so do we.
      const dump = record.maps.find((m) => /\/jit-\d+\.dump$/.test(m.path));
      if (dump !== undefined) {
        const tail = openTail(`/proc/${record.pid}/root${dump.path}`) ?? openTail(dump.path);
        if (tail !== undefined) record.jitDump = { ...tail, named: new Map() };
      }
    }
  }

  #readJit(record: ProcessRecord): void {
    if (!record.jitChecked || record.perfMap === undefined || record.jitDump === undefined) {
      record.jitChecked = true;
      if (record.maps === undefined && existsSync(`/proc/${record.pid}`)) this.snapshot(record.pid);
      this.#findJitFiles(record);
    }
    const map = record.perfMap;
    if (map !== undefined) {
      const text = readFrom(map.fd, map.offset);
      if (text !== undefined && text.length > 0) {
        const piece = map.pending + text.toString('utf8');
        const { entries, consumed } = parsePerfMap(piece);
        record.jit.add(entries);
        map.offset += text.length;
        map.pending = piece.slice(consumed);
      }
    }
    const dump = record.jitDump;
    if (dump !== undefined) {
      const bytes = readFrom(dump.fd, dump.offset);
      if (bytes !== undefined && bytes.length > 0) {
        const parsed = parseJitDump(bytes, dump.offset === 0, dump.named);
        if (parsed !== undefined) {
          record.jit.add(parsed.entries);
          dump.offset += parsed.consumed;
        }
      }
    }
  }
}

/** The bytes of an open file from `offset` to its end (undefined when it cannot be read). */
function readFrom(fd: number, offset: number): Buffer | undefined {
  try {
    const size = fstatSync(fd).size;
    if (size <= offset) return Buffer.alloc(0);
    const bytes = Buffer.alloc(size - offset);
    let done = 0;
    while (done < bytes.length) {
      const read = readSync(fd, bytes, done, bytes.length - done, offset + done);
      if (read === 0) break;
      done += read;
    }
    return bytes.subarray(0, done);
  } catch {
    return undefined;
  }
}

/** A named frame as a structured one: function, offset, object, and its source line. */
export function structuredFrame(frame: NamedFrame): StackFrame {
  const parsed = frameOf(frame.text);
  return frame.source === undefined
    ? parsed
    : { ...parsed, file: frame.source.file, line: frame.source.line };
}
