import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { readelfFileOffset } from './tools.js';

/** One frame of gdb's backtrace. */
export interface GdbFrame {
  readonly pc: bigint;
  /** gdb's name of the frame's function (DWARF's or the minimal symbol's), if any. */
  readonly name: string | undefined;
  /** A frame of a function inlined into the one below it (same pc). */
  readonly inline: boolean;
  /** `info symbol` at the pc: the minimal symbol holding it and the offset into it. */
  readonly symbol: string | undefined;
  readonly offset: bigint;
  /** The mapped file holding the pc, and the pc's offset in that file. */
  readonly path: string | undefined;
  readonly fileOffset: bigint | undefined;
}

// gdb's Python walks the frames; each line: pc | name | inline | info symbol | path | offset.
const SCRIPT = `
import gdb, re
maps = []
for line in gdb.execute("info proc mappings", to_string=True).splitlines():
    m = re.match(r"\\s*0x([0-9a-f]+)\\s+0x([0-9a-f]+)\\s+0x[0-9a-f]+\\s+0x([0-9a-f]+)\\s+(?:\\S+\\s+)?(/\\S.*)$", line)
    if m:
        maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4).strip()))
f = gdb.newest_frame()
while f is not None:
    pc = f.pc()
    try:
        sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    except gdb.error as e:
        sym = ""
    path = ""
    off = ""
    for (start, end, offset, p) in maps:
        if start <= pc < end:
            path = p
            off = "%x" % (pc - start + offset)
    print("FRAME|%x|%s|%d|%s|%s|%s" % (pc, f.name() or "", 1 if f.type() == gdb.INLINE_FRAME else 0, sym, path, off))
    f = f.older()
`;

export interface GdbStackOptions {
  /** Stop here first (a function of the program), so that libraries are loaded. */
  readonly first?: string | undefined;
  /** Attach to this process instead of starting argv. */
  readonly pid?: number | undefined;
  readonly env?: NodeJS.ProcessEnv | undefined;
}

/** gdb's stacks of programs it started, by program file (its inode and time), argv and place. */
const started = new Map<string, GdbFrame[]>();

/**
 * gdb's backtrace (every frame: past main and the entry point too) at the first hit of a
 * breakpoint on the first instruction of `at` (`break *at`, no prologue skipped, as a probe
 * is placed), in `argv` started under gdb or in process `pid` attached to. A program started
 * again as before (the same file, arguments and place) gives the stack gdb gave the first
 * time, without running gdb again.
 */
export function gdbStack(argv: readonly string[], at: string, options: GdbStackOptions = {}) {
  if (options.pid !== undefined || argv[0] === undefined) return runGdb(argv, at, options);
  const file = statSync(argv[0]);
  const key = JSON.stringify([file.dev, file.ino, file.mtimeMs, argv, at, options]);
  let frames = started.get(key);
  if (frames === undefined) {
    frames = runGdb(argv, at, options);
    started.set(key, frames);
  }
  return frames;
}

