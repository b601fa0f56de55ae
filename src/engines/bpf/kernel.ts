/**
 * BPF maps, programs, perf uprobe events and links as file descriptors, over the native
 * bpf(2), perf_event_open(2) and close(2). Each failure becomes a ProbeError that says which
 * object could not be made, why (errno in words), and what would allow it.
 */
import { readFileSync } from 'node:fs';
import { ProbeError } from '../../errors/index.js';
import {
  BPF_ATTACH_TYPE,
  BPF_ATTR_BYTES,
  BPF_BTF_LOAD_ATTR,
  BPF_CMD,
  BPF_LINK_CREATE_ATTR,
  BPF_MAP_BATCH_ATTR,
  BPF_MAP_ELEM_ATTR,
  BPF_MAP_TYPE,
  BPF_PROG_LOAD_ATTR,
  BPF_PROG_TYPE,
  BPF_RAW_TRACEPOINT_ATTR,
  describeErrno,
  errnoName,
  loadNative,
  mapCreateAttr,
  type NativeBinding,
  type NativeMemory,
  PERF_EVENT_ATTR,
  PERF_EVENT_IOC,
  SYSCALL,
  UPROBE_MULTI,
} from '../../native/index.js';
import type { Subprogram } from './asm.js';
import { programBtf } from './btf.js';
import { encode, type Insn } from './insn.js';

const EPERM = 1;
const EACCES = 13;
const ENOSPC = 28;
const E2BIG = 7;
const ENOMEM = 12;

/** What to say when the kernel refuses a BPF or perf operation for lack of privilege. */
export function privilegeError(what: string, errno: number): ProbeError {
  return new ProbeError('ERR_PRIVILEGES', `Cannot ${what}: ${describeErrno(errno)}`, {
    details: { errno: errnoName(errno) },
    hints: [
      'The bpf engine needs root, or CAP_BPF and CAP_PERFMON (e.g. sudo upscope ...)',
      'Without them, use --engine ptrace with -p PID or -c COMMAND on your own processes (no privileges needed)',
    ],
  });
}

function failure(what: string, errno: number): ProbeError {
  if (-errno === EPERM || -errno === EACCES) return privilegeError(what, -errno);
  return new ProbeError('ERR_NOT_SUPPORTED', `Cannot ${what}: ${describeErrno(errno)}`, {
    details: { errno: errnoName(errno) },
    hints: ['Check what this machine allows with: upscope doctor'],
  });
}

/** The number of possible CPUs: per-CPU maps hold one value for each. */
export function possibleCpus(): number {
  const text = readFileSync('/sys/devices/system/cpu/possible', 'utf8').trim();
  let count = 0;
  for (const range of text.split(',')) {
    const [first, last] = range.split('-').map(Number);
    count += (last ?? first!) - first! + 1;
  }
  return count;
}

function bpfAttr(native: NativeBinding): NativeMemory {
  return native.alloc(BPF_ATTR_BYTES);
}

export type MapKind =
  | 'hash'
  | 'lru-hash'
  | 'array'
  | 'percpu-hash'
  | 'percpu-array'
  | 'ringbuf'
  | 'lpm-trie';

const MAP_TYPES: Record<MapKind, number> = {
  hash: BPF_MAP_TYPE.BPF_MAP_TYPE_HASH,
  'lru-hash': BPF_MAP_TYPE.BPF_MAP_TYPE_LRU_HASH,
  array: BPF_MAP_TYPE.BPF_MAP_TYPE_ARRAY,
  'percpu-hash': BPF_MAP_TYPE.BPF_MAP_TYPE_PERCPU_HASH,
  'percpu-array': BPF_MAP_TYPE.BPF_MAP_TYPE_PERCPU_ARRAY,
  ringbuf: BPF_MAP_TYPE.BPF_MAP_TYPE_RINGBUF,
  'lpm-trie': BPF_MAP_TYPE.BPF_MAP_TYPE_LPM_TRIE,
};

/** `BPF_F_NO_PREALLOC`: a longest-prefix-match trie must be made with it. */
const BPF_F_NO_PREALLOC = 1;

export interface MapSpec {
  readonly kind: MapKind;
  readonly name: string;
  readonly keyBytes: number;
  readonly valueBytes: number;
  readonly maxEntries: number;
}

/**
 * A BPF map. Reads go through scratch memory of its own; a per-CPU map's lookup gives one
 * value per possible CPU, each in an 8-byte-aligned slot.
 */
