import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { ProbeError, renderError } from '../errors/index.js';
import {
  type Diagnostic,
  type ProbeSpec,
  parseSpec,
  parseSpecOrThrow,
  registerInfo,
} from './index.js';

const sp = (start: number, end: number) => ({ start, end });

function parsed(text: string): ProbeSpec {
  const { spec, diagnostics } = parseSpec(text);
  assert.deepEqual(diagnostics, [], `diagnostics for ${text}`);
  assert.ok(spec !== undefined);
  return spec;
}

describe('parseSpec() on the examples of DESIGN.md', () => {
  test('reads "libc:malloc size=arg0:u64" as an entry probe fetching the first argument', () => {
    assert.deepEqual(parsed('libc:malloc size=arg0:u64'), {
      text: 'libc:malloc size=arg0:u64',
      kind: 'entry',
      kindExplicit: false,
      target: { text: 'libc', span: sp(0, 4) },
      location: {
        type: 'symbol',
        name: 'malloc',
        version: undefined,
        offset: 0n,
        offsetSpan: undefined,
        span: sp(5, 11),
      },
      fetches: [
        {
          name: 'size',
          nameExplicit: true,
          expr: { kind: 'arg', index: 0, span: sp(17, 21) },
          type: 'u64',
          span: sp(12, 25),
        },
      ],
    });
  });

  test('reads "r:libc:malloc ret=retval:x64" as a return probe fetching the return value', () => {
    assert.deepEqual(parsed('r:libc:malloc ret=retval:x64'), {
      text: 'r:libc:malloc ret=retval:x64',
      kind: 'return',
      kindExplicit: true,
      target: { text: 'libc', span: sp(2, 6) },
      location: {
        type: 'symbol',
        name: 'malloc',
        version: undefined,
        offset: 0n,
        offsetSpan: undefined,
        span: sp(7, 13),
      },
      fetches: [
        {
          name: 'ret',
          nameExplicit: true,
          expr: { kind: 'retval', span: sp(18, 24) },
          type: 'x64',
          span: sp(14, 28),
        },
      ],
    });
  });

  test('reads "./app:parse_request+0x1a len=+8(arg0):u32" with an offset and a dereference', () => {
    assert.deepEqual(parsed('./app:parse_request+0x1a len=+8(arg0):u32'), {
      text: './app:parse_request+0x1a len=+8(arg0):u32',
      kind: 'entry',
      kindExplicit: false,
      target: { text: './app', span: sp(0, 5) },
      location: {
        type: 'symbol',
        name: 'parse_request',
        version: undefined,
        offset: 0x1an,
        offsetSpan: sp(19, 24),
        span: sp(6, 24),
      },
      fetches: [
        {
          name: 'len',
          nameExplicit: true,
          expr: {
            kind: 'deref',
            offset: 8n,
            inner: { kind: 'arg', index: 0, span: sp(32, 36) },
            span: sp(29, 37),
          },
          type: 'u32',
          span: sp(25, 41),
        },
      ],
    });
  });

  test('reads "u:python3:python:function__entry" as a USDT probe', () => {
    assert.deepEqual(parsed('u:python3:python:function__entry'), {
      text: 'u:python3:python:function__entry',
      kind: 'usdt',
      kindExplicit: true,
      target: { text: 'python3', span: sp(2, 9) },
      location: { type: 'usdt', provider: 'python', name: 'function__entry', span: sp(10, 32) },
      fetches: [],
    });
  });

  test('reads every TARGET form of the grammar', () => {
    for (const target of [
      '/path/to/file',
      './relative',
      '../up/x',
      'libc',
      'bash',
      'libssl.so.3',
    ]) {
      const spec = parsed(`${target}:main`);
      assert.deepEqual(spec.target, { text: target, span: sp(0, target.length) });
    }
  });

  test('reads every LOCATION form of the grammar', () => {
    const cases: [string, ProbeSpec['location']][] = [
      ['mall*', { type: 'glob', pattern: 'mall*', span: sp(2, 7) }],
      ['*alloc', { type: 'glob', pattern: '*alloc', span: sp(2, 8) }],
      ['str[cn]py', { type: 'glob', pattern: 'str[cn]py', span: sp(2, 11) }],
      ['?', { type: 'glob', pattern: '?', span: sp(2, 3) }],
      [
        'symbol+0x10',
        {
          type: 'symbol',
          name: 'symbol',
          version: undefined,
          offset: 16n,
          offsetSpan: sp(8, 13),
          span: sp(2, 13),
        },
      ],
      [
        'f+16',
        {
          type: 'symbol',
          name: 'f',
          version: undefined,
          offset: 16n,
          offsetSpan: sp(3, 6),
          span: sp(2, 6),
        },
      ],
      ['0x401136', { type: 'vaddr', vaddr: 0x401136n, span: sp(2, 10) }],
      ['@0x1136', { type: 'file-offset', fileOffset: 0x1136n, span: sp(2, 9) }],
      ['@4406', { type: 'file-offset', fileOffset: 4406n, span: sp(2, 7) }],
      ['file.c:42', { type: 'line', file: 'file.c', line: 42, span: sp(2, 11) }],
      ['src/net/io.cc:7', { type: 'line', file: 'src/net/io.cc', line: 7, span: sp(2, 17) }],
      [
        'ns::Class::method',
        {
          type: 'symbol',
          name: 'ns::Class::method',
          version: undefined,
          offset: 0n,
          offsetSpan: undefined,
          span: sp(2, 19),
        },
      ],
      [
        'malloc@@GLIBC_2.2.5',
        {
          type: 'symbol',
          name: 'malloc',
          version: 'GLIBC_2.2.5',
          offset: 0n,
          offsetSpan: undefined,
          span: sp(2, 21),
        },
      ],
      [
        'memcpy@GLIBC_2.2.5+4',
        {
          type: 'symbol',
          name: 'memcpy',
          version: 'GLIBC_2.2.5',
          offset: 4n,
          offsetSpan: sp(20, 22),
          span: sp(2, 22),
        },
      ],
      [
        "'operator new(unsigned long)'",
        {
          type: 'symbol',
          name: 'operator new(unsigned long)',
          version: undefined,
          offset: 0n,
          offsetSpan: undefined,
          span: sp(2, 31),
        },
      ],
      [
        'main.cold',
        {
          type: 'symbol',
          name: 'main.cold',
          version: undefined,
          offset: 0n,
          offsetSpan: undefined,
          span: sp(2, 11),
        },
      ],
    ];
    for (const [location, expected] of cases) {
      assert.deepEqual(parsed(`x:${location}`).location, expected, location);
    }
  });

  test('infers the USDT kind from PROVIDER:NAME, with globs on either side', () => {
    const spec = parsed('python3:py*:function__*');
    assert.equal(spec.kind, 'usdt');
    assert.equal(spec.kindExplicit, false);
    assert.deepEqual(spec.location, {
      type: 'usdt',
      provider: 'py*',
      name: 'function__*',
      span: sp(8, 23),
    });
    assert.equal(parsed('u:libpthread:*:mutex_[a-z]*').kind, 'usdt');
  });

  test('reads a quoted C++ name with a version and an offset after the quote', () => {
    assert.deepEqual(parsed("app:'ns::f(int) const'@V1+0x8").location, {
      type: 'symbol',
      name: 'ns::f(int) const',
      version: 'V1',
      offset: 8n,
      offsetSpan: sp(25, 29),
      span: sp(4, 29),
    });
  });

  test('reads demangled C++ names in quotes: "::", templates, parameters, "~", operators, spaces', () => {
    const names = [
      'ns::Class::method(int)',
      'ns::Class::~Class',
      'ns::Class::operator()',
      'ns::Class::operator()(long)',
      'shapes::Box<int>::get() const',
      'std::map<int, std::pair<long, char*> >::find(int const&)',
      '(anonymous namespace)::helper(long)',
      'operator new(unsigned long)',
      'ns::Box<int>::*',
      'a:b',
    ];
    for (const name of names) {
      for (const kind of ['', 'p:', 'r:']) {
        const text = `${kind}./app:'${name}' x=arg0`;
        const spec = parsed(text);
        assert.equal(spec.target.text, './app', text);
        assert.equal(spec.kind, kind === 'r:' ? 'return' : 'entry', text);
        assert.deepEqual(spec.location, {
          type: 'symbol',
          name,
          version: undefined,
          offset: 0n,
          offsetSpan: undefined,
          span: sp(kind.length + 6, kind.length + 8 + name.length),
        });
        assert.equal(spec.fetches.length, 1, text);
      }
    }
  });

  test('reads "::" in an unquoted name or pattern as part of it, never as a separator', () => {
    assert.deepEqual(parsed('app:ns::Class::method*').location, {
      type: 'glob',
      pattern: 'ns::Class::method*',
      span: sp(4, 22),
    });
    assert.deepEqual(parsed('r:app:*::Counter::bump').location, {
      type: 'glob',
      pattern: '*::Counter::bump',
      span: sp(6, 22),
    });
    const spec = parsed('app:rust_names::shapes::inner::probed+0x4');
    assert.equal(spec.target.text, 'app');
    assert.equal(spec.kind, 'entry');
    assert.deepEqual(spec.location, {
      type: 'symbol',
      name: 'rust_names::shapes::inner::probed',
      version: undefined,
      offset: 4n,
      offsetSpan: sp(37, 41),
      span: sp(4, 41),
    });
  });

  test('asks for quotes around C++ names with characters a bare name cannot hold', () => {
    for (const location of ['ns::Class::~Class', 'ns::Box<int>::get', 'ns::f(int)']) {
      const { spec, diagnostics } = parseSpec(`app:${location}`);
      assert.equal(spec, undefined, location);
      assert.equal(diagnostics[0]?.code, 'ERR_SPEC_SYNTAX');
      assert.deepEqual(
        diagnostics[0]?.hints.at(-1),
        `Quote the C++ name, and the spec for the shell: "app:'${location}'"`,
      );
    }
  });

  test('quotes the whole C++ name in its hint when the shell passed it with spaces, unquoted', () => {
    // What bash passes for: upscope resolve ./app:'ns::f(char const*, int) const' x=arg0
    const text = './app:ns::f(char const*, int) const x=arg0';
    const { diagnostics } = parseSpec(text);
    assert.equal(diagnostics[0]?.code, 'ERR_SPEC_SYNTAX');
    const hint = diagnostics[0]!.hints.at(-1)!;
    assert.equal(
      hint,
      `Quote the C++ name, and the spec for the shell: "./app:'ns::f(char const*, int) const'"`,
    );
    // The spec in the hint, typed in bash, reaches the parser as one spec that parses.
    const typed = /: (".*")$/.exec(hint)![1]!;
    const argv: string[] = JSON.parse(
      execFileSync(
        'bash',
        ['-c', `node -e 'console.log(JSON.stringify(process.argv.slice(1)))' ${typed}`],
        {
          encoding: 'utf8',
        },
      ),
    );
    assert.deepEqual(argv, ["./app:'ns::f(char const*, int) const'"]);
    assert.equal(parseSpec(argv[0]!).spec?.location.type, 'symbol');
  });

  test('a C++ name without a target gets one message saying so', () => {
    for (const [text, name] of [
      ['app::Calc::add', 'app::Calc::add'],
      ['r:app::Calc::add', 'app::Calc::add'],
      ['ns::f(int, char) x=arg0', 'ns::f(int, char)'],
    ] as const) {
      const { spec, diagnostics } = parseSpec(text);
      assert.equal(spec, undefined);
      assert.equal(diagnostics.length, 1, text);
      assert.equal(
        diagnostics[0]!.message,
        `Cannot parse probe spec: "${name}" has no target: a spec is TARGET:LOCATION`,
      );
      assert.doesNotMatch(diagnostics[0]!.hints.join('\n'), /USDT/);
    }
  });

  test('reads every FETCH form of the grammar with spans', () => {
    const spec = parsed(
      'libc:f arg0 arg5 arg15 %rax %EAX %al %r8d %rip %flags %ax ip sp comm +8(arg0) -16(%rbp) 24(+8(%rsp)) size req->len hdr.size arr[2] a->b.c[3]',
    );
    const exprs = spec.fetches.map((f) => f.expr);
    assert.deepEqual(exprs.slice(0, 3), [
      { kind: 'arg', index: 0, span: sp(7, 11) },
      { kind: 'arg', index: 5, span: sp(12, 16) },
      { kind: 'arg', index: 15, span: sp(17, 22) },
    ]);
    assert.deepEqual(
      exprs.slice(3, 10).map((e) => (e.kind === 'register' ? e.name : e.kind)),
      ['rax', 'eax', 'al', 'r8d', 'rip', 'flags', 'ax'],
    );
    assert.deepEqual(exprs[4], { kind: 'register', name: 'eax', span: sp(28, 32) });
    assert.deepEqual(
      exprs.slice(10, 13).map((e) => e.kind),
      ['ip', 'sp', 'comm'],
    );
    assert.deepEqual(exprs[14], {
      kind: 'deref',
      offset: -16n,
      inner: { kind: 'register', name: 'rbp', span: sp(82, 86) },
      span: sp(78, 87),
    });
    assert.deepEqual(exprs[15], {
      kind: 'deref',
      offset: 24n,
      inner: {
        kind: 'deref',
        offset: 8n,
        inner: { kind: 'register', name: 'rsp', span: sp(94, 98) },
        span: sp(91, 99),
      },
      span: sp(88, 100),
    });
    assert.deepEqual(exprs.slice(16), [
      { kind: 'variable', name: 'size', path: [], span: sp(101, 105) },
      { kind: 'variable', name: 'req', path: [{ op: '->', field: 'len' }], span: sp(106, 114) },
      { kind: 'variable', name: 'hdr', path: [{ op: '.', field: 'size' }], span: sp(115, 123) },
      { kind: 'variable', name: 'arr', path: [{ op: '[]', index: 2 }], span: sp(124, 130) },
      {
        kind: 'variable',
        name: 'a',
        path: [
          { op: '->', field: 'b' },
          { op: '.', field: 'c' },
          { op: '[]', index: 3 },
        ],
        span: sp(131, 140),
      },
    ]);
  });

  test('names an unnamed fetch by its word (arg0, retval, a variable), any other by its position from 1', () => {
    const names = (text: string) => parsed(text).fetches.map((f) => [f.name, f.nameExplicit]);
    assert.deepEqual(names('libc:f arg0 x=arg1 %rdx:u32 +8(arg0) req'), [
      ['arg0', false],
      ['x', true],
      ['arg3', false],
      ['arg4', false],
      ['req', false],
    ]);
    // A word taken already (by a name given, an earlier fetch, another's position) yields.
    assert.deepEqual(names('r:libc:f retval:u8 retval:bool'), [
      ['retval', false],
      ['arg2', false],
    ]);
    assert.deepEqual(names('libc:f arg0=arg1 arg0'), [
      ['arg0', true],
      ['arg2', false],
    ]);
    assert.deepEqual(names('libc:f +0(sp) arg1'), [
      ['arg1', false],
      ['arg2', false],
    ]);
  });

  test('accepts every TYPE of the grammar', () => {
    for (const type of [
      's8',
      's16',
      's32',
      's64',
      'u8',
      'u16',
      'u32',
      'u64',
      'x8',
      'x16',
      'x32',
      'x64',
    ]) {
      assert.equal(parsed(`libc:f arg0:${type}`).fetches[0]?.type, type);
    }
    for (const type of ['string', 'ustring', 'ptr', 'char', 'bool']) {
      assert.equal(parsed(`libc:f arg0:${type}`).fetches[0]?.type, type);
    }
    assert.equal(parsed('libc:f comm:string').fetches[0]?.type, 'string');
  });

  test('skips whitespace around and between the parts, keeping spans in the original text', () => {
    const spec = parsed('  libc:malloc \t size=arg0  ');
    assert.deepEqual(spec.target.span, sp(2, 6));
    assert.deepEqual(spec.fetches[0]?.span, sp(16, 25));
  });

  test('reads p:, r: and u: as kinds and a target called p written ./p', () => {
    assert.equal(parsed('p:libc:malloc').kindExplicit, true);
    assert.equal(parsed('p:libc:malloc').kind, 'entry');
    assert.equal(parsed('./p:main').target.text, './p');
    assert.equal(parsed('p:p:main').target.text, 'p');
  });

  test('allows retval inside a dereference in a return probe and argN in any probe', () => {
    assert.equal(parsed('r:libc:strdup s=+0(retval):string').fetches[0]?.expr.kind, 'deref');
    assert.equal(parsed('r:libc:malloc arg0').fetches.length, 1);
    assert.equal(parsed('r:libc:mall* retval').location.type, 'glob');
  });

  test('accepts the largest values of each range', () => {
    assert.equal((parsed('x:f+0xffffffff').location as { offset: bigint }).offset, 0xffffffffn);
    assert.equal(
      (parsed('x:0xffffffffffffffff').location as { vaddr: bigint }).vaddr,
      0xffffffffffffffffn,
    );
    assert.equal((parsed('x:a.c:2147483647').location as { line: number }).line, 2147483647);
    const deref = parsed('x:f -9223372036854775808(arg0) +9223372036854775807(arg1)').fetches;
    assert.deepEqual(
      deref.map((f) => (f.expr.kind === 'deref' ? f.expr.offset : undefined)),
      [-(2n ** 63n), 2n ** 63n - 1n],
    );
  });
});

