/**
 * BPF Type Format (include/uapi/linux/btf.h), both ways: the kernel's own types read from
 * /sys/kernel/btf/vmlinux (where a member of a kernel struct is on this kernel, as CO-RE
 * relocations find it), and the few types a program with subprograms must be loaded with (a
 * FUNC per subprogram: the verifier takes a callback only from a program that has them).
 */
import { readFileSync } from 'node:fs';
import { ProbeError } from '../../errors/index.js';

const MAGIC = 0xeb9f;
const HEADER_BYTES = 24;

/** `BTF_KIND_*` */
const KIND = {
  INT: 1,
  PTR: 2,
  ARRAY: 3,
  STRUCT: 4,
  UNION: 5,
  ENUM: 6,
  FWD: 7,
  TYPEDEF: 8,
  VOLATILE: 9,
  CONST: 10,
  RESTRICT: 11,
  FUNC: 12,
  FUNC_PROTO: 13,
  VAR: 14,
  DATASEC: 15,
  FLOAT: 16,
  DECL_TAG: 17,
  TYPE_TAG: 18,
  ENUM64: 19,
} as const;

export interface BtfMember {
  readonly name: string;
  /** Bytes from the start of the outermost struct. */
  readonly offset: number;
  /** The member's type id (typedefs and qualifiers not followed). */
  readonly type: number;
}

/** The running kernel's BTF, once read (not a `static #` field: see NO_STATIC_PRIVATE in scripts/build.mjs). */
let vmlinux: KernelBtf | undefined;

/** A kernel's BTF: struct members by (nested) name, decoded only for the structs asked for. */
export class KernelBtf {
  readonly #view: DataView;
  readonly #strings: Uint8Array;
  readonly #byteLength: number;
  /** Per type id (from 1): where its record starts in the bytes. */
  readonly #at: Uint32Array;
  readonly #count: number;
  readonly #members = new Map<string, BtfMember[]>();

  constructor(bytes: Uint8Array) {
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#byteLength = bytes.byteLength;
    const view = this.#view;
    if (bytes.length < HEADER_BYTES || view.getUint16(0, true) !== MAGIC) {
      throw new Error('not little-endian BTF');
    }
    const headerBytes = view.getUint32(4, true);
    const typeOff = headerBytes + view.getUint32(8, true);
    const typeLen = view.getUint32(12, true);
    const strOff = headerBytes + view.getUint32(16, true);
    const strLen = view.getUint32(20, true);
    this.#strings = bytes.subarray(strOff, strOff + strLen);
    const starts: number[] = [0];
    let at = typeOff;
    const end = typeOff + typeLen;
    while (at < end) {
      starts.push(at);
      const info = view.getUint32(at + 4, true);
      at += 12 + extraBytes((info >>> 24) & 0x1f, info & 0xffff);
    }
    this.#at = Uint32Array.from(starts);
    this.#count = starts.length - 1;
  }

  /** The running kernel's BTF (read once). */
  static vmlinux(path = '/sys/kernel/btf/vmlinux'): KernelBtf {
    if (vmlinux !== undefined) return vmlinux;
    let bytes: Uint8Array;
    try {
      bytes = readFileSync(path);
    } catch (err) {
      throw new ProbeError(
        'ERR_NOT_SUPPORTED',
        `Cannot read the kernel's types from ${path}: ${err instanceof Error ? err.message : String(err)}`,
        {
          hints: [
            'The bpf engine reads them to follow processes (-p, -c) and for stacks without frame pointers: a kernel built with CONFIG_DEBUG_INFO_BTF has them',
            'Without them, use --engine tracefs or --engine ptrace',
          ],
        },
      );
    }
    vmlinux = new KernelBtf(bytes);
    return vmlinux;
  }

  #kind(id: number): number {
    return (this.#view.getUint32(this.#at[id]! + 4, true) >>> 24) & 0x1f;
  }

