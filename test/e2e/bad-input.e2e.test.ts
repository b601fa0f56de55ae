import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { type CliResult, runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;

/** A user error: non-zero exit, exactly one `error[CODE]: ...` line, never a stack trace. */
function assertOneLineError(result: CliResult, code: string, label = ''): void {
  assert.notEqual(result.status, 0, `exit status ${label}: ${result.stdout.slice(0, 200)}`);
  const lines = result.stderr.split('\n').filter((l) => l.length > 0);
  const errors = lines.filter((l) => l.startsWith('error'));
  assert.equal(errors.length, 1, `one error line in:\n${result.stderr}`);
  assert.match(errors[0]!, new RegExp(`^error\\[${code}\\]: \\S.*[^.]$`), result.stderr);
  for (const line of lines)
    assert.doesNotMatch(line, /^\s+at |Error:|node:internal/, 'no stack trace');
}

describe('malformed probe specs', () => {
  const cases: [spec: string, code: string, underlined: string][] = [
    ['libc', 'ERR_SPEC_SYNTAX', ''],
    ['libc:', 'ERR_SPEC_SYNTAX', ''],
    [':malloc', 'ERR_SPEC_INVALID', ''],
    ['r:libc:malloc+0x10', 'ERR_SPEC_INVALID', '+0x10'],
    ['libc:malloc size=arg0:u65', 'ERR_SPEC_SYNTAX', 'u65'],
    ['libc:malloc ret=retval', 'ERR_SPEC_INVALID', 'retval'],
    ['libc:malloc a=arg0 a=arg1', 'ERR_SPEC_INVALID', 'a'],
    ['libc:malloc+zz', 'ERR_SPEC_SYNTAX', 'zz'],
    ['libc:malloc r=%rxx', 'ERR_SPEC_SYNTAX', '%rxx'],
    ['libc:malloc s=+8(arg0', 'ERR_SPEC_SYNTAX', ''],
    ['u:libc:foo', 'ERR_SPEC_INVALID', 'foo'],
    ['libc:mallocc', 'ERR_SYMBOL_NOT_FOUND', 'mallocc'],
    ['/nonexistent/app:main', 'ERR_TARGET_NOT_FOUND', '/nonexistent/app'],
    ['libnosuchlib:foo', 'ERR_TARGET_NOT_FOUND', 'libnosuchlib'],
    ['libc:__malloc_hook', 'ERR_NOT_A_FUNCTION', '__malloc_hook'],
    ['libc:@0xfffffffff', 'ERR_NOT_EXECUTABLE', '@0xfffffffff'],
    ['libc:malloc+0x100000', 'ERR_OFFSET_OUT_OF_RANGE', ''],
    ['libc:nosuch*', 'ERR_NO_MATCH', 'nosuch*'],
    ['libc:malloc@GLIBC_9', 'ERR_SYMBOL_NOT_FOUND', 'malloc@GLIBC_9'],
  ];
  for (const [spec, code, underlined] of cases) {
    test(`"${spec}" gives ${code} in one line with a caret`, () => {
      const result = runCli(['resolve', spec]);
      assertOneLineError(result, code);
      const lines = result.stderr.split('\n');
      assert.equal(lines[1], `  ${spec}`, 'the spec is shown under the error');
      const caret = lines[2]!;
      assert.match(caret, /^ +\^+$/);
      if (underlined !== '') {
        const start = caret.indexOf('^') - 2;
        const end = caret.lastIndexOf('^') - 2 + 1;
        assert.equal(spec.slice(start, end), underlined, 'the caret is under the problem');
      }
    });
  }

  test('a misspelled symbol gets a did-you-mean hint', () => {
    const result = runCli(['resolve', 'libc:mallocc']);
    assert.match(result.stderr, /hint: Did you mean "malloc"/);
  });

  test('an unknown option is one usage line', () => {
    assertOneLineError(runCli(['resolve', '--bogus', 'libc:malloc']), 'ERR_USAGE');
    assertOneLineError(runCli(['list', '-p', 'abc']), 'ERR_USAGE');
    assertOneLineError(runCli(['frobnicate']), 'ERR_USAGE');
  });
});

describe('malformed ELF files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-bad-elf-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** An edit made in place, returning the same buffer. */
  const patch = (edit: (b: Buffer) => unknown) => (b: Buffer) => {
    edit(b);
    return b;
  };

  function variant(name: string, edit: (bytes: Buffer) => Buffer, base: string): string {
    const path = join(dir, name);
    writeFileSync(path, edit(Buffer.from(readFileSync(base))));
    return path;
  }

  test('each gives one clear line and a non-zero exit', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const app = join(dir, 'app');
    copyFileSync(compileProgram(SAMPLE, { flags: ['-O2'] }), app);
    const header = tool('readelf', ['-hW', app]);
    const shoff = Number(/Start of section headers:\s+(\d+)/.exec(header)![1]);
    const strtab = tool('readelf', ['-SW', app])
      .split('\n')
      .map((l) => l.replace(/^\s*\[\s*\d+\]\s*/, '').split(/\s+/))
      .find((f) => f[0] === '.strtab')!;
    const strtabEnd = Number.parseInt(strtab[3]!, 16) + Number.parseInt(strtab[4]!, 16);
    const cases: [string, (b: Buffer) => Buffer, string][] = [
      ['empty', () => Buffer.alloc(0), 'ERR_ELF_INVALID'],
      ['text', () => Buffer.from('#!/bin/sh\necho not an ELF file\n'), 'ERR_SCRIPT_TARGET'],
      ['truncated-header', (b) => b.subarray(0, 40), 'ERR_ELF_INVALID'],
      ['truncated-middle', (b) => b.subarray(0, Math.floor(b.length / 2)), 'ERR_ELF_INVALID'],
      ['class32', patch((b) => b.writeUInt8(1, 4)), 'ERR_ELF_UNSUPPORTED'],
      ['big-endian', patch((b) => b.writeUInt8(2, 5)), 'ERR_ELF_UNSUPPORTED'],
      ['aarch64', patch((b) => b.writeUInt16LE(183, 18)), 'ERR_ELF_UNSUPPORTED'],
      ['huge-shnum', patch((b) => b.writeUInt16LE(0xffff, 60)), 'ERR_ELF_INVALID'],
      [
        'shoff-past-end',
        patch((b) => b.writeBigUInt64LE(BigInt(b.length) * 4n, 40)),
        'ERR_ELF_INVALID',
      ],
      ['huge-phnum', patch((b) => b.writeUInt16LE(0xfff0, 56)), 'ERR_ELF_INVALID'],
      [
        'section-past-end',
        (b) => {
          // Move the offset of the last section header's contents far past the end.
          const last = shoff + 64 * (b.readUInt16LE(60) - 1);
          b.writeBigUInt64LE(BigInt(b.length) * 8n, last + 24);
          b.writeBigUInt64LE(4096n, last + 32);
          return b;
        },
        'ERR_ELF_INVALID',
      ],
      [
        'unterminated-strtab',
        patch((b) => b.fill(0x41, strtabEnd - 8, strtabEnd)),
        'ERR_ELF_INVALID',
      ],
    ];
    for (const [name, edit, code] of cases) {
      const result = runCli(['list', variant(name, edit, app)]);
      assertOneLineError(result, code, name);
      assert.match(
        result.stderr,
        new RegExp(name === 'text' || name === 'empty' ? 'not an ELF|empty|too short|magic' : '.'),
      );
    }
  });
});

describe('which processes a run covers: options that do not go together', () => {
  const cases: [args: string[], says: RegExp][] = [
    [['count', '--children', '-c', 'true', 'libc:malloc'], /--children goes with -p PID/],
    [['trace', '--children', 'libc:malloc'], /--children goes with -p PID/],
    [
      ['latency', '--include-self', '-p', String(process.pid), 'libc:malloc'],
      /--include-self goes with a run over every process/,
    ],
    [['hist', '--kill-after', 'soon', '-c', 'true', 'libc:malloc', 'arg0'], /--kill-after "soon"/],
    [['trace', '--kill-after', '-1', '-c', 'true', 'libc:malloc'], /--kill-after/],
  ];
  for (const [args, says] of cases) {
    test(`${args.join(' ')}: one line, ERR_USAGE`, () => {
      const result = runCli(args);
      assertOneLineError(result, 'ERR_USAGE');
      assert.match(result.stderr, says);
    });
  }
});