export class BpfMap {
  readonly fd: number;
  readonly spec: MapSpec;
  readonly perCpu: boolean;
  /** Bytes of one lookup's value: `valueBytes`, or a slot per CPU for per-CPU maps. */
  readonly lookupBytes: number;
  readonly cpus: number;
  readonly #native: NativeBinding;
  readonly #attr: NativeMemory;
  readonly #key: NativeMemory;
  readonly #next: NativeMemory;
  readonly #value: NativeMemory;
  #closed = false;

  private constructor(native: NativeBinding, fd: number, spec: MapSpec, cpus: number) {
    this.#native = native;
    this.fd = fd;
    this.spec = spec;
    this.perCpu = spec.kind === 'percpu-hash' || spec.kind === 'percpu-array';
    this.cpus = this.perCpu ? cpus : 1;
    this.lookupBytes = this.perCpu ? Math.ceil(spec.valueBytes / 8) * 8 * cpus : spec.valueBytes;
    this.#attr = bpfAttr(native);
    this.#key = native.alloc(spec.keyBytes);
    this.#next = native.alloc(spec.keyBytes);
    this.#value = native.alloc(this.lookupBytes);
  }

  static create(spec: MapSpec): BpfMap {
    const native = loadNative();
    const fd = native.bpf(
      BPF_CMD.BPF_MAP_CREATE,
      mapCreateAttr({
        mapType: MAP_TYPES[spec.kind],
        keySizeBytes: spec.keyBytes,
        valueSizeBytes: spec.valueBytes,
        maxEntries: spec.maxEntries,
        name: spec.name,
        flags: spec.kind === 'lpm-trie' ? BPF_F_NO_PREALLOC : 0,
      }),
    );
    if (fd < 0) {
      if (-fd === E2BIG || -fd === ENOSPC || -fd === ENOMEM) {
        throw new ProbeError(
          'ERR_NOT_SUPPORTED',
          `Cannot create BPF map "${spec.name}" of ${spec.maxEntries} entries: ${describeErrno(fd)}`,
          { hints: ['Trace fewer probes at once, or raise the locked-memory limit (ulimit -l)'] },
        );
      }
      throw failure(`create BPF map "${spec.name}"`, fd);
    }
    return new BpfMap(native, fd, spec, possibleCpus());
  }

  /** A map element command on the scratch key (none: the first key, for GET_NEXT_KEY). */
  #elem(cmd: number, flags = 0n, withKey = true): number {
    const view = new DataView(this.#attr.bytes.buffer, this.#attr.bytes.byteOffset);
    this.#attr.bytes.fill(0);
    view.setUint32(BPF_MAP_ELEM_ATTR.map_fd, this.fd, true);
    if (withKey) view.setBigUint64(BPF_MAP_ELEM_ATTR.key, this.#key.address, true);
    // A delete takes the key alone: the kernel refuses any field after it (EINVAL).
    if (cmd !== BPF_CMD.BPF_MAP_DELETE_ELEM) {
      view.setBigUint64(
        BPF_MAP_ELEM_ATTR.value,
        cmd === BPF_CMD.BPF_MAP_GET_NEXT_KEY ? this.#next.address : this.#value.address,
        true,
      );
    }
    view.setBigUint64(BPF_MAP_ELEM_ATTR.flags, flags, true);
    return this.#native.syscall(
      SYSCALL.bpf,
      BigInt(cmd),
      this.#attr.address,
      BigInt(BPF_ATTR_BYTES),
      0n,
      0n,
    );
  }

  /** The value under `key` (a copy), or undefined when there is none. */
  lookup(key: Uint8Array): Uint8Array | undefined {
    this.#key.bytes.set(key);
    const status = this.#elem(BPF_CMD.BPF_MAP_LOOKUP_ELEM);
    if (status === -2) return undefined; // ENOENT
    if (status < 0) throw failure(`read BPF map "${this.spec.name}"`, status);
    return this.#value.bytes.slice();
  }

  /** A 64-bit counter under `key`, summed over CPUs for per-CPU maps (0 when absent). */
  lookupSum(key: Uint8Array, index = 0): bigint {
    const value = this.lookup(key);
    if (value === undefined) return 0n;
    return sumSlots(value, this.cpus, Math.ceil(this.spec.valueBytes / 8) * 8, index * 8);
  }

  update(key: Uint8Array, value: Uint8Array, flags = 0n): void {
    this.#key.bytes.set(key);
    this.#value.bytes.set(value);
    const status = this.#elem(BPF_CMD.BPF_MAP_UPDATE_ELEM, flags);
    if (status < 0) throw failure(`write BPF map "${this.spec.name}"`, status);
  }

