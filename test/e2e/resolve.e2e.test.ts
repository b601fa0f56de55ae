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

/**
 * readelf's lines of the table libc's functions are named from: the .symtab of libc6-dbg's debug
 * file (found by build-id) when it is installed, else libc's own .dynsym.
 */
function libcFunctionLines(): string[] {
  const id = /Build ID: ([0-9a-f]+)/.exec(tool('readelf', ['-n', LIBC]))![1]!;
  const debug = `/usr/lib/debug/.build-id/${id.slice(0, 2)}/${id.slice(2)}.debug`;
  return existsSync(debug)
    ? tool('readelf', ['-sW', debug]).split('\n')
    : tool('readelf', ['--dyn-syms', '-W', LIBC]).split('\n');
}
const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;

interface JsonSite {
  spec: string;
  kind: string;
  symbol: string | undefined;
  aliases: string[];
  vaddr: string;
  fileOffset: string;
  uprobeEvent: string;
  runtimeAddress?: string;
  instructions: { vaddr: string; length: number; text: string }[];
  handling: { strategy: string };
  /** An entry probed past instructions (the kernel would single-step the first). */
  pastFirst?: { offset: string; instruction: string; reason: string };
}

/**
 * Where `site`'s probe is, its function's start being `start`: there, or past the instructions
 * it says it passed (each checked to be one, by the length iced gives, against the site's own).
 */
function probedAt(site: JsonSite, start: bigint): bigint {
  if (site.pastFirst === undefined) return start;
  assert.match(site.pastFirst.reason, /single-steps|cannot|refuses|mishandles/);
  return start + BigInt(site.pastFirst.offset);
}

function resolveJson(args: string[]): { sites: JsonSite[]; errors: { code: string }[] } {
  const result = runCli(['resolve', '--json', ...args]);
  return JSON.parse(result.stdout);
}

/** `nm` value of a defined function symbol. */
function nmAddress(path: string, name: string): bigint {
  const line = tool('nm', [path])
    .split('\n')
    .find((l) => / [Tt] /.test(l) && l.endsWith(` ${name}`));
  assert.ok(line, `nm has no text symbol ${name} in ${path}`);
  return BigInt(`0x${line.split(' ')[0]}`);
}

/** Instruction start addresses of one function, from objdump. */
function objdumpBoundaries(path: string, start: bigint, size: number): bigint[] {
  const out = tool('objdump', [
    '-d',
    '--no-show-raw-insn',
    `--start-address=0x${start.toString(16)}`,
    `--stop-address=0x${(start + BigInt(size)).toString(16)}`,
    path,
  ]);
  return [...out.matchAll(/^\s+([0-9a-f]+):\s/gm)].map((m) => BigInt(`0x${m[1]}`));
}

function functionSize(path: string, name: string): number {
  const line = tool('readelf', ['-sW', path])
    .split('\n')
    .find((l) => l.trim().split(/\s+/)[7] === name && l.includes('FUNC'));
  assert.ok(line, `readelf has no FUNC ${name}`);
  return Number(line.trim().split(/\s+/)[2]);
}

