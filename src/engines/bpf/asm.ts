import {
  type Insn,
  type JMP,
  ja,
  jmpImm,
  jmpReg,
  mov64Imm,
  type Reg,
  exit as ret,
} from './insn.js';

type JmpOp = Exclude<keyof typeof JMP, 'JA' | 'CALL' | 'EXIT'>;

interface Fixup {
  readonly at: number;
  readonly label: string;
  readonly make: (off: number) => Insn;
}

/**
 * Straight-line BPF code with named forward and backward jump targets: jumps are emitted
 * with a label and their offsets filled in by `finish()`.
 */
export class Asm {
  readonly #insns: Insn[] = [];
  readonly #labels = new Map<string, number>();
  readonly #fixups: Fixup[] = [];
  #unique = 0;

  /** A label name no other call returns. */
  fresh(prefix: string): string {
    return `${prefix}.${this.#unique++}`;
  }

  emit(...insns: (Insn | readonly Insn[])[]): this {
    for (const one of insns) {
      if (Array.isArray(one)) this.#insns.push(...(one as Insn[]));
      else this.#insns.push(one as Insn);
    }
    return this;
  }

  label(name: string): this {
    if (this.#labels.has(name)) throw new Error(`BPF label "${name}" defined twice`);
    this.#labels.set(name, this.#insns.length);
    return this;
  }

  jmpImm(op: JmpOp, dst: Reg, imm: number, label: string): this {
    return this.#jump(label, (off) => jmpImm(op, dst, imm, off));
  }

  jmpReg(op: JmpOp, dst: Reg, src: Reg, label: string): this {
    return this.#jump(label, (off) => jmpReg(op, dst, src, off));
  }

  goto(label: string): this {
    return this.#jump(label, (off) => ja(off));
  }

  /** `r0 = 0; exit` */
  returnZero(): this {
    return this.emit(mov64Imm(0, 0), ret());
  }

  /** True when some jump targets `label`. */
  isTarget(label: string): boolean {
    return this.#fixups.some((fixup) => fixup.label === label);
  }

  #jump(label: string, make: (off: number) => Insn): this {
    this.#fixups.push({ at: this.#insns.length, label, make });
    this.#insns.push(make(0));
    return this;
  }

  finish(): Insn[] {
    for (const fixup of this.#fixups) {
      const target = this.#labels.get(fixup.label);
      if (target === undefined) throw new Error(`BPF label "${fixup.label}" is not defined`);
      this.#insns[fixup.at] = fixup.make(target - fixup.at - 1);
    }
    return [...this.#insns];
  }
}
