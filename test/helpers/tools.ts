import { execFileSync } from 'node:child_process';

/** Run an outside tool (readelf, nm, objdump) and return its stdout: the truth in tests. */
export function tool(command: string, args: readonly string[]): string {
  return execFileSync(command, args, { encoding: 'utf8', maxBuffer: 512 * 1024 * 1024 });
}

/** `readelf -lW`: PT_LOAD segments as numbers. */
export function readelfLoads(
  path: string,
): { offset: bigint; vaddr: bigint; filesz: bigint; flags: string }[] {
  const out = tool('readelf', ['-lW', path]);
  const loads = [];
  for (const line of out.split('\n')) {
    const m =
      /^\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+([RWE ]+?)\s+0x/.exec(
        line,
      );
    if (m)
      loads.push({
        offset: BigInt(m[1]!),
        vaddr: BigInt(m[2]!),
        filesz: BigInt(m[3]!),
        flags: m[4]!.replace(/ /g, ''),
      });
  }
  return loads;
}

/** The file offset readelf's program headers give for a virtual address. */
export function readelfFileOffset(path: string, vaddr: bigint): bigint {
  for (const load of readelfLoads(path)) {
    if (vaddr >= load.vaddr && vaddr < load.vaddr + load.filesz)
      return vaddr - load.vaddr + load.offset;
  }
  throw new Error(`no PT_LOAD holds 0x${vaddr.toString(16)} in ${path}`);
}

export interface ReadelfSection {
  /** Where the section's header is in the file. */
  readonly headerOffset: number;
  readonly offset: number;
  readonly size: number;
}

/** Where `readelf -SW` says the named section and its header are (`bytes`: the file). */
export function readelfSection(path: string, bytes: Buffer, name: string): ReadelfSection {
  const shoff = Number(bytes.readBigUInt64LE(40));
  for (const line of tool('readelf', ['-SW', path]).split('\n')) {
    const m = /^\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+[0-9a-f]{16}\s([0-9a-f]+)\s([0-9a-f]+)\s/.exec(
      line,
    );
    if (m && m[2] === name) {
      return {
        headerOffset: shoff + Number(m[1]) * 64,
        offset: Number.parseInt(m[3]!, 16),
        size: Number.parseInt(m[4]!, 16),
      };
    }
  }
  throw new Error(`readelf shows no ${name} in ${path}`);
}

/** The addresses gdb puts a breakpoint on LOCATION at (`lines.c:26`), sorted. */
export function gdbBreakpoints(path: string, location: string): bigint[] {
  const out = tool('gdb', [
    '-batch',
    '-nx',
    '-ex',
    `break ${location}`,
    '-ex',
    'info breakpoints',
    path,
  ]);
  const found = [...out.matchAll(/^(?:\d+|\d+\.\d+)\s+.*?\b0x([0-9a-f]{16}) in /gm)].map((m) =>
    BigInt(`0x${m[1]}`),
  );
  if (found.length === 0) throw new Error(`gdb places no breakpoint on ${location}:\n${out}`);
  return found.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}
