import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { requireHost } from '../../test/helpers/require-host.js';
import {
  cloneName,
  cxxDemanglerName,
  demangle,
  demangleNameStrings,
  demangleNames,
  useCxxDemangler,
  withoutParameters,
  withoutReturnType,
} from './index.js';

/** c++filt's answer for each name (binutils demangles C++ and both Rust manglings). */
function cxxfilt(names: readonly string[]): string[] {
  return execFileSync('c++filt', { input: `${names.join('\n')}\n`, encoding: 'utf8' })
    .split('\n')
    .slice(0, names.length);
}

/**
 * c++filt's Rust names less what rustc-demangle's short form leaves out: the legacy hash
 * (`::h0123456789abcdef`) and v0 crate disambiguators (`[3c1c0]`).
 */
function withoutRustHashes(name: string): string {
  return name.replace(/::h[0-9a-f]{16}$/, '').replace(/\[[0-9a-f]+\]/g, '');
}

describe('demangle()', () => {
  test('gives the names c++filt gives for C++ symbols', (t) => {
    if (!requireHost(t, { commands: ['c++filt'] })) return;
    const names = [
      '_ZN2ns5Class6methodEi',
      '_ZNK2ns5Class6methodEPKc',
      '_ZN2ns5ClassclEl',
      '_ZN2ns5ClassD1Ev',
      '_ZN2ns5ClassC2Ev',
      '_ZN12_GLOBAL__N_16helperEl',
      '_ZN6shapes3BoxIiE3getEv',
      '_ZNSt6vectorIiSaIiEE9push_backERKi',
      '_ZdlPvm',
      '_Znwm',
      '_ZN2ns1fEv.cold',
      '_ZN2ns1fEi.isra.0',
      '_ZN5outer5inner4deepEll',
      '_ZN2nsplERKNS_1VES2_',
    ];
    const truth = cxxfilt(names);
    for (const [i, name] of names.entries()) assert.equal(demangle(name), truth[i], name);
  });

  test('gives the Rust paths c++filt gives, without hashes, for legacy and v0 symbols', (t) => {
    if (!requireHost(t, { commands: ['c++filt'] })) return;
    const names = [
      '_ZN4core3fmt9Formatter3pad17h0123456789abcdefE',
      '_ZN10rust_names6shapes18Counter$LT$u64$GT$4bump17hd7a9e90995b62ac1E',
      '_RNvNtNtCsbt0fQicOZbh_10rust_names6shapes5inner6probed',
      '_RNvMNtCsbt0fQicOZbh_10rust_names6shapesINtB2_7CounteryE4bump',
    ];
    const truth = cxxfilt(names).map(withoutRustHashes);
    for (const [i, name] of names.entries()) assert.equal(demangle(name), truth[i], name);
  });

  test('leaves names that are not mangled alone: undefined', () => {
    for (const name of ['main', '_start', '__libc_start_main', '_init', 'foo.cold', '_Z', '_R']) {
      assert.equal(demangle(name), undefined, name);
    }
  });

  test('never throws on garbage, and keeps working after it', () => {
    const garbage = [
      '_Z' + 'P'.repeat(100_000) + 'i',
      '_Z' + 'N1a'.repeat(20_000) + 'E',
      '_ZN' + 'S_'.repeat(1000) + 'E',
      '_R' + 'B'.repeat(10_000),
      '_ZZZZZZ',
      '_Z\u0000x',
      '_Z\ud800x',
      '_Z1fé',
      '_Z' + 'x'.repeat(1 << 17),
    ];
    for (const name of garbage) assert.equal(demangle(name), undefined, name.slice(0, 20));
    // Every prefix of a real name: undefined or a string, never a throw.
    const real = '_ZNSt6vectorIiSaIiEE9push_backERKi';
    for (let n = 0; n <= real.length; n++) {
      const out = demangle(real.slice(0, n));
      assert.ok(out === undefined || typeof out === 'string');
    }
    assert.equal(demangle('_ZN2ns1fEv'), 'ns::f()');
    assert.equal(demangle(42 as unknown as string), undefined);
  });
});

