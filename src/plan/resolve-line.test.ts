import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  appendFileSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../../test/helpers/compile.js';
import { requireHost } from '../../test/helpers/require-host.js';
import { gdbBreakpoints, tool } from '../../test/helpers/tools.js';
import { resolveProbes } from './index.js';

// FILE:LINE specs through resolveProbes(): where the sites go, what each refusal says, and
// how separate debug files are found (by build-id in a debug directory, by .gnu_debuglink) and
// checked. Truth from the source's MARK comments, readelf, nm and objdump.

const SOURCE = new URL('../../test/programs/lines.c', import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), 'upscope-line-plan-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function mark(name: string): number {
  const lines = readFileSync(SOURCE, 'utf8').split('\n');
  const i = lines.findIndex((l) => l.includes(`MARK:${name}`) && !l.startsWith(' *'));
  assert.ok(i >= 0, name);
  return i + 1;
}

function nmAddress(path: string, name: string): bigint {
  const line = tool('nm', [path])
    .split('\n')
    .find((l) => / [Tt] /.test(l) && l.endsWith(` ${name}`));
  assert.ok(line, `nm has no ${name}`);
  return BigInt(`0x${line.split(' ')[0]}`);
}

function buildId(path: string): string {
  const m = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', path]));
  assert.ok(m, 'the binary has a build-id');
  return m[1]!;
}

/** Lines of lines.c with an is_stmt row, per objdump. */
function linesWithCode(path: string): number[] {
  const lines = new Set<number>();
  for (const text of tool('objdump', ['--dwarf=decodedline', path]).split('\n')) {
    const m = /^lines\.c\s+(\d+)\s+0x[0-9a-f]+(?:\s+\d+)?\s+x\s*$/.exec(text);
    if (m !== null) lines.add(Number(m[1]));
  }
  return [...lines].sort((a, b) => a - b);
}

/** A copy of the -O2 binary split like a distribution package: stripped file + debug file. */
function split(name: string, options: { link?: boolean; buildId?: boolean } = {}) {
  const dir = join(scratch, name);
  mkdirSync(dir, { recursive: true });
  const full = join(dir, 'full');
  execFileSync('gcc', [
    '-g',
    '-O2',
    ...(options.buildId === false ? ['-Wl,--build-id=none'] : []),
    '-o',
    full,
    SOURCE,
  ]);
  const app = join(dir, 'app');
  const debug = join(dir, 'app.debug');
  execFileSync('objcopy', ['--only-keep-debug', full, debug]);
  execFileSync('strip', ['-o', app, full]);
  if (options.link === true) {
    execFileSync('objcopy', ['--add-gnu-debuglink=app.debug', app], { cwd: dir });
  }
  return { dir, full, app, debug };
}

