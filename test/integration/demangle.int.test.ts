// Probes placed by demangled C++ and Rust names hit the functions they name as often as the
// target counts its own calls, on every engine; events and counts carry the demangled names.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

const ROUNDS = 7;

/** The target's own counts, from its "name count" lines. */
function ownCounts(stdout: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    const m = /^(\S+) (\d+)$/.exec(line);
    if (m !== null) counts[m[1]!] = Number(m[2]);
  }
  return counts;
}

/** Each spec (a location in the target), the probe names it gives, and the count to expect. */
function cxxCases(own: Record<string, number>): [string, Record<string, number>][] {
  return [
    // A plain name: every overload, each counted apart.
    [
      'shapes::Counter::method',
      {
        'shapes::Counter::method(int)': own['method_int']!,
        'shapes::Counter::method(double)': own['method_double']!,
        'shapes::Counter::method(char const*) const': own['method_ptr']!,
      },
    ],
    [
      "'shapes::Counter::operator()(long)'",
      { 'shapes::Counter::operator()(long)': own['call_op']! },
    ],
    ["'shapes::Counter::~Counter'", { 'shapes::Counter::~Counter()': own['dtor']! }],
    // A quoted pattern over template arguments.
    [
      "'shapes::Box<*>::get'",
      {
        'shapes::Box<int>::get() const': own['box_get_int']!,
        'shapes::Box<long>::get() const': own['box_get_long']!,
      },
    ],
    ['shapes::twice*', { 'shapes::twice<int>(int)': own['twice_int']! }],
    ["'(anonymous namespace)::helper'", { '(anonymous namespace)::helper(long)': own['helper']! }],
    ['*::deeper::deep', { 'shapes::inner::deeper::deep(long, long)': own['deep']! }],
  ];
}

function cxxTarget(): string {
  return compileProgram('cxx-names', { flags: ['-O2'] });
}

/** The target's counts, from running it alone. */
function runAlone(app: string): Record<string, number> {
  const own = ownCounts(execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }));
  assert.equal(own['method_double'], 2 * ROUNDS, 'the target counts its calls');
  return own;
}

function expected(cases: [string, Record<string, number>][]): Record<string, number> {
  return Object.assign({}, ...cases.map(([, counts]) => counts));
}

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'no upscope probes left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no traced or zombie children');
});

describe('probes by demangled C++ names', () => {
  test('trace --engine tracefs: one event per call, named demangled', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++'] })) return;
    const app = cxxTarget();
    const cases = cxxCases(runAlone(app));
    const result = runCli([
      'trace',
      '--engine',
      'tracefs',
      '--json',
      '--command-output',
      'inherit',
      '-c',
      `${app} ${ROUNDS}`,
      ...cases.map(([location]) => `${app}:${location}`),
    ]);
    assert.equal(result.status, 0, result.stderr);
    assert.deepEqual(ownCounts(result.stdout), runAlone(app), 'the traced run counted the same');
    const seen: Record<string, number> = {};
    for (const line of result.stdout.split('\n')) {
      if (!line.startsWith('{') || line.startsWith('{"command"')) continue;
      const event = JSON.parse(line);
      seen[event.probe] = (seen[event.probe] ?? 0) + 1;
    }
    assert.deepEqual(seen, expected(cases));
  });

  for (const engine of ['ptrace', 'bpf']) {
    test(`count --engine ${engine}: the target's own counts, keyed by demangled names`, (t) => {
      if (!requireHost(t, { root: engine === 'bpf', commands: ['g++'] })) return;
      const app = cxxTarget();
      const cases = cxxCases(runAlone(app));
      const result = runCli([
        'count',
        '--engine',
        engine,
        '--json',
        '--command-output',
        'inherit',
        '-c',
        `${app} ${ROUNDS}`,
        ...cases.map(([location]) => `${app}:${location}`),
      ]);
      assert.equal(result.status, 0, result.stderr);
      const json = result.stdout.split('\n').filter((l) => l.startsWith('['));
      const rows: { probe: string; count: number }[] = JSON.parse(json.at(-1)!);
      const counted = Object.fromEntries(rows.map((row) => [row.probe, row.count]));
      assert.deepEqual(counted, expected(cases));
    });
  }
});