  /**
   * Write `count` elements in one call: `keys` and `values` hold them back to back
   * (BPF_MAP_UPDATE_BATCH, kernel 5.6+).
   */
  updateBatch(keys: Uint8Array, values: Uint8Array, count: number): void {
    if (count === 0) return;
    const keyMemory = this.#native.alloc(keys.length);
    const valueMemory = this.#native.alloc(values.length);
    try {
      keyMemory.bytes.set(keys);
      valueMemory.bytes.set(values);
      this.#attr.bytes.fill(0);
      const view = new DataView(this.#attr.bytes.buffer, this.#attr.bytes.byteOffset);
      view.setBigUint64(BPF_MAP_BATCH_ATTR.keys, keyMemory.address, true);
      view.setBigUint64(BPF_MAP_BATCH_ATTR.values, valueMemory.address, true);
      view.setUint32(BPF_MAP_BATCH_ATTR.count, count, true);
      view.setUint32(BPF_MAP_BATCH_ATTR.map_fd, this.fd, true);
      const status = this.#native.syscall(
        SYSCALL.bpf,
        BigInt(BPF_CMD.BPF_MAP_UPDATE_BATCH),
        this.#attr.address,
        BigInt(BPF_ATTR_BYTES),
        0n,
        0n,
      );
      if (status < 0) throw failure(`write BPF map "${this.spec.name}"`, status);
    } finally {
      keyMemory.free();
      valueMemory.free();
    }
  }

  /**
   * Every element, read `chunk` at a time (BPF_MAP_LOOKUP_BATCH, kernel 5.6+): far fewer
   * system calls than keys() and a lookup per key. `each` gets the keys and values of one
   * chunk back to back (keyBytes and lookupBytes apart), and how many there are.
   */
  lookupBatch(each: (keys: Uint8Array, values: Uint8Array, count: number) => void, chunk = 4096) {
    const keyBytes = this.spec.keyBytes;
    const keys = this.#native.alloc(keyBytes * chunk);
    const values = this.#native.alloc(this.lookupBytes * chunk);
    // The position between calls (a bucket index for hashes): at least a key's size.
    const tokens = [
      this.#native.alloc(Math.max(keyBytes, 8)),
      this.#native.alloc(Math.max(keyBytes, 8)),
    ];
    try {
      let first = true;
      for (let round = 0; ; round++) {
        const inBatch = tokens[round % 2]!;
        const outBatch = tokens[(round + 1) % 2]!;
        this.#attr.bytes.fill(0);
        const view = new DataView(this.#attr.bytes.buffer, this.#attr.bytes.byteOffset);
        if (!first) view.setBigUint64(BPF_MAP_BATCH_ATTR.in_batch, inBatch.address, true);
        view.setBigUint64(BPF_MAP_BATCH_ATTR.out_batch, outBatch.address, true);
        view.setBigUint64(BPF_MAP_BATCH_ATTR.keys, keys.address, true);
        view.setBigUint64(BPF_MAP_BATCH_ATTR.values, values.address, true);
        view.setUint32(BPF_MAP_BATCH_ATTR.count, chunk, true);
        view.setUint32(BPF_MAP_BATCH_ATTR.map_fd, this.fd, true);
        const status = this.#native.syscall(
          SYSCALL.bpf,
          BigInt(BPF_CMD.BPF_MAP_LOOKUP_BATCH),
          this.#attr.address,
          BigInt(BPF_ATTR_BYTES),
          0n,
          0n,
        );
        first = false;
        const count = view.getUint32(BPF_MAP_BATCH_ATTR.count, true);
        if (status < 0 && status !== -2) throw failure(`read BPF map "${this.spec.name}"`, status);
        if (count > 0) {
          each(
            keys.bytes.subarray(0, count * keyBytes),
            values.bytes.subarray(0, count * this.lookupBytes),
            count,
          );
        }
        if (status === -2) return; // ENOENT: no more
      }
    } finally {
      keys.free();
      values.free();
      for (const token of tokens) token.free();
    }
  }

  delete(key: Uint8Array): boolean {
    this.#key.bytes.set(key);
    const status = this.#elem(BPF_CMD.BPF_MAP_DELETE_ELEM);
    if (status === -2) return false;
    if (status < 0) throw failure(`write BPF map "${this.spec.name}"`, status);
    return true;
  }

