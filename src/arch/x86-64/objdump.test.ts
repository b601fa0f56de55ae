// Differential tests: our decoder against objdump on the same bytes. objdump is the truth for
// instruction boundaries, lengths and mnemonics; every instruction of the ranges is compared.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfFileOffset, tool } from '../../../test/helpers/tools.js';
import { decodeInstructions } from './decode.js';

const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';

interface ObjdumpLine {
  readonly vaddr: bigint;
  readonly length: number;
  readonly text: string;
}

/** Instruction lines of `objdump -d -w` (one line per instruction, raw bytes shown). */
function objdump(path: string, args: readonly string[]): ObjdumpLine[] {
  const lines: ObjdumpLine[] = [];
  for (const line of tool('objdump', ['-d', '-w', ...args, path]).split('\n')) {
    const m = /^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t?(.*)$/.exec(line);
    if (m === null) continue;
    const text = m[3]!
      .replace(/\s*#.*$/, '')
      .replace(/\s*<[^>]*>/g, '')
      .replace(/\s+/g, ' ')
      .trim();
    lines.push({ vaddr: BigInt(`0x${m[1]}`), length: m[2]!.trim().split(' ').length, text });
  }
  return lines;
}

/** objdump prints direct branch targets without "0x"; we print them with it. */
function sameText(ours: string, theirs: string): boolean {
  const withPrefix = theirs.replace(
    /^((?:[a-z0-9]+ )*?(?:j[a-z]+|call|loop[a-z]*|xbegin)) ([0-9a-f]+)$/,
    (_, head: string, target: string) => `${head} 0x${target}`,
  );
  return ours === withPrefix;
}

function firstWord(text: string): string {
  return text.split(' ')[0]!;
}

/** Compare our decoding of [vaddr, vaddr + size) of `path` with objdump's, instruction by instruction. */
function compareRange(path: string, vaddr: bigint, sizeBytes: number, objdumpArgs: string[]): void {
  const fileOffset = Number(readelfFileOffset(path, vaddr));
  const bytes = readFileSync(path).subarray(fileOffset, fileOffset + sizeBytes);
  const ours = decodeInstructions(bytes, vaddr);
  const theirs = objdump(path, objdumpArgs);
  const where = (v: bigint) => `${path} at 0x${v.toString(16)}`;
  assert.ok(theirs.length > 0, `objdump printed no instructions for ${where(vaddr)}`);
  assert.equal(ours.length, theirs.length, `instruction count for ${where(vaddr)}`);
  let sameFullText = 0;
  for (let i = 0; i < theirs.length; i++) {
    const a = ours[i]!;
    const b = theirs[i]!;
    assert.equal(a.vaddr, b.vaddr, `boundary #${i} for ${where(vaddr)}`);
    assert.equal(a.length, b.length, `length of "${b.text}" at ${where(b.vaddr)}`);
    assert.equal(a.invalid, b.text === '(bad)', `validity of "${b.text}" at ${where(b.vaddr)}`);
    assert.equal(firstWord(a.text), firstWord(b.text), `mnemonic at ${where(b.vaddr)}`);
    if (sameText(a.text, b.text)) sameFullText++;
  }
  // Operands are printed the objdump way too; allow for a rare spelling difference.
  assert.ok(
    sameFullText >= theirs.length * 0.99,
    `only ${sameFullText} of ${theirs.length} instructions print as objdump prints them at ${where(vaddr)}`,
  );
}

function textSection(path: string): { vaddr: bigint; sizeBytes: number } {
  const line = tool('readelf', ['-SW', path])
    .split('\n')
    .find((l) => /\s\.text\s/.test(l));
  const m = /\.text\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)/.exec(line ?? '');
  assert.ok(m !== null, `no .text section in ${path}`);
  return { vaddr: BigInt(`0x${m[1]}`), sizeBytes: Number.parseInt(m[2]!, 16) };
}

for (const level of ['-O0', '-O2']) {
  test(`decodeInstructions() finds the boundaries, lengths and mnemonics objdump finds in all of .text at ${level}`, (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump', 'readelf'] })) return;
    const path = compileProgram('arch-funcs', { flags: [level] });
    const text = textSection(path);
    compareRange(path, text.vaddr, text.sizeBytes, ['-j', '.text']);
  });
}

/** libc functions to compare: from its separate debug file when installed, else .dynsym. */
function libcFunctions(): { name: string; vaddr: bigint; sizeBytes: number }[] {
  const buildId = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', LIBC]))?.[1];
  const debug =
    buildId === undefined
      ? undefined
      : `/usr/lib/debug/.build-id/${buildId.slice(0, 2)}/${buildId.slice(2)}.debug`;
  const symbols =
    debug !== undefined && existsSync(debug)
      ? tool('nm', ['-S', '--defined-only', debug])
      : tool('nm', ['-D', '-S', '--defined-only', LIBC]);
  const wanted = /^(malloc|free|memcpy|strlen|__memcpy_[a-z0-9_]+|__strlen_[a-z0-9_]+)(@.*)?$/;
  const found = new Map<bigint, { name: string; vaddr: bigint; sizeBytes: number }>();
  for (const line of symbols.split('\n')) {
    const m = /^([0-9a-f]+) ([0-9a-f]+) [TtiW] (\S+)$/.exec(line);
    if (m === null || !wanted.test(m[3]!)) continue;
    const vaddr = BigInt(`0x${m[1]}`);
    const sizeBytes = Number.parseInt(m[2]!, 16);
    if (sizeBytes > 0 && !found.has(vaddr)) found.set(vaddr, { name: m[3]!, vaddr, sizeBytes });
  }
  return [...found.values()];
}

test('decodeInstructions() agrees with objdump on malloc, free, memcpy and strlen implementations of libc', (t) => {
  if (!requireHost(t, { commands: ['objdump', 'readelf', 'nm'] })) return;
  if (!existsSync(LIBC)) {
    t.skip(`no ${LIBC}`);
    return;
  }
  const functions = libcFunctions();
  assert.ok(functions.length >= 2, 'found no libc functions to compare');
  for (const fn of functions) {
    const stop = fn.vaddr + BigInt(fn.sizeBytes);
    compareRange(LIBC, fn.vaddr, fn.sizeBytes, [
      `--start-address=0x${fn.vaddr.toString(16)}`,
      `--stop-address=0x${stop.toString(16)}`,
    ]);
  }
});
