/**
 * The `flags` word of an ld.so.cache entry (glibc's FLAG_* values): the low byte is the library
 * type, the next byte the ABI the library needs.
 */

export const FLAG_TYPE_MASK = 0x00ff;
export const FLAG_LIBC4 = 0x0000;
export const FLAG_ELF = 0x0001;
export const FLAG_ELF_LIBC5 = 0x0002;
export const FLAG_ELF_LIBC6 = 0x0003;
export const FLAG_REQUIRED_MASK = 0xff00;
export const FLAG_X8664_LIB64 = 0x0300;
export const FLAG_X8664_LIBX32 = 0x0800;

export type LdCacheArch = 'x86-64' | 'i386' | 'x32' | 'other';

/** Which x86 ABI an entry is for; anything that is not a libc6 x86 entry is 'other'. */
export function ldCacheArch(flags: number): LdCacheArch {
  if ((flags & FLAG_TYPE_MASK) !== FLAG_ELF_LIBC6) return 'other';
  switch (flags & FLAG_REQUIRED_MASK) {
    case FLAG_X8664_LIB64:
      return 'x86-64';
    case FLAG_X8664_LIBX32:
      return 'x32';
    case 0:
      return 'i386';
    default:
      return 'other';
  }
}

const TYPE_NAMES = ['libc4', 'ELF', 'libc5', 'libc6'];

/** ABI names by FLAG_*_LIB* value, as `ldconfig -p` prints them. */
const REQUIRED_NAMES: ReadonlyMap<number, string> = new Map([
  [0x0100, '64bit'], // SPARC
  [0x0200, 'IA-64'],
  [0x0300, 'x86-64'],
  [0x0400, '64bit'], // S/390
  [0x0500, '64bit'], // POWER
  [0x0600, 'N32'],
  [0x0700, '64bit'], // MIPS n64
  [0x0800, 'x32'],
  [0x0900, 'hard-float'],
  [0x0a00, 'AArch64'],
  [0x0b00, 'soft-float'],
  [0x0c00, 'nan2008'],
  [0x0d00, 'N32,nan2008'],
  [0x0e00, '64bit,nan2008'],
  [0x0f00, 'soft-float'], // RISC-V
  [0x1000, 'double-float'], // RISC-V
]);

/**
 * The flags as `ldconfig -p` describes them, e.g. "libc6,x86-64" or "libc6" (i386): the type,
 * then the ABI when there is one, or the ABI number when it is unknown.
 */
export function describeLdCacheFlags(flags: number): string {
  const type = TYPE_NAMES[flags & FLAG_TYPE_MASK] ?? 'unknown';
  const required = flags & FLAG_REQUIRED_MASK;
  if (required === 0) return type;
  return `${type},${REQUIRED_NAMES.get(required) ?? String(required)}`;
}
