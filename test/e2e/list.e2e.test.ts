import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';

const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';
const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;

interface JsonFunction {
  name: string;
  vaddr: string;
  fileOffset: string;
  sizeBytes: number;
  binding: string;
  type: string;
}

function listJson(args: string[]): {
  stripped: boolean;
  debugFile?: string;
  functions: JsonFunction[];
} {
  const result = runCli(['list', '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout);
}

/** Defined FUNC/IFUNC symbols of one table from `readelf -sW`, as unique "name value" pairs. */
function readelfFunctions(path: string, table: '.symtab' | '.dynsym'): Set<string> {
  const out = tool('readelf', [table === '.dynsym' ? '--dyn-syms' : '-s', '-W', path]);
  const found = new Set<string>();
  let inTable = false;
  for (const line of out.split('\n')) {
    if (line.startsWith('Symbol table')) inTable = line.includes(`'${table}'`);
    if (!inTable) continue;
    const f = line.trim().split(/\s+/);
    if (f.length < 8 || !/^\d+:$/.test(f[0]!) || f[6] === 'UND') continue;
    if (f[3] !== 'FUNC' && f[3] !== 'IFUNC') continue;
    found.add(`${f[7]} ${BigInt(`0x${f[1]}`)}`);
  }
  return found;
}

describe('upscope list', () => {
  test("gives malloc's file offset in libc exactly as readelf computes it (--json)", (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const { functions } = listJson(['libc', 'mall*']);
    const malloc = functions.find((fn) => fn.name === 'malloc@@GLIBC_2.2.5');
    assert.ok(malloc, 'malloc is listed');
    const line = tool('readelf', ['--dyn-syms', '-W', LIBC])
      .split('\n')
      .find((l) => l.trim().split(/\s+/)[7] === 'malloc@@GLIBC_2.2.5')!;
    const [, value, size, type, bind] = line.trim().split(/\s+/);
    const vaddr = BigInt(`0x${value}`);
    assert.equal(BigInt(malloc.vaddr), vaddr);
    assert.equal(BigInt(malloc.fileOffset), readelfFileOffset(LIBC, vaddr));
    assert.equal(malloc.sizeBytes, Number(size));
    assert.equal(malloc.type, type!.toLowerCase());
    assert.equal(malloc.binding, bind!.toLowerCase());
    for (const fn of functions) assert.match(fn.name, /^mall/);
  });

  test("lists every function readelf shows in libc's debug file (libc6-dbg), else in its .dynsym", (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const { stripped, debugFile, functions } = listJson([LIBC]);
    // Debian ships libc without .symtab; libc6-dbg's debug file, found by build-id, has one.
    const id = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', LIBC]))![1]!;
    const debug = `/usr/lib/debug/.build-id/${id.slice(0, 2)}/${id.slice(2)}.debug`;
    if (existsSync(debug)) {
      assert.equal(stripped, false);
      assert.equal(debugFile, debug);
      // Names without versions: the debug file writes only some of them into the name.
      const bare = (names: Iterable<string>) =>
        new Set([...names].map((n) => n.replace(/@[^ ]*/, '')));
      assert.deepEqual(
        bare(functions.map((fn) => `${fn.name} ${BigInt(fn.vaddr)}`)),
        bare(readelfFunctions(debug, '.symtab')),
      );
    } else {
      assert.equal(stripped, true);
      const ours = new Set(functions.map((fn) => `${fn.name} ${BigInt(fn.vaddr)}`));
      assert.deepEqual(ours, readelfFunctions(LIBC, '.dynsym'));
    }
  });

  test('lists /usr/bin/node: every .symtab function readelf shows, sorted by address', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    // --no-demangle: the names as the file stores them, as readelf shows them.
    const result = runCli(['list', '--no-demangle', '/usr/bin/node']);
    assert.equal(result.status, 0, result.stderr);
    const rows = result.stdout.trim().split('\n').slice(1, -1);
    const ours = rows.map((row) => {
      const f = row.split(/\s+/);
      return { vaddr: BigInt(`0x${f[0]}`), offset: BigInt(`0x${f[1]}`), name: f[5]! };
    });
    const expected = readelfFunctions('/usr/bin/node', '.symtab');
    assert.equal(ours.length, expected.size);
    assert.deepEqual(new Set(ours.map((r) => `${r.name} ${r.vaddr}`)), expected);
    for (let i = 1; i < ours.length; i++) assert.ok(ours[i - 1]!.vaddr <= ours[i]!.vaddr, 'sorted');
    const sample = ours.filter((_, i) => i % 5000 === 0);
    for (const row of sample)
      assert.equal(row.offset, readelfFileOffset('/usr/bin/node', row.vaddr));
  });

  for (const [label, flags, strip] of [
    ['-static', ['-O2', '-static'], false],
    ['-no-pie', ['-O0', '-no-pie'], false],
    ['stripped -rdynamic', ['-O2', '-rdynamic'], true],
  ] as const) {
    test(`agrees with nm on a ${label} binary`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'nm'] })) return;
      const app = compileProgram(SAMPLE, { flags, strip });
      const { stripped, functions } = listJson([app]);
      assert.equal(stripped, strip);
      const nm = tool('nm', strip ? ['-D', '--defined-only', app] : ['--defined-only', app])
        .split('\n')
        .map((l) => l.split(' '))
        .filter((f) => f.length === 3 && /^[TtWiI]$/.test(f[1]!))
        .map((f) => `${f[2]} ${BigInt(`0x${f[0]}`)}`);
      const ours = functions.map((fn) => `${fn.name} ${BigInt(fn.vaddr)}`);
      // nm also lists untyped text labels (STT_NOTYPE such as _start in some builds): every
      // function we list must be in nm's output, and the functions we know must be there.
      for (const entry of ours) assert.ok(nm.includes(entry), `${entry} is in nm's output`);
      for (const name of ['main', 'parse_request', 'checksum', 'handle_request']) {
        assert.ok(
          functions.some((fn) => fn.name === name),
          `${name} listed`,
        );
      }
    });
  }

  test('with -p PID, adds runtime addresses that /proc/PID/maps confirms', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram(SAMPLE, { flags: ['-O2'] });
    const child = spawn(app, ['0'], { stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 150));
      const result = runCli(['list', '-p', String(child.pid), 'libc', 'malloc']);
      assert.equal(result.status, 0, result.stderr);
      const row = result.stdout.split('\n')[1]!.split(/\s+/);
      const runtime = BigInt(`0x${row[5]}`);
      const fileOffset = BigInt(`0x${row[1]}`);
      const maps = tool('cat', [`/proc/${child.pid}/maps`]).split('\n');
      const mapping = maps
        .map((l) => l.split(/\s+/))
        .find((f) => f[5]?.endsWith('libc.so.6') && f[1]!.includes('x'))!;
      const [start] = mapping[0]!.split('-');
      assert.equal(runtime, BigInt(`0x${start}`) + fileOffset - BigInt(`0x${mapping[2]}`));
    } finally {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
  });
});
