/**
 * What a thread's seccomp filters would do with a system call upscope makes it run
 * (Tracee.injectSyscall()): a filter that kills the process at an mmap() with PROT_EXEC (as
 * OpenSSH's sandbox does), or refuses it (systemd's MemoryDenyWriteExecute=yes), is found out
 * before the call, not by the process dying. The filters are classic BPF programs; they are
 * read with PTRACE_SECCOMP_GET_FILTER and run here on the call's seccomp_data, as the kernel
 * runs them: every filter of the thread, the action of highest precedence taken.
 */
import { errnoName } from '../../native/index.js';

/** One classic BPF instruction (struct sock_filter). */
export interface SockFilter {
  readonly code: number;
  readonly jt: number;
  readonly jf: number;
  readonly k: number;
}

/** The filter's actions (SECCOMP_RET_*), as the kernel masks them. */
export const SECCOMP_RET = {
  KILL_PROCESS: 0x8000_0000,
  KILL_THREAD: 0x0000_0000,
  TRAP: 0x0003_0000,
  ERRNO: 0x0005_0000,
  USER_NOTIF: 0x7fc0_0000,
  TRACE: 0x7ff0_0000,
  LOG: 0x7ffc_0000,
  ALLOW: 0x7fff_0000,
} as const;

/** SECCOMP_RET_ACTION_FULL: the action's bits of a filter's result. */
const ACTION_FULL = 0xffff_0000;
/** SECCOMP_RET_DATA: an ERRNO action's errno. */
const DATA = 0x0000_ffff;

/** AUDIT_ARCH_X86_64: seccomp_data.arch of a 64-bit x86 system call. */
export const AUDIT_ARCH_X86_64 = 0xc000_003e;

/** A system call as a filter sees it (struct seccomp_data). */
export interface SeccompCall {
  readonly nr: number;
  readonly arch: number;
  readonly instructionPointer: bigint;
  readonly args: readonly bigint[];
}

/** The instructions of a filter as the kernel gives them (8 bytes each, host order). */
export function decodeFilter(bytes: Uint8Array): SockFilter[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: SockFilter[] = [];
  for (let at = 0; at + 8 <= bytes.length; at += 8) {
    out.push({
      code: view.getUint16(at, true),
      jt: view.getUint8(at + 2),
      jf: view.getUint8(at + 3),
      k: view.getUint32(at + 4, true),
    });
  }
  return out;
}

/** The 64 bytes of seccomp_data a filter loads its words from. */
function seccompData(call: SeccompCall): DataView {
  const view = new DataView(new ArrayBuffer(64));
  view.setUint32(0, call.nr, true);
  view.setUint32(4, call.arch, true);
  view.setBigUint64(8, BigInt.asUintN(64, call.instructionPointer), true);
  for (let i = 0; i < 6; i++)
    view.setBigUint64(16 + 8 * i, BigInt.asUintN(64, call.args[i] ?? 0n), true);
  return view;
}

/**
 * Runs one filter on `call`: its result (action and data), or undefined where the program is
 * not one the kernel would have taken (it checks them when they are installed: this never
 * happens with a filter read from a thread).
 */
