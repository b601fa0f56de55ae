// Functions GCC copies (`.isra.N`, `.constprop.N`), splits (`.part.N`) and parts (`.cold`),
// found by the name of the function they come from, as gdb finds them: the copies are probed,
// a .cold part is left out (said) unless named itself, and never takes a return probe. Truth
// from nm (names and addresses) and gdb (where `break NAME` goes).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { gdbBreakpoints, tool } from '../helpers/tools.js';

interface Resolved {
  sites: { symbol: string; demangled?: string; vaddr: string; kind: string }[];
  errors: { code: string; message: string; hints: string[] }[];
  warnings: { code: string; message: string; hints: string[] }[];
}

function resolveJson(specs: string[]): Resolved {
  const result = runCli(['resolve', '--json', ...specs]);
  assert.equal(result.stderr.includes('ERR_INTERNAL'), false, result.stderr);
  return JSON.parse(result.stdout);
}

/** nm's functions: name (demangled with -C) -> address. */
function nmFunctions(path: string, demangle: boolean): Map<string, bigint> {
  const found = new Map<string, bigint>();
  for (const line of tool('nm', [...(demangle ? ['-C'] : []), '--defined-only', path]).split(
    '\n',
  )) {
    const m = /^([0-9a-f]+) [tTwW] (.+)$/.exec(line);
    if (m !== null) found.set(m[2]!, BigInt(`0x${m[1]}`));
  }
  return found;
}

function at(nm: Map<string, bigint>, name: string): bigint {
  const vaddr = nm.get(name);
  assert.ok(vaddr !== undefined, `nm has ${name}: ${[...nm.keys()].join(', ')}`);
  return vaddr;
}

const C_SOURCE = new URL('../programs/gcc-clones.c', import.meta.url).pathname;

const addresses = (r: Resolved) => r.sites.map((s) => BigInt(s.vaddr)).sort();

describe('GCC clones and parts of C++ functions', () => {
  const target = () => compileProgram('gcc-clones', { flags: ['-O2'] });

  test('a clone is found by the name of its function, as gdb finds it', (t) => {
    if (!requireHost(t, { commands: ['g++', 'nm', 'gdb'] })) return;
    const app = target();
    const nm = nmFunctions(app, true);
    for (const [name, clone] of [
      ['app::Calc::add', 'app::Calc::add(app::Big const&, long) [clone .isra.0]'],
      ['app::scale', 'app::scale(long, long) [clone .constprop.0]'],
      ['app::work', 'app::work(long) [clone .part.0]'],
    ] as const) {
      const resolved = resolveJson([`${app}:${name}`]);
      assert.deepEqual(resolved.errors, []);
      assert.deepEqual(addresses(resolved), [at(nm, clone)], name);
      assert.equal(resolved.sites[0]!.demangled, clone, 'shown with its clone suffix');
      assert.equal(resolved.sites[0]!.kind, 'entry');
      assert.ok(gdbBreakpoints(app, name).includes(at(nm, clone)), `gdb breaks on ${clone}`);
    }
  });

  test("'app::Box<*>::get' matches both clones; an unquoted pattern too", (t) => {
    if (!requireHost(t, { commands: ['g++', 'nm'] })) return;
    const app = target();
    const nm = nmFunctions(app, true);
    const want = [
      at(nm, 'app::Box<int>::get(app::Box<int> const&, app::Big const&) [clone .isra.0]'),
      at(nm, 'app::Box<long>::get(app::Box<long> const&, app::Big const&) [clone .isra.0]'),
    ].sort();
    assert.deepEqual(addresses(resolveJson([`${app}:'app::Box<*>::get'`])), want);
    assert.deepEqual(addresses(resolveJson([`${app}:*::get`])), want);
  });

  test('a .cold part is left out of its function and said, as gdb leaves it out', (t) => {
    if (!requireHost(t, { commands: ['g++', 'nm', 'gdb'] })) return;
    const app = target();
    const nm = nmFunctions(app, true);
    const cold = at(nm, 'app::check(long) [clone .cold]');
    const resolved = resolveJson([`${app}:app::check`]);
    assert.deepEqual(addresses(resolved), [at(nm, 'app::check(long)')]);
    assert.deepEqual(gdbBreakpoints(app, 'app::check'), [at(nm, 'app::check(long)')]);
    assert.equal(resolved.warnings.length, 1);
    assert.equal(resolved.warnings[0]!.code, 'ERR_COLD_PART');
    assert.match(resolved.warnings[0]!.message, /app::check\(long\) \[clone \.cold\]/);
    // A pattern leaves it out too.
    const pattern = resolveJson([`${app}:'app::*'`]);
    assert.equal(addresses(pattern).includes(cold), false);
    assert.ok(pattern.warnings.some((w) => w.code === 'ERR_COLD_PART'));
    // Named itself, it is probed as the instruction it starts with.
    const named = resolveJson([`${app}:'app::check(long) [clone .cold]'`]);
    assert.deepEqual(named.errors, []);
    assert.deepEqual(addresses(named), [cold]);
    assert.equal(named.sites[0]!.kind, 'instruction');
  });

  test('a return probe on a .cold part is refused: the stack top there is no return address', (t) => {
    if (!requireHost(t, { commands: ['g++'] })) return;
    const app = target();
    const result = runCli(['resolve', `r:${app}:'app::check(long) [clone .cold]'`]);
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /^error\[ERR_COLD_PART\]: Cannot place a return probe on/);
    // The hint is a spec to copy into a shell as it is.
    assert.match(
      result.stderr,
      /hint: Probe the return of the function it belongs to: "r:[^"]+:'app::check\(long\)'"/,
    );
  });

  test('list shows the clones as nm -C names them', (t) => {
    if (!requireHost(t, { commands: ['g++', 'nm'] })) return;
    const app = target();
    const nm = nmFunctions(app, true);
    const result = runCli(['list', '--json', app, 'app::*']);
    assert.equal(result.status, 0, result.stderr);
    const listed: { name: string; vaddr: string }[] = JSON.parse(result.stdout).functions;
    const want = [...nm].filter(([name]) => name.startsWith('app::'));
    assert.deepEqual(
      new Set(listed.map((fn) => `${fn.name} ${BigInt(fn.vaddr)}`)),
      new Set(want.map(([name, vaddr]) => `${name} ${vaddr}`)),
    );
  });
});

describe('GCC clones and parts of C functions', () => {
  test('add, scale and work are found at their clones; check without its .cold part', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'nm', 'gdb'] })) return;
    const app = compileProgram(C_SOURCE, { flags: ['-O2'] });
    const nm = nmFunctions(app, false);
    const clones = [...nm.keys()];
    for (const name of ['add', 'scale', 'work']) {
      const clone = clones.find((n) => n.startsWith(`${name}.`));
      assert.ok(clone, `nm has a clone of ${name}`);
      const resolved = resolveJson([`${app}:${name}`]);
      assert.deepEqual(resolved.errors, []);
      assert.deepEqual(addresses(resolved), [nm.get(clone)]);
      assert.equal(resolved.sites[0]!.symbol, clone);
      assert.ok(gdbBreakpoints(app, name).includes(nm.get(clone)!), `gdb breaks on ${clone}`);
    }
    const check = resolveJson([`${app}:check`]);
    assert.deepEqual(addresses(check), [at(nm, 'check')]);
    assert.equal(check.warnings[0]?.code, 'ERR_COLD_PART');
    const named = resolveJson([`${app}:check.cold`]);
    assert.deepEqual(addresses(named), [at(nm, 'check.cold')]);
    assert.equal(named.sites[0]!.kind, 'instruction');
  });
});
