// Demangled names in `list` and `resolve`, checked against binutils: readelf for the function
// symbols and their addresses, c++filt for how each reads demangled (C++, Rust legacy and v0).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tool } from '../helpers/tools.js';

interface JsonFunction {
  name: string;
  symbol: string;
  demangled?: string;
  vaddr: string;
}

interface ElfFunction {
  readonly mangled: string;
  readonly vaddr: bigint;
  /** c++filt's reading of the name. */
  readonly cxxfilt: string;
}

/** The defined functions of .symtab as readelf lists them, each with c++filt's reading. */
function elfFunctions(path: string): ElfFunction[] {
  const rows = tool('readelf', ['-s', '-W', path])
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 8 && /^\d+:$/.test(f[0]!) && f[3] === 'FUNC' && f[6] !== 'UND')
    .map((f) => [f[1]!, 'T', f[7]!]);
  const names = rows.map((f) => f[2]!);
  const demangled = execFileSync('c++filt', { input: `${names.join('\n')}\n`, encoding: 'utf8' })
    .split('\n')
    .slice(0, names.length);
  return rows.map((f, i) => ({
    mangled: f[2]!,
    vaddr: BigInt(`0x${f[0]}`),
    cxxfilt: demangled[i]!,
  }));
}

/**
 * c++filt's name in the form upscope shows, which differs in one documented way: c++filt
 * writes a function template specialization's return type first (`int ns::twice<int>(int)`,
 * recognised by template arguments right before the parameter list); upscope, like the
 * cpp_demangle crate it uses, leaves it out. For Rust, rustc-demangle's short form leaves out
 * the legacy hash (`::h0123456789abcdef`) and v0 crate disambiguators (`[3c1c0]`).
 */