  /** Every key (copies), in the map's own order. */
  keys(): Uint8Array[] {
    const keys: Uint8Array[] = [];
    // No key asks for the first one.
    let status = this.#elem(BPF_CMD.BPF_MAP_GET_NEXT_KEY, 0n, false);
    while (status >= 0) {
      const key = this.#next.bytes.slice();
      keys.push(key);
      this.#key.bytes.set(key);
      status = this.#elem(BPF_CMD.BPF_MAP_GET_NEXT_KEY);
    }
    if (status !== -2) throw failure(`read BPF map "${this.spec.name}"`, status);
    return keys;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#native.close(this.fd);
    this.#attr.free();
    this.#key.free();
    this.#next.free();
    this.#value.free();
  }
}

/** The sum of the 64-bit values at `offset` in each CPU's slot of a per-CPU lookup. */
export function sumSlots(value: Uint8Array, cpus: number, slotBytes: number, offset = 0): bigint {
  const view = new DataView(value.buffer, value.byteOffset, value.byteLength);
  let sum = 0n;
  for (let cpu = 0; cpu < cpus; cpu++) sum += view.getBigUint64(cpu * slotBytes + offset, true);
  return BigInt.asUintN(64, sum);
}

export interface ProgramOptions {
  /** Up to 15 characters: [A-Za-z0-9_]. */
  readonly name: string;
  /** What the program is for, in errors: `the count handler of libc:malloc`. */
  readonly purpose: string;
  /** For uprobe_multi links; `session` for uprobe session links (entry and return). */
  readonly multi?: boolean | 'session' | undefined;
  /** A raw tracepoint's handler (its context is the tracepoint's arguments), not a uprobe's. */
  readonly tracepoint?: 'raw' | undefined;
  /** The main program and its subprograms (Asm's `subprograms`), when it has any. */
  readonly subprograms?: readonly Subprogram[] | undefined;
}

/**
 * Load the BTF that names a program's subprograms (the verifier takes a callback only from a
 * program that has it): its file descriptor, and the `func_info` records to load with.
 */
function loadSubprogramBtf(
  native: NativeBinding,
  subprograms: readonly Subprogram[],
  purpose: string,
): { fd: number; funcInfo: NativeMemory } {
  const { bytes, typeIds } = programBtf(subprograms);
  const blob = native.alloc(bytes.length);
  const attr = bpfAttr(native);
  const log = native.alloc(LOG_BYTES);
  try {
    blob.bytes.set(bytes);
    const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
    view.setBigUint64(BPF_BTF_LOAD_ATTR.btf, blob.address, true);
    view.setUint32(BPF_BTF_LOAD_ATTR.btf_size, bytes.length, true);
    view.setBigUint64(BPF_BTF_LOAD_ATTR.btf_log_buf, log.address, true);
    view.setUint32(BPF_BTF_LOAD_ATTR.btf_log_size, LOG_BYTES, true);
    view.setUint32(BPF_BTF_LOAD_ATTR.btf_log_level, 1, true);
    const fd = native.syscall(
      SYSCALL.bpf,
      BigInt(BPF_CMD.BPF_BTF_LOAD),
      attr.address,
      BigInt(BPF_ATTR_BYTES),
      0n,
      0n,
    );
    if (fd < 0) {
      const said = logText(log);
      throw failure(
        `load the BTF of the BPF program for ${purpose}${said === '' ? '' : ` (${verifierReason(said)})`}`,
        fd,
      );
    }
    const funcInfo = native.alloc(subprograms.length * 8);
    const info = new DataView(funcInfo.bytes.buffer, funcInfo.bytes.byteOffset);
    subprograms.forEach((sub, i) => {
      info.setUint32(i * 8, sub.insnOffset, true);
      info.setUint32(i * 8 + 4, typeIds[i]!, true);
    });
    return { fd, funcInfo };
  } finally {
    blob.free();
    attr.free();
    log.free();
  }
}

const LOG_BYTES = 1 << 20;
const LICENSE = 'GPL';

/**
 * Load a kprobe-type program (uprobes run those), or a raw tracepoint's. A refusal by the
 * verifier becomes ERR_BPF_VERIFIER naming the verifier's reason (its last meaningful log
 * line), with the whole log in the error's details.
 */
