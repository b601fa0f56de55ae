import { basename } from 'node:path';
import { ProbeError, quote } from '../../errors/index.js';

/** What the first line of a script (`#!INTERPRETER [ARG]`) says runs it. */
export interface ScriptHeader {
  /** The `#!` line as written, without the line end. */
  readonly line: string;
  /** The interpreter as named: `/usr/bin/python3`, or `bash` for `#!/usr/bin/env bash`. */
  readonly interpreter: string;
  /** The file the kernel runs for it: the line's first word (`/usr/bin/env`). */
  readonly program: string;
  /**
   * The version manager whose shim this is (`pyenv`, `rbenv`, `asdf`...), when the script
   * names one: a shim runs the program the manager picks, not its interpreter's code.
   */
  readonly manager: string | undefined;
}

/** Version managers that put shims (scripts named after programs) on PATH. */
const MANAGERS = /\b(pyenv|rbenv|nodenv|goenv|jenv|plenv|phpenv|asdf|mise|volta)\b/;

/**
 * The header of a script from its first bytes (up to 4 KiB), or undefined when they do not
 * start with `#!`. `#!/usr/bin/env [-S] NAME` names NAME, as env runs it.
 */
export function readScriptHeader(bytes: Uint8Array): ScriptHeader | undefined {
  if (bytes.length < 2 || bytes[0] !== 0x23 || bytes[1] !== 0x21) return undefined;
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
  const newline = text.indexOf('\n');
  const line = (newline < 0 ? text : text.slice(0, newline)).replace(/\r$/, '');
  const words = line
    .slice(2)
    .trim()
    .split(/\s+/)
    .filter((w) => w !== '');
  let interpreter = words[0] ?? '';
  if (basename(interpreter) === 'env') {
    interpreter = words.slice(1).find((w) => !w.startsWith('-') && !w.includes('=')) ?? interpreter;
  }
  const manager = MANAGERS.exec(text)?.[1];
  return { line, interpreter, program: words[0] ?? '', manager };
}

/**
 * The error for a script given where an ELF file is needed: it says it is a script and what
 * runs it, and where the probes should go instead. `extraHints` come first (other programs
 * of the name on PATH).
 */
export function scriptTargetError(
  path: string | undefined,
  header: ScriptHeader,
  extraHints: readonly string[] = [],
): ProbeError {
  const name = path === undefined ? 'the file' : basename(path);
  const interpreter = basename(header.interpreter) || '(none named)';
  // The interpreter as the shebang names it: a path, or a name env finds on PATH.
  const program = header.interpreter === '' ? 'INTERPRETER' : header.interpreter;
  const hints = [...extraHints];
  if (header.manager !== undefined) {
    hints.push(
      `It is a ${header.manager} shim: it starts the ${name} that ${header.manager} picks; probe that program (its path: ${header.manager} which ${name})`,
    );
  }
  hints.push(
    `Probes go on the code that runs: the interpreter (e.g. upscope list ${program}), or the program the script starts`,
  );
  return new ProbeError(
    'ERR_SCRIPT_TARGET',
    `Cannot read ${path === undefined ? 'ELF data' : `ELF file ${quote(path)}`}: it is a script run by ${interpreter} (${quote(header.line)}), not an ELF file`,
    { details: { path, interpreter: header.interpreter }, hints },
  );
}