function shownAs(cxxfilt: string): string {
  const rust = cxxfilt
    .replace(/::h[0-9a-f]{16}$/, '')
    .replace(/\[[0-9a-f]+\]/g, '')
    .replace(/\b(\d+|true|false): (?:[iu](?:8|16|32|64|128|size)|bool)\b/g, '$1');
  return />\([^()]*\)( const)?$/.test(rust) ? rust.replace(/^[^ (<]+ /, '') : rust;
}

function listJson(args: string[]): JsonFunction[] {
  const result = runCli(['list', '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout).functions;
}

function cxxTarget(optimize: string): string {
  return compileProgram('cxx-names', { flags: [optimize] });
}

describe('demangled names in list', () => {
  for (const optimize of ['-O0', '-O2']) {
    test(`every C++ function list shows demangled reads as c++filt reads it (${optimize})`, (t) => {
      if (!requireHost(t, { commands: ['g++', 'readelf', 'c++filt'] })) return;
      const app = cxxTarget(optimize);
      const truth = elfFunctions(app).filter((fn) => fn.mangled.startsWith('_Z'));
      assert.ok(truth.length >= 9, 'the target has its C++ functions');
      const listed = listJson([app]);
      for (const fn of truth) {
        const row = listed.find((r) => r.symbol === fn.mangled && BigInt(r.vaddr) === fn.vaddr);
        assert.ok(row, `${fn.mangled} is listed`);
        assert.equal(row.demangled, shownAs(fn.cxxfilt), fn.mangled);
        assert.equal(row.name, shownAs(fn.cxxfilt));
      }
      // Names that are not mangled are shown as stored, with nothing demangled.
      const main = listed.find((r) => r.symbol === 'main');
      assert.equal(main?.name, 'main');
      assert.equal(main?.demangled, undefined);
      // The kinds of name the target was written to have.
      const shown = new Set(listed.map((r) => r.name));
      for (const name of [
        'shapes::Counter::method(int)',
        'shapes::Counter::method(double)',
        'shapes::Counter::method(char const*) const',
        'shapes::Counter::operator()(long)',
        'shapes::Counter::~Counter()',
        'shapes::Box<int>::get() const',
        'shapes::twice<int>(int)',
        '(anonymous namespace)::helper(long)',
        'shapes::inner::deeper::deep(long, long)',
      ]) {
        assert.ok(shown.has(name), `${name} is listed`);
      }
    });
  }

  test('the table shows demangled names, and --no-demangle the names readelf shows', (t) => {
    if (!requireHost(t, { commands: ['g++', 'readelf', 'c++filt'] })) return;
    const app = cxxTarget('-O0');
    const names = (args: string[]) => {
      const result = runCli(['list', ...args, app]);
      assert.equal(result.status, 0, result.stderr);
      return result.stdout
        .split('\n')
        .slice(1, -2)
        .map((line) => line.split(/\s+/).slice(5).join(' '));
    };
    const truth = elfFunctions(app);
    assert.deepEqual(
      new Set(names(['--no-demangle'])),
      new Set(truth.map((fn) => fn.mangled)),
      '--no-demangle: the names as stored',
    );
    assert.deepEqual(new Set(names([])), new Set(truth.map((fn) => shownAs(fn.cxxfilt))));
  });

  test('a pattern matches demangled names, with and without parameters', (t) => {
    if (!requireHost(t, { commands: ['g++', 'readelf', 'c++filt'] })) return;
    const app = cxxTarget('-O0');
    const truth = elfFunctions(app).map((fn) => ({ ...fn, shown: shownAs(fn.cxxfilt) }));
    const names = (pattern: string) => new Set(listJson([app, pattern]).map((r) => r.symbol));
    const expect = (test: (shown: string) => boolean) =>
      new Set(truth.filter((fn) => test(fn.shown)).map((fn) => fn.mangled));
    assert.deepEqual(
      names('shapes::Counter::*'),
      expect((s) => s.startsWith('shapes::Counter::')),
    );
    assert.deepEqual(
      names('*::method'),
      expect((s) => s.startsWith('shapes::Counter::method(')),
    );
    assert.deepEqual(
      names('shapes::Box<*>::get'),
      expect((s) => /^shapes::Box<.*>::get\(\)/.test(s)),
    );
    assert.equal(names('shapes::Box<*>::get').size, 2);
    // The mangled names still match, as before.
    assert.deepEqual(
      names('_ZN6shapes7Counter*'),
      new Set(
        truth.filter((fn) => fn.mangled.startsWith('_ZN6shapes7Counter')).map((fn) => fn.mangled),
      ),
    );
  });

  const rustc = findRustc();
  for (const mangling of ['legacy', 'v0']) {
    test(`Rust functions (${mangling} mangling) read as c++filt and the program read them`, (t) => {
      if (rustc === undefined) {
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      if (!requireHost(t, { commands: ['readelf', 'c++filt'] })) return;
      const flags = mangling === 'v0' ? ['-C', 'symbol-mangling-version=v0'] : [];
      const app = compileRust(rustc, 'rust-names', ['-C', 'opt-level=1', ...flags]);
      const own = execFileSync(app, ['1'], { encoding: 'utf8' });
      const probedPath = own.split('\n')[0]!.split(' ')[0]!;
      assert.equal(probedPath, 'rust_names::shapes::inner::probed');
      const truth = elfFunctions(app).filter((fn) =>
        fn.mangled.startsWith(mangling === 'v0' ? '_R' : '_ZN'),
      );
      // The standard library may come with either mangling: the program's own functions at least.
      assert.ok(truth.length >= 3, 'the program has its Rust functions');
      const listed = new Map(listJson([app]).map((r) => [`${r.symbol} ${BigInt(r.vaddr)}`, r]));
      for (const fn of truth) {
        const row = listed.get(`${fn.mangled} ${fn.vaddr}`);
        assert.ok(row, `${fn.mangled} is listed`);
        assert.equal(row.demangled, shownAs(fn.cxxfilt), fn.mangled);
      }
      const probed = [...listed.values()].filter((r) => r.name === probedPath);
      assert.equal(probed.length, 1, 'the path the program prints for itself is listed');
    });
  }
});

describe('demangled names in resolve', () => {
  test('a demangled name resolves to the function readelf gives, and resolve shows both names', (t) => {
    if (!requireHost(t, { commands: ['g++', 'readelf', 'c++filt'] })) return;
    const app = cxxTarget('-O2');
    const truth = elfFunctions(app);
    const byShown = (name: string) => truth.filter((fn) => shownAs(fn.cxxfilt) === name);
    const cases: [string, string][] = [
      ["'shapes::Counter::method(int)'", 'shapes::Counter::method(int)'],
      [
        "'shapes::Counter::method(char const *) const'",
        'shapes::Counter::method(char const*) const',
      ],
      ["'shapes::Counter::operator()'", 'shapes::Counter::operator()(long)'],
      ["'(anonymous namespace)::helper'", '(anonymous namespace)::helper(long)'],
      ["'shapes::Box<long>::get'", 'shapes::Box<long>::get() const'],
      ['shapes::inner::deeper::deep', 'shapes::inner::deeper::deep(long, long)'],
    ];
    // The mangled name, as before.
    const deep = byShown('shapes::inner::deeper::deep(long, long)')[0]!;
    cases.push([deep.mangled, 'shapes::inner::deeper::deep(long, long)']);
    for (const [location, name] of cases) {
      const result = runCli(['resolve', '--json', `${app}:${location}`]);
      assert.equal(result.status, 0, `${location}: ${result.stderr}`);
      const { sites } = JSON.parse(result.stdout);
      const [fn] = byShown(name);
      assert.ok(fn, `${name} is in .symtab`);
      assert.equal(sites.length, 1, location);
      assert.equal(sites[0].demangled, name);
      assert.equal(sites[0].symbol, fn.mangled);
      assert.equal(BigInt(sites[0].vaddr), fn.vaddr);
    }
    const text = runCli(['resolve', `${app}:'shapes::Counter::method(int)'`]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /-> {2}shapes::Counter::method\(int\) \(function entry\)/);
    assert.match(text.stdout, /^ {2}symbol {5}_ZN6shapes7Counter6methodEi$/m);
    const raw = runCli(['resolve', '--no-demangle', `${app}:'shapes::Counter::method(int)'`]);
    assert.match(raw.stdout, /-> {2}_ZN6shapes7Counter6methodEi \(function entry\)/);
  });

  test('a name without parameters goes on every overload, with a warning naming them', (t) => {
    if (!requireHost(t, { commands: ['g++', 'readelf', 'c++filt'] })) return;
    const app = cxxTarget('-O2');
    const overloads = elfFunctions(app)
      .filter((fn) => shownAs(fn.cxxfilt).startsWith('shapes::Counter::method('))
      .map((fn) => fn.vaddr);
    assert.equal(overloads.length, 3);
    const result = runCli(['resolve', '--json', `${app}:shapes::Counter::method`]);
    assert.equal(result.status, 0, result.stderr);
    const { sites, warnings } = JSON.parse(result.stdout);
    assert.deepEqual(
      new Set(sites.map((s: { vaddr: string }) => BigInt(s.vaddr))),
      new Set(overloads),
    );
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0].code, 'ERR_OVERLOADED');
    assert.match(warnings[0].message, /3 overloads of "shapes::Counter::method"/);
    const text = runCli(['resolve', `${app}:shapes::Counter::method`]);
    assert.match(text.stderr, /^warning\[ERR_OVERLOADED\]/m);
  });

  test('a misspelt demangled name fails with a suggestion', (t) => {
    if (!requireHost(t, { commands: ['g++'] })) return;
    const app = cxxTarget('-O2');
    const result = runCli(['resolve', `${app}:shapes::Countr::method`]);
    assert.equal(result.status, 3);
    assert.match(result.stderr, /Cannot resolve symbol "shapes::Countr::method"/);
    assert.match(result.stderr, /Did you mean "shapes::Counter::method"/);
  });
});
