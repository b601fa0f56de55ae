export { machineLabel, SHN_ABS, SHN_COMMON, SHN_UNDEF, SHN_XINDEX } from './constants.js';
export { openElf, type ParseElfOptions, parseElf } from './parse-elf.js';
export { symbolDisplayName } from './read-symbols.js';
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
