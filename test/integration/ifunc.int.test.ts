// A probe on an IFUNC (libc's strlen, strchr, memcpy, ...): its resolver runs once, when libc
// is loaded, and picks the implementation the calls go to for this CPU. `libc:strlen` was
// refused (probe one of __strlen_sse2, __strlen_avx2, ... by hand, knowing which this CPU
// runs), and a pattern over libc:str* left strlen, strcmp and strchr out: neither counted a
// call of them. Both now probe the implementations the resolver can pick (objdump's leas in
// the resolver the truth), and every call a program makes is counted, from C, C++ that
// throws, Rust and Go (cgo), on each engine: the programs say how many calls they made.
// The AVX2 and AVX-512 implementations of memset begin with a VEX or EVEX instruction the
// kernel refuses or would mishandle: their entry is probed on their second instruction, and
// the size each call passes (LENGTH+1 bytes: no runtime's own) is read there as passed.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;

/** Calls of strlen each program makes, on a string of LENGTH bytes. */
const CALLS = 600;
/** Longer than any path or argument the programs' runtimes measure as they start. */
const LENGTH = 4321;

/** The C library `true` runs with, as ldd says. */
function libc(): string {
  const line = execFileSync('ldd', ['/usr/bin/true'], { encoding: 'utf8' })
    .split('\n')
    .find((l) => l.includes('libc.so'));
  return /=> (\S+)/.exec(line ?? '')![1]!;
}

/** The address of a file's IFUNC symbol `name`, as nm lists it (-D: of .dynsym). */
function ifuncAddress(path: string, name: string, dynamic = true): bigint {
  const lines = execFileSync('nm', [...(dynamic ? ['-D'] : []), '--defined-only', path], {
    encoding: 'utf8',
  });
  for (const line of lines.split('\n')) {
    const [address, type, symbol] = line.split(' ');
    if (type === 'i' && symbol?.replace(/@.*$/, '') === name) return BigInt(`0x${address}`);
  }
  throw new Error(`nm finds no IFUNC ${name} in ${path}`);
}

