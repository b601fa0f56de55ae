import type { FetchArg, FetchExpr, FetchType } from '../../spec/index.js';

/** The subset of a probe site the kernel's uprobe_events line is made of. */
export interface EventLineSite {
  readonly kind: 'entry' | 'return' | 'instruction' | 'usdt';
  readonly target: { readonly path: string };
  readonly fileOffset: bigint;
  readonly usdt: { readonly semaphoreFileOffset: bigint | undefined } | undefined;
  readonly fetches: readonly FetchArg[];
}

/** System V x86-64 argument registers, in the kernel's fetch-arg spelling. */
const ARG_REGISTERS = ['%di', '%si', '%dx', '%cx', '%r8', '%r9'] as const;

/** Our register names (any width) -> the kernel's pt_regs name and the width they read. */
const REGISTERS: Readonly<Record<string, readonly [string, FetchType | undefined]>> = (() => {
  const table: Record<string, readonly [string, FetchType | undefined]> = {};
  const legacy: [string, string, string, string, string][] = [
    ['ax', 'rax', 'eax', 'ax', 'al'],
    ['bx', 'rbx', 'ebx', 'bx', 'bl'],
    ['cx', 'rcx', 'ecx', 'cx', 'cl'],
    ['dx', 'rdx', 'edx', 'dx', 'dl'],
    ['si', 'rsi', 'esi', 'si', 'sil'],
    ['di', 'rdi', 'edi', 'di', 'dil'],
    ['bp', 'rbp', 'ebp', 'bp', 'bpl'],
    ['sp', 'rsp', 'esp', 'sp', 'spl'],
  ];
  for (const [kernel, q, d, w, b] of legacy) {
    table[q] = [`%${kernel}`, undefined];
    table[d] = [`%${kernel}`, 'u32'];
    table[w] = [`%${kernel}`, 'u16'];
    table[b] = [`%${kernel}`, 'u8'];
  }
  for (let n = 8; n <= 15; n++) {
    table[`r${n}`] = [`%r${n}`, undefined];
    table[`r${n}d`] = [`%r${n}`, 'u32'];
    table[`r${n}w`] = [`%r${n}`, 'u16'];
    table[`r${n}b`] = [`%r${n}`, 'u8'];
  }
  table['rip'] = ['%ip', undefined];
  table['ip'] = ['%ip', undefined];
  table['flags'] = ['%flags', undefined];
  table['eflags'] = ['%flags', undefined];
  table['rflags'] = ['%flags', undefined];
  return table;
})();

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

function fetchText(expr: FetchExpr): { text: string; width: FetchType | undefined } {
  switch (expr.kind) {
    case 'arg':
      return expr.index < ARG_REGISTERS.length
        ? { text: ARG_REGISTERS[expr.index]!, width: undefined }
        : { text: `$stack${expr.index - ARG_REGISTERS.length + 1}`, width: undefined };
    case 'retval':
      return { text: '$retval', width: undefined };
    case 'register': {
      const known = REGISTERS[expr.name.replace(/^%/, '')];
      return known === undefined
        ? { text: `%${expr.name.replace(/^%/, '')}`, width: undefined }
        : { text: known[0], width: known[1] };
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
    case 'variable':
      return { text: expr.name, width: undefined };
  }
}

/** The kernel's text for one fetch argument: `NAME=FETCH[:TYPE]`. */
export function kernelFetchArg(fetch: FetchArg): string {
  const { text, width } = fetchText(fetch.expr);
  const type = fetch.type ?? width;
  return `${fetch.name}=${text}${type === undefined ? '' : `:${kernelType(type)}`}`;
}

/**
 * The line to write to uprobe_events for a site, e.g.
 * `p:upscope_1234/malloc /usr/lib/x86_64-linux-gnu/libc.so.6:0xa2f40 size=%di:u64`.
 * Return probes use `r:`; USDT semaphores become the kernel's `(ref_ctr_offset)`.
 */
export function uprobeEventLine(site: EventLineSite, group: string, event: string): string {
  const prefix = site.kind === 'return' ? 'r' : 'p';
  const semaphore = site.usdt?.semaphoreFileOffset;
  const where = `${site.target.path}:0x${site.fileOffset.toString(16)}${semaphore === undefined ? '' : `(0x${semaphore.toString(16)})`}`;
  const args = site.fetches.map(kernelFetchArg);
  return [`${prefix}:${group}/${event}`, where, ...args].join(' ');
}

/** A valid tracefs event name from a symbol: letters, digits and underscores, not too long. */
export function eventName(symbol: string | undefined, symbolOffset: bigint, vaddr: bigint): string {
  const base = symbol === undefined ? `addr_${vaddr.toString(16)}` : symbol.replace(/@.*$/, '');
  const clean = base.replace(/[^A-Za-z0-9_]/g, '_').replace(/^([0-9])/, '_$1').slice(0, 48);
  return symbolOffset === 0n ? clean : `${clean}_${symbolOffset.toString(16)}`;
}
