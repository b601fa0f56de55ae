// The symbols/ readers this folder uses, in one place.
export {
  type LdCacheEntry,
  parseLdCache,
} from '../../symbols/index.js';
export {
  type MapEntry,
  type MappedObject,
  makeDev,
  mappedObjects,
  parseProcMaps,
} from '../../symbols/index.js';
