/**
 * Inline hooks (the `inject` engine): a 5-byte `jmp rel32` written over a function's first
 * instructions, which then run relocated at the end of a trampoline, followed by a jump back
 * to the first instruction the patch left whole (frida-gum's Interceptor does the same).
 *
 * A site can take the patch only if every instruction the 5 bytes cover can run elsewhere
 * as it is (or with its %rip-relative displacement re-aimed: planXol's `relocate` class), and
 * no jump lands inside the patched bytes after their first: such a jump would run the middle
 * of our `jmp`. Branches among the first instructions (a function that starts with `jmp`,
 * `call`, `jcc`) are refused here; the engine's int3 path serves those sites instead.
 */
import { decodeInstructions } from './decode.js';
import { planXol } from './xol.js';

/** The bytes of the patch: `jmp rel32`. */
export const PATCH_BYTES = 5;

export type EntryPatchPlan =
  | {
      readonly kind: 'patch';
      /** How many bytes of whole instructions the patch covers (>= PATCH_BYTES). */
      readonly length: number;
      /** The covered instructions, re-encoded to run at `relocatedAt`, without a jump back. */
      readonly relocated: Uint8Array;
      /** Where each covered instruction starts in `relocated`, and the address it stands for. */
      readonly map: readonly { readonly offset: number; readonly vaddr: bigint }[];
      /** objdump-like text of the covered instructions. */
      readonly texts: readonly string[];
    }
  | { readonly kind: 'refuse'; readonly reason: string };

/**
 * Plan the patch of the code `bytes` at `vaddr` (at least PATCH_BYTES + 15 bytes, the
 * original code), whose covered instructions will run from `relocatedAt`. `jumpTargets`:
 * the addresses near `vaddr` that a jump of the function lands on (undefined: not known,
 * which refuses, since nothing then proves the patch safe). Pure: no I/O.
 */
export function planEntryPatch(
  bytes: Uint8Array,
  vaddr: bigint,
  relocatedAt: bigint,
  jumpTargets: readonly bigint[] | undefined,
): EntryPatchPlan {
  if (jumpTargets === undefined) {
    return {
      kind: 'refuse',
      reason:
        'the extent of its function is not known, so jumps into its first bytes cannot be ruled out',
    };
  }
  const parts: Uint8Array[] = [];
  const map: { offset: number; vaddr: bigint }[] = [];
  const texts: string[] = [];
  let length = 0;
  while (length < PATCH_BYTES) {
    const at = vaddr + BigInt(length);
    const [decoded] = decodeInstructions(bytes.subarray(length), at, { maxCount: 1 });
    if (decoded === undefined || decoded.invalid) {
      return { kind: 'refuse', reason: `the bytes at 0x${at.toString(16)} do not decode` };
    }
    const plan = planXol(bytes.subarray(length), at, relocatedAt + BigInt(length));
    if (plan.kind === 'refuse') {
      return { kind: 'refuse', reason: `"${plan.text}" cannot run elsewhere: ${plan.reason}` };
    }
    if (plan.kind === 'emulate') {
      return {
        kind: 'refuse',
        reason: `"${plan.text}" in its first ${PATCH_BYTES} bytes is a branch (not relocated into a trampoline)`,
      };
    }
    map.push({ offset: length, vaddr: at });
    texts.push(plan.text);
    // The re-encoded instruction keeps its length; the jump back after it is dropped.
    parts.push(plan.slotBytes.subarray(0, plan.length));
    length += plan.length;
  }
  if (jumpTargets.includes(vaddr)) {
    return {
      kind: 'refuse',
      reason:
        'a jump of the function goes back to its first instruction (a loop there): a hook would take each pass for a call',
    };
  }
  const end = vaddr + BigInt(length);
  const inside = jumpTargets.find((target) => target > vaddr && target < end);
  if (inside !== undefined) {
    return {
      kind: 'refuse',
      reason: `a jump of the function lands at 0x${inside.toString(16)}, inside the ${length} bytes a patch would cover`,
    };
  }
  const relocated = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    relocated.set(part, offset);
    offset += part.length;
  }
  return { kind: 'patch', length, relocated, map, texts };
}

/** `jmp rel32` at `from` to `to` (within ±2 GiB; undefined otherwise). */
export function jumpRel32(from: bigint, to: bigint): Uint8Array | undefined {
  const rel = BigInt.asIntN(64, to - (from + 5n));
  if (rel < -(1n << 31n) || rel >= 1n << 31n) return undefined;
  const bytes = new Uint8Array(5);
  bytes[0] = 0xe9;
  new DataView(bytes.buffer).setInt32(1, Number(rel), true);
  return bytes;
}