export function loadProgram(insns: readonly (Insn | readonly Insn[])[], options: ProgramOptions) {
  const native = loadNative();
  const code = encode(insns);
  const program = native.alloc(code.length);
  const license = native.alloc(LICENSE.length + 1);
  const attr = bpfAttr(native);
  let log: NativeMemory | undefined;
  const subprograms = options.subprograms ?? [];
  const btf =
    subprograms.length === 0 ? undefined : loadSubprogramBtf(native, subprograms, options.purpose);
  try {
    program.bytes.set(code);
    license.bytes.set(new TextEncoder().encode(LICENSE));
    const load = (logLevel: number): number => {
      attr.bytes.fill(0);
      const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
      const type =
        options.tracepoint === 'raw'
          ? BPF_PROG_TYPE.BPF_PROG_TYPE_RAW_TRACEPOINT
          : BPF_PROG_TYPE.BPF_PROG_TYPE_KPROBE;
      view.setUint32(BPF_PROG_LOAD_ATTR.prog_type, type, true);
      view.setUint32(BPF_PROG_LOAD_ATTR.insn_cnt, code.length / 8, true);
      view.setBigUint64(BPF_PROG_LOAD_ATTR.insns, program.address, true);
      view.setBigUint64(BPF_PROG_LOAD_ATTR.license, license.address, true);
      if (logLevel > 0 && log !== undefined) {
        view.setUint32(BPF_PROG_LOAD_ATTR.log_level, logLevel, true);
        view.setUint32(BPF_PROG_LOAD_ATTR.log_size, LOG_BYTES, true);
        view.setBigUint64(BPF_PROG_LOAD_ATTR.log_buf, log.address, true);
      }
      attr.bytes.set(
        new TextEncoder().encode(options.name.slice(0, 15)),
        BPF_PROG_LOAD_ATTR.prog_name,
      );
      if (btf !== undefined) {
        view.setUint32(BPF_PROG_LOAD_ATTR.prog_btf_fd, btf.fd, true);
        view.setUint32(BPF_PROG_LOAD_ATTR.func_info_rec_size, 8, true);
        view.setBigUint64(BPF_PROG_LOAD_ATTR.func_info, btf.funcInfo.address, true);
        view.setUint32(BPF_PROG_LOAD_ATTR.func_info_cnt, subprograms.length, true);
      }
      if (options.multi !== undefined && options.multi !== false) {
        view.setUint32(
          BPF_PROG_LOAD_ATTR.expected_attach_type,
          options.multi === 'session'
            ? UPROBE_MULTI.BPF_TRACE_UPROBE_SESSION
            : UPROBE_MULTI.BPF_TRACE_UPROBE_MULTI,
          true,
        );
      }
      // The verifier gives up (EAGAIN, with a log cut short) at any signal pending for the
      // thread: a profiler's timer, a child's SIGCHLD, a Ctrl-C. Held back meanwhile, they
      // are delivered when it is done.
      return withSignalsBlocked(native, () =>
        native.syscall(
          SYSCALL.bpf,
          BigInt(BPF_CMD.BPF_PROG_LOAD),
          attr.address,
          BigInt(BPF_ATTR_BYTES),
          0n,
          0n,
        ),
      );
    };
    // Loading without a log is faster; the log is asked for only to explain a refusal (or,
    // with UPSCOPE_VERIFIER_STATS set, to print the verifier's work on stderr).
    let fd: number;
    if (process.env['UPSCOPE_VERIFIER_STATS'] !== undefined) {
      log = native.alloc(LOG_BYTES);
      fd = load(4);
      process.stderr.write(`upscope: ${options.purpose}: ${logText(log)}\n`);
    } else {
      fd = load(0);
    }
    if (fd >= 0) return fd;
    if (-fd === EPERM || -fd === EACCES) {
      // EACCES is also the verifier's answer: tell them apart by the log.
      log = native.alloc(LOG_BYTES);
      fd = load(1);
      if (fd >= 0) return fd;
      const said = logText(log);
      if (said === '') throw privilegeError(`load the BPF program for ${options.purpose}`, -fd);
      throw verifierError(options.purpose, said);
    }
    log = native.alloc(LOG_BYTES);
    fd = load(1);
    if (fd >= 0) return fd;
    const said = logText(log);
    if (said !== '') throw verifierError(options.purpose, said);
    throw failure(`load the BPF program for ${options.purpose}`, fd);
  } finally {
    program.free();
    license.free();
    attr.free();
    log?.free();
    // The program holds its own reference to the BTF.
    if (btf !== undefined) {
      native.close(btf.fd);
      btf.funcInfo.free();
    }
  }
}

const SIG_BLOCK = 0;
const SIG_SETMASK = 2;
/** The kernel's signal set: 64 bits. */
const SIGSET_BYTES = 8;

/**
 * Run `fn` with the signals that can be blocked held back for this thread (rt_sigprocmask),
 * then the thread's mask as it was: what came meanwhile is delivered then.
 */