function runGdb(argv: readonly string[], at: string, options: GdbStackOptions): GdbFrame[] {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-gdb-'));
  try {
    const script = join(dir, 'bt.py');
    writeFileSync(script, SCRIPT);
    const commands = [
      'set pagination off',
      'set confirm off',
      'set debuginfod enabled off',
      'set backtrace past-main on',
      'set backtrace past-entry on',
      // Names are given as minimal symbols: quoted C++ and Go names, Rust's mangled ones (in
      // Rust's own syntax, a quoted name is a character literal).
      'set language c',
    ];
    if (options.pid === undefined) {
      if (options.first !== undefined) commands.push(`break ${options.first}`, 'run', 'delete');
      commands.push(`break *${at}`, options.first === undefined ? 'run' : 'continue');
    } else {
      commands.push(`break *${at}`, 'continue');
    }
    commands.push(`source ${script}`, options.pid === undefined ? 'kill' : 'detach');
    const args = ['-batch', '-nx', ...commands.flatMap((c) => ['-ex', c])];
    if (options.pid === undefined) args.push('--args', ...argv);
    // The program as the process maps it (its path may name another file by now).
    else args.push(`/proc/${options.pid}/exe`, '-p', String(options.pid));
    const out = execFileSync('gdb', args, {
      encoding: 'utf8',
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 * 1024 * 1024,
      // A breakpoint gdb could not place would leave it waiting forever.
      timeout: 120_000,
    });
    const frames: GdbFrame[] = [];
    for (const line of out.split('\n')) {
      if (!line.startsWith('FRAME|')) continue;
      const [, pc, name, inline, info, path, fileOffset] = line.split('|');
      const m = /^(.*?)(?: \+ (\d+))? in section /.exec(info ?? '');
      // gdb's last frame past the entry point can be a zero pc: no frame.
      if (BigInt(`0x${pc}`) === 0n) continue;
      frames.push({
        pc: BigInt(`0x${pc}`),
        name: name === '' ? undefined : name,
        inline: inline === '1',
        symbol: m?.[1] === undefined ? undefined : minimalName(m[1]),
        offset: BigInt(m?.[2] ?? 0),
        path: path === '' ? undefined : path?.replace(/ \(deleted\)$/, ''),
        fileOffset:
          fileOffset === '' || fileOffset === undefined ? undefined : BigInt(`0x${fileOffset}`),
      });
    }
    assert.ok(frames.length > 0, `gdb showed no frames:\n${out}`);
    return frames;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A minimal symbol's name as gdb prints it, as other tools print it: gdb writes Go's
 * `main.leaf` as `main[leaf]`, keeps the hash of a legacy Rust name (`::h0123...`) and the
 * disambiguator of a v0 one's crate (`std[e28293b1aa0f68bd]::rt`).
 */
function minimalName(name: string): string {
  return name
    .replace(/\[[0-9a-f]{16}\]/g, '')
    .replace(/::h[0-9a-f]{16}$/, '')
    .replace(/^([\w./-]+)\[([^\]]+)\]$/, '$1.$2');
}

/** A frame as `count --by ustack` shows it, taken apart. */
export interface ShownFrame {
  readonly text: string;
  readonly name: string | undefined;
  readonly offset: bigint;
  readonly object: string | undefined;
  /** `object+0xVADDR`: a frame no symbol names. */
  readonly vaddr: bigint | undefined;
  readonly inlined: boolean;
  readonly cut: boolean;
}

export function parseFrame(text: string): ShownFrame {
  const none = { text, name: undefined, offset: 0n, object: undefined, vaddr: undefined };
  if (/^\[stack cut/.test(text)) return { ...none, inlined: false, cut: true };
  let m = /^(.*) \(inlined\) \(([^()]+)\)$/.exec(text);
  if (m !== null) return { ...none, name: m[1], object: m[2], inlined: true, cut: false };
  m = /^(.*?)(?:\+0x([0-9a-f]+))? \(([^()]+)\)$/.exec(text);
  if (m !== null) {
    return {
      ...none,
      name: m[1],
      offset: BigInt(`0x${m[2] ?? '0'}`),
      object: m[3],
      inlined: false,
      cut: false,
    };
  }
  m = /^([^ ]+)\+0x([0-9a-f]+)$/.exec(text);
  if (m !== null) {
    return { ...none, object: m[1], vaddr: BigInt(`0x${m[2]}`), inlined: false, cut: false };
  }
  return { ...none, inlined: false, cut: false };
}

/** A C++ or Rust name without its parameter list: `ns::f(int) const` is `ns::f`. */
export function withoutParameters(name: string): string {
  let depth = 0;
  for (let i = name.length - 1; i >= 0; i--) {
    const c = name[i];
    if (c === ')') depth++;
    else if (c === '(') {
      depth--;
      if (depth === 0) {
        const head = name.slice(0, i);
        // `operator()` and templates aside, the last top-level parenthesis opens the list.
        if (!head.endsWith('operator')) return head.trim();
      }
    }
  }
  return name;
}

/**
 * Assert that a stack `count --by ustack` showed is gdb's: the same frames in the same order,
 * each in the same file at the same place (the function and offset `info symbol` gives, or
 * the same file offset where no symbol names it); with `inlines`, the frames of inlined
 * functions too, by the name gdb gives them.
 */
export function assertSameStack(
  shown: readonly string[],
  all: readonly GdbFrame[],
  options: { readonly inlines?: boolean } = {},
): void {
  // Without --inlines, a frame is one function: the one its code is (gdb's non-inline frame).
  const gdb = options.inlines === true ? all : all.filter((frame) => !frame.inline);
  const ours = shown.map(parseFrame);
  const describe = () =>
    `upscope:\n  ${shown.join('\n  ')}\ngdb:\n  ${gdb
      .map(
        (f) =>
          `${f.inline ? '(inline) ' : ''}${f.name ?? '??'} [${f.symbol ?? '-'}+${f.offset}] ${f.path ?? ''}:0x${f.fileOffset?.toString(16)}`,
      )
      .join('\n  ')}`;
  assert.equal(ours.length, gdb.length, `frame count differs\n${describe()}`);
  for (const [i, frame] of gdb.entries()) {
    const our = ours[i]!;
    assert.ok(!our.cut, `frame ${i} is a cut\n${describe()}`);
    if (frame.inline) {
      assert.ok(our.inlined, `frame ${i} should be inlined\n${describe()}`);
      assert.equal(
        withoutParameters(our.name ?? ''),
        withoutParameters(frame.name ?? ''),
        `frame ${i}\n${describe()}`,
      );
      continue;
    }
    assert.ok(!our.inlined, `frame ${i} should not be inlined\n${describe()}`);
    if (frame.path !== undefined) {
      assert.equal(our.object, basename(frame.path), `frame ${i}'s file\n${describe()}`);
    }
    if (frame.symbol !== undefined) {
      assert.equal(our.name, frame.symbol, `frame ${i}'s function\n${describe()}`);
      assert.equal(our.offset, frame.offset, `frame ${i}'s offset\n${describe()}`);
    } else {
      assert.ok(our.vaddr !== undefined && frame.path !== undefined, `frame ${i}\n${describe()}`);
      assert.equal(
        readelfFileOffset(frame.path, our.vaddr),
        frame.fileOffset,
        `frame ${i}'s place in its file\n${describe()}`,
      );
    }
  }
}
