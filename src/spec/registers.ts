/** A general-purpose register of x86-64, or rip / rflags, by its 64-bit name. */
export type RegisterBase =
  | 'rax'
  | 'rbx'
  | 'rcx'
  | 'rdx'
  | 'rsi'
  | 'rdi'
  | 'rbp'
  | 'rsp'
  | 'r8'
  | 'r9'
  | 'r10'
  | 'r11'
  | 'r12'
  | 'r13'
  | 'r14'
  | 'r15'
  | 'rip'
  | 'rflags';

/** The registers of `arg0`..`arg5` in the x86-64 SysV ABI; later arguments are on the stack. */
export const ARGUMENT_REGISTERS: readonly RegisterBase[] = ['rdi', 'rsi', 'rdx', 'rcx', 'r8', 'r9'];

/** What a register name in a fetch reads: `bits` bits of `base`, starting `shift` bits up. */
export interface RegisterInfo {
  readonly name: string;
  readonly base: RegisterBase;
  readonly bits: 8 | 16 | 32 | 64;
  readonly shift: 0 | 8;
}

const table = new Map<string, RegisterInfo>();

function add(name: string, base: RegisterBase, bits: RegisterInfo['bits'], shift: 0 | 8 = 0) {
  table.set(name, { name, base, bits, shift });
}

// Order matters only for suggestions: the first of equally close names is offered.
for (const [letter, wide] of [
  ['a', 'rax'],
  ['b', 'rbx'],
  ['c', 'rcx'],
  ['d', 'rdx'],
] as const) {
  add(wide, wide, 64);
  add(`e${letter}x`, wide, 32);
  add(`${letter}l`, wide, 8);
  add(`${letter}h`, wide, 8, 8);
}
for (const [short, wide] of [
  ['si', 'rsi'],
  ['di', 'rdi'],
  ['bp', 'rbp'],
  ['sp', 'rsp'],
] as const) {
  add(wide, wide, 64);
  add(`e${short}`, wide, 32);
  add(`${short}l`, wide, 8);
}
for (let n = 8; n <= 15; n++) {
  const wide = `r${n}` as RegisterBase;
  add(wide, wide, 64);
  add(`${wide}d`, wide, 32);
  add(`${wide}w`, wide, 16);
  add(`${wide}b`, wide, 8);
}
add('rip', 'rip', 64);
add('flags', 'rflags', 64);
add('rflags', 'rflags', 64);
add('eflags', 'rflags', 32);
// The kernel's fetch-arg names (pt_regs fields): %ax is the whole of rax there, not its low
// 16 bits, and upscope follows the kernel so that kernel-style specs mean the same thing.
// Narrow a value with a type instead: %ax:u16.
for (const [short, wide] of [
  ['ax', 'rax'],
  ['bx', 'rbx'],
  ['cx', 'rcx'],
  ['dx', 'rdx'],
  ['si', 'rsi'],
  ['di', 'rdi'],
  ['bp', 'rbp'],
  ['sp', 'rsp'],
  ['ip', 'rip'],
] as const) {
  add(short, wide, 64);
}

/** Every register name a fetch accepts after `%` (lowercase). */
export const REGISTER_NAMES: readonly string[] = [...table.keys()];

/** What `%name` reads, or undefined for a name that is not a register. Case-insensitive. */
export function registerInfo(name: string): RegisterInfo | undefined {
  return table.get(name.toLowerCase());
}
