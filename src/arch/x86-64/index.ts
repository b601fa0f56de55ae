export { type BoundaryCheck, checkInstructionBoundary } from './boundary.js';
export {
  atAddress,
  type DecodedInstruction,
  type DecodeOptions,
  decodeInstructions,
  MAX_INSTRUCTION_LENGTH,
  recurringKey,
  ripRelativeTargets,
  sweepInstructions,
} from './decode.js';
export { type PassedChange, passableAtEntry } from './entry-pass.js';
export {
  changesCallState,
  type PairSlot,
  planPairSlot,
  type ReversibleEffect,
  reverseEffect,
} from './guard.js';
export { isIcedLoaded } from './iced.js';
export {
  analyzeKernelHandling,
  type KernelHandling,
  type KernelHandlingOptions,
} from './kernel-handling.js';
export { type EntryPatchPlan, jumpRel32, PATCH_BYTES, planEntryPatch } from './patch.js';
export { QUICK_FLOW, quick, quickLength } from './quick-length.js';
export {
  type CodePart,
  exitInstructionAt,
  findReturnInstructions,
  type JumpObserver,
  type ReturnInstruction,
  type ReturnScan,
} from './returns.js';
export {
  BUCKETS,
  buildEntryTrampoline,
  buildReturnTrampoline,
  type EntryRead,
  type EntryTrampolineSpec,
  READ_DATA,
  READ_LIMITS,
  RECORD,
  RECORD_KIND,
  RECORD_PROBE,
  RECORD_REGS,
  type RecordRegister,
  RING,
  readLayout,
  relocatedOffset,
  SHADOW,
  SHADOW_DEPTH,
  STACK_WORDS,
  STATS,
  savedRegisterOffset,
  TRAMPOLINE_MAX_BYTES,
} from './trampoline.js';
export {
  CFA_KIND,
  type CfiRowInput,
  compileUnwindTable,
  type Located,
  RA_KIND,
  RBP_KIND,
  ruleAt,
  ruleOfRow,
  STOP_REASON,
  type StopReason,
  stopFrameText,
  stopReasonOf,
  type UnwindOptions,
  type UnwindRule,
  type UnwindTable,
  type UnwoundFrame,
  unwindStack,
} from './unwind.js';
export {
  type Emulation,
  type EmulationResult,
  emulate,
  planXol,
  XOL_SLOT_BYTES,
  type XolPlan,
  type XolRegisters,
} from './xol.js';
