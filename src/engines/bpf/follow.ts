/**
 * Which processes a bpf run covers, decided in the kernel: a hash map of the process ids
 * followed, that every handler's prologue looks up, kept by handlers on the scheduler's
 * tracepoints. A process given at the start is followed with the children it forks
 * afterwards; a command that upscope started stopped before its exec (`-c`) is followed from
 * its exec on, so that the launcher's own code (a shell) is never counted; a process that
 * ends leaves the map, so that its id, once reused, is not followed by mistake.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProbeError } from '../../errors/index.js';
import { BPF_FUNC } from '../../native/index.js';
import { parseEventFormat } from '../tracefs/index.js';
import { Asm } from './asm.js';
import { alu64Imm, call, type Insn, ldMapFd, ldx, mov64Imm, mov64Reg, st, stx } from './insn.js';
import type { BpfMap } from './kernel.js';
import { BPF_RB_NO_WAKEUP } from './programs.js';
import type { RingBuffer } from './ring-buffer.js';
import { SCOPE_EXIT, SCOPE_FORK, SCOPE_RECORD } from './scope.js';
import type { BpfSession } from './session.js';

/** The processes a run follows. */
export interface FollowSpec {
  /** Processes followed from the start (every thread), each with the children it forks. */
  readonly pids: readonly number[];
  /**
   * A process started stopped before its exec (upscope's `-c`): followed from its exec on,
   * with the children it forks from then.
   */
  readonly startAtExecOf?: number | undefined;
  /** Follow the children the processes fork (default true). */
  readonly forks?: boolean | undefined;
  /** Where tracefs is mounted: the sched tracepoints' ids and record formats are read there. */
  readonly tracefs: string | undefined;
}

/** Processes followed at once (a process and its children). */
export const MAX_FOLLOWED = 32768;

const SCRATCH = -8;
const VALUE = -16;
/** Where a record for user space is made (see scope.ts). */
const RECORD = -24;

/** The tracefs id of a tracepoint and its record format's fields (name -> offset). */
function tracepoint(
  tracefs: string | undefined,
  system: string,
  name: string,
): { id: number; fields: Map<string, number> } {
  if (tracefs === undefined) {
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      `Cannot use tracepoint ${system}:${name} to follow processes: tracefs is not mounted`,
      { hints: ['Mount it as root: mount -t tracefs nodev /sys/kernel/tracing'] },
    );
  }
  const dir = join(tracefs, 'events', system, name);
  try {
    const format = parseEventFormat(readFileSync(join(dir, 'format'), 'utf8'));
    const id = Number(readFileSync(join(dir, 'id'), 'utf8').trim());
    return { id, fields: new Map(format.fields.map((f) => [f.name, f.offset])) };
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    if (code === 'EACCES' || code === 'EPERM') {
      throw new ProbeError(
        'ERR_PRIVILEGES',
        `Cannot read tracepoint ${system}:${name} to follow the process: ${join(dir, 'id')}: ${code}`,
        {
          cause,
          hints: [
            'Following -p or -c on the bpf engine reads the sched tracepoints in tracefs: run as root, or mount tracefs readable for you',
            'With CAP_BPF and CAP_PERFMON alone, trace every process (no -p or -c), or use count/hist/latency -p, or --engine ptrace',
          ],
        },
      );
    }
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot use tracepoint ${system}:${name} to follow processes: ${(cause as Error).message}`,
      { cause, hints: ['Trace every process (no -p or -c), or use --engine tracefs'] },
    );
  }
}

function field(
  point: { fields: Map<string, number> },
  name: string,
  tracepointName: string,
): number {
  const offset = point.fields.get(name);
  if (offset === undefined) {
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot use tracepoint ${tracepointName} to follow processes: its format has no ${name}`,
    );
  }
  return offset;
}

/**
 * Make the map of followed processes and attach the handlers that keep it, in `session`
 * (they are detached with its probes). Returns the map, for the probes' prologue. Throws
 * ProbeError when the tracepoints cannot be read (ERR_PRIVILEGES, ERR_TRACEFS_NOT_MOUNTED,
 * ERR_NOT_SUPPORTED) before anything is attached.
 */
export function followProcesses(
  session: BpfSession,
  spec: FollowSpec,
  announce?: RingBuffer,
): BpfMap {
  const forks = spec.forks ?? true;
  const fork = forks ? tracepoint(spec.tracefs, 'sched', 'sched_process_fork') : undefined;
  const exit = tracepoint(spec.tracefs, 'sched', 'sched_process_exit');
  const exec =
    spec.startAtExecOf === undefined
      ? undefined
      : tracepoint(spec.tracefs, 'sched', 'sched_process_exec');
  const childPid =
    fork === undefined ? undefined : field(fork, 'child_pid', 'sched:sched_process_fork');
  const followed = session.map({
    kind: 'hash',
    name: 'followed',
    keyBytes: 4,
    valueBytes: 4,
    maxEntries: MAX_FOLLOWED,
  });
  const one = new Uint8Array([1, 0, 0, 0]);
  for (const pid of spec.pids) followed.update(pidKey(pid), one);
  // Exits first, then execs, then forks: a process is never left in the map by a handler
  // that came before the one that takes it out.
  session.attachTracepoint(
    exit.id,
    'sched:sched_process_exit',
    forgetExitedProgram(followed.fd, exit.fields.get('group_dead'), announce?.map.fd),
  );
  if (exec !== undefined) {
    session.attachTracepoint(
      exec.id,
      'sched:sched_process_exec',
      followExecProgram(followed.fd, spec.startAtExecOf!),
    );
  }
  if (fork !== undefined) {
    session.attachTracepoint(
      fork.id,
      'sched:sched_process_fork',
      followForksProgram(followed.fd, childPid!, announce?.map.fd),
    );
  }
  return followed;
}

