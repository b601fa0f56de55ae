// The .debug_info side of the DWARF reader: units, DIEs, types, locations, call frames.
export type { Abbrev, AbbrevAttribute } from './abbrev.js';
export { CallFrames, type CfaRule } from './call-frames.js';
export { DW_AT, DW_ATE, DW_OP, DW_TAG, dwarfRegisterName } from './constants.js';
export { Cursor, DwarfFormatError } from './cursor.js';
export {
  type AddressRange,
  type AttrValue,
  DebugInfo,
  type Die,
  type LocationAt,
  type Unit,
} from './debug-info.js';
export {
  type DwarfFunction,
  DwarfReader,
  type DwarfVariable,
  type InlineContext,
  type Scope,
} from './dwarf-reader.js';
export {
  type DwarfType,
  declaration,
  resolvedType,
  type StructMember,
  TypeReader,
  typeName,
  typeSize,
} from './dwarf-types.js';
export {
  type AddressExpr,
  describeLocation,
  evaluateLocation,
  type VariableLocation,
} from './location.js';
export { type DwarfSections, dwarfSections, hasDwarf } from './sections.js';
