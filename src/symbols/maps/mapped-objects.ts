import { makeDev } from './dev.js';
import type { MapEntry } from './parse-proc-maps.js';

/** A file mapped into a process: all the areas of one (device, inode, path). */
export interface MappedObject {
  /** The file as the process sees it, without " (deleted)". */
  readonly path: string;
  readonly devMajor: number;
  readonly devMinor: number;
  /** The device as stat() reports it (see makeDev()), to compare with a file on disk. */
  readonly dev: bigint;
  readonly inode: bigint;
  readonly deleted: boolean;
  /** Its areas in address order. */
  readonly mappings: MapEntry[];
  /** Lowest address of any of its areas. */
  readonly start: bigint;
  /** First address past its highest area. */
  readonly end: bigint;
}

/** True for an area backed by a file (not anonymous, not a kernel pseudo area). */
export function isFileMapping(entry: MapEntry): boolean {
  return entry.inode !== 0n && entry.path !== '' && !entry.pseudo;
}

/**
 * Group the file-backed areas of a process by (device, inode, path), in order of their lowest
 * address. Anonymous areas (including a library's .bss beyond its file) and pseudo areas are
 * left out.
 */
export function mappedObjects(entries: readonly MapEntry[]): MappedObject[] {
  const groups = new Map<string, MapEntry[]>();
  for (const entry of entries) {
    if (!isFileMapping(entry)) continue;
    const key = `${entry.devMajor}:${entry.devMinor}:${entry.inode}:${entry.path}`;
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [entry]);
    else group.push(entry);
  }
  const objects: MappedObject[] = [];
  for (const group of groups.values()) {
    const mappings = [...group].sort((a, b) =>
      a.start < b.start ? -1 : a.start > b.start ? 1 : 0,
    );
    const first = mappings[0]!;
    let end = first.end;
    for (const m of mappings) if (m.end > end) end = m.end;
    objects.push({
      path: first.path,
      devMajor: first.devMajor,
      devMinor: first.devMinor,
      dev: makeDev(first.devMajor, first.devMinor),
      inode: first.inode,
      deleted: mappings.some((m) => m.deleted),
      mappings,
      start: first.start,
      end,
    });
  }
  return objects.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
}