describe('resolveProbes() on FILE:LINE', () => {
  test('puts one site per copy of the line, an entry site when the line starts its function', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'nm'] })) return;
    const app = compileProgram('lines', { flags: ['-O2'] });
    const loop = await resolveProbes([`${app}:lines.c:${mark('loop_body')}`]);
    assert.deepEqual(loop.errors, []);
    assert.equal(loop.sites.length, 1);
    assert.equal(loop.sites[0]!.symbol, 'main');
    assert.equal(loop.sites[0]!.kind, 'instruction');
    assert.equal(loop.sites[0]!.source?.line, mark('loop_body'));
    assert.equal(loop.sites[0]!.source?.file, SOURCE);
    assert.deepEqual(loop.sites[0]!.source?.debugFile, { path: app, how: 'embedded' });
    // add_twice is inlined once in main and twice in work: a site per inlined copy.
    const inline = await resolveProbes([`${app}:programs/lines.c:${mark('inline_body')}`]);
    assert.deepEqual(inline.sites.map((s) => s.symbol).sort(), ['main', 'work', 'work']);
    // With -O2 the first line of work() is its first instruction.
    const first = await resolveProbes([`${app}:${SOURCE}:${mark('work_first')}`]);
    assert.equal(first.sites.length, 1);
    assert.equal(first.sites[0]!.kind, 'entry');
    assert.equal(first.sites[0]!.vaddr, nmAddress(app, 'work'));
  });

  test('puts a probe where gdb puts a breakpoint location, one per inlined copy', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'gdb'] })) return;
    for (const flags of [['-O0'], ['-O2'], ['-O2', '-gdwarf-4']]) {
      const app = compileProgram('lines', { flags });
      // (Not odd_branch: at -O2 gcc schedules one of its instructions into an inlined
      // add_twice, where gdb puts a second location that runs on every call, even.)
      for (const name of ['inline_body', 'loop_body']) {
        const line = mark(name);
        const gdb = gdbBreakpoints(app, `lines.c:${line}`);
        const plan = await resolveProbes([`${app}:lines.c:${line}`]);
        assert.deepEqual(plan.errors, []);
        assert.deepEqual(
          plan.sites.map((s) => s.vaddr),
          gdb,
          `${name} (line ${line}) ${flags.join(' ')}`,
        );
      }
    }
  });

  test('refuses a line without code, naming the nearest lines with code', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram('lines', { flags: ['-O0'] });
    const line = mark('no_code');
    const code = linesWithCode(app);
    const below = code.filter((l) => l < line).at(-1);
    const above = code.find((l) => l > line);
    const plan = await resolveProbes([`${app}:lines.c:${line}`]);
    assert.equal(plan.sites.length, 0);
    assert.equal(plan.errors[0]?.code, 'ERR_NO_LINE_CODE');
    assert.equal(
      plan.errors[0]?.message,
      `Cannot probe lines.c:${line}: no code was generated for that line; nearby lines with code: ${below}, ${above}`,
    );
    const past = await resolveProbes([`${app}:lines.c:5000`]);
    assert.match(past.errors[0]!.message, new RegExp(`nearby lines with code: ${code.at(-1)}$`));
  });

  test('refuses a return probe, an unknown file, and a name two files share', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram('lines', { flags: ['-O0'] });
    const ret = await resolveProbes([`r:${app}:lines.c:${mark('loop_body')}`]);
    assert.equal(ret.sites.length, 0);
    assert.match(ret.errors[0]!.message, /Cannot place a return probe at "lines.c:\d+"/);
    const typo = await resolveProbes([`${app}:line.c:3`]);
    assert.equal(typo.errors[0]?.code, 'ERR_SOURCE_NOT_FOUND');
    assert.match(typo.errors[0]!.message, /no file "line.c" in its line tables$/);
    assert.ok(
      typo.errors[0]!.hints.some((h) => h.includes('"lines.c"')),
      `${typo.errors[0]!.hints}`,
    );
    // Two util.c in different directories.
    const dir = join(scratch, 'two');
    mkdirSync(join(dir, 'a'), { recursive: true });
    mkdirSync(join(dir, 'b'), { recursive: true });
    writeFileSync(join(dir, 'a', 'util.c'), 'int ua(int x) {\n  return x + 1;\n}\n');
    writeFileSync(join(dir, 'b', 'util.c'), 'int ub(int x) {\n  return x + 2;\n}\n');
    writeFileSync(
      join(dir, 'main.c'),
      'int ua(int); int ub(int);\nint main(void) { return ua(1) + ub(2); }\n',
    );
    execFileSync('gcc', ['-g', '-o', 'two', 'main.c', 'a/util.c', 'b/util.c'], { cwd: dir });
    const two = join(dir, 'two');
    const both = await resolveProbes([`${two}:util.c:2`]);
    assert.equal(both.errors[0]?.code, 'ERR_SOURCE_AMBIGUOUS');
    assert.match(
      both.errors[0]!.message,
      /"util.c" matches 2 files: .*\/a\/util.c, .*\/b\/util.c$/,
    );
    const one = await resolveProbes([`${two}:b/util.c:2`]);
    assert.deepEqual(one.errors, []);
    assert.equal(one.sites[0]!.symbol, 'ub');
  });

  test('without debug info: says where it looked and how to get it', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const app = compileProgram('lines', { flags: ['-O2'], strip: true });
    const id = buildId(app);
    const plan = await resolveProbes([`${app}:lines.c:${mark('loop_body')}`]);
    assert.equal(plan.errors[0]?.code, 'ERR_NO_DEBUG_INFO');
    assert.match(
      plan.errors[0]!.message,
      /it has no debug info \(no \.debug_line\) and no separate debug file was found$/,
    );
    const hints = plan.errors[0]!.hints.join('\n');
    assert.ok(
      hints.includes(`/usr/lib/debug/.build-id/${id.slice(0, 2)}/${id.slice(2)}.debug`),
      hints,
    );
    assert.match(hints, /--debug-dir/);
  });

  test('finds a separate debug file by build-id in a --debug-dir directory', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objcopy', 'strip', 'readelf'] })) return;
    const { dir, full, app, debug } = split('by-build-id');
    const id = buildId(app);
    const debugDir = join(dir, 'debug');
    mkdirSync(join(debugDir, '.build-id', id.slice(0, 2)), { recursive: true });
    const installed = join(debugDir, '.build-id', id.slice(0, 2), `${id.slice(2)}.debug`);
    copyFileSync(debug, installed);
    const specs = [mark('loop_body'), mark('inline_body'), mark('odd_branch')].map(
      (line) => `${app}:lines.c:${line}`,
    );
    const plan = await resolveProbes(specs, { debugDirs: [debugDir] });
    assert.deepEqual(plan.errors, []);
    // The same addresses as the unstripped binary, and the function names from the debug
    // file's .symtab (the stripped file has none).
    const unstripped = await resolveProbes(specs.map((s) => s.replace(app, full)));
    assert.deepEqual(
      plan.sites.map((s) => [s.vaddr, s.symbol, s.kind]),
      unstripped.sites.map((s) => [s.vaddr, s.symbol, s.kind]),
    );
    for (const site of plan.sites) {
      assert.deepEqual(site.source?.debugFile, { path: installed, how: 'build-id' });
    }
    // A debug file of another build under that build-id is refused.
    const other = join(dir, 'other');
    execFileSync('gcc', ['-g', '-O0', '-o', other, SOURCE]);
    copyFileSync(other, installed);
    const refused = await resolveProbes(specs.slice(0, 1), { debugDirs: [debugDir] });
    assert.equal(refused.errors[0]?.code, 'ERR_NO_DEBUG_INFO');
    assert.ok(
      refused.errors[0]!.hints.some((h) =>
        h.includes(`Not used: ${installed} (its build-id ${buildId(other)} is not ${id})`),
      ),
      refused.errors[0]!.hints.join('\n'),
    );
  });

  test('finds a separate debug file by .gnu_debuglink, checking its CRC-32', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objcopy', 'strip'] })) return;
    const { app, full, debug } = split('by-link', { link: true, buildId: false });
    const spec = `${app}:lines.c:${mark('loop_body')}`;
    const plan = await resolveProbes([spec]);
    assert.deepEqual(plan.errors, []);
    assert.deepEqual(plan.sites[0]!.source?.debugFile, { path: debug, how: 'debuglink' });
    const unstripped = await resolveProbes([spec.replace(app, full)]);
    assert.equal(plan.sites[0]!.vaddr, unstripped.sites[0]!.vaddr);
    // In the .debug folder beside the file too.
    const {
      dir: dir2,
      app: app2,
      debug: debug2,
    } = split('by-link-dot-debug', { link: true, buildId: false });
    mkdirSync(join(dir2, '.debug'));
    copyFileSync(debug2, join(dir2, '.debug', basename(debug2)));
    rmSync(debug2);
    const dotDebug = await resolveProbes([`${app2}:lines.c:${mark('loop_body')}`]);
    assert.equal(dotDebug.sites[0]?.source?.debugFile.path, join(dir2, '.debug', 'app.debug'));
    // A changed debug file no longer has the CRC the link records.
    appendFileSync(debug, Buffer.from([0]));
    const dumped = join(scratch, 'debuglink');
    execFileSync('objcopy', [
      '--dump-section',
      `.gnu_debuglink=${dumped}`,
      app,
      join(scratch, 'discard'),
    ]);
    const crc = readFileSync(dumped);
    const recorded = crc
      .readUInt32LE(crc.length - 4)
      .toString(16)
      .padStart(8, '0');
    const changed = await resolveProbes([spec]);
    assert.equal(changed.errors[0]?.code, 'ERR_NO_DEBUG_INFO');
    assert.ok(
      changed.errors[0]!.hints.some(
        (h) =>
          h.includes(`Not used: ${debug} (its CRC-32 0x`) &&
          h.includes(`is not the 0x${recorded} .gnu_debuglink records)`),
      ),
      changed.errors[0]!.hints.join('\n'),
    );
  });

  test('a malformed line table: ERR_DWARF_INVALID on the spec, no exception', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const original = compileProgram('lines', { flags: ['-O0'] });
    const bytes = Buffer.from(readFileSync(original));
    const m = /\]\s+\.debug_line\s+PROGBITS\s+[0-9a-f]+\s([0-9a-f]+)\s/.exec(
      tool('readelf', ['-SW', original]),
    );
    assert.ok(m);
    bytes.writeUInt16LE(9, Number.parseInt(m[1]!, 16) + 4); // version 9
    const path = join(scratch, 'bad-version');
    writeFileSync(path, bytes);
    const plan = await resolveProbes([`${path}:lines.c:3`]);
    assert.equal(plan.errors[0]?.code, 'ERR_DWARF_INVALID');
    assert.equal(
      plan.errors[0]?.message,
      `Cannot read the line table of "${path}": .debug_line at 0x0: unsupported line table version 9`,
    );
  });
});
