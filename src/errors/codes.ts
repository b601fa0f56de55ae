/**
 * The catalog of every error code upscope can report: code -> category and a one-line summary.
 * A `ProbeError` can only be built with a code from this table, so the set of things that can
 * go wrong is listed in one place and each maps to a CLI exit status through its category.
 */

export type ErrorCategory =
  | 'usage'
  | 'environment'
  | 'resolution'
  | 'target'
  | 'not-supported'
  | 'internal';

/** Exit status of the CLI for each category (64+ are sysexits-style, as many tools do). */
export const EXIT_STATUS: Readonly<Record<ErrorCategory, number>> = {
  usage: 2,
  resolution: 3,
  target: 4,
  environment: 5,
  'not-supported': 6,
  internal: 70,
};

interface CodeInfo {
  readonly category: ErrorCategory;
  readonly summary: string;
}

function code(category: ErrorCategory, summary: string): CodeInfo {
  return { category, summary };
}

export const ERROR_CODES = {
  ERR_USAGE: code('usage', 'The command line is not valid'),
  ERR_SPEC_SYNTAX: code('usage', 'A probe spec cannot be parsed'),
  ERR_SPEC_INVALID: code('usage', 'A probe spec is well formed but asks for something impossible'),
  ERR_TARGET_NOT_FOUND: code('resolution', 'The file, program or library named cannot be found'),
  ERR_FILE_READ: code('target', 'A file cannot be read'),
  ERR_FILE_ACCESS: code('environment', 'A file cannot be read with these privileges'),
  ERR_ELF_INVALID: code('target', 'A file is not a valid ELF file'),
  ERR_SCRIPT_TARGET: code('target', 'A target is a script (#!), not an ELF file'),
  ERR_ELF_UNSUPPORTED: code('not-supported', 'An ELF file is not 64-bit little-endian x86-64'),
  ERR_USDT_ARGUMENT: code('target', "A USDT note's argument string cannot be read"),
  ERR_SYMBOL_NOT_FOUND: code('resolution', 'No symbol of that name is in the file'),
  ERR_NO_MATCH: code('resolution', 'A pattern matched no symbol'),
  ERR_OVERLOADED: code('resolution', 'A C++ name without parameters names several overloads'),
  ERR_OFFSET_OUT_OF_RANGE: code('resolution', 'An offset points past the end of its function'),
  ERR_NOT_INSTRUCTION_BOUNDARY: code('resolution', 'An address falls inside an instruction'),
  ERR_NOT_EXECUTABLE: code('resolution', 'An address is not inside an executable segment'),
  ERR_UNSAFE_ADDRESS: code('resolution', 'A raw address has no symbol around it'),
  ERR_IFUNC: code('resolution', 'A symbol is an IFUNC resolver, not the function it picks'),
  ERR_COLD_PART: code(
    'resolution',
    "A name matched a function's .cold part, code jumped to from it, not a function entry",
  ),
  ERR_NOT_A_FUNCTION: code('resolution', 'A symbol is data, not code'),
  ERR_DECODE: code('resolution', 'Machine code cannot be decoded'),
  ERR_PROCESS_NOT_FOUND: code('resolution', 'No process has that PID'),
  ERR_PROCESS_ACCESS: code('environment', 'A process cannot be inspected with these privileges'),
  ERR_ALREADY_TRACED: code(
    'target',
    'The process is already traced by another tracer (one at a time)',
  ),
  ERR_KERNEL_THREAD: code(
    'target',
    'The process is a kernel thread: it has no user space to probe',
  ),
  ERR_NOT_MAPPED: code('resolution', 'A file or address is not mapped in the process'),
  ERR_LDCACHE_INVALID: code('target', 'The dynamic linker cache cannot be read'),
  ERR_PRIVILEGES: code('environment', 'The operation needs privileges this user does not have'),
  ERR_TRACEFS_NOT_MOUNTED: code('environment', 'tracefs is not mounted'),
  ERR_NATIVE_UNAVAILABLE: code('environment', 'The native syscall layer cannot be loaded'),
  ERR_NOT_SUPPORTED_ON_OS: code('not-supported', 'upscope runs on Linux x86-64 only'),
  ERR_UNPROBEABLE_INSTRUCTION: code(
    'resolution',
    'The kernel refuses or mishandles a probe on that instruction',
  ),
  ERR_RETURNS_NOT_FOUND: code(
    'resolution',
    "A function's returns cannot all be found, and its return addresses must not be replaced",
  ),
  ERR_RETURN_ADDRESS_UNSAFE: code(
    'resolution',
    'A return trampoline was asked for where replacing a return address breaks the program',
  ),
  ERR_NOT_SUPPORTED: code('not-supported', 'A feature is not available in this version or kernel'),
  ERR_MAPS_INVALID: code('target', 'A /proc/PID/maps text cannot be parsed'),
  ERR_KERNEL_REFUSED_PROBE: code('resolution', 'The kernel refused a uprobe_events definition'),
  ERR_TRACEFS_WRITE: code('environment', 'A tracefs control file refused a change'),
  ERR_NOT_A_RECORDING: code('target', 'A directory is not a call recording upscope can read'),
  ERR_RECORDING_WRITE: code('environment', 'A call recording cannot be written'),
  ERR_OUTPUT_FILE: code(
    'environment',
    'The --output or --command-output file cannot be opened or written',
  ),
  ERR_LISTEN: code('environment', 'An endpoint (--prometheus, serve) cannot listen where asked'),
  ERR_CONFIG: code('usage', "serve's --config file cannot be read or is not valid"),
  ERR_TRACEFS_FORMAT: code(
    'environment',
    "A tracefs format file or ring-buffer page is not what the kernel's layout says",
  ),
  ERR_TARGET_GONE: code('target', 'The traced process or thread ended while upscope worked on it'),
  ERR_TARGET_MEMORY: code('target', "The traced process's memory cannot be read or written there"),
  ERR_SECCOMP: code(
    'target',
    "The traced process's seccomp filter would not let a system call upscope makes there run",
  ),
  ERR_XOL_UNAVAILABLE: code(
    'target',
    'No room for the out-of-line area within reach of the probed code in the traced process',
  ),
  ERR_BPF_VERIFIER: code(
    'not-supported',
    "The kernel's BPF verifier refused a program upscope generated for a handler",
  ),
  ERR_NO_DEBUG_INFO: code(
    'resolution',
    'A file has no debug info (DWARF) and no separate debug file for it was found',
  ),
  ERR_DWARF_INVALID: code('target', "A file's DWARF debug info cannot be read"),
  ERR_SOURCE_NOT_FOUND: code('resolution', "A source file is not in a file's line tables"),
  ERR_SOURCE_AMBIGUOUS: code('resolution', 'A source file name matches several files'),
  ERR_NO_LINE_CODE: code('resolution', 'No code was generated for a source line'),
  ERR_VARIABLE_NOT_FOUND: code(
    'resolution',
    'No variable, parameter or member of that name is there',
  ),
  ERR_VARIABLE_UNAVAILABLE: code(
    'resolution',
    'A variable is optimized out, or cannot be read as asked, at the probed address',
  ),
  ERR_HELPER_FAILED: code(
    'environment',
    "The helper process that runs the ptrace engine's tracer could not start or was killed",
  ),
  ERR_INTERNAL: code('internal', 'A bug in upscope'),
} as const satisfies Record<string, CodeInfo>;

export type ErrorCode = keyof typeof ERROR_CODES;

export function categoryOf(errorCode: ErrorCode): ErrorCategory {
  return ERROR_CODES[errorCode].category;
}
