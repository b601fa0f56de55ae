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
export { type DwarfSections, dwarfSections, hasDwarf } from './sections.js';
