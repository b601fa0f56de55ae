/**
 * Streaming handlers: each hit becomes one record in a BPF ring buffer, holding who and when
 * and the probe's fetched values, which user space reads from the buffer's mapped pages.
 *
 * A probe's attach cookie is `layout << 32 | probe`: `probe` is the probe's index in the
 * stream, `layout` the index of its record layout (probes fetching the same things share
 * one), so that one program serves every probe with a jump to its layout's code. A uprobe
 * session's probe (one uprobe whose program runs at a call's entry and again at its return)
 * holds both: see SESSION_COOKIE.
 */
import { ProbeError } from '../../errors/index.js';
import { BPF_FUNC } from '../../native/index.js';
import { type FetchArg, printFetchExpr } from '../../spec/index.js';
import { Asm } from './asm.js';
import type { SessionKfunc } from './btf.js';
import {
  alu64Imm,
  alu64Reg,
  call,
  callKfunc,
  type Insn,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  st,
  stx,
} from './insn.js';
import {
  BPF_RB_NO_WAKEUP,
  emitAddress,
  emitFetch,
  emitHitFilters,
  type Filters,
  fetchType,
  isStringType,
  processPrologue,
} from './programs.js';

/** Bytes kept of a fetched string (longer ones are cut, and marked so: see `cuts`). */
export const STREAM_STRING_BYTES = 256;
/**
 * A record's fixed part: probe, fault bits, time, tid, pid, cpu, the bits of the strings cut
 * (one per fetch, as the fault bits: the string went on past its slot), comm.
 */
export const RECORD_HEADER = {
  probe: 0,
  faults: 4,
  timeNs: 8,
  tid: 16,
  pid: 20,
  cpu: 24,
  cuts: 28,
  comm: 32,
  bytes: 48,
} as const;
/** A record's fault bits name its fetches: one bit each. */
export const MAX_STREAM_FETCHES = 32;

const SCRATCH = -8;

/** Where a record holds one fetched value, and as what. */
export interface FieldSlot {
  readonly fetch: FetchArg;
  readonly offset: number;
  readonly bytes: number;
  /** `string` for strings and comm, else a number of the fetch's type. */
  readonly string: boolean;
}

/** The fields of the probes sharing one layout, and their record's size. */
export interface RecordLayout {
  readonly key: string;
  readonly slots: readonly FieldSlot[];
  readonly bytes: number;
}

/** A record layout for a probe's fetches (throws ProbeError when there are too many). */
export function recordLayout(fetches: readonly FetchArg[]): RecordLayout {
  if (fetches.length > MAX_STREAM_FETCHES) {
    throw new ProbeError(
      'ERR_SPEC_INVALID',
      `Cannot stream ${fetches.length} fetches of one probe with the bpf engine: at most ${MAX_STREAM_FETCHES}`,
      { hints: ['Split the fetches over two specs of the same location'] },
    );
  }
  let offset: number = RECORD_HEADER.bytes;
  const slots: FieldSlot[] = [];
  for (const fetch of fetches) {
    const string = fetch.expr.kind === 'comm' || isStringType(fetch);
    const bytes = fetch.expr.kind === 'comm' ? 16 : string ? STREAM_STRING_BYTES : 8;
    slots.push({ fetch, offset, bytes, string });
    offset += bytes;
  }
  const key = fetches.map((f) => `${printFetchExpr(f.expr)}:${fetchType(f)}`).join(' ');
  return { key, slots, bytes: offset };
}

/** Maps a streaming handler uses, by file descriptor. */
export interface StreamMaps {
  readonly ring: number;
  /**
   * Hits lost because the ring buffer was full (per-CPU array): per probe, in the probe's
   * slot, or all in slot 0 with `lostInAll`.
   */
  readonly lost: number;
  readonly lostInAll?: boolean | undefined;
  /** Processes followed (a hash keyed by process id), when the stream is for some only. */
  readonly followed?: number | undefined;
}

