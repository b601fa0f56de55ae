// A pattern that matches functions some engine cannot probe: they are skipped and counted on
// the start line, every other match is probed (on every engine and command that takes specs),
// `resolve` lists them with the reason, --strict makes a skip an error, and a function named
// exactly fails as before. The target: test/programs/lock-insns.c, whose `locked_*` functions
// start with `lock add` (the kernel refuses it, ptrace runs it), `hlt` (no engine runs it) and
// a plain `mov`.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const CALLS = 200;

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'upscope-warn-'));
}

function app(): string {
  return compileProgram('lock-insns', { flags: ['-O2'], link: ['-lpthread'] });
}

/** objdump's first instruction of each `locked_*` function: the truth of what is skipped. */
function firstInstructions(path: string): Map<string, string> {
  const text = execFileSync('objdump', ['-d', '--no-show-raw-insn', path], { encoding: 'utf8' });
  const found = new Map<string, string>();
  for (const m of text.matchAll(/^[0-9a-f]+ <(locked_\w+)>:\n\s*[0-9a-f]+:\s+(\S+)/gm)) {
    found.set(m[1]!, m[2]!);
  }
  return found;
}

const KERNEL_SKIPS = /2 of 3 sites skipped: hlt 1, lock prefix 1; upscope resolve lists them$/;
const PTRACE_SKIPS =
  /1 of 3 sites skipped: a privileged instruction 1; upscope resolve --engine ptrace lists them$/;