/** The addresses the resolver at `start` loads with %rip-relative leas, as objdump reads them. */
function leaTargets(path: string, start: bigint): Set<bigint> {
  const out = execFileSync(
    'objdump',
    [
      '-d',
      `--start-address=0x${start.toString(16)}`,
      `--stop-address=0x${(start + 512n).toString(16)}`,
      path,
    ],
    { encoding: 'utf8', maxBuffer: 16 << 20 },
  );
  return new Set(
    [...out.matchAll(/\slea\s.*\(%rip\).*#\s*([0-9a-f]+)/g)].map((m) => BigInt(`0x${m[1]}`)),
  );
}

interface Target {
  readonly language: string;
  readonly command: string;
  /** What the program prints of its calls. */
  readonly says: RegExp;
}

/** The programs of test/programs/ifunc-calls.*, built; Rust and Go where their compilers are. */
function targets(): Target[] {
  const says = new RegExp(`^calls=${CALLS} .*total=${CALLS * LENGTH}$`, 'm');
  const found: Target[] = [
    {
      language: 'C',
      command: `${compileProgram(`${PROGRAMS}ifunc-calls.c`, { flags: ['-O2', '-fno-builtin'] })} ${CALLS} ${LENGTH}`,
      says,
    },
    {
      language: 'C++',
      command: `${compileProgram(`${PROGRAMS}ifunc-calls.cpp`, { flags: ['-O2'] })} ${CALLS} ${LENGTH}`,
      says: new RegExp(`^calls=${CALLS} caught=${CALLS / 3} total=${CALLS * LENGTH}$`, 'm'),
    },
  ];
  const rustc = findRustc();
  const go = findGo();
  for (const [name, tool] of [
    ['Rust', rustc],
    ['Go', go],
  ] as const) {
    if (tool !== undefined) continue;
    const reason = `${name === 'Rust' ? 'rustc' : 'go'} is not installed`;
    if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
    console.log(`# the IFUNC tests leave out ${name}: ${reason}`);
  }
  if (rustc !== undefined) {
    const path = compileRust(rustc, 'ifunc-calls', ['-C', 'opt-level=2']);
    found.push({ language: 'Rust', command: `${path} ${CALLS} ${LENGTH}`, says });
  }
  if (go !== undefined) {
    const path = compileGo(go, 'ifunc-calls', { cgo: true });
    found.push({ language: 'Go', command: `${path} ${CALLS} ${LENGTH}`, says });
  }
  return found;
}

interface Counted {
  readonly probe: string;
  readonly count: number;
}

/**
 * `trace --engine tracefs` of `spec` in the target's run: its lines that hold `field`, one per
 * call the program made (checked), after the program ran as it does.
 */
function tracefsLines(target: Target, spec: string, field: string): string[] {
  const result = runCli(['trace', '--engine', 'tracefs', '-c', target.command, spec]);
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stdout + result.stderr, target.says, target.language);
  const lines = result.stdout.split('\n').filter((l) => l.includes(field));
  assert.equal(lines.length, CALLS, `${target.language}: ${result.stderr}`);
  return lines;
}

function countJson(args: readonly string[]): { counted: Counted[]; stderr: string } {
  const result = runCli(['count', '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return { counted: JSON.parse(result.stdout) as Counted[], stderr: result.stderr };
}

describe('probes on an IFUNC are placed on the implementations its resolver can pick', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  test("resolve libc:strlen: a site at each address the resolver loads (objdump's leas)", (t) => {
    if (!requireHost(t, { commands: ['nm', 'objdump', 'ldd'] })) return;
    const path = libc();
    const resolver = ifuncAddress(path, 'strlen');
    const loads = leaTargets(path, resolver);
    const result = runCli(['resolve', '--json', `${path}:strlen`]);
    assert.equal(result.status, 0, result.stderr);
    const { sites, warnings } = JSON.parse(result.stdout) as {
      sites: { vaddr: string; kind: string }[];
      warnings: { code: string; message: string }[];
    };
    assert.ok(sites.length >= 2, result.stdout);
    for (const site of sites) {
      assert.ok(loads.has(BigInt(site.vaddr)), `${site.vaddr} is loaded by strlen's resolver`);
      assert.equal(site.kind, 'entry');
    }
    assert.ok(!sites.some((site) => BigInt(site.vaddr) === resolver), 'not the resolver itself');
    assert.equal(warnings[0]?.code, 'ERR_IFUNC');
    assert.match(
      warnings[0]!.message,
      new RegExp(
        `^Probed "strlen" at the ${sites.length} implementations its IFUNC resolver can pick: `,
      ),
    );
    // An offset is one into the resolver's code: refused, as before.
    const offset = runCli(['resolve', `${path}:strlen+4`]);
    assert.notEqual(offset.status, 0, offset.stderr);
    assert.match(
      offset.stderr,
      /^error\[ERR_IFUNC\]: Cannot probe "strlen\+0x4" .*the offset is one into its own code/,
    );
    assert.match(offset.stderr, /hint: Without the offset, .*:strlen probes the implementations/);
  });

  for (const engine of ['bpf', 'ptrace', 'inject']) {
    test(`count --engine ${engine} libc:strlen and r:libc:strlen: every call the program makes`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'g++', 'ldd'] })) return;
      for (const target of targets()) {
        const what = `${target.language} on ${engine}`;
        const entries = countJson(['--engine', engine, '-c', target.command, 'libc:strlen']);
        assert.match(entries.stderr, target.says, `${what}: the program ran as it does`);
        // One implementation runs here: it has every call (libc's own calls of strlen are
        // counted too: at least the program's).
        const hit = entries.counted.filter((c) => c.count > 0);
        assert.equal(hit.length, 1, `${what}: ${JSON.stringify(entries.counted)}`);
        assert.ok(hit[0]!.count >= CALLS, `${what}: ${JSON.stringify(entries.counted)}`);
        assert.match(hit[0]!.probe, /^__strlen_\w+$/, what);
        // The returns of a 73-byte string: exactly the program's calls.
        const returns = countJson([
          '--engine',
          engine,
          '--filter',
          `retval == ${LENGTH}`,
          '-c',
          target.command,
          'r:libc:strlen',
        ]);
        assert.match(returns.stderr, target.says, `${what}: the program ran as it does`);
        const total = returns.counted.reduce((n, c) => n + c.count, 0);
        assert.equal(total, CALLS, `${what}: ${JSON.stringify(returns.counted)}`);
        assert.equal(
          returns.counted.find((c) => c.count > 0)?.probe,
          `r:${hit[0]!.probe}`,
          `${what}: the same implementation`,
        );
      }
    });
  }

  for (const engine of ['bpf', 'ptrace', 'inject']) {
    test(`count --engine ${engine} libc:memset: every call the program makes, its size read as passed`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'g++', 'ldd'] })) return;
      for (const target of targets()) {
        const what = `${target.language} on ${engine}`;
        const sized = ['--filter', `arg2 == ${LENGTH + 1}`, '-c', target.command];
        const entries = countJson(['--engine', engine, ...sized, 'libc:memset']);
        assert.match(entries.stderr, target.says, `${what}: the program ran as it does`);
        assert.doesNotMatch(entries.stderr, /could not be probed/, what);
        const hit = entries.counted.filter((c) => c.count > 0);
        assert.equal(hit.length, 1, `${what}: ${JSON.stringify(entries.counted)}`);
        assert.equal(hit[0]!.count, CALLS, `${what}: ${JSON.stringify(entries.counted)}`);
        assert.match(hit[0]!.probe, /^__memset_\w+$/, what);
        // Each call returns once (the entry it opened at is the moved one on the kernel
        // engines): as many returns as calls of that size, whatever their size.
        const both = countJson([
          '--engine',
          engine,
          '-c',
          target.command,
          'libc:memset',
          'r:libc:memset',
        ]);
        const count = (probe: string) => both.counted.find((c) => c.probe === probe)?.count;
        const calls = count(hit[0]!.probe)!;
        assert.ok(calls >= CALLS, `${what}: ${JSON.stringify(both.counted)}`);
        assert.equal(
          count(`r:${hit[0]!.probe}`),
          calls,
          `${what}: ${JSON.stringify(both.counted)}`,
        );
      }
    });
  }

  test("resolve libc:memset: an entry moved past a first instruction the kernel cannot probe is on objdump's next, which nothing in the function jumps to", (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump', 'nm', 'ldd'] })) return;
    const path = libc();
    const result = runCli(['resolve', '--json', `${path}:memset`]);
    assert.equal(result.status, 0, result.stderr);
    type Site = {
      symbol: string;
      vaddr: string;
      symbolOffset: string;
      pastFirst?: { offset: string; instruction: string; reason: string };
    };
    const { sites } = JSON.parse(result.stdout) as { sites: Site[] };
    // Those moved for the kernel's refusal (not those it would single-step: stepped-entry.int).
    const moved = sites.filter(
      (site) => site.pastFirst !== undefined && !/single-steps/.test(site.pastFirst.reason),
    );
    // This libc's AVX2 and AVX-512 memsets (any x86-64 CPU's libc has them).
    assert.ok(moved.length >= 2, result.stdout);
    const sizes = new Map(
      execFileSync('nm', ['-S', '--defined-only', path], { encoding: 'utf8' })
        .split('\n')
        .map((line) => line.split(' '))
        .filter((f) => f.length === 4)
        .map(([address, size]) => [BigInt(`0x${address}`), BigInt(`0x${size}`)]),
    );
    for (const site of moved) {
      const past = site.pastFirst!;
      assert.equal(site.symbolOffset, '0x0', site.symbol);
      const start = BigInt(site.vaddr) - BigInt(past.offset);
      const end = start + (sizes.get(start) ?? 256n);
      const code = execFileSync(
        'objdump',
        [
          '-d',
          '--no-show-raw-insn',
          `--start-address=0x${start.toString(16)}`,
          `--stop-address=0x${end.toString(16)}`,
          path,
        ],
        { encoding: 'utf8', maxBuffer: 16 << 20 },
      )
        .split('\n')
        .map((line) => /^\s*([0-9a-f]+):\s+(.*?)\s*$/.exec(line))
        .filter((m) => m !== null)
        .map((m) => ({ at: BigInt(`0x${m[1]}`), text: m[2]!.replace(/\s+/g, ' ') }));
      assert.equal(code[0]!.at, start, site.symbol);
      // The instructions passed, then the probe on the next.
      const passed = past.instruction.split('; ');
      assert.deepEqual(
        code.slice(0, passed.length).map((line) => line.text),
        passed,
        `${site.symbol}: its first instructions`,
      );
      for (const text of passed) {
        assert.match(text, /^v\w+ [^(]*$/, `${site.symbol}: a vector instruction on registers`);
      }
      const probe = code[passed.length]!.at;
      assert.equal(probe, BigInt(site.vaddr), `${site.symbol}: probed on the next one`);
      const jumps = code.filter((line) => {
        const m = /^(?:j\w+|call) ([0-9a-f]+)\b/.exec(line.text);
        return m !== null && BigInt(`0x${m[1]}`) > start && BigInt(`0x${m[1]}`) <= probe;
      });
      assert.deepEqual(jumps, [], `${site.symbol}: nothing jumps into what was passed`);
    }
  });

  test('trace --engine tracefs r:libc:strlen: every return of the program, with its value', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'g++', 'ldd'] })) return;
    for (const target of targets()) {
      const returns = tracefsLines(target, 'r:libc:strlen length=retval', ` length=${LENGTH}`);
      assert.match(returns[0]!, / r:__strlen_\w+ /, target.language);
    }
  });

  test('trace --engine tracefs libc:memset: every call of the program, with its size', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'g++', 'ldd'] })) return;
    for (const target of targets()) {
      const calls = tracefsLines(target, 'libc:memset size=arg2', ` size=${LENGTH + 1}`);
      assert.match(calls[0]!, / __memset_\w+ /, target.language);
    }
  });

  test('a libc without debug symbols: the implementations, unnamed, are probed at their addresses', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objcopy', 'nm', 'objdump', 'ldd'] })) {
      return;
    }
    // A copy with no build-id and no debug link: its debug file cannot be found.
    const dir = mkdtempSync(join(tmpdir(), 'upscope-ifunc-'));
    try {
      const copy = join(dir, 'libc.so.6');
      execFileSync('objcopy', [
        '--remove-section',
        '.note.gnu.build-id',
        '--remove-section',
        '.gnu_debuglink',
        libc(),
        copy,
      ]);
      const loads = leaTargets(copy, ifuncAddress(copy, 'strlen'));
      const c = targets()[0]!;
      const { counted, stderr } = countJson([
        '-c',
        `env LD_LIBRARY_PATH=${dir} ${c.command}`,
        `${copy}:strlen`,
      ]);
      assert.match(stderr, c.says);
      for (const { probe } of counted) {
        const m = /^0x([0-9a-f]+) \(an implementation of strlen\)$/.exec(probe);
        assert.ok(m, probe);
        assert.ok(loads.has(BigInt(`0x${m[1]}`)), `${probe} is loaded by the resolver`);
      }
      const hit = counted.filter((x) => x.count > 0);
      assert.equal(hit.length, 1, JSON.stringify(counted));
      assert.ok(hit[0]!.count >= CALLS, JSON.stringify(counted));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the implementation this CPU runs is named (a program's own resolution the truth), and said when the kernel cannot probe it", (t) => {
    if (!requireHost(t, { commands: ['gcc', 'ldd'] })) return;
    const app = compileProgram(`${PROGRAMS}ifunc-pick.c`, {
      flags: ['-O2', '-fno-builtin'],
      link: ['-ldl'],
    });
    // Where the dynamic linker resolved them in a program: NAME 0xVADDR.
    const picks = new Map(
      execFileSync(app, { encoding: 'utf8' })
        .trim()
        .split('\n')
        .map((line) => line.split(' '))
        .map(([name, vaddr]) => [name!, BigInt(vaddr!)]),
    );
    assert.deepEqual([...picks.keys()], ['strlen', 'memset', 'memcpy']);
    for (const [name, at] of picks) {
      const result = runCli(['resolve', '--json', `${libc()}:${name}`]);
      assert.equal(result.status, 0, result.stderr);
      type Site = {
        symbol?: string;
        vaddr: string;
        reason?: string;
        pastFirst?: { offset: string };
      };
      const plan = JSON.parse(result.stdout) as {
        sites: Site[];
        skipped: Site[];
        warnings: { hints: string[] }[];
      };
      const named = (site: Site) => site.symbol ?? `0x${start(site).toString(16)}`;
      // A function's start (its entry may be probed past its first instruction).
      const start = (site: Site) => BigInt(site.vaddr) - BigInt(site.pastFirst?.offset ?? 0);
      const picked = [...plan.sites, ...plan.skipped].find((site) => start(site) === at);
      assert.ok(picked, `${name}: 0x${at.toString(16)} is one of the implementations planned`);
      const hints = plan.warnings[0]!.hints.join('\n');
      assert.ok(hints.includes(`(here: ${named(picked)})`), `${name}: ${hints}`);
      const refused = plan.skipped.find((site) => BigInt(site.vaddr) === at);
      assert.equal(hints.includes('could not be probed'), refused !== undefined, hints);
      if (refused !== undefined) {
        assert.ok(
          hints.includes(
            `${name}'s ${named(refused)} (${refused.reason}); --engine ptrace probes it`,
          ),
          hints,
        );
      }
    }
  });

  test("a program's own IFUNCs: one whose resolver loads its implementations' addresses is probed at them; one that loads a table's entry is said", (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'objdump'] })) return;
    const app = compileProgram('ifunc-own', { flags: ['-O2'] });
    const symbols = execFileSync('nm', [app], { encoding: 'utf8' });
    assert.match(symbols, / i own_lea$/m);
    assert.match(symbols, / i own_table$/m);
    const loads = leaTargets(app, ifuncAddress(app, 'own_lea', false));
    const address = (name: string) =>
      BigInt(`0x${new RegExp(`^([0-9a-f]+) t ${name}$`, 'm').exec(symbols)![1]}`);
    assert.ok(loads.has(address('impl_a')) && loads.has(address('impl_b')), 'the leas of own_lea');
    const { counted, stderr } = countJson(['-c', `${app} ${CALLS}`, `${app}:own_*`]);
    assert.match(stderr, new RegExp(`^calls=${CALLS} `, 'm'));
    // Both resolvers picked impl_a: every call of either is one of it.
    assert.deepEqual(
      Object.fromEntries(counted.map((c) => [c.probe, c.count])),
      { impl_a: 2 * CALLS, impl_b: 0 },
      stderr,
    );
    assert.match(
      stderr,
      /^warning\[ERR_IFUNC\]: Probed 1 IFUNC resolver matched by "own_\*" at their implementations \(2 more functions\): own_lea$/m,
    );
    assert.match(
      stderr,
      /^warning\[ERR_IFUNC\]: Skipped 1 IFUNC resolver matched by "own_\*": own_table$/m,
    );
    // Named alone, or the only match of a pattern, it cannot be probed: one error each.
    for (const spec of [`${app}:own_table`, `${app}:own_t*`]) {
      const refused = runCli(['count', '-c', `${app} 1`, spec]);
      assert.notEqual(refused.status, 0, spec);
      assert.match(refused.stderr, /^error\[ERR_IFUNC\]: Cannot probe .*own_table/, spec);
    }
  });

  test("count libc:str*: the pattern's IFUNC resolvers are probed at their implementations", (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'ldd'] })) return;
    const path = libc();
    const lines = execFileSync('nm', ['-D', '--defined-only', path], { encoding: 'utf8' });
    const resolvers = new Set(
      lines
        .split('\n')
        .map((line) => line.split(' '))
        .filter(([, type, name]) => type === 'i' && name?.startsWith('str'))
        .map(([address]) => address),
    );
    const c = targets()[0]!;
    const { counted, stderr } = countJson(['-c', c.command, `${path}:str*`]);
    assert.match(stderr, c.says);
    assert.match(
      stderr,
      new RegExp(
        `^warning\\[ERR_IFUNC\\]: Probed ${resolvers.size} IFUNC resolvers matched by "str\\*" at their implementations \\(\\d+ more functions\\): `,
        'm',
      ),
    );
    const strlens = counted.filter((x) => x.probe.startsWith('__strlen_') && x.count > 0);
    assert.equal(strlens.length, 1, JSON.stringify(strlens));
    assert.ok(strlens[0]!.count >= CALLS, JSON.stringify(strlens));
  });
});