describe('a pattern over thousands of C++ functions (planned lean, their names demangled at once)', () => {
  test('count: 2,500 functions, each keyed by the name c++filt gives its symbol, counted as often as the target calls it', (t) => {
    if (!requireHost(t, { root: true, commands: ['g++', 'nm', 'c++filt'] })) return;
    const app = compileProgram('cxx-many', { flags: ['-O2'] });
    const mangled = execFileSync('nm', [app], { encoding: 'utf8' })
      .split('\n')
      .map((line) => line.split(' ')[2] ?? '')
      .filter((name) => /^_ZN4many\d+f\d+El$/.test(name));
    assert.equal(mangled.length, 2500, 'nm lists the 2,500 functions');
    const filtered = execFileSync('c++filt', mangled, { encoding: 'utf8' }).trim().split('\n');
    // Planned each time (no plan kept): the names are made in this run.
    const saved = process.env.UPSCOPE_CACHE_DIR;
    process.env.UPSCOPE_CACHE_DIR = '';
    let result: ReturnType<typeof runCli>;
    try {
      result = runCli(['count', '--json', '-c', `${app} 3`, `${app}:_ZN4many*`]);
    } finally {
      if (saved === undefined) delete process.env.UPSCOPE_CACHE_DIR;
      else process.env.UPSCOPE_CACHE_DIR = saved;
    }
    assert.equal(result.status, 0, result.stderr);
    // 3 rounds of 1 to 5 calls each: 3 * 500 * (1 + 2 + 3 + 4 + 5).
    assert.match(result.stderr, /functions=2500 calls=22500 /);
    const rows: { probe: string; count: number }[] = JSON.parse(result.stdout);
    const counted = Object.fromEntries(rows.map((row) => [row.probe, row.count]));
    // many::f(1000 + i) is called i % 5 + 1 times a round.
    const calls = (name: string) => 3 * (((Number(/f(\d+)\(/.exec(name)?.[1]) - 1000) % 5) + 1);
    assert.deepEqual(counted, Object.fromEntries(filtered.map((name) => [name, calls(name)])));
  });
});

describe('probes by demangled Rust paths', () => {
  const rustc = findRustc();
  for (const mangling of ['legacy', 'v0']) {
    test(`count --engine ptrace on a Rust function by its path (${mangling} mangling)`, (t) => {
      if (rustc === undefined) {
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      const flags = mangling === 'v0' ? ['-C', 'symbol-mangling-version=v0'] : [];
      const app = compileRust(rustc, 'rust-names', ['-C', 'opt-level=1', ...flags]);
      // The program prints the path Rust gives its function, and how often it ran.
      const alone = execFileSync(app, [String(ROUNDS)], { encoding: 'utf8' }).split('\n');
      const [path, calls] = alone[0]!.split(' ');
      assert.equal(path, 'rust_names::shapes::inner::probed');
      assert.equal(Number(calls), ROUNDS);
      const result = runCli([
        'count',
        '--engine',
        'ptrace',
        '--json',
        '--command-output',
        'inherit',
        '-c',
        `${app} ${ROUNDS}`,
        `${app}:${path}`,
        `${app}:'*Counter<u64>*::bump'`,
      ]);
      assert.equal(result.status, 0, result.stderr);
      const json = result.stdout.split('\n').filter((l) => l.startsWith('['));
      const rows: { probe: string; count: number }[] = JSON.parse(json.at(-1)!);
      const counted = Object.fromEntries(rows.map((row) => [row.probe, row.count]));
      const bump =
        mangling === 'v0'
          ? '<rust_names::shapes::Counter<u64>>::bump'
          : 'rust_names::shapes::Counter<u64>::bump';
      assert.deepEqual(counted, { [path!]: ROUNDS, [bump]: ROUNDS });
    });
  }
});
