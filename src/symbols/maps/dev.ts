/**
 * Device numbers: /proc/PID/maps shows major:minor, stat() returns glibc's encoded dev_t.
 * The encoding (glibc's makedev) keeps the low 8 bits of the minor and 12 bits of the major
 * where old 16-bit dev_t values had them.
 */

/** The dev_t that stat() reports for a device, from its major and minor numbers. */
export function makeDev(major: number, minor: number): bigint {
  const ma = BigInt(major);
  const mi = BigInt(minor);
  return ((ma & 0xfffn) << 8n) | ((ma & ~0xfffn) << 32n) | (mi & 0xffn) | ((mi & ~0xffn) << 12n);
}

/** The major and minor numbers of a dev_t from stat(). */
export function splitDev(dev: bigint): { major: number; minor: number } {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return { major: Number(major), minor: Number(minor) };
}