describe('patterns skip what cannot be probed', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  test('resolve lists the skipped functions with their reasons; --strict and exact names fail', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
    const path = app();
    const first = firstInstructions(path);
    assert.deepEqual(
      [...first].sort(),
      [
        ['locked_add', 'lock'],
        ['locked_count', 'mov'],
        ['locked_halt', 'hlt'],
      ],
      'what gcc made of them',
    );
    const spec = `${path}:locked_*`;
    const text = runCli(['resolve', spec]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /:locked_\* {2}-> {2}locked_count \(function entry\)\n/);
    assert.match(
      text.stdout,
      /:locked_\* {2}-> {2}locked_add \(skipped: lock prefix\)\n.*\n.*\n\s+why\s+Cannot place probe at 0x[0-9a-f]+ in ".*": the kernel refuses uprobes on "lock add .*": the kernel refuses instructions with a lock prefix \(0xf0\)\n/,
    );
    assert.match(text.stdout, /:locked_\* {2}-> {2}locked_halt \(skipped: hlt\)\n/);
    assert.equal(text.stderr, 'upscope: 2 of 3 sites skipped: hlt 1, lock prefix 1\n');

    const json = runCli(['resolve', '--json', spec]);
    const plan = JSON.parse(json.stdout) as {
      sites: { symbol: string }[];
      skipped: { symbol: string; reason: string; error: { code: string } }[];
    };
    assert.deepEqual(
      plan.sites.map((s) => s.symbol),
      ['locked_count'],
    );
    assert.deepEqual(plan.skipped.map((s) => [s.symbol, s.reason, s.error.code]).sort(), [
      ['locked_add', 'lock prefix', 'ERR_UNPROBEABLE_INSTRUCTION'],
      ['locked_halt', 'hlt', 'ERR_UNPROBEABLE_INSTRUCTION'],
    ]);

    // By the ptrace engine's rules only hlt is left out: it runs the lock add itself.
    const ptrace = JSON.parse(runCli(['resolve', '--json', '--engine', 'ptrace', spec]).stdout);
    assert.deepEqual(
      ptrace.skipped.map((s: { symbol: string }) => s.symbol),
      ['locked_halt'],
    );

    const strict = runCli(['resolve', '--strict', spec]);
    assert.equal(strict.status, 3);
    assert.match(
      strict.stderr,
      /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot place probes on 2 of the 3 functions matching "locked_\*" in ".*" \(--strict\): hlt 1, lock prefix 1\n/,
    );
    // A function named exactly is not skipped: its spec fails, as a pattern of only such does.
    const exact = runCli(['resolve', `${path}:locked_add`]);
    assert.equal(exact.status, 3);
    assert.match(exact.stderr, /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot place probe at /);
    const none = runCli(['resolve', `${path}:locked_[ah]*`]);
    assert.equal(none.status, 3);
    assert.match(
      none.stderr,
      /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot place a probe on any of the 2 functions matching "locked_\[ah\]\*" in ".*": hlt 1, lock prefix 1\n/,
    );
  });

  const runs: { engine: 'tracefs' | 'bpf' | 'ptrace'; command: string[]; skips: RegExp }[] = [
    { engine: 'tracefs', command: ['trace'], skips: KERNEL_SKIPS },
    { engine: 'bpf', command: ['trace'], skips: KERNEL_SKIPS },
    { engine: 'bpf', command: ['count'], skips: KERNEL_SKIPS },
    { engine: 'bpf', command: ['latency'], skips: KERNEL_SKIPS },
    { engine: 'bpf', command: ['hist'], skips: KERNEL_SKIPS },
    { engine: 'ptrace', command: ['trace'], skips: PTRACE_SKIPS },
    { engine: 'ptrace', command: ['count'], skips: PTRACE_SKIPS },
    { engine: 'ptrace', command: ['latency'], skips: PTRACE_SKIPS },
    { engine: 'ptrace', command: ['hist'], skips: PTRACE_SKIPS },
  ];
  for (const { engine, command, skips } of runs) {
    test(`${command[0]} --engine ${engine}: the rest of the pattern is probed, the skips said on the start line; --strict fails`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
      const path = app();
      const args = (...more: string[]) => [
        command[0]!,
        '--engine',
        engine,
        ...more,
        '-c',
        `${path} ${CALLS}`,
        `${path}:locked_*`,
        ...(command[0] === 'hist' ? ['arg0'] : []),
      ];
      // The target's own line is read from stdout beside the JSON.
      const result = runCli(args('--json', '--command-output', 'inherit'));
      assert.equal(result.status, 0, result.stderr);
      // The target ran and counted its calls: 2 threads, each calls both functions CALLS times.
      assert.match(
        result.stdout,
        new RegExp(`^calls=${2 * CALLS} added=${4 * CALLS} counted=${2 * CALLS}$`, 'm'),
      );
      const start = result.stderr
        .split('\n')
        .find((l) => /^(Tracing|Counting|Timing|Histogram)/.test(l));
      assert.ok(start !== undefined, result.stderr);
      assert.match(start, / Ctrl-C to end\. /);
      assert.match(start, skips);
      // Every call of what could be probed was seen.
      const probed = engine === 'ptrace' ? ['locked_add', 'locked_count'] : ['locked_count'];
      const seen = new Map<string, number>();
      for (const line of result.stdout.split('\n')) {
        if (line.startsWith('{') && !line.startsWith('{"command"') && command[0] === 'trace') {
          const probe = (JSON.parse(line) as { probe: string }).probe;
          seen.set(probe, (seen.get(probe) ?? 0) + 1);
        } else if (line.startsWith('[')) {
          for (const row of JSON.parse(line) as {
            probe: string;
            count?: number;
            histogram?: { count: number };
          }[]) {
            seen.set(row.probe, Number(row.count ?? row.histogram?.count));
          }
        }
      }
      assert.deepEqual(
        [...seen].sort(),
        probed.map((p) => [p, 2 * CALLS]),
        `hits per probe: ${result.stdout.slice(0, 2000)}`,
      );

      const strict = runCli(args('--strict'));
      assert.equal(strict.status, 3, strict.stderr);
      assert.doesNotMatch(strict.stdout, /calls=/, 'the command was not started');
      assert.match(
        strict.stderr,
        /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot place probes on \d of the 3 functions matching "locked_\*" .*\(--strict\)/,
      );
    });
  }
});

