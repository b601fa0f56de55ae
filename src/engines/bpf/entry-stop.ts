/**
 * A process stopped at its program's entry point, for as long as user space needs to read
 * what the dynamic linker mapped before any of the program's own code runs (and before it
 * can start a thread): a uprobe on the entry, for that process alone, whose handler sends
 * the process SIGSTOP. The kernel's stack walker then knows every mapping of the program's
 * start (UnwindMaps.syncProcess) even if the program's first walks find its memory map locked.
 */
import { BPF_FUNC } from '../../native/index.js';
import { alu64Imm, call, exit, jmpImm, mov64Imm } from './insn.js';
import { closeFd, linkPerfEvent, loadProgram, openUprobeEvent, uprobePmu } from './kernel.js';

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
