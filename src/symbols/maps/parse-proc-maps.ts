import { ProbeError, quote } from '../../errors/index.js';

/** One line of /proc/PID/maps: a virtual memory area of the process. */
export interface MapEntry {
  /** First address of the area. */
  readonly start: bigint;
  /** First address past the area. */
  readonly end: bigint;
  readonly readable: boolean;
  readonly writable: boolean;
  readonly executable: boolean;
  /** 's' (MAP_SHARED) rather than 'p' (private, copy-on-write). */
  readonly shared: boolean;
  /** File offset mapped at `start` (meaningless for anonymous areas). */
  readonly offset: bigint;
  readonly devMajor: number;
  readonly devMinor: number;
  /** 0 for anonymous areas. */
  readonly inode: bigint;
  /**
   * The file as the process sees it, '' for anonymous areas, or a pseudo name like "[heap]".
   * Without the " (deleted)" suffix; "\012" (how the kernel shows a newline) is decoded.
   */
  readonly path: string;
  /** The kernel appended " (deleted)": the file was unlinked or replaced since it was mapped. */
  readonly deleted: boolean;
  /** A kernel-named area: [heap], [stack], [vdso], [vvar], [vsyscall], [uprobes], [anon:NAME]... */
  readonly pseudo: boolean;
}

export interface ParseProcMapsOptions {
  /** Where the text came from, for error messages, e.g. "/proc/1234/maps". */
  readonly source?: string;
}

// start-end perms offset major:minor inode [padding path]. The kernel prints at least 8 hex
// digits per address and pads the path to a column, so any run of spaces separates fields.
const LINE =
  /^([0-9a-f]{1,16})-([0-9a-f]{1,16}) ([r-])([w-])([x-])([sp]) ([0-9a-f]{1,16}) ([0-9a-f]{1,3}):([0-9a-f]{1,5}) ([0-9]{1,20})(?: +(.*))?$/;
const DELETED = ' (deleted)';

/**
 * Parse the text of /proc/PID/maps. Blank lines are ignored; any other line not in the
 * kernel's format throws ProbeError 'ERR_MAPS_INVALID' naming the line.
 */
export function parseProcMaps(text: string, options: ParseProcMapsOptions = {}): MapEntry[] {
  const entries: MapEntry[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '') continue;
    const m = LINE.exec(line);
    if (m === null)
      invalid(
        options,
        i,
        line,
        'is not in the "start-end perms offset major:minor inode path" format',
      );
    const start = BigInt(`0x${m[1]}`);
    const end = BigInt(`0x${m[2]}`);
    if (end <= start) invalid(options, i, line, 'ends before it starts');
    const inode = BigInt(m[10]!);
    let path = (m[11] ?? '').replace(/\\012/g, '\n');
    const deleted = path.endsWith(DELETED);
    if (deleted) path = path.slice(0, -DELETED.length);
    entries.push({
      start,
      end,
      readable: m[3] === 'r',
      writable: m[4] === 'w',
      executable: m[5] === 'x',
      shared: m[6] === 's',
      offset: BigInt(`0x${m[7]}`),
      devMajor: Number.parseInt(m[8]!, 16),
      devMinor: Number.parseInt(m[9]!, 16),
      inode,
      path,
      deleted,
      pseudo: inode === 0n && path.startsWith('[') && path.endsWith(']'),
    });
  }
  return entries;
}

function invalid(
  options: ParseProcMapsOptions,
  index: number,
  line: string,
  reason: string,
): never {
  const shown = line.length > 120 ? `${line.slice(0, 117)}...` : line;
  throw new ProbeError(
    'ERR_MAPS_INVALID',
    `Cannot parse ${options.source === undefined ? 'process maps' : quote(options.source)}: line ${index + 1} ${reason}: ${quote(shown)}`,
    { details: { line: index + 1, text: line, source: options.source } },
  );
}
