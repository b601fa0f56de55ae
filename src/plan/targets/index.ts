export {
  compareVersionsDescending,
  libraryShortName,
  libraryVersion,
  matchLibraryName,
  type NameMatch,
} from './library-name.js';
export {
  fileHead,
  findInLdCache,
  findInLibraryDirs,
  findOnPath,
  LD_CACHE_PATH,
  LIBRARY_DIRS,
  readLdCache,
} from './library-search.js';
export {
  processComm,
  processError,
  processObjects,
  readProcessMaps,
  sameMountNamespace,
} from './process.js';
export {
  commandSearchOptions,
  openMappedObject,
  type ResolvedTarget,
  type ResolveTargetOptions,
  resolveTarget,
} from './resolve-target.js';
