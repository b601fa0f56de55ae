export {
  machineLabel,
  SHN_ABS,
  SHN_COMMON,
  SHN_UNDEF,
  SHN_XINDEX,
  SYMBOL_BINDINGS,
} from './constants.js';
export { openElf, type ParseElfOptions, parseElf } from './parse-elf.js';
export {
  DT,
  DYN_ENTRY_BYTES,
  type DynamicEntry,
  type DynamicInfo,
  parseDynamicEntries,
  readDynamicInfo,
} from './read-dynamic.js';
export { type FunctionColumns, splitSymbolVersion, symbolDisplayName } from './read-symbols.js';
export type {
  DebugLink,
  ElfFile,
  ElfNote,
  ElfSection,
  ElfSegment,
  ElfSymbol,
  ElfType,
  SymbolBinding,
  SymbolTableName,
  SymbolType,
  SymbolVisibility,
  UsdtNote,
} from './types.js';
