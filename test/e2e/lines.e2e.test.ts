import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

// `upscope list --lines` and line specs through the CLI, against the source text, objdump's
// decoded line table and readelf's symbols.

const SOURCE = new URL('../programs/lines.c', import.meta.url).pathname;
const TEXT = readFileSync(SOURCE, 'utf8').split('\n');
const scratch = mkdtempSync(join(tmpdir(), 'upscope-lines-e2e-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function mark(name: string): number {
  return TEXT.findIndex((l) => l.includes(`MARK:${name}`) && !l.startsWith(' *')) + 1;
}

/** Lines of lines.c with an is_stmt row in [low, high), per objdump. */
function stmtLines(path: string, low = 0n, high = 1n << 48n): Set<number> {
  const lines = new Set<number>();
  for (const text of tool('objdump', ['--dwarf=decodedline', path]).split('\n')) {
    const m = /^lines\.c\s+(\d+)\s+(0x[0-9a-f]+)(?:\s+\d+)?\s+x\s*$/.exec(text);
    if (m !== null && BigInt(m[2]!) >= low && BigInt(m[2]!) < high) lines.add(Number(m[1]));
  }
  return lines;
}

function symbolRange(path: string, name: string): [bigint, bigint] {
  const f = tool('readelf', ['-sW', path])
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .find((f) => f[3] === 'FUNC' && f[7] === name);
  assert.ok(f);
  const low = BigInt(`0x${f[1]}`);
  return [low, low + BigInt(f[2]!)];
}

describe('upscope list --lines', () => {
  for (const flags of [['-O0'], ['-O2']]) {
    test(`FUNC (${flags}): the function's source, its probe-able lines marked`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'objdump', 'readelf'] })) return;
      const app = compileProgram('lines', { flags });
      const result = runCli(['list', app, '--lines', 'work']);
      assert.equal(result.status, 0, result.stderr);
      const [heading, ...rest] = result.stdout.trimEnd().split('\n');
      const decl = TEXT.findIndex((l) => l.includes('long work(long i) {')) + 1;
      const close = TEXT.findIndex((l, i) => i >= decl && l === '}') + 1;
      assert.match(
        heading!,
        new RegExp(
          `^work in ${SOURCE}:${decl}-${close} \\(${app}; debug info: ${app}, in the file itself\\)$`,
        ),
      );
      const listed = rest.filter((l) => /^[* ] +\d+/.test(l));
      assert.equal(listed.length, close - decl + 1);
      const [low, high] = symbolRange(app, 'work');
      const probeable = stmtLines(app, low, high);
      for (const text of listed) {
        const m = /^([* ]) +(\d+)(?: {2}(.*))?$/.exec(text)!;
        const line = Number(m[2]);
        assert.equal(m[3] ?? '', TEXT[line - 1], `text of line ${line}`);
        assert.equal(m[1] === '*', probeable.has(line), `line ${line} marked as objdump says`);
      }
      assert.ok(!listed.some((l) => l.startsWith(`* ${mark('no_code')}`)));
    });
  }

  test('FILE:START-END --json: each line with its addresses', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram('lines', { flags: ['-O0'] });
    const result = runCli(['list', app, '--lines', 'lines.c:20-40', '--json']);
    assert.equal(result.status, 0, result.stderr);
    const listing = JSON.parse(result.stdout);
    assert.equal(listing.file, SOURCE);
    assert.equal(listing.sourceFound, true);
    assert.deepEqual(
      listing.lines.map((l: { line: number }) => l.line),
      Array.from({ length: 21 }, (_, i) => 20 + i),
    );
    const code = stmtLines(app);
    for (const line of listing.lines) {
      assert.equal(line.probe, code.has(line.line), `line ${line.line}`);
      assert.equal(line.text, TEXT[line.line - 1]);
    }
  });

  test('without the source file: line numbers and a note', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const dir = join(scratch, 'moved');
    mkdirSync(dir);
    copyFileSync(SOURCE, join(dir, 'lines.c'));
    execFileSync('gcc', ['-g', '-O0', '-o', 'app', join(dir, 'lines.c')], { cwd: dir });
    rmSync(join(dir, 'lines.c'));
    const result = runCli(['list', join(dir, 'app'), '--lines', 'work']);
    assert.equal(result.status, 0, result.stderr);
    assert.match(
      result.stdout,
      new RegExp(`\\(source not found at ${dir}/lines.c: line numbers only\\)`),
    );
    assert.match(result.stdout, new RegExp(`^\\* ${mark('work_first')}$`, 'm'));
  });

  test('refusals are one error with hints, and a non-zero exit', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram('lines', { flags: ['-O0'] });
    const stripped = compileProgram('lines', { flags: ['-O0'], strip: true });
    for (const [args, code, status] of [
      [['list', app, '--lines', 'nosuch'], 'ERR_SYMBOL_NOT_FOUND', 3],
      [['list', app, '--lines', 'nosuch.c:1-3'], 'ERR_SOURCE_NOT_FOUND', 3],
      [['list', stripped, '--lines', 'work'], 'ERR_NO_DEBUG_INFO', 3],
      [['resolve', `${app}:lines.c:${mark('no_code')}`], 'ERR_NO_LINE_CODE', 3],
      [['resolve', `${stripped}:lines.c:${mark('loop_body')}`], 'ERR_NO_DEBUG_INFO', 3],
    ] as const) {
      const result = runCli([...args]);
      assert.equal(result.status, status, `${args.join(' ')}: ${result.stderr}`);
      const lines = result.stderr.trimEnd().split('\n');
      assert.ok(lines[0]!.startsWith(`error[${code}]: `), result.stderr);
      assert.ok(!/^\s+at /m.test(result.stderr), 'no stack trace');
    }
  });
});

describe('upscope resolve FILE:LINE', () => {
  test('shows the source line and the debug info read; --json carries them', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram('lines', { flags: ['-O2'] });
    const line = mark('loop_body');
    const text = runCli(['resolve', `${app}:lines.c:${line}`]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(
      text.stdout,
      new RegExp(
        `^  line +${SOURCE}:${line}(:\\d+)? \\(debug info: ${app}, in the file itself\\)$`,
        'm',
      ),
    );
    const json = JSON.parse(runCli(['resolve', '--json', `${app}:lines.c:${line}`]).stdout);
    assert.equal(json.sites[0].source.line, line);
    assert.deepEqual(json.sites[0].source.debugFile, { path: app, how: 'embedded' });
  });
});
