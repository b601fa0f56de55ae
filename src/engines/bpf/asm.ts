import {
  callSub,
  type Insn,
  type JMP,
  ja,
  jmpImm,
  jmpReg,
  ld64Imm,
  mov64Imm,
  PSEUDO_FUNC,
  type Reg,
  exit as ret,
} from './insn.js';

type JmpOp = Exclude<keyof typeof JMP, 'JA' | 'CALL' | 'EXIT'>;

interface Fixup {
  readonly at: number;
  readonly label: string;
  readonly make: (off: number) => Insn;
}

/** A subprogram (a bpf-to-bpf call's target or a callback): where it starts, its arity. */
export interface Subprogram {
  readonly name: string;
  readonly params: number;
  readonly insnOffset: number;
}

/**
 * Straight-line BPF code with named forward and backward jump targets: jumps are emitted
 * with a label and their offsets filled in by `finish()`. Subprograms follow the main one,
 * each begun with `subprogram()`; the kernel needs their list (`subprograms`) as BTF.
 */
export class Asm {
  readonly #insns: Insn[] = [];
  readonly #labels = new Map<string, number>();
  readonly #fixups: Fixup[] = [];
  readonly #subprograms: Subprogram[] = [];
  #unique = 0;

  /** Begin a subprogram here: `name` is also its label, for `callSubprogram`/`loadCallback`. */
  subprogram(name: string, params: number): this {
    if (this.#subprograms.length === 0) {
      this.#subprograms.push({ name: 'main', params: 1, insnOffset: 0 });
    }
    this.#subprograms.push({ name, params, insnOffset: this.#insns.length });
    return this.label(name);
  }

  /** The main program and each subprogram, in order; empty when there are none. */
  get subprograms(): readonly Subprogram[] {
    return this.#subprograms;
  }

  /** A bpf-to-bpf call of the subprogram labelled `name`. */
  callSubprogram(name: string): this {
    return this.#jump(name, (off) => callSub(off));
  }

  /** `dst` = the subprogram `name`, as a callback for helpers such as bpf_loop. */
  loadCallback(dst: Reg, name: string): this {
    this.#fixups.push({
      at: this.#insns.length,
      label: name,
      make: (off) => ld64Imm(dst, BigInt(off), PSEUDO_FUNC)[0],
    });
    this.#insns.push(...ld64Imm(dst, 0n, PSEUDO_FUNC));
    return this;
  }

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
