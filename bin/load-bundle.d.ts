import type { Script } from 'node:vm';

/** The bundle compiled (from its code cache when V8 takes it) and run: its exports. */
export function loadBundle(): { main(argv: readonly string[]): Promise<number> };
/** The bundle compiled, from its cache when there is one (cachedDataRejected says if taken). */
export function compileBundle(): Script;
/** Writes the bundle's code cache, made after its module ran. */
export function writeCodeCache(): void;
