// `list --vars` and `list --lines` take a function by the name probes take (a demangled C++
// name, a Rust path, the function of a GCC clone), and --vars shows what a probe on it can
// fetch: the function's own parameters (as gdb's `info args` at `break FUNCTION`), not those
// of a function inlined at its top, and read at its entry, not at its .cold part.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tool } from '../helpers/tools.js';

interface VarsJson {
  instances: {
    name: string;
    inlined: boolean;
    vaddr: string;
    variables: { name: string; kind: string; location?: string }[];
  }[];
}

function varsJson(app: string, fn: string): VarsJson {
  const result = runCli(['list', '--json', app, '--vars', fn]);
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout);
}

/** gdb's `info args` where it stops on `break FUNCTION` in a run with these arguments. */
function gdbArgs(app: string, fn: string, args: string): string[] {
  const out = tool('gdb', [
    '-batch',
    '-nx',
    '-ex',
    `break ${fn}`,
    '-ex',
    `run ${args}`,
    '-ex',
    'info args',
    app,
  ]);
  const after = out.slice(out.lastIndexOf('\nBreakpoint 1, '));
  return [...after.matchAll(/^(\w+) = /gm)].map((m) => m[1]!);
}

function nmAddress(app: string, demangled: string): bigint {
  const line = tool('nm', ['-C', app])
    .split('\n')
    .find((l) => l.endsWith(` ${demangled}`));
  assert.ok(line, `nm -C has ${demangled}`);
  return BigInt(`0x${line.split(' ')[0]}`);
}

function rust(t: { skip(reason: string): void }): string | undefined {
  const rustc = findRustc();
  if (rustc === undefined) {
    if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
    t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
    return undefined;
  }
  return compileRust(rustc, 'rust-vars', ['-C', 'opt-level=1']);
}

describe('list --vars', () => {
  test("Rust: a function's own parameters, not those of black_box inlined at its top", (t) => {
    if (!requireHost(t, { commands: ['gdb'] })) return;
    const app = rust(t);
    if (app === undefined) return;
    const want = gdbArgs(app, 'rust_vars::process', '1');
    assert.deepEqual(want, ['n']);
    // By its path, as probes take it, and by its DWARF name.
    for (const name of ['rust_vars::process', 'process']) {
      const { instances } = varsJson(app, name);
      const own = instances.filter((i) => !i.inlined);
      assert.equal(own.length, 1, name);
      assert.deepEqual(
        own[0]!.variables.filter((v) => v.kind === 'parameter').map((v) => v.name),
        want,
      );
    }
    // What it does not list, a probe there cannot fetch either.
    const refused = runCli(['resolve', `${app}:rust_vars::process dummy`]);
    assert.notEqual(refused.status, 0);
    assert.match(refused.stderr, /error\[ERR_VARIABLE_NOT_FOUND\]: Cannot fetch "dummy"/);
    assert.match(refused.stderr, /hint: Visible there: n$/m);
  });

  test('C++: by its demangled name, read at its entry, not at its .cold part', (t) => {
    if (!requireHost(t, { commands: ['g++', 'gdb', 'nm'] })) return;
    const app = compileProgram('gcc-clones', { flags: ['-O2'] });
    const entry = nmAddress(app, 'app::check(long)');
    for (const name of ['app::check', 'app::check(long)', 'check']) {
      const { instances } = varsJson(app, name);
      const own = instances.filter((i) => !i.inlined);
      assert.deepEqual(
        own.map((i) => BigInt(i.vaddr)),
        [entry],
        name,
      );
      assert.deepEqual(
        own[0]!.variables.map((v) => `${v.name} ${v.location}`),
        // x arrives in the first argument register; gdb shows the same one argument.
        ['x %rdi'],
      );
    }
    assert.deepEqual(gdbArgs(app, 'app::check', '1'), ['x']);
    // A clone is found by its function's name too.
    const add = varsJson(app, 'app::Calc::add').instances.filter((i) => !i.inlined);
    assert.deepEqual(
      add.map((i) => BigInt(i.vaddr)),
      [nmAddress(app, 'app::Calc::add(app::Big const&, long) [clone .isra.0]')],
    );
  });
});

describe('list --lines', () => {
  test('takes a C++ function by its demangled name and a Rust function by its path', (t) => {
    if (!requireHost(t, { commands: ['g++'] })) return;
    const app = compileProgram('gcc-clones', { flags: ['-O2'] });
    const result = runCli(['list', app, '--lines', 'app::check']);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, /^app::check\(long\) in \S+gcc-clones\.cpp:\d+-\d+ /);
    assert.match(result.stdout, /^\* \d+ +__attribute__\(\(noinline\)\) long check\(long x\) \{$/m);
    const rs = rust(t);
    if (rs === undefined) return;
    const lines = runCli(['list', rs, '--lines', 'rust_vars::process']);
    assert.equal(lines.status, 0, lines.stderr);
    // Its own file and lines, not those of black_box (core/src/hint.rs) inlined at its top.
    assert.match(lines.stdout, /^rust_vars::process in \S+rust-vars\.rs:\d+-\d+ /);
    assert.match(lines.stdout, /^ +\d+ +pub fn process\(n: u64\) -> u64 \{$/m);
  });
});
