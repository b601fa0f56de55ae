/**
 * A process stopped at its program's entry point, for as long as user space needs to read
 * what the dynamic linker mapped before any of the program's own code runs (and before it
 * can start a thread): a uprobe on the entry, for that process alone, whose handler sends
 * the process SIGSTOP. The kernel's stack walker then knows every mapping of the program's
 * start (UnwindMaps.syncProcess) even if the program's first walks find its memory map locked.
 */
import { BPF_FUNC } from '../../native/index.js';
import { Asm } from './asm.js';
import {
  alu64Imm,
  call,
  exit,
  type Insn,
  jmpImm,
  ldMapFd,
  ldx,
  mov64Imm,
  mov64Reg,
  st,
  stx,
} from './insn.js';
import {
  BpfMap,
  closeFd,
  linkPerfEvent,
  loadProgram,
  openRawTracepoint,
  openUprobeEvent,
  uprobePmu,
} from './kernel.js';

const SIGSTOP = 19;

/** The handler: SIGSTOP to the process that hit the probe, if it is `pid`. */
function stopProgram(pid: number) {
  return [
    call(BPF_FUNC.get_current_pid_tgid),
    alu64Imm('RSH', 0, 32),
    jmpImm('JNE', 0, pid, 2),
    mov64Imm(1, SIGSTOP),
    call(BPF_FUNC.send_signal),
    mov64Imm(0, 0),
    exit(),
  ];
}

export class EntryStop {
  #fds: number[];

  private constructor(fds: number[]) {
    this.#fds = fds;
  }

  /**
   * Stop process `pid` when it reaches the instruction at `fileOffset` of the file at `path`
   * (its program's entry, once it has exec'd it): the uprobe is on that process only (a
   * perf event of the process), so no other process that runs the file is touched.
   * Throws ProbeError (no privileges, no uprobe PMU, the process has ended).
   */
  static open(pid: number, path: string, fileOffset: bigint): EntryStop {
    const fds: number[] = [];
    try {
      const program = loadProgram(stopProgram(pid), {
        name: 'upscope_hold',
        purpose: `holding process ${pid} at its entry`,
      });
      fds.push(program);
      const event = openUprobeEvent(uprobePmu(), {
        path,
        offset: fileOffset,
        retprobe: false,
        pid,
      });
      fds.push(event);
      fds.push(linkPerfEvent(program, event, 0n));
    } catch (err) {
      for (const fd of fds.reverse()) closeFd(fd);
      throw err;
    }
    return new EntryStop(fds);
  }

  /** Take the probe out (idempotent); a stop it made stays until the process is continued. */
  close(): void {
    const fds = this.#fds;
    this.#fds = [];
    for (const fd of fds.reverse()) closeFd(fd);
  }
}

/**
 * The handler of a process's execs: `stops[0]++`, then SIGSTOP to the process from its second
 * exec on (the first, a command's launcher making way for its program, is held at the
 * program's entry: see EntryStop).
 */
function execStopProgram(pid: number, stops: number): Insn[] {
  const a = new Asm();
  const out = 'out';
  const KEY = -4;
  a.emit(call(BPF_FUNC.get_current_pid_tgid), alu64Imm('RSH', 0, 32));
  a.jmpImm('JNE', 0, pid, out);
  a.emit(st('W', 10, KEY, 0));
  a.emit(ldMapFd(1, stops), mov64Reg(2, 10), alu64Imm('ADD', 2, KEY));
  a.emit(call(BPF_FUNC.map_lookup_elem));
  a.jmpImm('JEQ', 0, 0, out);
  a.emit(ldx('DW', 1, 0, 0), alu64Imm('ADD', 1, 1), stx('DW', 0, 0, 1));
  a.jmpImm('JLE', 1, 1, out);
  a.emit(mov64Imm(1, SIGSTOP), call(BPF_FUNC.send_signal));
  a.label(out);
  a.returnZero();
  return a.finish();
}

/**
 * A process stopped at each exec it makes after its first, before any code of the new program
 * (its dynamic linker included) runs: a handler on the scheduler's exec tracepoint that sends
 * it SIGSTOP, and counts the execs. Only for a process whose parent is upscope (a -c command):
 * a stop is reported to the parent that waits for it, and upscope's is the one wait that sees
 * it. Whoever holds it continues it.
 */
export class ExecStop {
  readonly #stops: BpfMap;
  #fds: number[];

  private constructor(stops: BpfMap, fds: number[]) {
    this.#stops = stops;
    this.#fds = fds;
  }

  /** Throws ProbeError (no privileges, no raw tracepoints). */
  static open(pid: number): ExecStop {
    const stops = BpfMap.create({
      kind: 'array',
      name: 'exec_stops',
      keyBytes: 4,
      valueBytes: 8,
      maxEntries: 1,
    });
    const fds: number[] = [];
    try {
      const program = loadProgram(execStopProgram(pid, stops.fd), {
        name: 'upscope_exec_hold',
        purpose: `holding process ${pid} at its execs`,
        tracepoint: 'raw',
      });
      fds.push(program);
      fds.push(openRawTracepoint(program, 'sched_process_exec'));
    } catch (err) {
      for (const fd of fds.reverse()) closeFd(fd);
      stops.close();
      throw err;
    }
    return new ExecStop(stops, fds);
  }

  /** The execs the process has made since open() (the first one included). */
  execs(): number {
    const value = this.#fds.length === 0 ? undefined : this.#stops.lookup(new Uint8Array(4));
    return value === undefined ? 0 : Number(new DataView(value.buffer).getBigUint64(0, true));
  }

  /** Take the handler out (idempotent); a stop it made stays until the process is continued. */
  close(): void {
    const fds = this.#fds;
    this.#fds = [];
    for (const fd of fds.reverse()) closeFd(fd);
    if (fds.length > 0) this.#stops.close();
  }
}