export function runFilter(filter: readonly SockFilter[], call: SeccompCall): number | undefined {
  const data = seccompData(call);
  const memory = new Uint32Array(16);
  let a = 0;
  let x = 0;
  for (let pc = 0; pc < filter.length; pc++) {
    const { code, jt, jf, k } = filter[pc]!;
    const cls = code & 0x07;
    const source = code & 0x08 ? x : k;
    switch (cls) {
      case 0x00: // BPF_LD
      case 0x01: {
        // BPF_LDX
        const mode = code & 0xe0;
        let value: number;
        if (mode === 0x20) {
          // BPF_ABS, 32-bit words of seccomp_data only
          if ((code & 0x18) !== 0x00 || k % 4 !== 0 || k + 4 > 64) return undefined;
          value = data.getUint32(k, true);
        } else if (mode === 0x00)
          value = k; // BPF_IMM
        else if (mode === 0x60)
          value = memory[k & 15]!; // BPF_MEM
        else if (mode === 0x80)
          value = 64; // BPF_LEN
        else return undefined;
        if (cls === 0x00) a = value >>> 0;
        else x = value >>> 0;
        break;
      }
      case 0x02: // BPF_ST
        memory[k & 15] = a;
        break;
      case 0x03: // BPF_STX
        memory[k & 15] = x;
        break;
      case 0x04: {
        // BPF_ALU
        const op = code & 0xf0;
        const s = source >>> 0;
        if (op === 0x00) a = (a + s) >>> 0;
        else if (op === 0x10) a = (a - s) >>> 0;
        else if (op === 0x20) a = Math.imul(a, s) >>> 0;
        else if (op === 0x30) a = s === 0 ? 0 : Math.floor(a / s) >>> 0;
        else if (op === 0x40) a = (a | s) >>> 0;
        else if (op === 0x50) a = (a & s) >>> 0;
        else if (op === 0x60) a = s >= 32 ? 0 : (a << s) >>> 0;
        else if (op === 0x70) a = s >= 32 ? 0 : a >>> s;
        else if (op === 0x80) a = -a >>> 0;
        else if (op === 0x90) a = s === 0 ? 0 : (a % s) >>> 0;
        else if (op === 0xa0) a = (a ^ s) >>> 0;
        else return undefined;
        break;
      }
      case 0x05: {
        // BPF_JMP
        const op = code & 0xf0;
        if (op === 0x00) {
          pc += k; // BPF_JA
          break;
        }
        const s = source >>> 0;
        let taken: boolean;
        if (op === 0x10) taken = a === s;
        else if (op === 0x20) taken = a > s;
        else if (op === 0x30) taken = a >= s;
        else if (op === 0x40) taken = (a & s) !== 0;
        else return undefined;
        pc += taken ? jt : jf;
        break;
      }
      case 0x06: // BPF_RET
        return ((code & 0x18) === 0x10 ? a : k) >>> 0;
      case 0x07: // BPF_MISC
        if ((code & 0xf8) === 0x00)
          x = a; // TAX
        else a = x; // TXA
        break;
      default:
        return undefined;
    }
  }
  return undefined;
}

/** An action's precedence: lower goes first (the kernel compares the action as signed). */
function precedence(result: number): number {
  return (result & ACTION_FULL) | 0;
}

/**
 * What the filters (the thread's, newest first or in any order) do with `call`: the result of
 * highest precedence (SECCOMP_RET_ALLOW without filters), or undefined where one cannot be run.
 */
export function seccompVerdict(
  filters: readonly (readonly SockFilter[])[],
  call: SeccompCall,
): number | undefined {
  let verdict: number = SECCOMP_RET.ALLOW;
  for (const filter of filters) {
    const result = runFilter(filter, call);
    if (result === undefined) return undefined;
    if (precedence(result) < precedence(verdict)) verdict = result;
  }
  return verdict;
}

/** What a result does, in words: `kill the process`, `fail it with EPERM`, ... */
export function describeVerdict(result: number): string {
  const action = (result & ACTION_FULL) >>> 0;
  switch (action) {
    case SECCOMP_RET.KILL_PROCESS:
      return 'kill the process';
    case SECCOMP_RET.KILL_THREAD:
      return 'kill the thread';
    case SECCOMP_RET.TRAP:
      return 'send it SIGSYS';
    case SECCOMP_RET.ERRNO:
      return `fail it (${errnoName(result & DATA)})`;
    case SECCOMP_RET.USER_NOTIF:
      return 'hand it to its supervisor';
    case SECCOMP_RET.TRACE:
      return 'hand it to a seccomp tracer';
    default:
      return 'let it run';
  }
}

/** Whether a result lets the call run as made (ALLOW, or LOG which runs it too). */
export function allows(result: number): boolean {
  const action = (result & ACTION_FULL) >>> 0;
  return action === SECCOMP_RET.ALLOW || action === SECCOMP_RET.LOG;
}
