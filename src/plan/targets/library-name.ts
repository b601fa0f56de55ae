/**
 * Matching a library name as a user types it (`libc`, `libssl`, `libc.so.6`) against file
 * names and sonames (`libc.so.6`, `libc-2.31.so`, `libssl.so.3`).
 */

/**
 * Match quality, lower is better: 0 the file name is the name (`libc.so.6`); 1 a versioned
 * file of the library (`libc.so.6` for `libc` or `libc.so`); 2 the old glibc naming
 * (`libc-2.31.so` for `libc`).
 */
export type NameMatch = 0 | 1 | 2;

const SO_IN_NAME = /\.so(\.|$)/;
/** `-2.31.so` at the end of `libc-2.31.so`. */
const DASHED_VERSION = /-([0-9][0-9.]*)\.so$/;

/**
 * How `fileName` (a basename or soname) matches `name`, or undefined when it does not:
 * `name` itself; `name.so` or `name.so.N...` for a short name; `name.N...` when the name
 * already has ".so" (`libssl.so` -> `libssl.so.3`); `name-N....so` (`libc-2.31.so`).
 * `libc` does not match `libcap.so.2` or `libc-client.so.1`.
 */
export function matchLibraryName(fileName: string, name: string): NameMatch | undefined {
  if (fileName === name) return 0;
  if (fileName.startsWith(`${name}.so`)) {
    const rest = fileName.slice(name.length + 3);
    if (rest === '' || rest.startsWith('.')) return 1;
  }
  if (SO_IN_NAME.test(name) && fileName.startsWith(`${name}.`)) return 1;
  if (fileName.startsWith(`${name}-`) && /^-[0-9][0-9.]*\.so$/.test(fileName.slice(name.length)))
    return 2;
  return undefined;
}

/**
 * The version numbers in a library file name: `libssl.so.1.1` -> [1, 1], `libc-2.31.so` ->
 * [2, 31], `libfoo.so` -> []. Non-numeric parts end the version.
 */
export function libraryVersion(fileName: string): number[] {
  const dashed = DASHED_VERSION.exec(fileName);
  const text = dashed?.[1] ?? /\.so\.([0-9][0-9.]*)/.exec(fileName)?.[1] ?? '';
  const version: number[] = [];
  for (const part of text.split('.')) {
    if (!/^[0-9]+$/.test(part)) break;
    version.push(Number(part));
  }
  return version;
}

/**
 * Order versions highest first. No version sorts last; when one version is a prefix of the
 * other (`.so.1` and `.so.1.2.3`, usually a symlink and its file) the shorter comes first.
 */
export function compareVersionsDescending(a: readonly number[], b: readonly number[]): number {
  if (a.length === 0 || b.length === 0) return b.length - a.length;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) return b[i]! - a[i]!;
  }
  return a.length - b.length;
}

/** The name a user would type for a library file: `libssl.so.3` -> `libssl`. */
export function libraryShortName(fileName: string): string {
  const dashed = DASHED_VERSION.exec(fileName);
  if (dashed !== null && dashed.index > 0) return fileName.slice(0, dashed.index);
  const so = fileName.search(/\.so(\.|$)/);
  return so > 0 ? fileName.slice(0, so) : fileName;
}