  #vlen(id: number): number {
    return this.#view.getUint32(this.#at[id]! + 4, true) & 0xffff;
  }

  #ref(id: number): number {
    return this.#view.getUint32(this.#at[id]! + 8, true);
  }

  #nameIs(nameOff: number, wanted: Uint8Array): boolean {
    const s = this.#strings;
    if (nameOff + wanted.length >= s.length) return false;
    for (let i = 0; i < wanted.length; i++) if (s[nameOff + i] !== wanted[i]) return false;
    return s[nameOff + wanted.length] === 0;
  }

  #name(nameOff: number): string {
    if (nameOff === 0) return '';
    const end = this.#strings.indexOf(0, nameOff);
    return new TextDecoder().decode(this.#strings.subarray(nameOff, end));
  }

  /** The type id of function `name` (a kernel function or kfunc), or undefined. */
  functionId(name: string): number | undefined {
    const wanted = new TextEncoder().encode(name);
    for (let id = 1; id <= this.#count; id++) {
      if (this.#kind(id) !== KIND.FUNC) continue;
      if (this.#nameIs(this.#view.getUint32(this.#at[id]!, true), wanted)) return id;
    }
    return undefined;
  }

  /**
   * How many arguments the tracepoint `name` (`sched_process_exit`) passes its raw handlers,
   * from its `btf_trace_` typedef (a pointer to a prototype whose first parameter is the
   * tracepoint's own data, not an argument); undefined where there is no such tracepoint.
   */
  tracepointArgs(name: string): number | undefined {
    const wanted = new TextEncoder().encode(`btf_trace_${name}`);
    for (let id = 1; id <= this.#count; id++) {
      if (this.#kind(id) !== KIND.TYPEDEF) continue;
      if (!this.#nameIs(this.#view.getUint32(this.#at[id]!, true), wanted)) continue;
      const pointer = this.#ref(id);
      if (this.#kind(pointer) !== KIND.PTR) return undefined;
      const prototype = this.#ref(pointer);
      if (this.#kind(prototype) !== KIND.FUNC_PROTO) return undefined;
      return this.#vlen(prototype) - 1;
    }
    return undefined;
  }

  /** How many parameters function `id` takes (of its prototype). */
  parameterCount(id: number): number {
    return this.#vlen(this.#ref(id));
  }

  /** The members of struct `structName`, anonymous ones flattened, with their offsets. */
  members(structName: string): BtfMember[] {
    const known = this.#members.get(structName);
    if (known !== undefined) return known;
    const wanted = new TextEncoder().encode(structName);
    for (let id = 1; id <= this.#count; id++) {
      if (this.#kind(id) !== KIND.STRUCT || this.#vlen(id) === 0) continue;
      if (!this.#nameIs(this.#view.getUint32(this.#at[id]!, true), wanted)) continue;
      const out: BtfMember[] = [];
      this.#collect(id, 0, out);
      this.#members.set(structName, out);
      return out;
    }
    throw new Error(`no struct ${structName} in the kernel's BTF`);
  }

  /** Byte offset of `structName.member` (a member of an anonymous struct or union counts). */
  offsetOf(structName: string, member: string): number {
    const found = this.members(structName).find((m) => m.name === member);
    if (found === undefined) throw new Error(`no member ${member} in struct ${structName}`);
    return found.offset;
  }

  #collect(id: number, base: number, out: BtfMember[]): void {
    const kindFlag = this.#view.getUint32(this.#at[id]! + 4, true) >>> 31 === 1;
    const data = this.#at[id]! + 12;
    for (let i = 0; i < this.#vlen(id); i++) {
      const at = data + i * 12;
      const name = this.#name(this.#view.getUint32(at, true));
      const memberType = this.#view.getUint32(at + 4, true);
      const raw = this.#view.getUint32(at + 8, true);
      const bits = kindFlag ? raw & 0xff_ffff : raw;
      const offset = base + Math.floor(bits / 8);
      const resolved = this.#skipQualifiers(memberType);
      const kind = this.#kind(resolved);
      if (name === '' && (kind === KIND.STRUCT || kind === KIND.UNION)) {
        this.#collect(resolved, offset, out);
      } else {
        out.push({ name, offset, type: memberType });
      }
    }
  }

  #skipQualifiers(id: number): number {
    let at = id;
    for (let guard = 0; guard < 32 && at !== 0; guard++) {
      const kind = this.#kind(at);
      if (
        kind === KIND.TYPEDEF ||
        kind === KIND.VOLATILE ||
        kind === KIND.CONST ||
        kind === KIND.RESTRICT ||
        kind === KIND.TYPE_TAG
      ) {
        at = this.#ref(at);
        continue;
      }
      return at;
    }
    return at;
  }

  get typeCount(): number {
    return this.#count;
  }

  get byteLength(): number {
    return this.#byteLength;
  }
}

function extraBytes(kind: number, vlen: number): number {
  switch (kind) {
    case KIND.INT:
    case KIND.VAR:
    case KIND.DECL_TAG:
      return 4;
    case KIND.ARRAY:
      return 12;
    case KIND.STRUCT:
    case KIND.UNION:
    case KIND.DATASEC:
    case KIND.ENUM64:
      return 12 * vlen;
    case KIND.ENUM:
    case KIND.FUNC_PROTO:
      return 8 * vlen;
    default:
      return 0;
  }
}

/** A subprogram of a program: its name and how many arguments it takes. */
export interface BtfFunction {
  readonly name: string;
  readonly params: number;
}

/**
 * The BTF a program with subprograms is loaded with: an 8-byte `long`, a prototype per
 * arity, and a static FUNC per subprogram, whose type ids are those of `functions` in order
 * (the program's `func_info` names them by these ids).
 */
export function programBtf(functions: readonly BtfFunction[]): {
  bytes: Uint8Array;
  typeIds: number[];
} {
  const strings: number[] = [0];
  const stringAt = new Map<string, number>();
  const str = (text: string): number => {
    if (text === '') return 0;
    const known = stringAt.get(text);
    if (known !== undefined) return known;
    const at = strings.length;
    strings.push(...new TextEncoder().encode(text), 0);
    stringAt.set(text, at);
    return at;
  };
  const words: number[] = [];
  let nextId = 1;
  const add = (name: number, kind: number, vlen: number, sizeOrType: number, extra: number[]) => {
    words.push(name, ((kind << 24) | vlen) >>> 0, sizeOrType, ...extra);
    return nextId++;
  };
  // INT: encoding SIGNED (1 << 24), offset 0, 64 bits.
  const long = add(str('long'), KIND.INT, 0, 8, [(1 << 24) | 64]);
  const protos = new Map<number, number>();
  for (const fn of functions) {
    if (protos.has(fn.params)) continue;
    const params: number[] = [];
    for (let i = 0; i < fn.params; i++) params.push(str(`a${i}`), long);
    protos.set(fn.params, add(0, KIND.FUNC_PROTO, fn.params, long, params));
  }
  const typeIds = functions.map((fn) =>
    add(str(fn.name), KIND.FUNC, 0, protos.get(fn.params)!, []),
  );
  const typeBytes = words.length * 4;
  const bytes = new Uint8Array(HEADER_BYTES + typeBytes + strings.length);
  const view = new DataView(bytes.buffer);
  view.setUint16(0, MAGIC, true);
  view.setUint8(2, 1);
  view.setUint32(4, HEADER_BYTES, true);
  view.setUint32(8, 0, true);
  view.setUint32(12, typeBytes, true);
  view.setUint32(16, typeBytes, true);
  view.setUint32(20, strings.length, true);
  for (const [i, word] of words.entries()) view.setUint32(HEADER_BYTES + i * 4, word, true);
  bytes.set(strings, HEADER_BYTES + typeBytes);
  return { bytes, typeIds };
}

/** The kernel's bpf_session_is_return(): its BTF id, and whether it takes the context. */
export interface SessionKfunc {
  readonly btfId: number;
  readonly takesContext: boolean;
}
