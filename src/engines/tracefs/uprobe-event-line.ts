import { InternalError, ProbeError } from '../../errors/index.js';
import {
  type FetchArg,
  type FetchExpr,
  type FetchType,
  fetchTypeBytes,
  printFetchExpr,
  type RegisterBase,
  registerInfo,
} from '../../spec/index.js';

/** The subset of a probe site the kernel's uprobe_events line is made of. */
export interface EventLineSite {
  readonly kind: 'entry' | 'return' | 'instruction' | 'usdt';
  readonly target: { readonly path: string };
  readonly fileOffset: bigint;
  readonly usdt: { readonly semaphoreFileOffset: bigint | undefined } | undefined;
  readonly fetches: readonly FetchArg[];
  /**
   * `uretprobe` for an `r:` line (the kernel catches the return through the return address),
   * `uprobe` for a `p:` line; by default `r:` for a return and `p:` for anything else. A
   * return caught at a function's exit is a `p:` line at that exit.
   */
  readonly attach?: 'uprobe' | 'uretprobe' | undefined;
}

/** System V x86-64 argument registers, in the kernel's fetch-arg spelling. */
const ARG_REGISTERS = ['%di', '%si', '%dx', '%cx', '%r8', '%r9'] as const;

/** The kernel's pt_regs name of each 64-bit register. */
const KERNEL_REGISTER: Readonly<Record<RegisterBase, string>> = {
  rax: '%ax',
  rbx: '%bx',
  rcx: '%cx',
  rdx: '%dx',
  rsi: '%si',
  rdi: '%di',
  rbp: '%bp',
  rsp: '%sp',
  r8: '%r8',
  r9: '%r9',
  r10: '%r10',
  r11: '%r11',
  r12: '%r12',
  r13: '%r13',
  r14: '%r14',
  r15: '%r15',
  rip: '%ip',
  rflags: '%flags',
};

/** Our types -> the kernel's fetch types. */
function kernelType(type: FetchType): string {
  switch (type) {
    case 'ptr':
      return 'x64';
    case 'bool':
      return 'u8';
    case 'char':
      return 'char';
    default:
      return type;
  }
}

function fetchText(expr: FetchExpr): {
  text: string;
  width: FetchType | `b${number}@${number}/64` | undefined;
} {
  switch (expr.kind) {
    case 'arg':
      return expr.index < ARG_REGISTERS.length
        ? { text: ARG_REGISTERS[expr.index]!, width: undefined }
        : { text: `$stack${expr.index - ARG_REGISTERS.length + 1}`, width: undefined };
    case 'retval':
      if ((expr.index ?? 0) !== 0) {
        throw new InternalError(
          `The fetch retval${expr.index} reached the tracefs engine without its calling convention`,
        );
      }
      return { text: '$retval', width: undefined };
    case 'register': {
      const info = registerInfo(expr.name.replace(/^%/, ''));
      if (info === undefined) return { text: `%${expr.name}`, width: undefined };
      // The kernel reads whole registers; a narrower name reads their low bits (a type), and
      // %ah-style names the second byte (a bitfield type).
      const width =
        info.shift !== 0
          ? (`b${info.bits}@${info.shift}/64` as const)
          : info.bits === 64
            ? undefined
            : (`u${info.bits}` as FetchType);
      return { text: KERNEL_REGISTER[info.base], width };
    }
    case 'ip':
      return { text: '%ip', width: undefined };
    case 'sp':
      return { text: '%sp', width: undefined };
    case 'comm':
      return { text: '$comm', width: 'string' };
    case 'deref': {
      const inner = fetchText(expr.inner).text;
      const sign = expr.offset < 0n ? '-' : '+';
      const magnitude = expr.offset < 0n ? -expr.offset : expr.offset;
      return { text: `${sign}${magnitude}(${inner})`, width: undefined };
    }
    case 'constant':
      // The kernel's immediate (Linux 4.20 and later).
      return { text: `\\${expr.value}`, width: undefined };
    case 'indexed':
      throw new ProbeError(
        'ERR_NOT_SUPPORTED',
        `Cannot fetch ${printFetchExpr(expr)} with the tracefs engine: the kernel's fetch-args cannot add two registers`,
        {
          hints: [
            'Use --engine bpf or --engine ptrace, which can',
            'Or fetch only the other arguments, e.g. arg0 arg1',
          ],
          details: { feature: 'indexed fetch' },
        },
      );
    case 'variable':
      throw new InternalError(
        `The fetch of variable "${expr.name}" reached the tracefs engine unresolved`,
      );
  }
}

