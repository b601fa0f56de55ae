import {
  closeDebugInfo,
  type FunctionVariables,
  functionVariables,
  noDebugInfoHints,
  openDwarf,
  resolveTarget,
  targetSymbols,
} from '../plan/index.js';
import { type DwarfReader, fileOffsetToRuntime, openElf } from '../symbols/index.js';

/** The variables `upscope list TARGET --vars FUNCTION` shows. */
export interface VariableListing {
  readonly target: { readonly path: string; readonly displayPath: string };
  readonly function: string;
  /** The out-of-line copy and every inlined instance of the function. */
  readonly instances: readonly (FunctionVariables & {
    /** With a pid: where the probe point is in that process. */
    readonly runtimeAddress: bigint | undefined;
  })[];
}

export interface ListVariablesOptions {
  /** Find the target as this process sees it and add runtime addresses. */
  readonly pid?: number | undefined;
  /** Directories searched for separate debug files, before /usr/lib/debug. */
  readonly debugDirs?: readonly string[] | undefined;
}

/**
 * The parameters and local variables visible where a probe on `fn` goes, with their C types
 * and where each value is (or why it is not available), from the file's DWARF.
 */
export async function listVariables(
  target: string,
  fn: string,
  options: ListVariablesOptions = {},
): Promise<VariableListing> {
  const resolved = await resolveTarget(target, { pid: options.pid });
  const elf = openElf(resolved.path);
  const debug = { debugDirs: options.debugDirs };
  try {
    let dwarf: DwarfReader | undefined | null = null;
    const instances = functionVariables(
      {
        elf,
        displayPath: resolved.displayPath,
        dwarf: () => {
          if (dwarf === null) dwarf = openDwarf(elf, resolved.path, debug);
          return dwarf;
        },
        noDebugInfoHints: () => noDebugInfoHints(elf, resolved.path, resolved.displayPath, debug),
        symbols: () => targetSymbols(elf, resolved.path, debug),
      },
      fn,
    ).map((instance) => {
      const fileOffset = elf.vaddrToFileOffset(instance.vaddr);
      const mapped = resolved.mappedObject;
      return {
        ...instance,
        runtimeAddress:
          mapped === undefined || fileOffset === undefined
            ? undefined
            : fileOffsetToRuntime(mapped, fileOffset),
      };
    });
    return {
      target: { path: resolved.path, displayPath: resolved.displayPath },
      function: fn,
      instances,
    };
  } finally {
    closeDebugInfo(elf);
    elf.close();
  }
}
