export type { Abbrev, AbbrevAttribute } from './abbrev.js';
export {
  type CallFrameRow,
  CallFrames,
  type CfaDefinition,
  type CfaRule,
  type RegisterRule,
} from './call-frames.js';
export { DW_AT, DW_ATE, DW_OP, DW_TAG, dwarfRegisterName } from './constants.js';
export { Cursor, DwarfFormatError, stringAt } from './cursor.js';
export {
  crc32,
  type DebugFileRejection,
  type DebugInfoLookup,
  type DebugInfoSource,
  type FindDebugInfoOptions,
  fileCrc32,
  findDebugInfo,
} from './debug-file.js';
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
  type LineFileEntry,
  type LineProgramHeader,
  type LineRows,
  readLineHeader,
  runLineProgram,
} from './line-program.js';
export {
  fileMatcher,
  firstAddressPerContext,
  type LineAddress,
  LineTable,
  type LineTableOptions,
  nearestLines,
  type SourceLocation,
} from './line-table.js';
export {
  type AddressExpr,
  describeLocation,
  evaluateLocation,
  type VariableLocation,
} from './location.js';
export { type DwarfSections, dwarfSections, hasDwarf } from './sections.js';
