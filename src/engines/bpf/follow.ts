/**
 * Which processes a bpf run covers, decided in the kernel: a hash map of the process ids
 * followed, that every handler's prologue looks up, kept by handlers on the scheduler's raw
 * tracepoints. A process given at the start is followed with the children it forks
 * afterwards; a command that upscope started stopped before its exec (`-c`) is followed from
 * its exec on, so that the launcher's own code (a shell) is never counted; a process that
 * ends leaves the map, so that its id, once reused, is not followed by mistake.
 */
import { ProbeError } from '../../errors/index.js';
import { BPF_FUNC } from '../../native/index.js';
import { Asm } from './asm.js';
import { alu64Imm, call, type Insn, ldMapFd, ldx, mov64Imm, mov64Reg, st, stx } from './insn.js';
import type { BpfMap } from './kernel.js';
import { type KernelFacts, kernelFacts } from './kernel-facts.js';
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
}

/** Processes followed at once (a process and its children). */
export const MAX_FOLLOWED = 32768;

const SCRATCH = -8;
const VALUE = -16;
/** Where a record for user space is made (see scope.ts): 16 bytes, below the others. */
const RECORD = -48;
/** Where the fork handler reads the child's process id. */
const CHILD_TGID = -32;
/** A raw tracepoint handler's arguments, 64 bits each, from its context. */
const ARG_BYTES = 8;

/**
 * Make the map of followed processes and attach the handlers that keep it, in `session`
 * (they are detached with its probes), on the scheduler's raw tracepoints: their handlers
 * take the tracepoints' arguments, and their removal waits out no grace period (as perf
 * events on the tracepoints, 150-250 ms at the end of every run). Where a task's id is comes
 * from the kernel's BTF (see kernelFacts()). Returns the map, for the probes' prologue.
 * Throws ProbeError where the kernel's BTF cannot be read, before anything is attached.
 */
export function followProcesses(
  session: BpfSession,
  spec: FollowSpec,
  announce?: RingBuffer,
): BpfMap {
  const forks = spec.forks ?? true;
  let facts: KernelFacts;
  try {
    facts = kernelFacts();
  } catch (err) {
    if (err instanceof ProbeError) throw err;
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot follow processes on the bpf engine: ${err instanceof Error ? err.message : String(err)}`,
      { hints: ['Use --engine tracefs or --engine ptrace'] },
    );
  }
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
  session.attachRawTracepoint(
    'sched_process_exit',
    forgetExitedProgram(followed.fd, facts.exitArgs >= 2, announce?.map.fd),
  );
  if (spec.startAtExecOf !== undefined) {
    session.attachRawTracepoint(
      'sched_process_exec',
      followExecProgram(followed.fd, spec.startAtExecOf),
    );
  }
  if (forks) {
    session.attachRawTracepoint(
      'sched_process_fork',
      followForksProgram(followed.fd, facts, announce?.map.fd),
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
 * SCOPE_FORK) or went (SCOPE_EXIT), and when (bpf_ktime_get_ns(): CLOCK_MONOTONIC). A full
 * buffer drops the record (64 KiB: 4,000 of them).
 */
function emitAnnounce(a: Asm, ring: number, kind: number, pidAt: number): void {
  a.emit(call(BPF_FUNC.ktime_get_ns), stx('DW', 10, RECORD + SCOPE_RECORD.timeNs, 0));
  a.emit(st('W', 10, RECORD + SCOPE_RECORD.kind, kind));
  a.emit(ldx('W', 1, 10, pidAt), stx('W', 10, RECORD + SCOPE_RECORD.pid, 1));
  a.emit(ldMapFd(1, ring), mov64Reg(2, 10), alu64Imm('ADD', 2, RECORD));
  a.emit(mov64Imm(3, SCOPE_RECORD.bytes), mov64Imm(4, BPF_RB_NO_WAKEUP));
  a.emit(call(BPF_FUNC.ringbuf_output));
}

/**
 * At `sched_process_fork(parent, child)`: a child of a followed process is followed too; its
 * id is read from the child's task_struct, where the kernel's BTF says it is. A new thread's
 * id is added as well (the tracepoint does not tell threads from processes): harmless, as its
 * process is followed already, and taken out again when the thread ends. Only a new process
 * (its id its process's) is told to user space.
 */
export function followForksProgram(
  followed: number,
  offsets: Pick<KernelFacts, 'taskPid' | 'taskTgid'>,
  announce?: number,
): Insn[] {
  const a = new Asm();
  const out = 'out';
  a.emit(mov64Reg(6, 1));
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32), stx('W', 10, SCRATCH, 0));
  a.emit(ldMapFd(1, followed), mov64Reg(2, 10), alu64Imm('ADD', 2, SCRATCH));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, out);
  // bpf_probe_read_kernel(fp + SCRATCH, 4, &child->pid)
  a.emit(ldx('DW', 3, 6, ARG_BYTES), alu64Imm('ADD', 3, offsets.taskPid));
  a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, SCRATCH), mov64Imm(2, 4));
  a.emit(call(BPF_FUNC.probe_read_kernel));
  a.jmpImm('JNE', 0, 0, out);
  emitFollow(a, followed);
  if (announce !== undefined) {
    // bpf_probe_read_kernel(fp + CHILD_TGID, 4, &child->tgid); a thread is not told.
    a.emit(ldx('DW', 3, 6, ARG_BYTES), alu64Imm('ADD', 3, offsets.taskTgid));
    a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, CHILD_TGID), mov64Imm(2, 4));
    a.emit(call(BPF_FUNC.probe_read_kernel));
    a.jmpImm('JNE', 0, 0, out);
    a.emit(ldx('W', 1, 10, SCRATCH), ldx('W', 2, 10, CHILD_TGID));
    a.jmpReg('JNE', 1, 2, out);
    emitAnnounce(a, announce, SCOPE_FORK, SCRATCH);
  }
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
 * At `sched_process_exit(task[, group_dead])` (once per thread): a thread that is not its
 * process's leader takes its own id out (a fork handler may have put it in); the last thread
 * of a process takes the process's id out (`group_dead`, the second argument, on kernels
 * that pass it: `groupDead`; without it, the leader's exit does).
 */
export function forgetExitedProgram(
  followed: number,
  groupDead: boolean,
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
  if (!groupDead) {
    a.goto(out);
    a.label(leader);
  } else {
    a.label(leader);
    // A bool, passed as a 64-bit word.
    a.emit(ldx('DW', 1, 6, ARG_BYTES), alu64Imm('AND', 1, 0xff));
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
