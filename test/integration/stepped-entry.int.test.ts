// An entry whose first instruction the kernel would single-step (a trap more each call, 13 µs
// and more in a VM) is probed on the first instruction after it that the kernel emulates,
// when what is passed changes only the flags, %rax or %r11 (test/programs/stepped-start.c,
// .cpp, .rs). The truth: objdump for where the probe goes, the programs' own counts for every
// call, return, throw and panic, and their output with no probes for what they compute.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;
const CALLS = 300;
const C_FUNCTIONS = [
  'flags_first',
  'scratch_first',
  'arg_written',
  'loop_back',
  'table_jump',
  'shared_head',
  'shared_tail',
  'pointer_tail',
  'register_tail',
  'register_table',
];

interface ResolvedSite {
  readonly symbol: string;
  readonly vaddr: string;
  readonly handling: { readonly strategy: string };
  readonly pastFirst?: { readonly instruction: string; readonly reason: string };
}

function resolved(specs: readonly string[]): ResolvedSite[] {
  const result = runCli(['resolve', '--json', ...specs]);
  assert.equal(result.status, 0, result.stderr);
  return (JSON.parse(result.stdout) as { sites: ResolvedSite[] }).sites;
}

/** objdump's instructions of `fn` in `path`: address and text (no raw bytes). */
function disassembly(path: string, fn: string): { vaddr: bigint; text: string }[] {
  const text = execFileSync('objdump', ['--no-show-raw-insn', `--disassemble=${fn}`, path], {
    encoding: 'utf8',
  });
  const start = text.indexOf(`<${fn}>:\n`);
  assert.ok(start >= 0, `objdump shows ${fn}`);
  const body = text.slice(start).split('\n\n')[0]!.split('\n').slice(1);
  return body.map((line) => {
    const m = /^\s*([0-9a-f]+):\s+(.*)$/.exec(line)!;
    return { vaddr: BigInt(`0x${m[1]}`), text: m[2]!.replace(/\s+/g, ' ').trim() };
  });
}

