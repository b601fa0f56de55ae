export {
  fileOffsetToRuntime,
  findMapping,
  type LoadSegment,
  loadBias,
  runtimeAddressesOf,
  runtimeToFileOffset,
} from './address.js';
export { makeDev, splitDev } from './dev.js';
export { isFileMapping, type MappedObject, mappedObjects } from './mapped-objects.js';
export { type MapEntry, type ParseProcMapsOptions, parseProcMaps } from './parse-proc-maps.js';