describe('demangleNames()', () => {
  test("gives demangle()'s answer for every name of a string table, as bytes", () => {
    const names = [
      '_ZN2ns5Class6methodEi',
      'main',
      '_ZN2ns1fEv.cold',
      '_Z',
      '_ZZZZZZ',
      '_RNvNtNtCsbt0fQicOZbh_10rust_names6shapes5inner6probed',
      '_ZN4core3fmt9Formatter3pad17h0123456789abcdefE',
      '_ZNSt6vectorIiSaIiEE9push_backERKi',
      `_Z${'P'.repeat(100_000)}i`,
      '_R',
      '_Znwm',
    ];
    // A string table as ELF keeps it: each name followed by a NUL, one after the other.
    const table = Buffer.from(`\0${names.join('\0')}\0`);
    const starts: number[] = [];
    const ends: number[] = [];
    let at = 1;
    for (const name of names) {
      starts.push(at);
      ends.push(at + name.length);
      at += name.length + 1;
    }
    const out = demangleNames(table, starts, ends);
    const strings = demangleNameStrings(table, starts, ends);
    names.forEach((name, k) => {
      const want = demangle(name);
      const got =
        out.start[k]! < 0
          ? undefined
          : Buffer.from(out.bytes.subarray(out.start[k], out.end[k])).toString('utf8');
      assert.equal(got, want, name.slice(0, 40));
      // The same names as strings (C++ by libiberty, Rust by the WebAssembly demangler).
      assert.equal(strings[k], want ?? null, `as a string: ${name.slice(0, 40)}`);
    });
  });
});

describe('cloneName()', () => {
  test('splits the suffixes GCC gives copies and parts of functions, stored or demangled', () => {
    const cases: [string, string | undefined, string | undefined, boolean | undefined][] = [
      ['helper.isra.0', 'helper', '.isra.0', false],
      ['add.constprop.0.isra.0', 'add', '.constprop.0.isra.0', false],
      ['work.part.0', 'work', '.part.0', false],
      ['check.cold', 'check', '.cold', true],
      ['work.part.0.cold', 'work', '.part.0.cold', true],
      ['_ZN3app4Calc3addEi.isra.0', '_ZN3app4Calc3addEi', '.isra.0', false],
      ['app::Calc::add(int) [clone .isra.0]', 'app::Calc::add(int)', ' [clone .isra.0]', false],
      [
        'app::f(int) [clone .constprop.0] [clone .isra.0]',
        'app::f(int)',
        ' [clone .constprop.0] [clone .isra.0]',
        false,
      ],
      ['app::check(long) [clone .cold]', 'app::check(long)', ' [clone .cold]', true],
      ['main', undefined, undefined, undefined],
      ['foo.localalias', undefined, undefined, undefined],
      ['.cold', undefined, undefined, undefined],
      ['std::vector<int>::at(unsigned long) const', undefined, undefined, undefined],
    ];
    for (const [name, base, suffix, cold] of cases) {
      const got = cloneName(name);
      assert.deepEqual(
        got === undefined ? [undefined, undefined, undefined] : [got.base, got.suffix, got.cold],
        [base, suffix, cold],
        name,
      );
    }
  });
});

