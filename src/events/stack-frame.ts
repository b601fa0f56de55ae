/**
 * One frame of a user stack, as symbolized: what names it and where it is. Every field but the
 * ones known is left out: a frame no symbol covers has an address (and its object, when a
 * file is mapped there) and no function.
 */
export interface StackFrame {
  /** The function's name as shown (demangled for C++ and Rust). */
  readonly function?: string | undefined;
  /** The symbol as stored (mangled), where it differs from `function`. */
  readonly symbol?: string | undefined;
  /** How far the address is into its function. */
  readonly symbolOffset?: bigint | undefined;
  /** The mapped file, as the process sees its path. */
  readonly object?: string | undefined;
  /** The object's GNU build-id, in hex. */
  readonly buildId?: string | undefined;
  /** The runtime address (for a caller's frame, the return address). */
  readonly address?: bigint | undefined;
  /** The address as an offset in `object`. */
  readonly fileOffset?: bigint | undefined;
  /** The source file and line, where debug info says. */
  readonly file?: string | undefined;
  readonly line?: number | undefined;
  /**
   * Inlined into the frame after it (the next outer one): at the same address, it has no
   * frame of its own on the machine stack.
   */
  readonly inlined?: boolean | undefined;
}
