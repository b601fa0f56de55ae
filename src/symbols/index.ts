export {
  DEFAULT_DEBUG_DIR,
  type DebugFileCandidate,
  debugFileCandidates,
  debugFileLocations,
} from './debug-files.js';
export {
  type CloneName,
  type CxxDemangler,
  cloneName,
  cxxDemanglerName,
  type DemangledNames,
  demangle,
  demangleNameStrings,
  demangleNames,
  looksMangled,
  useCxxDemangler,
  withoutParameters,
  withoutReturnType,
} from './demangle.js';
export * from './dwarf/index.js';
export * from './elf/index.js';
export * from './jit/index.js';
export * from './ldcache/index.js';
export * from './maps/index.js';
export {
  type DisplayNameOptions,
  type FunctionSymbol,
  functionDisplayName,
  mangledOnly,
  preferName,
  SymbolIndex,
  type SymbolIndexOptions,
} from './symbol-index.js';