/**
 * The kernel's text for one fetch argument: `NAME=FETCH[:TYPE]`. A string fetched from a value
 * (`arg0:string`, the string at arg0) is written `+0(%di):string`: the kernel reads strings
 * only through a dereference.
 */
export function kernelFetchArg(fetch: FetchArg): string {
  const { text: valueText, width } = fetchText(fetch.expr);
  let type = fetch.type === undefined ? width : kernelType(fetch.type);
  const isString = fetch.type === 'string' || fetch.type === 'ustring';
  let text = valueText;
  if (isString && fetch.expr.kind !== 'deref' && fetch.expr.kind !== 'comm') {
    if (width !== undefined) {
      // `%eax:string`: the kernel would take the address from the whole register.
      throw new ProbeError(
        'ERR_NOT_SUPPORTED',
        `Cannot fetch a string at ${printFetchExpr(fetch.expr)} with the tracefs engine: the kernel takes a string's address from a whole register`,
        {
          hints: [
            'Fetch the string at the 64-bit register, or use --engine bpf or --engine ptrace',
          ],
        },
      );
    }
    text = `+0(${valueText})`;
  }
  // %ah-style registers are a bitfield of the whole register; the kernel's bitfields are
  // unsigned, so an 8-bit unsigned type keeps the bitfield and a signed one cannot be had.
  if (width?.startsWith('b') && fetch.type !== undefined) {
    if (fetch.type === 's8') {
      throw new ProbeError(
        'ERR_NOT_SUPPORTED',
        `Cannot fetch ${printFetchExpr(fetch.expr)} as s8 with the tracefs engine: the kernel reads a register's second byte only as an unsigned bitfield`,
        { hints: ['Use --engine bpf or --engine ptrace, or fetch it as u8'] },
      );
    }
    if (fetchTypeBytes(fetch.type) === 1) type = width;
  }
  return `${fetch.name}=${text}${type === undefined ? '' : `:${type}`}`;
}

/**
 * The line to write to uprobe_events for a site, e.g.
 * `p:upscope_1234/malloc /usr/lib/x86_64-linux-gnu/libc.so.6:0xa2f40 size=%di:u64`.
 * Return probes use `r:`; USDT semaphores become the kernel's `(ref_ctr_offset)`.
 */
export function uprobeEventLine(site: EventLineSite, group: string, event: string): string {
  const uretprobe =
    site.attach === undefined ? site.kind === 'return' : site.attach === 'uretprobe';
  const prefix = uretprobe ? 'r' : 'p';
  const semaphore = site.usdt?.semaphoreFileOffset;
  const where = `${site.target.path}:0x${site.fileOffset.toString(16)}${semaphore === undefined ? '' : `(0x${semaphore.toString(16)})`}`;
  const args = site.fetches.map(kernelFetchArg);
  return [`${prefix}:${group}/${event}`, where, ...args].join(' ');
}

/** A valid tracefs event name from a symbol: letters, digits and underscores, not too long. */
export function eventName(symbol: string | undefined, symbolOffset: bigint, vaddr: bigint): string {
  const base = symbol === undefined ? `addr_${vaddr.toString(16)}` : symbol.replace(/@.*$/, '');
  const clean = base
    .replace(/[^A-Za-z0-9_]/g, '_')
    .replace(/^([0-9])/, '_$1')
    .slice(0, 48);
  return symbolOffset === 0n ? clean : `${clean}_${symbolOffset.toString(16)}`;
}
