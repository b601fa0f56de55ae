/**
 * The instructions an entry probe may be moved past when the kernel would single-step the
 * first (see entryPastStepped() in the planning): by their bytes alone, no decoder, since
 * planning every function of a large program asks it of half of them. Only what is sure: a
 * `test` or `cmp` (it writes the flags alone, whatever it reads), and a `mov`, `lea`, `movzx`,
 * `movsx`, `movsxd` or `xor` into %rax or %r11 (or a part of them): registers no argument
 * arrives in (%rax carries at most the count of vector registers a variadic call passes), and
 * no stack or memory written. Anything else (and any prefix but 0x66 and REX) is undefined.
 */
import { quickLength } from './quick-length.js';

/** What a passable instruction changes: the flags alone, or %rax or %r11 (and the flags). */
export type PassedChange = 'flags' | 'scratch';

/** ModRM's reg field with REX.R, and its rm field with REX.B, as register numbers 0-15. */
function fields(rex: number, modrm: number): { reg: number; rm: number; mod: number } {
  return {
    reg: ((modrm >> 3) & 7) | ((rex & 4) << 1),
    rm: (modrm & 7) | ((rex & 1) << 3),
    mod: modrm >> 6,
  };
}

/** %rax (0) or %r11 (11), by number. */
const isScratch = (register: number) => register === 0 || register === 11;

/**
 * The length of the instruction at `bytes[at]` and what it changes when an entry probe may
 * be moved past it; undefined when it may not (or it is not one of the few known here).
 */
export function passableAtEntry(
  bytes: Uint8Array,
  at: number,
  end: number,
): { length: number; change: PassedChange } | undefined {
  const length = quickLength(bytes, at, end);
  if (length === 0) return undefined;
  let i = at;
  let operand16 = false;
  if (bytes[i] === 0x66) {
    operand16 = true;
    i++;
  }
  let rex = 0;
  if ((bytes[i]! & 0xf0) === 0x40) rex = bytes[i++]!;
  const op = bytes[i++]!;
  const flags = { length, change: 'flags' as const };
  const scratch = { length, change: 'scratch' as const };
  // The ModRM byte, for the forms that have one (quickLength() has checked it is there).
  const modrm = bytes[i] ?? 0;
  const { reg, rm, mod } = fields(rex, modrm);
  switch (op) {
    // test r/m,r; cmp r/m,r and r,r/m; cmp and test of %al/%eax with an immediate.
    case 0x84:
    case 0x85:
    case 0x38:
    case 0x39:
    case 0x3a:
    case 0x3b:
    case 0x3c:
    case 0x3d:
    case 0xa8:
    case 0xa9:
      return flags;
    // cmp r/m,imm (/7)
    case 0x80:
    case 0x81:
    case 0x83:
      return ((modrm >> 3) & 7) === 7 ? flags : undefined;
    // test r/m,imm (/0)
    case 0xf6:
    case 0xf7:
      return ((modrm >> 3) & 7) === 0 ? flags : undefined;
  }
  if (operand16) return undefined;
  switch (op) {
    // mov r,r/m; lea r,m; movsxd r,r/m; xor r,r/m: into the reg field.
    case 0x8b:
    case 0x63:
    case 0x33:
      return isScratch(reg) ? scratch : undefined;
    case 0x8d:
      return mod !== 3 && isScratch(reg) ? scratch : undefined;
    // mov r/m,r and xor r/m,r: into the rm field, a register only (else memory is written).
    case 0x89:
    case 0x31:
      return mod === 3 && isScratch(rm) ? scratch : undefined;
    case 0x0f: {
      // movzx and movsx r,r/m
      const op2 = bytes[i];
      if (op2 !== 0xb6 && op2 !== 0xb7 && op2 !== 0xbe && op2 !== 0xbf) return undefined;
      const second = fields(rex, bytes[i + 1] ?? 0);
      return isScratch(second.reg) ? scratch : undefined;
    }
  }
  // mov $imm,%eax/%rax (b8) or %r11d/%r11 (REX.B bb)
  if ((op & 0xf8) === 0xb8 && isScratch((op & 7) | ((rex & 1) << 3))) return scratch;
  return undefined;
}