function withSignalsBlocked<T>(native: NativeBinding, fn: () => T): T {
  const all = native.alloc(SIGSET_BYTES);
  const old = native.alloc(SIGSET_BYTES);
  try {
    // Every signal but glibc's own two (32 and 33: thread cancellation, set*id across threads).
    new DataView(all.bytes.buffer, all.bytes.byteOffset).setBigUint64(
      0,
      ~((1n << 31n) | (1n << 32n)) & 0xffff_ffff_ffff_ffffn,
      true,
    );
    const size = BigInt(SIGSET_BYTES);
    const blocked =
      native.syscall(
        SYSCALL.rt_sigprocmask,
        BigInt(SIG_BLOCK),
        all.address,
        old.address,
        size,
        0n,
      ) === 0;
    try {
      return fn();
    } finally {
      if (blocked) {
        native.syscall(SYSCALL.rt_sigprocmask, BigInt(SIG_SETMASK), old.address, 0n, size, 0n);
      }
    }
  } finally {
    all.free();
    old.free();
  }
}

function logText(log: NativeMemory): string {
  const end = log.bytes.indexOf(0);
  return new TextDecoder().decode(log.bytes.subarray(0, end < 0 ? log.bytes.length : end)).trim();
}

/** A verifier log's reason: its last line that is not the processed-instructions summary. */
export function verifierReason(log: string): string {
  const lines = log
    .split('\n')
    .map((line) => line.trim())
    .filter(
      (line) =>
        line !== '' &&
        !/^processed \d+ insns/.test(line) &&
        !/^verification time/.test(line) &&
        !/^stack depth/.test(line),
    );
  return lines.at(-1) ?? 'no reason given';
}

export function verifierError(purpose: string, log: string): ProbeError {
  const reason = verifierReason(log);
  const helper = /(?:unknown|invalid) func (\S+)/.exec(log)?.[1];
  if (helper !== undefined) {
    return new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot load the BPF program for ${purpose}: this kernel lacks the helper ${helper}`,
      {
        details: { verifierLog: log },
        hints: [
          'upscope needs kernel 5.15 or later for the bpf engine',
          'Use --engine tracefs or --engine ptrace instead',
        ],
      },
    );
  }
  return new ProbeError(
    'ERR_BPF_VERIFIER',
    `Cannot load the BPF program for ${purpose}: the kernel's verifier refused it: ${reason}`,
    {
      details: { verifierLog: log },
      hints: ['Run with UPSCOPE_DEBUG=1 to print the whole verifier log'],
    },
  );
}

/** The perf PMU of uprobes: its type number and the config bit for return probes. */
export interface UprobePmu {
  readonly type: number;
  readonly retprobeBit: number;
}

const PMU_DIR = '/sys/bus/event_source/devices/uprobe';

export function uprobePmu(dir = PMU_DIR): UprobePmu {
  try {
    const type = Number(readFileSync(`${dir}/type`, 'utf8').trim());
    const format = readFileSync(`${dir}/format/retprobe`, 'utf8').trim();
    const bit = /^config:(\d+)$/.exec(format)?.[1];
    if (!Number.isInteger(type) || bit === undefined) throw new Error(`format "${format}"`);
    return { type, retprobeBit: Number(bit) };
  } catch (err) {
    throw new ProbeError(
      'ERR_NOT_SUPPORTED',
      `Cannot use the perf uprobe PMU: ${dir} is missing or unreadable (${err instanceof Error ? err.message : String(err)})`,
      {
        hints: [
          'The kernel needs CONFIG_UPROBE_EVENTS (4.17 or later)',
          'Use --engine ptrace instead',
        ],
      },
    );
  }
}

export interface UprobeEventSpec {
  readonly path: string;
  readonly offset: bigint;
  readonly retprobe: boolean;
  /** The file offset of a USDT semaphore to count up while attached. */
  readonly refCtrOffset?: bigint | undefined;
  /** Only this process; undefined for every process. */
  readonly pid?: number | undefined;
}

