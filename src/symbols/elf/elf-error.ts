import { ProbeError, quote } from '../../errors/index.js';

const SUPPORTED_HINT = 'upscope reads 64-bit little-endian x86-64 ELF files only';

/** Names the file in every message when its path is known. */
export function describeFile(path: string | undefined): string {
  return path === undefined ? 'ELF data' : `ELF file ${quote(path)}`;
}

/** A corrupt, truncated or non-ELF file: `Cannot read ELF file "/x": <reason>`. */
export function invalidElf(path: string | undefined, reason: string, cause?: unknown): ProbeError {
  return new ProbeError('ERR_ELF_INVALID', `Cannot read ${describeFile(path)}: ${reason}`, {
    details: { path },
    cause,
  });
}

/** A well-formed ELF file of a kind upscope does not read: `Cannot use ELF file "/x": <what> is not supported`. */
export function unsupportedElf(path: string | undefined, what: string): ProbeError {
  return new ProbeError(
    'ERR_ELF_UNSUPPORTED',
    `Cannot use ${describeFile(path)}: ${what} is not supported`,
    {
      details: { path },
      hints: [SUPPORTED_HINT],
    },
  );
}

/** `0x1f40` */
export function hex(value: number | bigint): string {
  return `0x${value.toString(16)}`;
}