describe('withoutParameters()', () => {
  test('drops the parameter list and the qualifiers after it', () => {
    const cases: [string, string | undefined][] = [
      ['ns::Class::method(int)', 'ns::Class::method'],
      ['ns::Class::method(char const*) const', 'ns::Class::method'],
      ['ns::Class::operator()(long)', 'ns::Class::operator()'],
      ['ns::Class::~Class()', 'ns::Class::~Class'],
      ['(anonymous namespace)::helper(long)', '(anonymous namespace)::helper'],
      ['std::function<void (int)>::operator()(int) const', 'std::function<void (int)>::operator()'],
      ['ns::V::get() const &&', 'ns::V::get'],
      ['ns::operator<(ns::V const&, ns::V const&)', 'ns::operator<'],
      ['f() [clone .cold]', undefined],
      ['rust_names::shapes::inner::probed', undefined],
      ['{vtable(ns::Class)}', undefined],
    ];
    for (const [name, expected] of cases) assert.equal(withoutParameters(name), expected, name);
  });
});

describe('withoutReturnType()', () => {
  test("drops the return type libiberty writes before a function template's name, and nothing else", () => {
    const cases: [string, string][] = [
      ['void ns::apply<int>(int)', 'ns::apply<int>(int)'],
      ['unsigned long ns::size<char>(char const*) const', 'ns::size<char>(char const*) const'],
      [
        'std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > node::SPrintF<unsigned long>(char const*, unsigned long&&)',
        'node::SPrintF<unsigned long>(char const*, unsigned long&&)',
      ],
      ['void (anonymous namespace)::run<2>(long)', '(anonymous namespace)::run<2>(long)'],
      [
        'bool ns::operator< <int>(ns::V<int> const&, ns::V<int> const&)',
        'ns::operator< <int>(ns::V<int> const&, ns::V<int> const&)',
      ],
      ['void ns::X::operator()<int>(int)', 'ns::X::operator()<int>(int)'],
      ['char const* ns::name<1>() [clone .isra.0]', 'ns::name<1>() [clone .isra.0]'],
      ['decltype ({parm#1}.size()) ns::length<V>(V const&)', 'ns::length<V>(V const&)'],
      // No return type: not a function template, or a constructor or conversion of one.
      ['ns::Class::method(int)', 'ns::Class::method(int)'],
      ['ns::Box<int>::get() const', 'ns::Box<int>::get() const'],
      ['ns::Box<int>::Box<long>(long)', 'ns::Box<int>::Box<long>(long)'],
      [
        'ns::X::operator std::vector<int, std::allocator<int> >()',
        'ns::X::operator std::vector<int, std::allocator<int> >()',
      ],
      ['operator new(unsigned long)', 'operator new(unsigned long)'],
      ['ns::X::operator unsigned long() const', 'ns::X::operator unsigned long() const'],
      ['rust_names::shapes::inner::probed', 'rust_names::shapes::inner::probed'],
    ];
    for (const [name, expected] of cases) assert.equal(withoutReturnType(name), expected, name);
  });
});

describe('useCxxDemangler()', () => {
  test('names C++ symbols by the demangler given, falls back where it fails, and says which one names them', () => {
    assert.equal(cxxDemanglerName(), 'cpp_demangle');
    const asked: string[] = [];
    useCxxDemangler(() => (bytes) => {
      const name = Buffer.from(bytes.subarray(0, bytes.indexOf(0))).toString('latin1');
      asked.push(name);
      return name === '_ZN2ns1fEv' ? 'void ns::f<int>(int)' : undefined;
    });
    try {
      assert.equal(cxxDemanglerName(), 'libiberty');
      // Its answer, without the return type of a function template.
      assert.equal(demangle('_ZN2ns1fEv'), 'ns::f<int>(int)');
      // Where it fails, the WebAssembly demangler's.
      assert.equal(demangle('_ZN2ns5Class6methodEi'), 'ns::Class::method(int)');
      // Rust names never go to it.
      assert.equal(demangle('_ZN10rust_names6probed17h0123456789abcdefE'), 'rust_names::probed');
      assert.deepEqual(asked, ['_ZN2ns1fEv', '_ZN2ns5Class6methodEi']);
    } finally {
      useCxxDemangler(() => undefined);
    }
    assert.equal(cxxDemanglerName(), 'cpp_demangle');
  });
});