/** perf_event_open(2) of one uprobe through the PMU: its file descriptor. */
export function openUprobeEvent(pmu: UprobePmu, spec: UprobeEventSpec): number {
  const native = loadNative();
  const attr = native.alloc(PERF_EVENT_ATTR.sizeBytes);
  const path = native.alloc(Buffer.byteLength(spec.path) + 1);
  try {
    path.bytes.set(new TextEncoder().encode(spec.path));
    const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
    view.setUint32(PERF_EVENT_ATTR.type, pmu.type, true);
    view.setUint32(PERF_EVENT_ATTR.size, PERF_EVENT_ATTR.sizeBytes, true);
    let config = spec.retprobe ? 1n << BigInt(pmu.retprobeBit) : 0n;
    if (spec.refCtrOffset !== undefined) config |= spec.refCtrOffset << 32n;
    view.setBigUint64(PERF_EVENT_ATTR.config, config, true);
    view.setBigUint64(PERF_EVENT_ATTR.sample_period, 1n, true);
    view.setUint32(PERF_EVENT_ATTR.wakeup_events, 1, true);
    view.setBigUint64(PERF_EVENT_ATTR.config1, path.address, true);
    view.setBigUint64(PERF_EVENT_ATTR.config2, spec.offset, true);
    // Every process: pid -1 on one CPU (a uprobe fires on all of them); one process: any CPU.
    const pid = spec.pid ?? -1;
    const cpu = spec.pid === undefined ? 0 : -1;
    const fd = native.syscall(
      SYSCALL.perf_event_open,
      attr.address,
      BigInt.asUintN(64, BigInt(pid)),
      BigInt.asUintN(64, BigInt(cpu)),
      BigInt.asUintN(64, -1n),
      BigInt(PERF_EVENT_IOC.PERF_FLAG_FD_CLOEXEC),
    );
    if (fd < 0) {
      const where = `${spec.path} at offset 0x${spec.offset.toString(16)}`;
      if (fd === -3) {
        throw new ProbeError(
          'ERR_PROCESS_NOT_FOUND',
          `Cannot probe process ${spec.pid}: it has ended`,
        );
      }
      throw failure(`open a perf uprobe event on ${where}`, fd);
    }
    return fd;
  } finally {
    attr.free();
    path.free();
  }
}

/**
 * BPF_RAW_TRACEPOINT_OPEN: program `programFd` (loaded with `tracepoint: 'raw'`) runs at every
 * hit of the tracepoint `name` (`sched_process_fork`) until the returned descriptor is
 * closed. Unlike a perf event's, its removal waits out no RCU grace period.
 */
export function openRawTracepoint(programFd: number, name: string): number {
  const native = loadNative();
  const attr = bpfAttr(native);
  const text = native.alloc(name.length + 1);
  try {
    text.bytes.set(new TextEncoder().encode(name));
    text.bytes[name.length] = 0;
    const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
    view.setBigUint64(BPF_RAW_TRACEPOINT_ATTR.name, text.address, true);
    view.setUint32(BPF_RAW_TRACEPOINT_ATTR.prog_fd, programFd, true);
    const fd = native.syscall(
      SYSCALL.bpf,
      BigInt(BPF_CMD.BPF_RAW_TRACEPOINT_OPEN),
      attr.address,
      BigInt(BPF_ATTR_BYTES),
      0n,
      0n,
    );
    if (fd < 0) throw failure(`attach a BPF program to raw tracepoint ${name}`, fd);
    return fd;
  } finally {
    attr.free();
    text.free();
  }
}

/** BPF_LINK_CREATE of a program on a perf event, with a cookie the program reads. */
export function linkPerfEvent(programFd: number, perfFd: number, cookie: bigint): number {
  const native = loadNative();
  const attr = bpfAttr(native);
  try {
    const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
    view.setUint32(BPF_LINK_CREATE_ATTR.prog_fd, programFd, true);
    view.setUint32(BPF_LINK_CREATE_ATTR.target_fd, perfFd, true);
    view.setUint32(BPF_LINK_CREATE_ATTR.attach_type, BPF_ATTACH_TYPE.BPF_PERF_EVENT, true);
    view.setBigUint64(BPF_LINK_CREATE_ATTR.bpf_cookie, cookie, true);
    const fd = native.syscall(
      SYSCALL.bpf,
      BigInt(BPF_CMD.BPF_LINK_CREATE),
      attr.address,
      BigInt(BPF_ATTR_BYTES),
      0n,
      0n,
    );
    if (fd < 0) throw failure('link a BPF program to a perf uprobe event', fd);
    return fd;
  } finally {
    attr.free();
  }
}

export interface MultiLinkSpec {
  readonly path: string;
  readonly offsets: readonly bigint[];
  /** Each probe's cookie (a number below 2^53, or a bigint). */
  readonly cookies: readonly (bigint | number)[];
  /** Semaphore file offsets (0 for none), or undefined when no probe has one. */
  readonly refCtrOffsets?: readonly bigint[] | undefined;
  readonly retprobe: boolean;
  /** A uprobe session link: its program runs at each entry and at that call's return. */
  readonly session?: boolean | undefined;
  readonly pid?: number | undefined;
}

