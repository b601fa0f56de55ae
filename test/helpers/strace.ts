import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, normalize } from 'node:path';

/**
 * The system calls that change files: opening for writing, writing, making, removing,
 * renaming, linking, truncating and changing the mode or owner.
 */
export const CHANGING_CALLS = [
  'open',
  'openat',
  'openat2',
  'creat',
  'mkdir',
  'mkdirat',
  'mknod',
  'mknodat',
  'rmdir',
  'unlink',
  'unlinkat',
  'rename',
  'renameat',
  'renameat2',
  'link',
  'linkat',
  'symlink',
  'symlinkat',
  'write',
  'pwrite64',
  'writev',
  'pwritev',
  'pwritev2',
  'truncate',
  'ftruncate',
  'chmod',
  'fchmod',
  'fchmodat',
  'chown',
  'fchown',
  'fchownat',
  'lchown',
] as const;

/** One change to the file system that a traced process made or tried, as strace saw it. */
export interface FileChange {
  /** The thread that made the call. */
  readonly tid: number;
  readonly call: string;
  /** What kind of change: see changeOf(). */
  readonly kind: 'open' | 'write' | 'mkdir' | 'rmdir' | 'unlink' | 'rename' | 'link' | 'attr';
  /**
   * The path changed (for rename and link: the source; `to` holds the other): absolute, or
   * relative when the call gave a relative path and no directory fd; for writes, what strace
   * shows for the fd (a path, or `pipe:[N]`, `socket:[N]`, `anon_inode:...`).
   */
  readonly path: string;
  readonly to?: string;
  /** The bytes written, for write calls (strace's -s bound applies). */
  readonly data?: string;
  /** The open flags, for opens. */
  readonly flags?: string;
  /** strace's text of the result: `= 3</path>`, `= -1 ENOENT (...)`. */
  readonly result: string;
}

export interface StraceRun {
  readonly status: number;
  readonly stdout: string;
  readonly stderr: string;
  /** The pid of the traced command (its first process). */
  readonly pid: number;
  /** Every file change made or tried by the command and the processes and threads it made. */
  readonly changes: FileChange[];
  /** strace's own output, for a failure message. */
  readonly trace: string;
}

