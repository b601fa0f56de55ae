// The symbols/ readers this folder uses. Until src/symbols/index.ts re-exports ldcache/ and
// maps/, they are imported here directly; afterwards this file should import
// '../../symbols/index.js' (the only line to change).
export {
  type LdCacheEntry,
  parseLdCache,
} from '../../symbols/ldcache/index.js';
export {
  type MapEntry,
  type MappedObject,
  makeDev,
  mappedObjects,
  parseProcMaps,
} from '../../symbols/maps/index.js';