describe('upscope resolve', () => {
  for (const [label, flags] of [
    ['PIE -O0', ['-O0']],
    ['PIE -O2', ['-O2']],
    ['non-PIE -O2', ['-O2', '-no-pie']],
    ['static -O2', ['-O2', '-static']],
  ] as const) {
    test(`gives the file offsets readelf computes for a ${label} binary`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
      const app = compileProgram(SAMPLE, { flags });
      const { sites, errors } = resolveJson([
        `${app}:parse_request`,
        `${app}:checksum`,
        `r:${app}:handle_request`,
        `${app}:main`,
      ]);
      assert.deepEqual(errors, []);
      assert.equal(sites.length, 4);
      for (const site of sites) {
        const name = site.symbol!;
        const vaddr = probedAt(site, nmAddress(app, name));
        assert.equal(BigInt(site.vaddr), vaddr, `vaddr of ${name}`);
        assert.equal(
          BigInt(site.fileOffset),
          readelfFileOffset(app, vaddr),
          `file offset of ${name}`,
        );
        assert.match(
          site.uprobeEvent,
          new RegExp(
            `^[pr]:upscope_\\d+/${name} ${app}:0x${BigInt(site.fileOffset).toString(16)}$`,
          ),
        );
      }
      assert.equal(sites[2]!.kind, 'return');
      assert.ok(sites[2]!.uprobeEvent.startsWith('r:'));
    });
  }

  test('refuses an offset inside an instruction and names the boundaries objdump shows', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump', 'readelf', 'nm'] })) return;
    const app = compileProgram(SAMPLE, { flags: ['-O2'] });
    const start = nmAddress(app, 'parse_request');
    const boundaries = objdumpBoundaries(app, start, functionSize(app, 'parse_request'));
    // The first instruction longer than one byte: probing one byte into it is mid-instruction.
    const index = boundaries.findIndex(
      (b, i) => i + 1 < boundaries.length && boundaries[i + 1]! - b > 1n,
    );
    const inside = boundaries[index]! + 1n;
    const offset = inside - start;
    const result = runCli(['resolve', `${app}:parse_request+0x${offset.toString(16)}`]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_NOT_INSTRUCTION_BOUNDARY\]: /);
    const previous = `parse_request+0x${(boundaries[index]! - start).toString(16)}`;
    const next = `parse_request+0x${(boundaries[index + 1]! - start).toString(16)}`;
    assert.ok(result.stderr.includes(`${previous} and ${next}`), result.stderr);
    // Every boundary objdump shows is accepted.
    const ok = resolveJson(
      boundaries.slice(0, 6).map((b) => `${app}:parse_request+0x${(b - start).toString(16)}`),
    );
    assert.deepEqual(ok.errors, []);
    assert.deepEqual(
      ok.sites.map((s) => BigInt(s.vaddr)),
      boundaries.slice(0, 6),
    );
  });

  test('refuses a raw address no symbol covers unless --unsafe', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const app = compileProgram(SAMPLE, { flags: ['-O2'] });
    // .plt stubs have no symbol around them; take the start of .plt from readelf.
    const plt = tool('readelf', ['-SW', app])
      .split('\n')
      .find((l) => /\s\.plt\s/.test(l));
    assert.ok(plt);
    const address = `0x${plt.trim().split(/\s+/)[3]!.replace(/^0+/, '')}`;
    const refused = runCli(['resolve', `${app}:${address}`]);
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr, /^error\[ERR_UNSAFE_ADDRESS\]/);
    assert.match(refused.stderr, /--unsafe/);
    const allowed = runCli(['resolve', '--unsafe', `${app}:${address}`]);
    assert.equal(allowed.status, 0, allowed.stderr);
  });

  test("finds libc's malloc, merges its aliases, and matches readelf's offset", (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const dyn = tool('readelf', ['--dyn-syms', '-W', LIBC]).split('\n');
    const malloc = dyn.find((l) => l.trim().split(/\s+/)[7] === 'malloc@@GLIBC_2.2.5');
    assert.ok(malloc);
    const vaddr = BigInt(`0x${malloc.trim().split(/\s+/)[1]}`);
    const aliases = libcFunctionLines()
      .filter((l) => l.includes(' FUNC ') && BigInt(`0x${l.trim().split(/\s+/)[1]}`) === vaddr)
      .map((l) => l.trim().split(/\s+/)[7]!.replace(/@.*/, ''));
    const { sites } = resolveJson(['libc:*malloc']);
    const site = sites.find((s) => BigInt(s.vaddr) === vaddr);
    assert.ok(site, 'a site at malloc');
    assert.equal(
      sites.filter((s) => BigInt(s.vaddr) === vaddr).length,
      1,
      'aliases merged into one site',
    );
    assert.equal(site.symbol, 'malloc@@GLIBC_2.2.5');
    assert.deepEqual([...site.aliases, 'malloc'].sort(), [...new Set(aliases)].sort());
    assert.equal(BigInt(site.fileOffset), readelfFileOffset(LIBC, vaddr));
  });

  test('picks one version of a symbol libc defines twice, as readelf numbers them', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const dyn = tool('readelf', ['--dyn-syms', '-W', LIBC]).split('\n');
    const addressOf = (display: string) => {
      const line = dyn.find((l) => l.trim().split(/\s+/)[7] === display);
      assert.ok(line, `${display} in readelf`);
      return BigInt(`0x${line.trim().split(/\s+/)[1]}`);
    };
    const { sites, errors } = resolveJson(['libc:realpath@GLIBC_2.2.5', 'libc:realpath@GLIBC_2.3']);
    assert.deepEqual(errors, []);
    assert.equal(BigInt(sites[0]!.vaddr), probedAt(sites[0]!, addressOf('realpath@GLIBC_2.2.5')));
    assert.equal(BigInt(sites[1]!.vaddr), probedAt(sites[1]!, addressOf('realpath@@GLIBC_2.3')));
    assert.equal(sites[1]!.symbol, 'realpath@@GLIBC_2.3');
  });

  // libc:strlen is probed at those implementations (ifunc.int.test.ts); an offset is one into
  // the resolver's own code.
  test("explains an offset into libc's strlen IFUNC and offers the implementations its resolver loads", (t) => {
    if (!requireHost(t, { commands: ['readelf', 'objdump'] })) return;
    const line = tool('readelf', ['--dyn-syms', '-W', LIBC])
      .split('\n')
      .find((l) => l.trim().split(/\s+/)[7] === 'strlen@@GLIBC_2.2.5');
    assert.ok(line?.includes('IFUNC'), 'strlen is an IFUNC in this libc');
    const [, value, size] = line!.trim().split(/\s+/);
    const leas = objdumpLeaTargets(LIBC, BigInt(`0x${value}`), Number(size));
    const result = runCli(['resolve', 'libc:strlen+4']);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_IFUNC\]: .*IFUNC/);
    assert.match(result.stderr, /the offset is one into its own code, which runs once, at load/);
    // Named from libc's debug symbols when it has them (__strlen_evex, ...), else addresses.
    const named = /Its implementations: (.*)/.exec(result.stderr)![1]!.split(', ');
    const addressOf = new Map(
      libcFunctionLines()
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f[3] === 'FUNC')
        .map((f) => [f[7]!, BigInt(`0x${f[1]}`)]),
    );
    const offered = named.map((n) => (n.startsWith('0x') ? BigInt(n) : addressOf.get(n)!));
    assert.ok(offered.length >= 2, result.stderr);
    for (const address of offered.filter((a) => a !== BigInt(`0x${value}`))) {
      assert.ok(leas.has(address), `0x${address.toString(16)} is loaded by the resolver`);
    }
    // An offered implementation is accepted as a function entry without --unsafe.
    const first = offered.find((a) => leas.has(a))!;
    const impl = resolveJson([`libc:0x${first.toString(16)}`]);
    assert.deepEqual(impl.errors, []);
    assert.equal(impl.sites[0]!.kind, 'entry');
  });

  test('points at a stripped binary and where debug files would be looked for', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'strip'] })) return;
    const app = compileProgram(SAMPLE, { flags: ['-O2'], strip: true });
    const result = runCli(['resolve', `${app}:parse_request`]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_SYMBOL_NOT_FOUND\]: .*not in \.dynsym/);
    assert.match(result.stderr, /stripped: only \.dynsym/);
    assert.match(result.stderr, /\/usr\/lib\/debug\/\.build-id\/[0-9a-f]{2}\/[0-9a-f]+\.debug/);
  });

  test('with -p, resolves libc as the process maps it and symbolizes the runtime address', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram(SAMPLE, { flags: ['-O2'] });
    const child = spawn(app, ['0'], { stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 150));
      const pid = String(child.pid);
      const listing = runCli(['list', '-p', pid]);
      assert.equal(listing.status, 0, listing.stderr);
      assert.match(listing.stdout, /libc\.so\.6/);
      const { sites, errors } = resolveJson(['-p', pid, 'libc:malloc', `${app}:checksum`]);
      assert.deepEqual(errors, []);
      const maps = tool('cat', [`/proc/${pid}/maps`]);
      for (const site of sites) {
        const runtime = BigInt(site.runtimeAddress!);
        const mapping = maps
          .split('\n')
          .map((l) => l.split(/\s+/))
          .find(
            (f) =>
              f[0] &&
              BigInt(`0x${f[0].split('-')[0]}`) <= runtime &&
              runtime < BigInt(`0x${f[0].split('-')[1]}`),
          );
        assert.ok(mapping, 'runtime address is mapped');
        assert.ok(mapping[1]!.includes('x'), 'in an executable mapping');
        assert.equal(
          runtime - BigInt(`0x${mapping[0]!.split('-')[0]}`) + BigInt(`0x${mapping[2]}`),
          BigInt(site.fileOffset),
        );
        // 4 bytes into the function, wherever its entry is probed.
        const start = runtime - BigInt(site.pastFirst?.offset ?? 0);
        const back = runCli(['resolve', '-p', pid, `0x${(start + 4n).toString(16)}`]);
        assert.equal(back.status, 0, back.stderr);
        assert.ok(back.stdout.includes(`${site.symbol}+0x4`), back.stdout);
      }
    } finally {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
  });
});

/** Targets of the RIP-relative leas objdump prints in a function (`# addr <sym>`). */
function objdumpLeaTargets(path: string, start: bigint, size: number): Set<bigint> {
  const out = tool('objdump', [
    '-d',
    `--start-address=0x${start.toString(16)}`,
    `--stop-address=0x${(start + BigInt(size)).toString(16)}`,
    path,
  ]);
  return new Set(
    [...out.matchAll(/\slea\s.*\(%rip\).*#\s*([0-9a-f]+)/g)].map((m) => BigInt(`0x${m[1]}`)),
  );
}