function countJson(args: readonly string[]): {
  rows: { probe: string; count: number; exit?: string }[];
  stderr: string;
} {
  const result = runCli(['count', '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return { rows: JSON.parse(result.stdout), stderr: result.stderr };
}

describe('an entry the kernel would single-step, probed on the next instruction it emulates', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  test("C: flags_first, scratch_first and the tail calls through a pointer are probed on objdump's second instruction, the others where they start", (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump'] })) return;
    const app = compileProgram(`${PROGRAMS}stepped-start.c`, { flags: ['-O2'] });
    const sites = resolved(C_FUNCTIONS.map((fn) => `${app}:${fn}`));
    const at = (fn: string) => sites.find((site) => site.symbol === fn)!;
    for (const [fn, passed] of [
      ['flags_first', 'test %rdi,%rdi'],
      ['scratch_first', 'mov %rdi,%rax'],
      ['pointer_tail', 'test %rdi,%rdi'],
      ['register_tail', 'test %rdi,%rdi'],
    ] as const) {
      const code = disassembly(app, fn);
      assert.equal(code[0]!.text, passed, `what ${fn} begins with`);
      assert.equal(BigInt(at(fn).vaddr), code[1]!.vaddr, `${fn}: probed on ${code[1]!.text}`);
      assert.equal(at(fn).pastFirst?.instruction, passed);
      assert.match(at(fn).pastFirst!.reason, /single-steps/);
      assert.equal(at(fn).handling.strategy, 'emulate');
    }
    // What the probe fetches decides too: arguments are as at the entry, %rax is not.
    const fetching = (spec: string) => BigInt(resolved([spec])[0]!.vaddr);
    const flags = disassembly(app, 'flags_first');
    assert.equal(fetching(`${app}:flags_first arg0 arg1`), flags[1]!.vaddr);
    assert.equal(fetching(`r:${app}:flags_first retval`), flags[1]!.vaddr);
    assert.equal(
      fetching(`${app}:scratch_first %rax`),
      disassembly(app, 'scratch_first')[0]!.vaddr,
    );
    for (const fn of ['arg_written', 'loop_back', 'table_jump', 'shared_head', 'register_table']) {
      assert.equal(BigInt(at(fn).vaddr), disassembly(app, fn)[0]!.vaddr, fn);
      assert.equal(at(fn).pastFirst, undefined, fn);
      assert.equal(at(fn).handling.strategy, 'single-step', fn);
    }
  });

  test('C: every call counted at the moved probes (bpf), arguments read there as at the entry, every return paired (trampoline and sites), on tracefs too', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const app = compileProgram(`${PROGRAMS}stepped-start.c`, { flags: ['-O2'] });
    const untraced = execFileSync(app, [String(CALLS)], { encoding: 'utf8' });
    const zeros = Number(/zeros=(\d+)/.exec(untraced)![1]);
    const command = `${app} ${CALLS}`;
    const all = countJson(['-c', command, ...C_FUNCTIONS.map((fn) => `${app}:${fn}`)]);
    assert.ok(all.stderr.includes(untraced.trim()), 'the program computes what it does alone');
    assert.deepEqual(
      Object.fromEntries(all.rows.map((row) => [row.probe, row.count])),
      Object.fromEntries(C_FUNCTIONS.map((fn) => [fn, CALLS])),
    );
    const filtered = countJson([
      '--filter',
      'arg0 == 0',
      '-c',
      command,
      `${app}:flags_first`,
      `${app}:scratch_first`,
    ]);
    assert.deepEqual(
      filtered.rows.map((row) => [row.probe, row.count]),
      [
        ['flags_first', zeros],
        ['scratch_first', zeros],
      ],
    );
    for (const mode of ['trampoline', 'sites']) {
      const paired = countJson([
        '--return-probes',
        mode,
        '-c',
        command,
        `r:${app}:flags_first`,
        `r:${app}:scratch_first`,
      ]);
      assert.ok(paired.stderr.includes(untraced.trim()), `${mode}: the program is unharmed`);
      assert.deepEqual(
        paired.rows.map((row) => [row.probe, row.exit, row.count]),
        [
          ['r:flags_first', undefined, CALLS],
          ['r:scratch_first', undefined, CALLS],
        ],
        mode,
      );
    }
    const traced = runCli(['trace', '--engine', 'tracefs', '-c', command, `${app}:flags_first`]);
    assert.equal(traced.status, 0, traced.stderr);
    assert.equal(traced.stdout.split('\n').filter((l) => l.includes('flags_first')).length, CALLS);
  });

  const languages = [
    {
      language: 'C++ (a throw through it)',
      fn: 'checked',
      symbol: '_Z7checkedPKl',
      probe: 'checked(long const*)',
      build: () => compileProgram(`${PROGRAMS}stepped-start.cpp`, { flags: ['-O2'] }),
    },
    {
      language: 'Rust (a panic through it)',
      fn: 'rust_checked',
      symbol: 'rust_checked',
      probe: 'rust_checked',
      build: () => {
        const rustc = findRustc();
        if (rustc === undefined) return undefined;
        return compileRust(rustc, 'stepped-start', ['-C', 'opt-level=2']);
      },
    },
  ];
  for (const { language, fn, symbol, probe, build } of languages) {
    test(`${language}: probed past its null check's test, every call, return and unwind counted as the program counts them`, (t) => {
      if (!requireHost(t, { root: true, commands: ['g++', 'objdump'] })) return;
      const app = build();
      if (app === undefined) {
        if (STRICT) throw new Error('Cannot run test under CI: rustc is not installed');
        t.skip('rustc is not installed');
        return;
      }
      const code = disassembly(app, symbol);
      assert.equal(code[0]!.text, 'test %rdi,%rdi', `what ${fn} begins with`);
      const [site] = resolved([`${app}:${fn}`]);
      assert.equal(BigInt(site!.vaddr), code[1]!.vaddr);
      assert.equal(site!.pastFirst?.instruction, 'test %rdi,%rdi');
      const untraced = execFileSync(app, [String(CALLS)], { encoding: 'utf8' });
      const own = Object.fromEntries(
        [...untraced.matchAll(/(\w+)=(\d+)/g)].map((m) => [m[1]!, Number(m[2])]),
      );
      const { rows, stderr } = countJson([
        '-c',
        `${app} ${CALLS}`,
        `${app}:${fn}`,
        `r:${app}:${fn}`,
      ]);
      assert.ok(stderr.includes(untraced.trim()), 'the program computes what it does alone');
      const unwound = own['throws'] ?? own['panics']!;
      assert.deepEqual(
        rows.map((row) => [row.probe, row.exit, row.count]),
        [
          [probe, undefined, own['checked']],
          [`r:${probe}`, undefined, own['checked']! - unwound],
          [`r:${probe}`, 'unwind', unwound],
        ],
      );
    });
  }

  test("Go: no function's entry is moved (each is probed after its stack check)", (t) => {
    const go = findGo();
    if (!requireHost(t, { commands: go === undefined ? ['go'] : [] })) return;
    const app = compileGo(go!, 'go-returns');
    const sites = resolved([`${app}:main.*`]);
    assert.ok(sites.length > 3);
    for (const site of sites) assert.equal(site.pastFirst, undefined, site.symbol);
  });
});
