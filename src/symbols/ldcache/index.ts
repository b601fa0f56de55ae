export {
  describeLdCacheFlags,
  FLAG_ELF_LIBC6,
  FLAG_REQUIRED_MASK,
  FLAG_TYPE_MASK,
  FLAG_X8664_LIB64,
  FLAG_X8664_LIBX32,
  type LdCacheArch,
  ldCacheArch,
} from './flags.js';
export {
  type LdCache,
  type LdCacheEntry,
  type ParseLdCacheOptions,
  parseLdCache,
  parseLdCacheFile,
} from './parse-ld-cache.js';
