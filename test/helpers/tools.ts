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
