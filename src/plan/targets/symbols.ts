// The symbols/ readers this folder uses, in one place.
export {
  type LdCacheEntry,
  type MapEntry,
  type MappedObject,
  makeDev,
  mappedObjects,
  parseLdCache,
  parseProcMaps,
} from '../../symbols/index.js';
