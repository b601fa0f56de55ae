import { type DecodedInstruction, sweepInstructions } from './decode.js';

/**
 * Where a probe address falls among a function's instructions:
 * - `ok`: an instruction starts there;
 * - `inside-instruction`: it falls inside `containing`, between the boundaries `previous`
 *   (where `containing` starts) and `next` (where the instruction after it starts);
 * - `past-end`: it is not inside the function's bytes at all;
 * - `undecodable`: decoding from the function's start met bytes that are not an instruction
 *   before reaching it; `lastGood` is the start of the last instruction decoded before them.
 */
export type BoundaryCheck =
  | { ok: true; instruction: DecodedInstruction }
  | {
      ok: false;
      reason: 'inside-instruction';
      containing: DecodedInstruction;
      previous: bigint;
      next: bigint;
    }
  | { ok: false; reason: 'past-end' | 'undecodable'; lastGood: bigint | undefined };

/**
 * Check that `targetVaddr` is an instruction boundary of the function whose bytes are
 * `functionBytes`, starting at `functionVaddr`. As the kernel documentation for uprobes asks,
 * the function is decoded from its start (a linear sweep) up to the target: a probe placed in
 * the middle of an instruction would corrupt the program.
 *
 * For `past-end`, `lastGood` is the start of the function's last instruction (undefined when
 * the function has no bytes or its first instruction cannot be decoded).
 */
export function checkInstructionBoundary(
  functionBytes: Uint8Array,
  functionVaddr: bigint,
  targetVaddr: bigint,
): BoundaryCheck {
  const end = functionVaddr + BigInt(functionBytes.length);
  const inside = targetVaddr >= functionVaddr && targetVaddr < end;
  let lastGood: bigint | undefined;
  let result: BoundaryCheck | undefined;
  sweepInstructions(functionBytes, functionVaddr, (instruction) => {
    if (instruction.invalid) return false;
    if (inside) {
      if (instruction.vaddr === targetVaddr) {
        result = { ok: true, instruction };
        return false;
      }
      const next = instruction.vaddr + BigInt(instruction.length);
      if (targetVaddr < next) {
        result = {
          ok: false,
          reason: 'inside-instruction',
          containing: instruction,
          previous: instruction.vaddr,
          next,
        };
        return false;
      }
    }
    lastGood = instruction.vaddr;
    return true;
  });
  if (result !== undefined) return result;
  return { ok: false, reason: inside ? 'undecodable' : 'past-end', lastGood };
}
