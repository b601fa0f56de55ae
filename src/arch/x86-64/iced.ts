/**
 * The one place that loads iced-x86 (the x86 decoder, compiled to WebAssembly). It is loaded
 * lazily on the first decode, through `createRequire` (about 25 ms here; an ESM import of the
 * same package takes about 70 ms), so commands that never decode never pay for it.
 *
 * Every iced object (Decoder, Instruction, Formatter, ...) lives in WebAssembly memory and must
 * be released with `.free()`; callers do that in `finally` blocks.
 */
import { createRequire } from 'node:module';
import type * as IcedModule from 'iced-x86';
import { InternalError } from '../../errors/index.js';

export type Iced = typeof IcedModule;
export type IcedInstruction = IcedModule.Instruction;
export type IcedFormatter = IcedModule.Formatter;

let iced: Iced | undefined;

/** The iced-x86 module, loaded on first use and cached. */
export function loadIced(): Iced {
  if (iced === undefined) {
    try {
      iced = createRequire(import.meta.url)('iced-x86') as Iced;
    } catch (cause) {
      throw new InternalError(
        `Cannot load the x86-64 decoder "iced-x86": ${cause instanceof Error ? cause.message : String(cause)}`,
        cause,
      );
    }
  }
  return iced;
}

/** True once iced-x86 has been loaded (tests use it to check that loading stays lazy). */
export function isIcedLoaded(): boolean {
  return iced !== undefined;
}
