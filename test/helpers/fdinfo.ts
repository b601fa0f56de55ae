import { readdirSync, readFileSync } from 'node:fs';

/**
 * What the kernel says of each file descriptor process `pid` holds (/proc/PID/fdinfo/FD): BPF
 * programs, maps and links name their kind and id there, uprobe_multi links their file and
 * uprobe count. Descriptors closed while they are read are left out.
 */
export function fdInfos(pid: number): string[] {
  const infos: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fdinfo`)) {
    try {
      infos.push(readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'));
    } catch {
      // closed meanwhile
    }
  }
  return infos;
}