/**
 * The handler of every probe of a stream: filters, then a record of the layout the cookie
 * names. A fetch that faults leaves its slot zeroed and its fault bit set.
 */
export function streamProgram(
  maps: StreamMaps,
  layouts: readonly RecordLayout[],
  filters: Filters,
  /** For a uprobe session link: the kfunc that tells a return from an entry. */
  session?: SessionKfunc | undefined,
): Insn[] {
  const a = new Asm();
  const out = 'out';
  processPrologue(a, filters, out, maps.followed);
  if (session !== undefined) emitSessionCookie(a, session);
  emitHitFilters(a, filters, out);
  a.emit(mov64Reg(7, 8), alu64Imm('RSH', 7, 32));
  for (let index = 0; index < layouts.length; index++) a.jmpImm('JEQ', 7, index, `layout.${index}`);
  a.goto(out);
  layouts.forEach((layout, index) => {
    a.label(`layout.${index}`);
    emitRecord(a, maps, layout, out);
  });
  a.label('lost');
  // Lost hits are counted per probe, in the probe's slot of the `lost` array (or in all).
  a.emit(maps.lostInAll === true ? st('W', 10, SCRATCH, 0) : stx('W', 10, SCRATCH, 8));
  a.emit(ldMapFd(1, maps.lost), mov64Reg(2, 10));
  a.emit(alu64Imm('ADD', 2, SCRATCH), call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, out);
  a.emit(ldx('DW', 1, 0, 0), alu64Imm('ADD', 1, 1), stx('DW', 0, 0, 1));
  a.label(out);
  a.returnZero();
  return a.finish();
}

/**
 * The cookie of a uprobe session's probe: the entry's probe index (bits 0-23), the return's
 * (24-47), the entry's layout (48-55) and the return's (56-63). Its program makes the cookie
 * of the side it runs for (`layout << 32 | probe`) before anything reads it.
 */
export const SESSION_COOKIE = { probes: 2 ** 24, layouts: 2 ** 8 } as const;

/** The session cookie of an entry and a return probe (`layout << 32 | probe` each). */
export function sessionCookie(entry: number, ret: number): bigint {
  const probe = (cookie: number) => BigInt(cookie % 2 ** 32);
  const layout = (cookie: number) => BigInt(Math.floor(cookie / 2 ** 32));
  return probe(entry) | (probe(ret) << 24n) | (layout(entry) << 48n) | (layout(ret) << 56n);
}

/** Whether a probe's cookie (`layout << 32 | probe`) fits its half of a session cookie. */
export function fitsSessionCookie(cookie: number): boolean {
  return (
    cookie % 2 ** 32 < SESSION_COOKIE.probes &&
    Math.floor(cookie / 2 ** 32) < SESSION_COOKIE.layouts
  );
}

/** Turn the session cookie in r8 into the cookie of the side this run is for (r7 clobbered). */
function emitSessionCookie(a: Asm, session: SessionKfunc): void {
  if (session.takesContext) a.emit(mov64Reg(1, 6));
  a.emit(callKfunc(session.btfId));
  a.jmpImm('JNE', 0, 0, 'session.return');
  a.emit(mov64Reg(7, 8), alu64Imm('AND', 7, SESSION_COOKIE.probes - 1));
  a.emit(mov64Reg(1, 8), alu64Imm('RSH', 1, 48), alu64Imm('AND', 1, SESSION_COOKIE.layouts - 1));
  a.goto('session.cookie');
  a.label('session.return');
  a.emit(mov64Reg(7, 8), alu64Imm('RSH', 7, 24), alu64Imm('AND', 7, SESSION_COOKIE.probes - 1));
  a.emit(mov64Reg(1, 8), alu64Imm('RSH', 1, 56));
  a.label('session.cookie');
  a.emit(alu64Imm('LSH', 1, 32), alu64Reg('OR', 7, 1), mov64Reg(8, 7));
}