// What a plan warns of was only said by resolve: a pattern over libc's str* functions counted
// no strlen, strcmp or strchr (IFUNC resolvers, left out) and said nothing of it. They are
// probed at their implementations now (ifunc.int.test.ts), and that is said.
describe('what a plan warns of is said before the start line', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  /** The C library `true` runs with, as ldd says. */
  function libc(): string {
    const line = execFileSync('ldd', ['/usr/bin/true'], { encoding: 'utf8' })
      .split('\n')
      .find((l) => l.includes('libc.so'));
    return /=> (\S+)/.exec(line ?? '')![1]!;
  }

  /** nm's IFUNC symbols of the file whose names start with `prefix`, one per address. */
  function ifuncsNamed(path: string, prefix: string): number {
    const lines = execFileSync('nm', ['-D', '--defined-only', path], { encoding: 'utf8' });
    const addresses = new Set<string>();
    for (const line of lines.split('\n')) {
      const [address, type, name] = line.split(' ');
      if (type === 'i' && name?.startsWith(prefix)) addresses.add(address!);
    }
    return addresses.size;
  }

  for (const args of [
    ['trace', '--engine', 'bpf'],
    ['count'],
    ['count', '--engine', 'ptrace'],
    ['record'],
  ]) {
    test(`${args.join(' ')}: the IFUNC resolvers a pattern probed at their implementations`, (t) => {
      if (!requireHost(t, { root: true, commands: ['nm', 'ldd'] })) return;
      const path = libc();
      const ifuncs = ifuncsNamed(path, 'str');
      assert.ok(ifuncs > 0, `${path} has str* IFUNCs`);
      const dir = args[0] === 'record' ? tempDir() : undefined;
      const command = dir === undefined ? args : [...args, '-o', join(dir, 'rec')];
      const result = runCli([...command, '-c', '/usr/bin/true', `${path}:str*`]);
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
      assert.equal(result.status, 0, result.stderr);
      const lines = result.stderr.split('\n');
      const warning = lines.findIndex((l) => l.startsWith('warning[ERR_IFUNC]'));
      // Once: a recording plans the pattern's entries and returns, which warned of it twice.
      assert.equal(lines.filter((l) => l.startsWith('warning[')).length, 1, result.stderr);
      assert.match(
        lines[warning] ?? '',
        new RegExp(
          `^warning\\[ERR_IFUNC\\]: Probed ${ifuncs} IFUNC resolvers matched by "str\\*" at their implementations \\(\\d+ more functions\\): `,
        ),
        result.stderr,
      );
      // The first one's implementations, named, and where the start line is.
      assert.match(result.stderr, /^ {2}hint: \w+'s are __\w+/m);
      const start = lines.findIndex((l) => /^(Tracing|Counting|Recording) /.test(l));
      assert.ok(warning < start, 'said before the start line');
      assert.doesNotMatch(result.stderr, /ERR_COLD_PART/, 'a .cold part left out loses nothing');
    });
  }

  test('trace: the overloads a C++ name placed probes on (c++filt the truth)', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++', 'nm', 'c++filt'] })) return;
    const target = compileProgram('cxx-names', { flags: ['-O2'] });
    const demangled = execFileSync('nm', ['-C', '--defined-only', target], { encoding: 'utf8' });
    const overloads = new Set(
      demangled
        .split('\n')
        .map((line) => line.split(' ').slice(2).join(' '))
        .filter((name) => name.startsWith('shapes::Counter::method(')),
    );
    assert.ok(overloads.size > 1, 'the target overloads shapes::Counter::method');
    const result = runCli([
      'trace',
      '--engine',
      'bpf',
      '-c',
      `${target} 1`,
      `${target}:shapes::Counter::method`,
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `^warning\\[ERR_OVERLOADED\\]: Placed probes on ${overloads.size} overloads of "shapes::Counter::method"`,
        'm',
      ),
    );
    assert.match(result.stderr, /^ {2}hint: Probe one by its parameters, e\.g\. /m);
  });
});

describe('an entry past VEX instructions the kernel cannot take', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  test("vex_loads is probed past vzeroupper and a load, on objdump's third instruction, and counts every call; a loop back into them, or a general register written, keeps the skip", (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'objdump'] })) return;
    // The program's instructions need AVX.
    if (!/^flags\s*:.* avx( |$)/m.test(readFileSync('/proc/cpuinfo', 'utf8'))) {
      if (STRICT) throw new Error('Cannot run test under CI: this CPU has no AVX');
      t.skip('this CPU has no AVX');
      return;
    }
    const app = compileProgram('vex-start', { flags: ['-O2'] });
    const text = execFileSync('objdump', ['-d', '--no-show-raw-insn', app], { encoding: 'utf8' });
    const third = /^[0-9a-f]+ <vex_loads>:\n(?:.*\n){2}\s*([0-9a-f]+):/m.exec(text);
    assert.ok(third, 'objdump shows vex_loads');
    const resolved = runCli(['resolve', '--json', `${app}:vex_*`]);
    assert.equal(resolved.status, 0, resolved.stderr);
    const plan = JSON.parse(resolved.stdout) as {
      sites: { symbol: string; vaddr: string; pastFirst?: { instruction: string } }[];
      skipped: { symbol: string }[];
    };
    assert.deepEqual(
      plan.sites.map((s) => [s.symbol, BigInt(s.vaddr), s.pastFirst?.instruction]),
      [['vex_loads', BigInt(`0x${third[1]}`), 'vzeroupper; vmovdqu (%rdi),%ymm1']],
    );
    assert.deepEqual(plan.skipped.map((s) => s.symbol).sort(), ['vex_gpr', 'vex_loop']);
    const counted = runCli(['count', '--json', '-c', `${app} ${CALLS}`, `${app}:vex_*`]);
    assert.equal(counted.status, 0, counted.stderr);
    assert.match(counted.stderr, new RegExp(`^calls=${CALLS} `, 'm'));
    assert.deepEqual(JSON.parse(counted.stdout), [{ probe: 'vex_loads', count: CALLS }]);
  });
});
