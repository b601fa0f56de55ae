import { SHT_STRTAB } from './constants.js';
import { invalidElf } from './elf-error.js';
import type { ElfContext } from './parse-elf.js';
import type { ElfSection } from './types.js';

/** Checks a string table and returns it; every name in it is then NUL-terminated. */
export function stringTable(file: ElfContext, index: number, user: ElfSection): Buffer {
  const table = file.sections[index];
  if (index === 0 || table === undefined || table.type !== SHT_STRTAB) {
    throw invalidElf(
      file.path,
      `section [${user.index}] ${user.name} links to section [${index}], which is not a string table`,
    );
  }
  const bytes = file.sectionBytes(table);
  if (bytes.length > 0 && bytes[bytes.length - 1] !== 0) {
    throw invalidElf(
      file.path,
      `string table [${index}] ${table.name} does not end with a NUL byte`,
    );
  }
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