interface Malformed {
  readonly spec: string;
  readonly code: Diagnostic['code'];
  readonly message: string;
  readonly span: [number, number];
  /** A hint the first error must carry, when the case has one worth pinning. */
  readonly hint?: string;
}

// Each case: the first error parseSpec() reports, with the exact characters it underlines.
const MALFORMED: readonly Malformed[] = [
  {
    spec: '',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: the spec is empty',
    span: [0, 0],
  },
  {
    spec: 'malloc',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected ":" and a location after "malloc"',
    span: [6, 6],
    hint: 'Write a probe spec as [KIND:]TARGET:LOCATION, for example libc:malloc',
  },
  {
    spec: 'libc:',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a location after "libc:"',
    span: [5, 5],
  },
  {
    spec: 'p:malloc',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected ":" and a location after "p:malloc"',
    span: [8, 8],
    hint: 'The spec starts with the kind "p:"; write a target named p as ./p',
  },
  {
    spec: ':malloc',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a probe: the target is empty',
    span: [0, 0],
  },
  {
    spec: "app:'operator new",
    code: 'ERR_SPEC_SYNTAX',
    message: `Cannot parse probe spec: expected "'" to close the quoted location "'operator new"`,
    span: [4, 17],
  },
  {
    spec: 'app:ns::f(int)',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "(" in symbol "ns::f(int)"',
    span: [9, 10],
    hint: `Quote the C++ name, and the spec for the shell: "app:'ns::f(int)'"`,
  },
  {
    spec: 'libc:1234',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: a location cannot be a decimal number: "1234"',
    span: [5, 9],
    hint: 'Write a virtual address in hex: 0x4d2',
  },
  {
    spec: 'libc:0x12g4',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "g" in address "0x12g4"',
    span: [9, 10],
  },
  {
    spec: 'libc:malloc+',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected an offset after "malloc+"',
    span: [12, 12],
  },
  {
    spec: 'libc:malloc-4',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "-" in symbol "malloc-4"',
    span: [11, 12],
    hint: 'An offset into a function is written FUNCTION+OFFSET, for example malloc+0x10',
  },
  {
    spec: 'libc:str[cn',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected "]" to close the "[" in "str[cn"',
    span: [8, 11],
  },
  {
    spec: 'libc:@0xzz',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a file offset after "@"',
    span: [6, 10],
  },
  {
    spec: 'app:main:42',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a file name with an extension before ":42"',
    span: [4, 8],
    hint: 'Write a source line as FILE:LINE, for example main.c:42',
  },
  {
    spec: 'app:main.c:x',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a line number after "main.c:"',
    span: [11, 12],
  },
  {
    spec: 'app:main.c:0',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a probe at line 0 of "main.c": lines start at 1',
    span: [11, 12],
  },
  {
    spec: 'r:libc:malloc+0x10',
    code: 'ERR_SPEC_INVALID',
    message:
      'Cannot place a return probe at "malloc+0x10": return probes go on a function entry, not at an offset into it',
    span: [13, 18],
    hint: 'Write a return probe as r:TARGET:FUNCTION, for example r:libc:malloc',
  },
  {
    spec: 'r:app:main.c:42',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a return probe at "main.c:42": return probes go on a function entry',
    span: [6, 15],
  },
  {
    spec: 'r:app:0x401136',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a return probe at "0x401136": return probes go on a function entry',
    span: [6, 14],
  },
  {
    spec: 'u:python3:function__entry',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a USDT probe at "function__entry": a USDT probe is named PROVIDER:NAME',
    span: [10, 25],
    hint: 'Write a USDT probe as u:TARGET:PROVIDER:NAME, for example u:python3:python:function__entry',
  },
  {
    spec: 'p:python3:python:function__entry',
    code: 'ERR_SPEC_INVALID',
    message:
      'Cannot place an entry probe at USDT probe "python:function__entry": USDT probes take the kind u',
    span: [0, 1],
  },
  {
    spec: 'libc:malloc ret=retval',
    code: 'ERR_SPEC_INVALID',
    message:
      'Cannot fetch retval in an entry probe: a return value exists only when a function returns',
    span: [16, 22],
    hint: 'Write a return probe: r:libc:malloc',
  },
  {
    spec: 'libc:malloc a=arg0 a=arg1',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot name two fetches "a": each fetch needs its own name',
    span: [19, 20],
  },
  {
    spec: 'libc:malloc arg2=arg0 %rsi',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot name fetch 2 "arg2" by its position: another fetch has that name',
    span: [22, 26],
  },
  {
    spec: 'libc:f arg16',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot fetch "arg16": arguments go from arg0 to arg15',
    span: [7, 12],
  },
  {
    spec: 'libc:malloc+0x100000000',
    code: 'ERR_SPEC_INVALID',
    message:
      'Cannot place a probe at "malloc+0x100000000": an offset into a function must be below 0x100000000',
    span: [11, 23],
  },
  {
    spec: 'libc:f comm:u32',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot fetch comm as u32: comm is the thread name, a string',
    span: [12, 15],
  },
  {
    spec: 'libc:f %rid',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unknown register "%rid"',
    span: [7, 11],
    hint: 'Did you mean %rdi?',
  },
  {
    spec: 'libc:f arg0:u65',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unknown type "u65"',
    span: [12, 15],
    hint: 'Types are s8, s16, s32, s64, u8, u16, u32, u64, x8, x16, x32, x64, string, ustring, ptr, char, bool',
  },
  {
    spec: 'libc:f +8(arg0',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected ")" after "+8(arg0"',
    span: [14, 14],
  },
  {
    spec: 'libc:f +8arg0',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected "(" after "+8"',
    span: [9, 10],
  },
  {
    spec: 'libc:f $retval',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "$" in fetch "$retval"',
    span: [7, 8],
    hint: 'Write retval without "$"',
  },
  {
    spec: 'libc:f $arg1',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "$" in fetch "$arg1"',
    span: [7, 8],
    hint: "upscope counts arguments from arg0: write arg0 for the kernel's $arg1",
  },
  {
    spec: 'libc:f arg0->len',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "->" after "arg0": only a variable has fields',
    span: [11, 13],
  },
  {
    spec: 'libc:f req->',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a field name after "req->"',
    span: [12, 12],
  },
  {
    spec: 'libc:f 1x=arg0',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "1" in fetch name "1x"',
    span: [7, 8],
  },
  {
    spec: 'libc:f x=',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: expected a fetch after "x="',
    span: [9, 9],
  },
  {
    spec: 'libc:mall*+4',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot place a probe at "mall*+4": an offset needs one function, not a pattern',
    span: [10, 12],
  },
  {
    spec: 'libc:[z-a]*',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot match pattern "[z-a]*": the range "z-a" runs backwards',
    span: [5, 10],
  },
  {
    spec: 'libc:f +0(comm)',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot dereference comm: it is the thread name, not an address',
    span: [10, 14],
  },
  {
    spec: 'libc:f common_pid=arg0',
    code: 'ERR_SPEC_INVALID',
    message:
      'Cannot name a fetch "common_pid": names starting with "common_" or "__probe_" are reserved',
    span: [7, 17],
  },
  {
    spec: 'app:operator new(unsigned long)',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected "(" after "new"',
    span: [16, 17],
    hint: `Quote a location that has spaces or special characters, and the spec for the shell: "app:'operator new(unsigned long)'"`,
  },
  {
    spec: "'app':main",
    code: 'ERR_SPEC_SYNTAX',
    message: `Cannot parse probe spec: a target cannot be quoted: "'app'"`,
    span: [0, 5],
  },
  {
    spec: 'app:a:::b',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: unexpected ":::" in location "a:::b"',
    span: [5, 8],
  },
  {
    spec: 'libc:mem*@GLIBC_2.2.5',
    code: 'ERR_SPEC_SYNTAX',
    message: 'Cannot parse probe spec: a pattern cannot name a symbol version: "mem*@GLIBC_2.2.5"',
    span: [9, 21],
  },
  {
    spec: 'libc:f +99999999999999999999(arg0)',
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot read memory at offset "+99999999999999999999": it does not fit in 64 bits',
    span: [7, 28],
  },
  {
    spec: `libc:f ${'+8('.repeat(17)}arg0${')'.repeat(17)}`,
    code: 'ERR_SPEC_INVALID',
    message: 'Cannot dereference this deep: the limit is 16 nested dereferences',
    span: [55, 58],
  },
];

