import { USER_REGS } from '../../native/index.js';

/** A general-purpose register of x86-64 as `struct user_regs_struct` names it. */
export type RegisterName = Exclude<keyof typeof USER_REGS, 'sizeBytes'>;

/**
 * A thread's registers as PTRACE_GETREGS gives them: `struct user_regs_struct`, read and
 * written by name as unsigned 64-bit bigints. `bytes` is what PTRACE_SETREGS takes back.
 */
export class Registers {
  readonly bytes: Uint8Array;
  readonly #view: DataView;

  constructor(bytes: Uint8Array = new Uint8Array(USER_REGS.sizeBytes)) {
    this.bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get(name: RegisterName): bigint {
    return this.#view.getBigUint64(USER_REGS[name], true);
  }

  /** Set a register; a negative value is stored as its two's complement. */
  set(name: RegisterName, value: bigint): void {
    this.#view.setBigUint64(USER_REGS[name], BigInt.asUintN(64, value), true);
  }

  get rip(): bigint {
    return this.get('rip');
  }

  set rip(value: bigint) {
    this.set('rip', value);
  }

  get rsp(): bigint {
    return this.get('rsp');
  }

  set rsp(value: bigint) {
    this.set('rsp', value);
  }

  /** A copy that shares nothing with this one. */
  clone(): Registers {
    return new Registers(this.bytes.slice());
  }
}
