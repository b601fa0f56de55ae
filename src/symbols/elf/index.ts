export { FileSource } from './byte-source.js';
export {
  machineLabel,
  SHN_ABS,
  SHN_COMMON,
  SHN_UNDEF,
  SHN_XINDEX,
  SYMBOL_BINDINGS,
} from './constants.js';
export { fileAccessError } from './file-access.js';
export { type GoInfo, goInfo, isGoFunctionEntry } from './go-info.js';
export {
  type GoStackDelta,
  goFunctionColumns,
  goFunctionEntries,
  goStackDeltas,
} from './go-pclntab.js';
export { miniDebugInfo } from './mini-debuginfo.js';
export { openElf, type ParseElfOptions, parseElf } from './parse-elf.js';
export {
  DT,
  DYN_ENTRY_BYTES,
  type DynamicEntry,
  type DynamicInfo,
  interpreterOf,
  parseDynamicEntries,
  readDynamicInfo,
} from './read-dynamic.js';
export {
  type FunctionColumns,
  joinedColumns,
  splitSymbolVersion,
  symbolDisplayName,
} from './read-symbols.js';
export {
  AT_BASE,
  findDebugEntry,
  LINK_MAP_BYTES,
  type LinkMapEntry,
  parseAuxv,
  parseLinkMapEntry,
  parseRDebug,
  R_DEBUG_BYTES,
  R_STATE_OFFSET,
  type RDebug,
  type RendezvousState,
  RT_STATE,
  rendezvousState,
  walkLinkMap,
} from './rendezvous.js';
export { readScriptHeader, type ScriptHeader, scriptTargetError } from './script.js';
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
export {
  parseUsdtArguments,
  type UsdtArgument,
  type UsdtOperand,
  type UsdtRegister,
  usdtRegister,
} from './usdt-arguments.js';
