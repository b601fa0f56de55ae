import { inflateSync } from 'node:zlib';
import { CHDR_SIZE, ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD } from './constants.js';
import { invalidElf, unsupportedElf } from './elf-error.js';
import type { ElfSection } from './types.js';

/** zlib cannot expand data by more than about 1032 times; a larger ch_size is a lie. */
const MAX_ZLIB_RATIO = 1032;
/** Largest section we inflate, whatever the header claims. */
const MAX_INFLATED_BYTES = 1024 * 1024 * 1024;

/**
 * The contents of an SHF_COMPRESSED section: an Elf64_Chdr, then zlib data. The size the header
 * announces is checked against what the compressed bytes could possibly hold before anything is
 * allocated, and zlib is told to stop there.
 */
export function inflateSection(
  path: string | undefined,
  section: ElfSection,
  raw: Uint8Array,
): Uint8Array {
  const what = `compressed section [${section.index}] ${section.name}`;
  if (raw.length < CHDR_SIZE) throw invalidElf(path, `${what} is smaller than its header`);
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const kind = view.getUint32(0, true);
  const size = view.getBigUint64(8, true);
  if (kind === ELFCOMPRESS_ZSTD)
    throw unsupportedElf(path, `zstd compression of section ${section.name}`);
  if (kind !== ELFCOMPRESS_ZLIB)
    throw invalidElf(path, `${what} uses unknown compression type ${kind}`);
  const payload = raw.subarray(CHDR_SIZE);
  const limit = BigInt(payload.length) * BigInt(MAX_ZLIB_RATIO) + 64n;
  if (size > limit || size > BigInt(MAX_INFLATED_BYTES)) {
    throw invalidElf(
      path,
      `${what} claims ${size} bytes, more than ${payload.length} compressed bytes can hold`,
    );
  }
  const expected = Number(size);
  if (expected === 0) return new Uint8Array(0);
  let out: Buffer;
  try {
    out = inflateSync(payload, { maxOutputLength: expected });
  } catch (err) {
    throw invalidElf(path, `${what} cannot be inflated (${(err as Error).message})`, err);
  }
  if (out.length !== expected) {
    throw invalidElf(
      path,
      `${what} inflates to ${out.length} bytes, not the ${expected} its header says`,
    );
  }
  return out;
}