export interface StraceOptions {
  /**
   * Let a child go when it execs another program (strace -b execve): a command upscope
   * launches (-c) is then not traced by strace, so that it stops itself as it would untraced.
   * Children that do not exec are followed either way.
   */
  readonly detachOnExec?: boolean;
  readonly timeoutMs?: number;
  /** Added to the command's environment. */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Run `argv` under `strace -f` (following its threads and children) and return the file
 * changes they made or tried.
 */
export function straceChanges(argv: readonly string[], options: StraceOptions = {}): StraceRun {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-strace-'));
  const out = join(dir, 'trace');
  try {
    const run = spawnSync(
      'strace',
      [
        '-f',
        ...(options.detachOnExec === true ? ['-b', 'execve'] : []),
        '-qq',
        '-y',
        '-s',
        '65536',
        '-e',
        `trace=${CHANGING_CALLS.join(',')}`,
        '-e',
        'signal=none',
        '-o',
        out,
        ...argv,
      ],
      {
        encoding: 'utf8',
        env: { ...process.env, NO_COLOR: '1', ...options.env },
        timeout: options.timeoutMs ?? 120_000,
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    const text = readFileSync(out, 'utf8');
    const pid = Number(/^(\d+)\s/.exec(text)?.[1]);
    return {
      status: run.status ?? -1,
      stdout: run.stdout,
      stderr: run.stderr,
      pid,
      changes: parseStrace(text),
      trace: text,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** strace's lines with each `<unfinished ...>` call joined to its `<... resumed>` end. */
function joinedLines(text: string): { tid: number; line: string }[] {
  const pending = new Map<number, string>();
  const lines: { tid: number; line: string }[] = [];
  for (const raw of text.split('\n')) {
    // strace pads the pid to five columns: `812   write(...)`, `12345 write(...)`.
    const head = /^(\d+)\s+(.*)$/.exec(raw);
    if (head === null) continue;
    const tid = Number(head[1]);
    const rest = head[2]!;
    const unfinished = /^(.*) <unfinished \.\.\.>$/.exec(rest);
    if (unfinished !== null) {
      pending.set(tid, unfinished[1]!);
      continue;
    }
    const resumed = /^<\.\.\. \w+ resumed>(.*)$/.exec(rest);
    if (resumed !== null) {
      lines.push({ tid, line: `${pending.get(tid) ?? ''}${resumed[1]}` });
      pending.delete(tid);
      continue;
    }
    lines.push({ tid, line: rest });
  }
  return lines;
}

/** The arguments of a call, split at top-level commas (not inside quotes, <>, [], {}). */
function splitArgs(text: string): string[] {
  const args: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '\\') i++;
      else if (c === '"') quoted = false;
      continue;
    }
    if (c === '"') quoted = true;
    else if (c === '<' || c === '[' || c === '{') depth++;
    else if (c === '>' || c === ']' || c === '}') depth--;
    else if (c === ',' && depth === 0) {
      args.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  if (text.trim() !== '') args.push(text.slice(start).trim());
  return args;
}

/** The value of a C string as strace prints it (escapes undone); '' when there is none. */
export function unquote(text: string): string {
  const match = /"((?:[^"\\]|\\.)*)"/.exec(text);
  if (match === null) return '';
  return match[1]!.replace(/\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)/g, (_, e: string) => {
    if (e[0] === 'x') return String.fromCharCode(Number.parseInt(e.slice(1), 16));
    if (/^[0-7]/.test(e)) return String.fromCharCode(Number.parseInt(e, 8));
    const simple: Record<string, string> = { n: '\n', t: '\t', r: '\r', v: '\v', f: '\f' };
    return simple[e] ?? e;
  });
}

/** The path in an fd decoration (`3</a/b>`, `AT_FDCWD</cwd>`), or undefined. */
function fdPath(arg: string | undefined): string | undefined {
  return arg === undefined ? undefined : /<(.*)>$/.exec(arg)?.[1];
}

/**
 * A path argument made absolute against its directory fd's path; a relative path without one
 * (mkdir("d")) stays relative: the reader does not follow each process's working directory.
 */
function absoluteIn(
  dirArg: string | undefined,
  pathArg: string,
  fds?: ReadonlyMap<number, string>,
): string {
  const path = unquote(pathArg);
  if (isAbsolute(path)) return throughFd(normalize(path), fds);
  const dir = fdPath(dirArg);
  return dir === undefined ? path : throughFd(normalize(join(dir, path)), fds);
}

/**
 * A path through a descriptor (`/proc/self/fd/17/instances/x`) as the path it stands for
 * (`/sys/kernel/tracing/instances/x`), from what the open that returned that descriptor named.
 */
function throughFd(path: string, fds: ReadonlyMap<number, string> | undefined): string {
  const m = /^\/proc\/(?:self|thread-self|\d+)\/fd\/(\d+)(\/.*)?$/.exec(path);
  const base = m === null ? undefined : fds?.get(Number(m[1]));
  return base === undefined ? path : normalize(`${base}${m![2] ?? ''}`);
}

/**
 * The file changes in an strace output (`strace -f -y -o FILE`, one thread's pid first on
 * each line). Opens count only when they could write (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC,
 * O_APPEND); failed calls count too (they were tried).
 */
export function parseStrace(text: string): FileChange[] {
  const changes: FileChange[] = [];
  /** Each descriptor's path, from the last open that returned it (in any process). */
  const fds = new Map<number, string>();
  for (const { tid, line } of joinedLines(text)) {
    const call = /^(\w+)\((.*)\)\s+=\s+(.*)$/.exec(line);
    if (call === null) continue;
    const [, name, argText, result] = call as unknown as [string, string, string, string];
    const args = splitArgs(argText);
    const add = (change: Omit<FileChange, 'tid' | 'call' | 'result'>) =>
      changes.push({ tid, call: name, result, ...change });
    const opened = fdPath(result);
    const fd = /^(\d+)</.exec(result)?.[1];
    if (opened !== undefined && fd !== undefined && /^open/.test(name)) fds.set(Number(fd), opened);
    const absolute = (dirArg: string | undefined, pathArg: string) =>
      absoluteIn(dirArg, pathArg, fds);
    switch (name) {
      case 'open':
      case 'creat':
      case 'openat':
      case 'openat2': {
        const at = name === 'openat' || name === 'openat2';
        const flags = name === 'creat' ? 'O_CREAT|O_WRONLY|O_TRUNC' : (args[at ? 2 : 1] ?? '');
        if (!/O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND/.test(flags)) break;
        const path = opened ?? absolute(at ? args[0] : undefined, args[at ? 1 : 0]!);
        add({ kind: 'open', path, flags });
        break;
      }
      case 'write':
      case 'pwrite64':
        add({ kind: 'write', path: fdPath(args[0]) ?? args[0]!, data: unquote(args[1] ?? '') });
        break;
      case 'writev':
      case 'pwritev':
      case 'pwritev2': {
        const pieces = [...(args[1] ?? '').matchAll(/iov_base="((?:[^"\\]|\\.)*)"/g)];
        const data = pieces.map((p) => unquote(`"${p[1]}"`)).join('');
        add({ kind: 'write', path: fdPath(args[0]) ?? args[0]!, data });
        break;
      }
      case 'ftruncate':
      case 'fchmod':
      case 'fchown':
        add({ kind: 'attr', path: fdPath(args[0]) ?? args[0]! });
        break;
      case 'truncate':
      case 'chmod':
      case 'chown':
      case 'lchown':
        add({ kind: 'attr', path: absolute(undefined, args[0]!) });
        break;
      case 'fchmodat':
      case 'fchownat':
        add({ kind: 'attr', path: absolute(args[0], args[1]!) });
        break;
      case 'mkdir':
      case 'mknod':
        add({ kind: 'mkdir', path: absolute(undefined, args[0]!) });
        break;
      case 'mkdirat':
      case 'mknodat':
        add({ kind: 'mkdir', path: absolute(args[0], args[1]!) });
        break;
      case 'rmdir':
        add({ kind: 'rmdir', path: absolute(undefined, args[0]!) });
        break;
      case 'unlink':
        add({ kind: 'unlink', path: absolute(undefined, args[0]!) });
        break;
      case 'unlinkat':
        add({
          kind: /AT_REMOVEDIR/.test(args[2] ?? '') ? 'rmdir' : 'unlink',
          path: absolute(args[0], args[1]!),
        });
        break;
      case 'rename':
      case 'link':
      case 'symlink':
        add({
          kind: name === 'rename' ? 'rename' : 'link',
          path: absolute(undefined, args[0]!),
          to: absolute(undefined, args[1]!),
        });
        break;
      case 'renameat':
      case 'renameat2':
      case 'linkat':
        add({
          kind: name === 'linkat' ? 'link' : 'rename',
          path: absolute(args[0], args[1]!),
          to: absolute(args[2], args[3]!),
        });
        break;
      case 'symlinkat':
        add({ kind: 'link', path: unquote(args[0]!), to: absolute(args[1], args[2]!) });
        break;
    }
  }
  return changes;
}