/** Reserve a record (r9), fill it, submit it; a full buffer jumps to `lost`. */
function emitRecord(a: Asm, maps: StreamMaps, layout: RecordLayout, out: string): void {
  a.emit(ldMapFd(1, maps.ring), mov64Imm(2, layout.bytes), mov64Imm(3, 0));
  a.emit(call(BPF_FUNC.ringbuf_reserve));
  a.jmpImm('JEQ', 0, 0, 'lost');
  a.emit(mov64Reg(9, 0));
  a.emit(stx('W', 9, RECORD_HEADER.probe, 8), st('W', 9, RECORD_HEADER.faults, 0));
  a.emit(call(BPF_FUNC.ktime_get_ns), stx('DW', 9, RECORD_HEADER.timeNs, 0));
  a.emit(call(BPF_FUNC.get_current_pid_tgid), stx('DW', 9, RECORD_HEADER.tid, 0));
  a.emit(call(BPF_FUNC.get_smp_processor_id), stx('DW', 9, RECORD_HEADER.cpu, 0));
  a.emit(mov64Reg(1, 9), alu64Imm('ADD', 1, RECORD_HEADER.comm), mov64Imm(2, 16));
  a.emit(call(BPF_FUNC.get_current_comm));
  layout.slots.forEach((slot, index) => {
    const fault = a.fresh('fault');
    const next = a.fresh('next');
    if (slot.fetch.expr.kind === 'comm') {
      a.emit(mov64Reg(1, 9), alu64Imm('ADD', 1, slot.offset), mov64Imm(2, slot.bytes));
      a.emit(call(BPF_FUNC.get_current_comm));
      return;
    }
    if (slot.string) {
      emitAddress(a, slot.fetch, fault);
      a.emit(mov64Reg(1, 9), alu64Imm('ADD', 1, slot.offset), mov64Imm(2, slot.bytes));
      a.emit(mov64Reg(3, 7), call(BPF_FUNC.probe_read_user_str));
      // 0 is a read that failed without an error: even an empty string counts its NUL.
      a.jmpImm('JSLE', 0, 0, fault);
      // A string that filled its slot (its last byte the NUL the helper wrote) may go on:
      // it does when the byte of the source there is not a NUL. Then its cut bit is set.
      a.jmpImm('JNE', 0, slot.bytes, next);
      a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, SCRATCH), mov64Imm(2, 1));
      a.emit(mov64Reg(3, 7), alu64Imm('ADD', 3, slot.bytes - 1));
      a.emit(call(BPF_FUNC.probe_read_user));
      a.jmpImm('JNE', 0, 0, next);
      a.emit(ldx('B', 1, 10, SCRATCH));
      a.jmpImm('JEQ', 1, 0, next);
      a.emit(ldx('W', 1, 9, RECORD_HEADER.cuts));
      a.emit(mov64Imm(2, 1), alu64Imm('LSH', 2, index), alu64Reg('OR', 1, 2));
      a.emit(stx('W', 9, RECORD_HEADER.cuts, 1));
      a.goto(next);
    } else {
      emitFetch(a, slot.fetch, fault);
      a.emit(stx('DW', 9, slot.offset, 7));
      a.goto(next);
    }
    if (a.isTarget(fault)) {
      a.label(fault);
      a.emit(st('DW', 9, slot.offset, 0), ldx('W', 1, 9, RECORD_HEADER.faults));
      // Bit 31 does not fit a sign-extended immediate of an OR: set it with a shift.
      a.emit(mov64Imm(2, 1), alu64Imm('LSH', 2, index), alu64Reg('OR', 1, 2));
      a.emit(stx('W', 9, RECORD_HEADER.faults, 1));
    }
    a.label(next);
  });
  a.emit(mov64Reg(1, 9), mov64Imm(2, BPF_RB_NO_WAKEUP), call(BPF_FUNC.ringbuf_submit));
  a.goto(out);
}