/** Add processes to a map made by followProcesses() (descendants found after the start). */
export function followMore(followed: BpfMap, pids: readonly number[]): void {
  const one = new Uint8Array([1, 0, 0, 0]);
  for (const pid of pids) followed.update(pidKey(pid), one);
}

function pidKey(pid: number): Uint8Array {
  const key = new Uint8Array(4);
  new DataView(key.buffer).setUint32(0, pid, true);
  return key;
}

/** `followed[*(u32 *)(fp + SCRATCH)] = 1` */
function emitFollow(a: Asm, followed: number): void {
  a.emit(st('W', 10, VALUE, 1));
  a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
  a.emit(mov64Reg(3, 10), alu64Imm('ADD', 3, VALUE), mov64Imm(4, 0));
  a.emit(call(BPF_FUNC.map_update_elem));
}

/**
 * Tell user space (ring buffer `ring`) that process `*(u32 *)(fp + pidAt)` came (`kind`
 * SCOPE_FORK) or went (SCOPE_EXIT). A full buffer drops the record (64 KiB: 8,000 of them).
 */
function emitAnnounce(a: Asm, ring: number, kind: number, pidAt: number): void {
  a.emit(st('W', 10, RECORD + SCOPE_RECORD.kind, kind));
  a.emit(ldx('W', 1, 10, pidAt), stx('W', 10, RECORD + SCOPE_RECORD.pid, 1));
  a.emit(ldMapFd(1, ring), mov64Reg(2, 10), alu64Imm('ADD', 2, RECORD));
  a.emit(mov64Imm(3, SCOPE_RECORD.bytes), mov64Imm(4, BPF_RB_NO_WAKEUP));
  a.emit(call(BPF_FUNC.ringbuf_output));
}

/**
 * At `sched_process_fork`: a child of a followed process is followed too. `childPidOffset`
 * is where the tracepoint's record holds `child_pid` (from its format). A new thread's id is
 * added as well (the tracepoint does not tell threads from processes): harmless, as its
 * process is followed already, and taken out again when the thread ends.
 */
export function followForksProgram(
  followed: number,
  childPidOffset: number,
  announce?: number,
): Insn[] {
  const a = new Asm();
  const out = 'out';
  a.emit(mov64Reg(6, 1));
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32), stx('W', 10, SCRATCH, 0));
  a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, out);
  a.emit(ldx('W', 1, 6, childPidOffset), stx('W', 10, SCRATCH, 1));
  emitFollow(a, followed);
  if (announce !== undefined) emitAnnounce(a, announce, SCOPE_FORK, SCRATCH);
  a.label(out);
  a.returnZero();
  return a.finish();
}

/** At `sched_process_exec`: process `pid` (started stopped before its exec) is followed from now. */
export function followExecProgram(followed: number, pid: number): Insn[] {
  const a = new Asm();
  const out = 'out';
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
  a.jmpImm('JNE', 0, pid, out);
  a.emit(stx('W', 10, SCRATCH, 0));
  emitFollow(a, followed);
  a.label(out);
  a.returnZero();
  return a.finish();
}

/**
 * At `sched_process_exit` (once per thread): a thread that is not its process's leader takes
 * its own id out (a fork handler may have put it in); the last thread of a process takes the
 * process's id out (`group_dead`, at `groupDeadOffset` in the record, on kernels that have it;
 * without it, the leader's exit does).
 */
export function forgetExitedProgram(
  followed: number,
  groupDeadOffset: number | undefined,
  announce?: number,
): Insn[] {
  const a = new Asm();
  const out = 'out';
  const leader = 'leader';
  a.emit(mov64Reg(6, 1), call(BPF_FUNC.get_current_pid_tgid), mov64Reg(7, 0));
  // r8 = tgid, r7 = tid
  a.emit(mov64Reg(8, 0), alu64Imm('RSH', 8, 32), alu64Imm('LSH', 7, 32), alu64Imm('RSH', 7, 32));
  a.jmpReg('JEQ', 7, 8, leader);
  a.emit(stx('W', 10, SCRATCH, 7));
  a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
  a.emit(call(BPF_FUNC.map_delete_elem));
  if (groupDeadOffset === undefined) {
    a.goto(out);
    a.label(leader);
  } else {
    a.label(leader);
    a.emit(ldx('B', 1, 6, groupDeadOffset));
    a.jmpImm('JEQ', 1, 0, out);
  }
  a.emit(stx('W', 10, SCRATCH, 8));
  a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
  a.emit(call(BPF_FUNC.map_delete_elem));
  if (announce !== undefined) {
    // Only a process that was followed (the delete found it).
    a.jmpImm('JNE', 0, 0, out);
    emitAnnounce(a, announce, SCOPE_EXIT, SCRATCH);
  }
  a.label(out);
  a.returnZero();
  return a.finish();
}
