import { readFileSync } from 'node:fs';
import { ProbeError } from '../../errors/index.js';
import { SYSCALL } from '../../native/index.js';
import type { Tracee } from './tracee.js';

const PAGE_BYTES = 4096n;
const PROT_READ = 1n;
const PROT_EXEC = 4n;
const MAP_PRIVATE = 0x02n;
const MAP_ANONYMOUS = 0x20n;
const MAP_FIXED_NOREPLACE = 0x100000n;
/** A rel32 reaches ±2 GiB; keep a margin for the instruction lengths around it. */
const REACH = (1n << 31n) - PAGE_BYTES * 2n;
/** The lowest address mmap may use (vm.mmap_min_addr is 64 KiB by default). */
const LOWEST = 0x10000n;
/** The top of user space on x86-64 with 4-level page tables. */
const HIGHEST = 0x7fff_ffff_f000n;

/** One executable page in the tracee, cut into slots. */
interface Area {
  readonly vaddr: bigint;
  readonly slots: number;
  next: number;
  readonly free: number[];
}

/**
 * The out-of-line areas of a traced process: executable pages injected into it (by making a
 * stopped thread run mmap), each within ±2 GiB of the code it serves, so that a displaced
 * instruction's %rip-relative operand and the jump back can be encoded with 32-bit offsets.
 * A slot holds one displaced instruction and its jump back. The pages stay mapped when the
 * tracer detaches (nothing runs there once every breakpoint is gone).
 */
export class XolArea {
  readonly #tracee: Tracee;
  readonly #slotBytes: number;
  readonly #areas: Area[] = [];

  constructor(tracee: Tracee, slotBytes: number) {
    this.#tracee = tracee;
    this.#slotBytes = slotBytes;
  }

  /**
   * A free slot within reach of `near` (a new page is mapped through thread `tid`, which must
   * be stopped, when none has room). Throws ProbeError ERR_XOL_UNAVAILABLE when no address
   * within reach is free.
   */
  take(near: bigint, tid: number): bigint {
    for (const area of this.#areas) {
      if (distance(area.vaddr, near) > REACH) continue;
      const slot = area.free.pop() ?? (area.next < area.slots ? area.next++ : undefined);
      if (slot !== undefined) return area.vaddr + BigInt(slot * this.#slotBytes);
    }
    const area = this.#map(near, tid);
    this.#areas.push(area);
    return area.vaddr + BigInt(area.next++ * this.#slotBytes);
  }

  /** Unmap every page, through stopped thread `tid` (no thread may be running in them). */
  unmapAll(tid: number): void {
    for (const area of this.#areas.splice(0)) {
      this.#tracee.injectSyscall(tid, SYSCALL.munmap, [area.vaddr, PAGE_BYTES]);
    }
  }

  /** The same pages in a forked child of the process (it has a copy of each, slots included). */
  copyFor(child: Tracee): XolArea {
    const copy = new XolArea(child, this.#slotBytes);
    for (const area of this.#areas) copy.#areas.push({ ...area, free: [...area.free] });
    return copy;
  }

  /** Forget every page: the process exec'd, and its memory is new. */
  forget(): void {
    this.#areas.length = 0;
  }

  /** Give a slot back once nothing can be running in it. */
  release(slot: bigint): void {
    const area = this.#areas.find((a) => slot >= a.vaddr && slot < a.vaddr + PAGE_BYTES);
    area?.free.push(Number(slot - area.vaddr) / this.#slotBytes);
  }

  /** Write a slot's bytes (the page is not writable by the tracee; /proc/PID/mem can). */
  fill(slot: bigint, bytes: Uint8Array): void {
    this.#tracee.write(slot, bytes);
  }

  #map(near: bigint, tid: number): Area {
    const tried: string[] = [];
    for (const hint of candidates(readMaps(this.#tracee.pid), near)) {
      const result = this.#tracee.injectSyscall(tid, SYSCALL.mmap, [
        hint,
        PAGE_BYTES,
        PROT_READ | PROT_EXEC,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
        -1n,
        0n,
      ]);
      if (result === hint) {
        return { vaddr: hint, slots: Number(PAGE_BYTES) / this.#slotBytes, next: 0, free: [] };
      }
      tried.push(`0x${hint.toString(16)}: ${result < 0n ? `errno ${-result}` : 'moved'}`);
      if (result > 0n) {
        this.#tracee.injectSyscall(tid, SYSCALL.munmap, [result, PAGE_BYTES]);
      }
      if (tried.length >= 8) break;
    }
    throw new ProbeError(
      'ERR_XOL_UNAVAILABLE',
      `Cannot map an out-of-line page within 2 GiB of 0x${near.toString(16)} in process ${this.#tracee.pid}`,
      { details: { tried } },
    );
  }
}

function distance(a: bigint, b: bigint): bigint {
  return a > b ? a - b : b - a;
}

/** A mapped range of a process and its name (`[stack]`, a path, or empty). */
export interface MappedRange {
  readonly start: bigint;
  readonly end: bigint;
  readonly name: string;
}

/** The mapped ranges of a process, sorted. */
function readMaps(pid: number): MappedRange[] {
  const text = readFileSync(`/proc/${pid}/maps`, 'utf8');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const fields = line.split(/\s+/);
      const [start, end] = fields[0]!.split('-');
      return {
        start: BigInt(`0x${start}`),
        end: BigInt(`0x${end}`),
        name: fields.slice(5).join(' '),
      };
    })
    .sort((a, b) => (a.start < b.start ? -1 : 1));
}

/**
 * Free pages just below a mapping, nearest to `near` first, all within reach. Never below the
 * stack (it grows down into that room) and never above anything (the heap grows up after
 * the program's data), so the page takes room from neither.
 */
export function candidates(maps: readonly MappedRange[], near: bigint): bigint[] {
  const found: bigint[] = [];
  const free = (vaddr: bigint) =>
    vaddr >= LOWEST &&
    vaddr + PAGE_BYTES <= HIGHEST &&
    maps.every((m) => vaddr + PAGE_BYTES <= m.start || vaddr >= m.end);
  for (const m of maps) {
    if (m.name === '[stack]') continue;
    const vaddr = m.start - PAGE_BYTES;
    if (distance(vaddr, near) <= REACH && free(vaddr)) found.push(vaddr);
  }
  return found.sort((a, b) => (distance(a, near) < distance(b, near) ? -1 : 1));
}
