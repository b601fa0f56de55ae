import { NT_GNU_BUILD_ID, NT_STAPSDT, PT_NOTE, SHT_NOTE } from './constants.js';
import { hex, invalidElf } from './elf-error.js';
import type { ElfContext } from './parse-elf.js';
import type { DebugLink, ElfNote, ElfSection, ElfSegment, UsdtNote } from './types.js';

const NOTE_HEADER_SIZE = 12;

function alignUp(value: number, align: number): number {
  return Math.ceil(value / align) * align;
}

/**
 * Splits a note area into notes: namesz, descsz, type, then the owner name and the descriptor,
 * each starting at a multiple of `align` (4, or 8 in 8-aligned areas such as .note.gnu.property).
 */
export function parseNotes(
  path: string | undefined,
  bytes: Uint8Array,
  align: number,
  where: string,
): ElfNote[] {
  const notes: ElfNote[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at + NOTE_HEADER_SIZE <= bytes.length) {
    const nameSize = view.getUint32(at, true);
    const descSize = view.getUint32(at + 4, true);
    const type = view.getUint32(at + 8, true);
    const nameAt = at + NOTE_HEADER_SIZE;
    const descAt = alignUp(nameAt + nameSize, align);
    if (descAt > bytes.length || descAt + descSize > bytes.length) {
      throw invalidElf(
        path,
        `the note at ${hex(at)} in ${where} runs past its end (${bytes.length} bytes)`,
      );
    }
    let nameEnd = nameAt + nameSize;
    while (nameEnd > nameAt && bytes[nameEnd - 1] === 0) nameEnd--;
    const owner = Buffer.from(bytes.buffer, bytes.byteOffset + nameAt, nameEnd - nameAt).toString(
      'latin1',
    );
    notes.push({ owner, type, desc: bytes.subarray(descAt, descAt + descSize) });
    at = alignUp(descAt + descSize, align);
  }
  return notes;
}

/**
 * Every note in the note sections; from PT_NOTE segments only when the file has no section
 * headers (the non-allocated note sections, such as .note.stapsdt, have no segment).
 */
export function readNotes(
  file: ElfContext,
  segmentBytes: (segment: ElfSegment) => Uint8Array,
  segments: readonly ElfSegment[],
): ElfNote[] {
  const notes: ElfNote[] = [];
  if (file.sections.length > 0) {
    for (const section of file.sections) {
      if (section.type !== SHT_NOTE) continue;
      const align = section.addralign === 8n ? 8 : 4;
      const where = `section [${section.index}] ${section.name}`;
      notes.push(...parseNotes(file.path, file.sectionBytes(section), align, where));
    }
    return notes;
  }
  for (const [i, segment] of segments.entries()) {
    if (segment.type !== PT_NOTE) continue;
    const align = segment.align === 8n ? 8 : 4;
    notes.push(...parseNotes(file.path, segmentBytes(segment), align, `segment [${i}] NOTE`));
  }
  return notes;
}

export function readBuildId(notes: readonly ElfNote[]): string | undefined {
  for (const note of notes) {
    if (note.owner === 'GNU' && note.type === NT_GNU_BUILD_ID && note.desc.length > 0) {
      return Buffer.from(note.desc.buffer, note.desc.byteOffset, note.desc.byteLength).toString(
        'hex',
      );
    }
  }
  return undefined;
}

/** .gnu_debuglink: the debug file's name, NUL, padding to 4 bytes, then its CRC-32. */
export function readDebugLink(
  file: ElfContext,
  section: ElfSection | undefined,
): DebugLink | undefined {
  if (section === undefined) return undefined;
  const bytes = file.sectionBytes(section);
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = buffer.indexOf(0);
  const crcAt = alignUp(end + 1, 4);
  if (end <= 0 || crcAt + 4 > buffer.length) {
    throw invalidElf(file.path, `section ${section.name} does not hold a file name and a CRC-32`);
  }
  return { file: buffer.toString('utf8', 0, end), crc32: buffer.readUInt32LE(crcAt) };
}

/**
 * The SystemTap probes of .note.stapsdt. Each descriptor holds pc, base and semaphore (8 bytes
 * each) and three NUL-terminated strings: provider, name, arguments.
 */
export function readUsdtNotes(
  file: ElfContext,
  notesSection: ElfSection | undefined,
  baseSection: ElfSection | undefined,
): UsdtNote[] {
  if (notesSection === undefined) return [];
  const align = notesSection.addralign === 8n ? 8 : 4;
  const where = `section [${notesSection.index}] ${notesSection.name}`;
  const notes = parseNotes(file.path, file.sectionBytes(notesSection), align, where);
  const usdt: UsdtNote[] = [];
  for (const note of notes) {
    if (note.owner !== 'stapsdt' || note.type !== NT_STAPSDT) continue;
    const desc = Buffer.from(note.desc.buffer, note.desc.byteOffset, note.desc.byteLength);
    const strings: string[] = [];
    let at = 24;
    while (strings.length < 3 && at < desc.length) {
      const end = desc.indexOf(0, at);
      if (end < 0) break;
      strings.push(desc.toString('utf8', at, end));
      at = end + 1;
    }
    if (desc.length < 24 || strings.length < 3) {
      throw invalidElf(
        file.path,
        `a USDT note in ${where} does not hold an address, a base, a semaphore and three strings`,
      );
    }
    const pc = desc.readBigUInt64LE(0);
    const base = desc.readBigUInt64LE(8);
    const vaddr = baseSection === undefined ? pc : BigInt.asUintN(64, pc + baseSection.addr - base);
    usdt.push({
      provider: strings[0]!,
      name: strings[1]!,
      pc,
      base,
      semaphore: desc.readBigUInt64LE(16),
      args: strings[2]!,
      vaddr,
    });
  }
  return usdt;
}
