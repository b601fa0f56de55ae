import { ProbeError } from '../errors/index.js';
import { processObjects, type ResolvedTarget, resolveTarget } from '../plan/index.js';
import { globToRegExp } from '../spec/index.js';
import { type ElfFile, fileOffsetToRuntime, openElf } from '../symbols/index.js';

/** One USDT probe of a file (a .note.stapsdt note), and with a pid where it is in that process. */
export interface ListedUsdtProbe {
  readonly provider: string;
  readonly name: string;
  /** The probe's address in the file (the note's pc, corrected for prelinking). */
  readonly vaddr: bigint;
  readonly fileOffset: bigint | undefined;
  /** The semaphore's address in the file, when the probe has one. */
  readonly semaphoreVaddr: bigint | undefined;
  /** The argument string as the note holds it, e.g. `-4@%edi 8@-16(%rbp)`. */
  readonly args: string;
  /** With a pid: the probe's address in that process. */
  readonly runtimeAddress: bigint | undefined;
}

export interface UsdtObjectListing {
  readonly path: string;
  readonly displayPath: string;
  readonly buildId: string | undefined;
  /** Sorted by provider, name, then address. */
  readonly probes: readonly ListedUsdtProbe[];
}

export interface UsdtListing {
  readonly pid: number | undefined;
  /** The objects listed that have probes (the target, or each object the process maps). */
  readonly objects: readonly UsdtObjectListing[];
}

export interface ListUsdtOptions {
  /** A glob over `provider:name`. */
  readonly pattern?: string | undefined;
  /** Find the target as this process sees it and add runtime addresses. */
  readonly pid?: number | undefined;
}

/**
 * The USDT probes of one ELF file (a path, program or library name), or with `target`
 * undefined and a pid, of every ELF object the process has mapped (files that are not ELF,
 * such as locale archives, are passed over).
 */
export async function listUsdtProbes(
  target: string | undefined,
  options: ListUsdtOptions = {},
): Promise<UsdtListing> {
  const pattern = options.pattern === undefined ? undefined : globToRegExp(options.pattern);
  if (target !== undefined) {
    const resolved = resolveTarget(target, { pid: options.pid });
    const object = listObject(resolved, pattern);
    return { pid: options.pid, objects: object.probes.length > 0 ? [object] : [] };
  }
  if (options.pid === undefined) {
    throw new ProbeError('ERR_USAGE', 'Cannot list USDT probes: name a TARGET, or give -p PID', {
      hints: ['Run "upscope list --help" for usage'],
    });
  }
  const objects: UsdtObjectListing[] = [];
  const seen = new Set<string>();
  for (const mapped of processObjects(options.pid)) {
    const key = `${mapped.devMajor}:${mapped.devMinor}:${mapped.inode}`;
    if (seen.has(key)) continue;
    seen.add(key);
    let resolved: ResolvedTarget;
    try {
      resolved = resolveTarget(mapped.path, { pid: options.pid });
    } catch (err) {
      if (err instanceof ProbeError) continue;
      throw err;
    }
    let object: UsdtObjectListing;
    try {
      object = listObject(resolved, pattern);
    } catch (err) {
      // Mapped files that are not ELF objects (locale archives, caches) have no probes.
      if (err instanceof ProbeError && err.code === 'ERR_ELF_INVALID') continue;
      throw err;
    }
    if (object.probes.length > 0) objects.push(object);
  }
  return { pid: options.pid, objects };
}

function listObject(resolved: ResolvedTarget, pattern: RegExp | undefined): UsdtObjectListing {
  const elf: ElfFile = openElf(resolved.path);
  try {
    const mapped = resolved.mappedObject;
    const probes = elf
      .usdtNotes()
      .filter((note) => pattern === undefined || pattern.test(`${note.provider}:${note.name}`))
      .map((note): ListedUsdtProbe => {
        const fileOffset = elf.vaddrToFileOffset(note.vaddr);
        return {
          provider: note.provider,
          name: note.name,
          vaddr: note.vaddr,
          fileOffset,
          semaphoreVaddr: note.semaphore === 0n ? undefined : note.semaphore,
          args: note.args,
          runtimeAddress:
            mapped === undefined || fileOffset === undefined
              ? undefined
              : fileOffsetToRuntime(mapped, fileOffset),
        };
      })
      .sort(
        (a, b) =>
          a.provider.localeCompare(b.provider) ||
          a.name.localeCompare(b.name) ||
          (a.vaddr < b.vaddr ? -1 : a.vaddr > b.vaddr ? 1 : 0),
      );
    return {
      path: resolved.path,
      displayPath: resolved.displayPath,
      buildId: elf.buildId(),
      probes,
    };
  } finally {
    elf.close();
  }
}