describe('parseSpec() on malformed specs', () => {
  for (const c of MALFORMED) {
    test(`reports ${c.code} at ${c.span[0]}..${c.span[1]} for ${JSON.stringify(c.spec)}`, () => {
      const { spec, diagnostics } = parseSpec(c.spec);
      assert.equal(spec, undefined);
      const first = diagnostics[0];
      assert.ok(first !== undefined);
      assert.equal(first.severity, 'error');
      assert.equal(first.code, c.code);
      assert.equal(first.message, c.message);
      assert.deepEqual(first.span, sp(c.span[0], c.span[1]));
      if (c.hint !== undefined) assert.ok(first.hints.includes(c.hint), first.hints.join('\n'));
    });
  }

  test('has messages in the house style: failed action first, colon, no final period', () => {
    for (const c of MALFORMED) {
      for (const d of parseSpec(c.spec).diagnostics) {
        assert.match(d.message, /^Cannot \S.*: \S/, d.message);
        assert.doesNotMatch(d.message, /\.$/, d.message);
        for (const hint of d.hints) assert.match(hint, /^([A-Z]|upscope )/, hint);
      }
    }
  });

  test('reports an error in each broken fetch, not only the first', () => {
    const { diagnostics } = parseSpec('libc:f %rdz arg0 x:u65');
    assert.deepEqual(
      diagnostics.map((d) => d.span),
      [sp(7, 11), sp(19, 22)],
    );
  });

  test('suggests the nearest register and type', () => {
    const hintsOf = (text: string) => parseSpec(text).diagnostics[0]?.hints ?? [];
    assert.deepEqual(hintsOf('x:f %rid'), ['Did you mean %rdi?']);
    // rax and rsi are both one edit away; the one sharing the longer prefix is offered.
    assert.deepEqual(hintsOf('x:f %RSX'), ['Did you mean %rsi?']);
    assert.deepEqual(hintsOf('x:f %r16'), ['Did you mean %r10?']);
    assert.equal(hintsOf('x:f arg0:strng')[0], 'Did you mean string?');
    assert.equal(hintsOf('x:f %zzzzzz').filter((h) => h.startsWith('Did you mean')).length, 0);
  });
});

