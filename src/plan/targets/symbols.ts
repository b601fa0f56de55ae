// The symbols/ readers this folder uses, in one place.
export {
  type ElfFile,
  fileAccessError,
  type LdCacheEntry,
  type MapEntry,
  type MappedObject,
  makeDev,
  mappedObjects,
  openElf,
  parseLdCache,
  parseProcMaps,
  readDynamicInfo,
  readScriptHeader,
  scriptTargetError,
} from '../../symbols/index.js';