/**
 * BPF_LINK_CREATE of a uprobe_multi link: every offset of one file in one call (kernel
 * 6.6+). Returns the link's fd, or the negative errno (the caller decides on a fallback).
 */
export function linkUprobeMulti(programFd: number, spec: MultiLinkSpec): number {
  const native = loadNative();
  const attr = multiLinkAttr(native, programFd, spec);
  try {
    return native.syscall(...linkCreate(attr.address));
  } finally {
    attr.free();
  }
}

/**
 * linkUprobeMulti() on another thread: the kernel places tens of thousands of uprobes in a
 * few hundred milliseconds, which this thread spends on other work meanwhile.
 */
export async function linkUprobeMultiAsync(
  programFd: number,
  spec: MultiLinkSpec,
): Promise<number> {
  const native = loadNative();
  const attr = multiLinkAttr(native, programFd, spec);
  try {
    return await native.syscallAsync(...linkCreate(attr.address));
  } finally {
    attr.free();
  }
}

/** The arguments of bpf(BPF_LINK_CREATE) with the attributes at `attr`. */
function linkCreate(attr: bigint): [number, bigint, bigint, bigint, bigint, bigint] {
  return [SYSCALL.bpf, BigInt(BPF_CMD.BPF_LINK_CREATE), attr, BigInt(BPF_ATTR_BYTES), 0n, 0n];
}

/** The attributes of a uprobe_multi link, in memory of their own: free() them after the call. */
function multiLinkAttr(
  native: NativeBinding,
  programFd: number,
  spec: MultiLinkSpec,
): { readonly address: bigint; free(): void } {
  const count = spec.offsets.length;
  const attr = bpfAttr(native);
  const path = native.alloc(Buffer.byteLength(spec.path) + 1);
  const offsets = native.alloc(count * 8);
  const cookies = native.alloc(count * 8);
  const refs = spec.refCtrOffsets === undefined ? undefined : native.alloc(count * 8);
  path.bytes.set(new TextEncoder().encode(spec.path));
  const offsetView = new DataView(offsets.bytes.buffer, offsets.bytes.byteOffset);
  const cookieView = new DataView(cookies.bytes.buffer, cookies.bytes.byteOffset);
  const refView = refs && new DataView(refs.bytes.buffer, refs.bytes.byteOffset);
  for (let i = 0; i < count; i++) {
    offsetView.setBigUint64(i * 8, spec.offsets[i]!, true);
    const cookie = spec.cookies[i]!;
    if (typeof cookie === 'bigint') cookieView.setBigUint64(i * 8, cookie, true);
    else {
      // No bigint made per probe: the two halves as numbers.
      cookieView.setUint32(i * 8, cookie % 2 ** 32, true);
      cookieView.setUint32(i * 8 + 4, Math.floor(cookie / 2 ** 32), true);
    }
    refView?.setBigUint64(i * 8, spec.refCtrOffsets![i]!, true);
  }
  const view = new DataView(attr.bytes.buffer, attr.bytes.byteOffset);
  view.setUint32(BPF_LINK_CREATE_ATTR.prog_fd, programFd, true);
  view.setUint32(
    BPF_LINK_CREATE_ATTR.attach_type,
    spec.session === true
      ? UPROBE_MULTI.BPF_TRACE_UPROBE_SESSION
      : UPROBE_MULTI.BPF_TRACE_UPROBE_MULTI,
    true,
  );
  view.setBigUint64(UPROBE_MULTI.path, path.address, true);
  view.setBigUint64(UPROBE_MULTI.offsets, offsets.address, true);
  if (refs !== undefined) view.setBigUint64(UPROBE_MULTI.ref_ctr_offsets, refs.address, true);
  view.setBigUint64(UPROBE_MULTI.cookies, cookies.address, true);
  view.setUint32(UPROBE_MULTI.cnt, count, true);
  view.setUint32(
    UPROBE_MULTI.flags,
    spec.retprobe ? UPROBE_MULTI.BPF_F_UPROBE_MULTI_RETURN : 0,
    true,
  );
  view.setUint32(UPROBE_MULTI.pid, spec.pid ?? 0, true);
  return {
    address: attr.address,
    free: () => {
      attr.free();
      path.free();
      offsets.free();
      cookies.free();
      refs?.free();
    },
  };
}

/** Throw the error a refused uprobe_multi link means. */
export function multiLinkError(path: string, errno: number): ProbeError {
  return failure(`attach uprobes to ${path} through a uprobe_multi link`, errno);
}

export function closeFd(fd: number): void {
  loadNative().close(fd);
}