describe('parseSpec() warnings', () => {
  test('warns when a variable is named like a register but still returns the spec', () => {
    const { spec, diagnostics } = parseSpec('libc:f rdi');
    assert.ok(spec !== undefined);
    assert.deepEqual(diagnostics, [
      {
        severity: 'warning',
        code: 'ERR_SPEC_INVALID',
        message: 'Reading "rdi" as a variable, not a register',
        span: sp(7, 10),
        hints: ['Write %rdi for the register'],
      },
    ]);
  });

  test('warns when a one-letter target looks like a mistyped kind', () => {
    const { spec, diagnostics } = parseSpec('e:libc:malloc');
    assert.equal(spec?.kind, 'usdt');
    assert.equal(diagnostics[0]?.severity, 'warning');
    assert.deepEqual(diagnostics[0]?.span, sp(0, 1));
  });
});

describe('parseSpecOrThrow()', () => {
  test('returns the spec when there is no error', () => {
    assert.equal(parseSpecOrThrow('libc:malloc').location.type, 'symbol');
  });

  test('throws a ProbeError with the source span and hints of the first error', () => {
    const err = (() => {
      try {
        parseSpecOrThrow('r:libc:malloc+4 x=arg0');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    assert.ok(err instanceof ProbeError);
    assert.equal(err.code, 'ERR_SPEC_INVALID');
    assert.equal(err.category, 'usage');
    assert.deepEqual(err.source, { text: 'r:libc:malloc+4 x=arg0', span: sp(13, 15) });
    assert.equal(
      renderError(err),
      [
        'error[ERR_SPEC_INVALID]: Cannot place a return probe at "malloc+4": return probes go on a function entry, not at an offset into it',
        '  r:libc:malloc+4 x=arg0',
        '               ^^',
        '  hint: Write a return probe as r:TARGET:FUNCTION, for example r:libc:malloc',
        '  hint: For a probe at that instruction write p:libc:malloc+4',
      ].join('\n'),
    );
  });
});

describe('registerInfo()', () => {
  test('maps sub-registers to their 64-bit register and kernel short names to the whole register', () => {
    assert.deepEqual(registerInfo('EAX'), { name: 'eax', base: 'rax', bits: 32, shift: 0 });
    assert.deepEqual(registerInfo('ah'), { name: 'ah', base: 'rax', bits: 8, shift: 8 });
    assert.deepEqual(registerInfo('r9w'), { name: 'r9w', base: 'r9', bits: 16, shift: 0 });
    assert.deepEqual(registerInfo('sil'), { name: 'sil', base: 'rsi', bits: 8, shift: 0 });
    assert.deepEqual(registerInfo('ax'), { name: 'ax', base: 'rax', bits: 64, shift: 0 });
    assert.deepEqual(registerInfo('ip'), { name: 'ip', base: 'rip', bits: 64, shift: 0 });
    assert.equal(registerInfo('xmm0'), undefined);
  });
});
