import { execFileSync } from 'node:child_process';
import { parseElf } from './parse-elf.js';
import type { ElfFile } from './types.js';

/** The most a .gnu_debugdata is taken to inflate to (a .symtab of a large library: megabytes). */
const MAX_BYTES = 256 * 1024 * 1024;

/**
 * The ELF file a stripped file carries in its .gnu_debugdata section (MiniDebugInfo, as Fedora
 * and RHEL ship every program and library): an xz-compressed .symtab of the functions .dynsym
 * leaves out (its static and hidden ones), which gdb and perf read. Inflated by xz(1), which a
 * system whose files carry one has (its own packages are xz-compressed). Undefined where the
 * file has none, xz is not there, or what it holds is not an ELF file with a .symtab.
 */
export function miniDebugInfo(elf: ElfFile): ElfFile | undefined {
  const section = elf.section('.gnu_debugdata');
  if (section === undefined) return undefined;
  let bytes: Buffer;
  try {
    bytes = execFileSync('xz', ['--decompress', '--stdout', '--format=xz'], {
      input: elf.sectionBytes(section),
      maxBuffer: MAX_BYTES,
      stdio: ['pipe', 'pipe', 'ignore'],
    });
  } catch {
    return undefined;
  }
  try {
    const mini = parseElf(bytes, { path: `${elf.path ?? '(file)'}:.gnu_debugdata` });
    return mini.hasSymtab ? mini : undefined;
  } catch {
    return undefined;
  }
}
