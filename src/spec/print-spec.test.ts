import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ProbeError } from '../errors/index.js';
import { type ProbeSpec, parseSpec, printSpec } from './index.js';

function print(text: string): string {
  const { spec, diagnostics } = parseSpec(text);
  assert.equal(
    diagnostics.filter((d) => d.severity === 'error').length,
    0,
    `${text}: ${diagnostics[0]?.message}`,
  );
  assert.ok(spec !== undefined);
  return printSpec(spec);
}

describe('printSpec()', () => {
  test('prints the DESIGN.md examples as they are written', () => {
    for (const text of [
      'libc:malloc size=arg0:u64',
      'r:libc:malloc ret=retval:x64',
      './app:parse_request+0x1a len=+8(arg0):u32',
      'u:python3:python:function__entry',
    ]) {
      assert.equal(print(text), text);
    }
  });

  test('writes symbol offsets and addresses in lowercase hex and dereference offsets in decimal', () => {
    assert.equal(
      print('./app:parse_request+26 len=+0x8(arg0):u32'),
      './app:parse_request+0x1a len=+8(arg0):u32',
    );
    assert.equal(print('x:0X4011AB'), 'x:0x4011ab');
    assert.equal(print('x:@4406'), 'x:@0x1136');
    assert.equal(print('x:f -0x10(%RBP) 000(arg0)'), 'x:f -16(%rbp) +0(arg0)');
    assert.equal(print('x:malloc+0'), 'x:malloc');
  });

  test('quotes a symbol only when it needs quotes', () => {
    assert.equal(print("x:'malloc'"), 'x:malloc');
    assert.equal(print("x:'ns::C::m'"), 'x:ns::C::m');
    assert.equal(print("x:'mall*'"), "x:'mall*'");
    assert.equal(print("x:'operator new(unsigned long)'+4"), "x:'operator new(unsigned long)'+0x4");
    assert.equal(print("x:'::global'"), "x:'::global'");
    assert.equal(print("x:'1st'"), "x:'1st'");
  });

  test('prints demangled C++ names so that they read back as the same spec', () => {
    for (const text of [
      "r:./app:'ns::Class::~Class()' ret=retval",
      "./app:'shapes::Box<int>::get() const'+0x4",
      "./app:'ns::Class::operator()(long)' n=arg1:s64",
      "./app:'(anonymous namespace)::helper(long)'",
      "./app:'std::map<int, char*>::find(int const&)'@V1",
      './app:rust_names::shapes::inner::probed',
      './app:*::Counter::bump*',
    ]) {
      assert.equal(print(text), text);
      assert.equal(print(print(text)), text);
    }
  });

  test('writes a version with one "@" and keeps the kind only when it was written', () => {
    assert.equal(print('x:malloc@@GLIBC_2.2.5'), 'x:malloc@GLIBC_2.2.5');
    assert.equal(print('p:libc:malloc'), 'p:libc:malloc');
    assert.equal(print('python3:python:function__entry'), 'python3:python:function__entry');
  });

  test('canonicalises fetches: registers lowercase, arguments without leading zeros, names as written', () => {
    assert.equal(
      print('x:f %RAX arg007 n=comm:string v=a->b.c[02]'),
      'x:f %rax arg7 n=comm:string v=a->b.c[2]',
    );
  });

  test('writes the kind for a target named p, r or u', () => {
    const spec = parseSpec('p:p:main').spec!;
    assert.equal(printSpec(spec), 'p:p:main');
    const inferred: ProbeSpec = { ...spec, kindExplicit: false };
    assert.equal(printSpec(inferred), 'p:p:main');
  });

  test('refuses a hand-made symbol name that no spec can hold', () => {
    const spec = parseSpec('x:f').spec!;
    const bad: ProbeSpec = {
      ...spec,
      location: {
        ...(spec.location as Extract<ProbeSpec['location'], { type: 'symbol' }>),
        name: "it's",
      },
    };
    assert.throws(() => printSpec(bad), ProbeError);
  });
});
