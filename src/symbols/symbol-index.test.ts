import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileProgram } from '../../test/helpers/compile.js';
import { requireHost, STRICT } from '../../test/helpers/require-host.js';
import { compileRust, findRustc } from '../../test/helpers/rustc.js';
import { tool } from '../../test/helpers/tools.js';
import { globToRegExp } from '../spec/glob.js';
import { demangle } from './demangle.js';
import { openElf } from './elf/index.js';
import {
  functionDisplayName,
  identifiersOf,
  mangledOnly,
  requiredFragments,
  SymbolIndex,
} from './symbol-index.js';

const LIBC = '/usr/lib/x86_64-linux-gnu/libc.so.6';
const SAMPLE = new URL('../../sample/app.c', import.meta.url).pathname;

/** name -> [address, size] of the defined functions readelf lists in one table. */
function readelfFunctions(path: string, dynamic: boolean): Map<string, [bigint, bigint]> {
  const out = tool('readelf', [dynamic ? '--dyn-syms' : '-s', '-W', path]);
  const found = new Map<string, [bigint, bigint]>();
  for (const line of out.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8 || !/^\d+:$/.test(f[0]!) || f[6] === 'UND' || f[3] !== 'FUNC') continue;
    found.set(f[7]!, [BigInt(`0x${f[1]}`), BigInt(f[2]!)]);
  }
  return found;
}

test('SymbolIndex finds the function holding any address of its body, as readelf sizes it', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
  const app = compileProgram(SAMPLE, { flags: ['-O2'] });
  const elf = openElf(app);
  try {
    const index = new SymbolIndex(elf);
    const functions = readelfFunctions(app, false);
    for (const name of ['main', 'parse_request', 'checksum', 'handle_request']) {
      const [start, size] = functions.get(name)!;
      for (const address of [start, start + size / 2n, start + size - 1n]) {
        assert.equal(index.containing(address)?.name, name, `0x${address.toString(16)}`);
      }
      assert.notEqual(index.containing(start + size)?.name, name, 'the byte after the end');
      assert.deepEqual(
        index.named(name).map((fn) => [fn.vaddr, fn.sizeBytes]),
        [[start, size]],
      );
    }
    const sorted = index.functions.map((fn) => fn.vaddr);
    assert.deepEqual(
      sorted,
      [...sorted].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    );
  } finally {
    elf.close();
  }
});

test('SymbolIndex gives every alias at an address and prefers the global name', (t) => {
  if (!requireHost(t, { commands: ['readelf'] })) return;
  const elf = openElf(LIBC);
  try {
    const index = new SymbolIndex(elf);
    assert.equal(index.stripped, true);
    const [malloc] = readelfFunctions(LIBC, true).get('malloc@@GLIBC_2.2.5')!;
    const expected = [...readelfFunctions(LIBC, true)]
      .filter(([, [address]]) => address === malloc)
      .map(([name]) => name)
      .sort();
    assert.deepEqual(
      index
        .at(malloc)
        .map((fn) => functionDisplayName(fn))
        .sort(),
      expected,
    );
    assert.equal(functionDisplayName(index.containing(malloc + 5n)!), 'malloc@@GLIBC_2.2.5');
  } finally {
    elf.close();
  }
});

test('SymbolIndex row accessors agree with the objects it builds', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const elf = openElf(compileProgram(SAMPLE, { flags: ['-O0', '-no-pie'] }));
  try {
    const index = new SymbolIndex(elf);
    for (let k = 0; k < index.length; k++) {
      const fn = index.function(k);
      assert.equal(BigInt(index.vaddrAt(k)), fn.vaddr);
      assert.equal(BigInt(index.sizeAt(k)), fn.sizeBytes);
      assert.equal(BigInt(index.fileOffsetAt(k)!), fn.fileOffset);
      assert.equal(BigInt(index.fileOffsetAt(k)!), elf.vaddrToFileOffset(fn.vaddr));
      assert.equal(index.bindingAt(k), fn.binding);
      const bytes = new Uint8Array(index.nameLengthAt(k));
      index.copyNameAt(k, bytes, 0);
      assert.equal(
        Buffer.from(bytes).toString() + index.versionSuffixAt(k),
        functionDisplayName(fn),
      );
    }
  } finally {
    elf.close();
  }
});

test('A pattern that starts as a mangled name matches, without demangling, what matching every form of the names does', (t) => {
  if (!requireHost(t, { commands: ['nm'] })) return;
  // Node's own binary: tens of thousands of C++ functions, with .cold, .part and .isra clones.
  const elf = openElf(process.execPath);
  try {
    const index = new SymbolIndex(elf);
    const patterns = [
      '_ZN2v88internal8compiler*',
      '_ZNK2v88internal*',
      '_Z2*',
      '_Z2*part*',
      '_Z2*E',
      '_ZN[1-9S]*',
      '_Z*',
    ];
    for (const glob of patterns) {
      assert.ok(mangledOnly(glob), glob);
      const re = globToRegExp(glob);
      const stored: number[] = [];
      const openEnd = glob.endsWith('*');
      for (let k = 0; k < index.length; k++) {
        if (index.matchesStoredAt(k, re, openEnd)) stored.push(k);
      }
      assert.ok(stored.length > 0, `${glob} matches some function of node`);
      const all: number[] = [];
      for (let k = 0; k < index.length; k++) if (index.matchesAt(k, re)) all.push(k);
      assert.deepEqual(stored, all, glob);
    }
  } finally {
    elf.close();
  }
  for (const glob of ['*', 'v8::*', '_start', 'main', '_*', '*_ZN2v8*', '?ZN2v8*', '[_]Z*']) {
    assert.ok(!mangledOnly(glob), `${glob} may match a demangled name`);
  }
});

test('coldPartsOf() finds the .cold part of every function nm lists one for, and none for the others', (t) => {
  if (!requireHost(t, { commands: ['nm'] })) return;
  const names = new Set(
    tool('nm', ['--defined-only', process.execPath])
      .split('\n')
      .map((line) => line.split(' ')[2])
      .filter((name): name is string => name !== undefined && name !== ''),
  );
  const elf = openElf(process.execPath);
  try {
    const index = new SymbolIndex(elf);
    let withCold = 0;
    for (let k = 0; k < index.length; k++) {
      const name = index.function(k).name;
      const expected = names.has(`${name}.cold`) ? [`${name}.cold`] : [];
      if (expected.length > 0) withCold++;
      assert.deepEqual(
        index.coldPartsOf(name).map((fn) => fn.name),
        expected,
        name,
      );
    }
    assert.ok(withCold > 0, 'node has functions with a .cold part');
  } finally {
    elf.close();
  }
});

test('demangleSome() names the functions asked for as demangle() does one by one, and leaves the others to be named when read', (t) => {
  if (!requireHost(t, { commands: ['nm'] })) return;
  const elf = openElf(process.execPath);
  try {
    const index = new SymbolIndex(elf);
    // Every 97th function, and the first ones (C names, not mangled).
    const asked = [0, 1, 2, ...Array.from({ length: 800 }, (_, i) => i * 97)].filter(
      (k) => k < index.length,
    );
    index.demangleSome(asked);
    for (const k of asked) {
      const fn = index.function(k);
      assert.equal(fn.demangled, demangle(fn.name), fn.name);
    }
    assert.ok(asked.filter((k) => index.function(k).demangled !== undefined).length > 400);
    // One not asked for is demangled when read, the same as a fresh index does it.
    const other = asked[asked.length - 1]! - 1;
    assert.equal(index.demangledAt(other), new SymbolIndex(elf).demangledAt(other));
  } finally {
    elf.close();
  }
});

// A spec looks up a name or two: the first lookups scan the names' bytes, and only after 16
// is a map of every name made (it took 100 ms for node's). Both give what readelf lists.
test('SymbolIndex finds a name, and its GCC clones, by a scan and by a map alike, as readelf lists them', (t) => {
  const NODE = '/usr/bin/node';
  if (!requireHost(t, { commands: ['readelf'] })) return;
  /** Distinct addresses of the defined functions readelf lists under each name. */
  const listed = new Map<string, Set<bigint>>();
  for (const line of tool('readelf', ['-s', '-W', NODE]).split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8 || !/^\d+:$/.test(f[0]!) || f[6] === 'UND' || f[3] !== 'FUNC') continue;
    const addresses = listed.get(f[7]!) ?? new Set<bigint>();
    addresses.add(BigInt(`0x${f[1]}`));
    listed.set(f[7]!, addresses);
  }
  const names = [...listed.keys()];
  const shared = names.filter((name) => listed.get(name)!.size > 1).slice(0, 5);
  const cloned = [
    ...new Set(
      names
        .filter((name) => /\.(isra|cold|part|constprop)\b/.test(name))
        .map((n) => n.split('.')[0]!),
    ),
  ]
    .filter((base) => listed.has(base))
    .slice(0, 5);
  assert.equal(shared.length, 5, 'node has static functions that share a name');
  assert.equal(cloned.length, 5, 'node has functions with GCC clones');
  const plain = names.filter((_, i) => i % 9000 === 0);
  // No such function, though it begins names that are ('uv_ru' of uv_run).
  const asked = [...shared, ...cloned, ...plain, 'uv_run', 'uv_ru', 'no_such_function_here'];
  const addresses = (fns: readonly { vaddr: bigint }[]) =>
    fns.map((fn) => fn.vaddr).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const elf = openElf(NODE);
  try {
    const answers = (index: SymbolIndex) =>
      asked.map((name) => [addresses(index.named(name)), addresses(index.clonesOf(name))]);
    const scanned = answers(new SymbolIndex(elf, { lookupsBeforeMaps: Infinity }));
    const mapped = answers(new SymbolIndex(elf, { lookupsBeforeMaps: 0 }));
    assert.deepEqual(scanned, mapped);
    asked.forEach((name, i) => {
      const [named, clones] = mapped[i]!;
      assert.deepEqual(
        named,
        [...(listed.get(name) ?? [])].sort((a, b) => (a < b ? -1 : 1)),
        name,
      );
      // Every clone readelf lists under `${name}.SUFFIX` is found.
      const expected = new Set(
        names
          .filter(
            (n) =>
              n.startsWith(`${name}.`) &&
              /^\.(isra|cold|part|constprop|lto_priv)/.test(n.slice(name.length)),
          )
          .flatMap((n) => [...listed.get(n)!]),
      );
      for (const address of expected)
        assert.ok(clones!.includes(address), `${name}: 0x${address.toString(16)}`);
      if (cloned.includes(name)) assert.ok(expected.size > 0, name);
    });
  } finally {
    elf.close();
  }
});

// By a demangled name, a lookup demangles only the names that spell out every identifier of
// its qualified name (identifiersOf()), not all of them (500 ms for node's): what it finds is
// what a map of every demangled name finds, for names of C++ (node, libstdc++: std's
// abbreviations, operators, constructors, destructors, templates, lambdas, anonymous
// namespaces, clones) and Rust, whole, without parameters and as a clone's base.
test('A function found by its demangled name is the one a map of every demangled name finds', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const files = ['/usr/bin/node', '/usr/lib/x86_64-linux-gnu/libstdc++.so.6'];
  const rustc = findRustc();
  if (rustc !== undefined) {
    for (const flags of [[], ['-C', 'symbol-mangling-version=v0']]) {
      files.push(compileRust(rustc, 'rust-names', ['-C', 'opt-level=1', ...flags]));
    }
  } else if (STRICT) assert.fail('rustc is needed to check Rust names');
  for (const file of files) {
    const elf = openElf(file);
    try {
      const mapped = new SymbolIndex(elf, { lookupsBeforeMaps: 0 });
      const scanned = new SymbolIndex(elf, { lookupsBeforeMaps: Infinity });
      const every = Math.max(1, Math.floor(mapped.length / 300));
      const asked = new Set<string>();
      for (let k = 0; k < mapped.length; k += every) {
        const demangled = mapped.demangledAt(k);
        if (demangled === undefined) continue;
        asked.add(demangled);
        const base = demangled.replace(/ \[clone [^\]]*\]$/, '');
        asked.add(base);
        const open = base.indexOf('(');
        if (open > 0) asked.add(base.slice(0, open));
      }
      assert.ok(asked.size > 200, `${file}: ${asked.size} names`);
      let found = 0;
      for (const name of asked) {
        const expected = mapped.demangledNamed(name).map((fn) => fn.vaddr);
        assert.deepEqual(
          scanned.demangledNamed(name).map((fn) => fn.vaddr),
          expected,
          `${file}: ${name}`,
        );
        if (expected.length > 0) found++;
      }
      assert.ok(found > asked.size / 2, `${file}: ${found} of ${asked.size} found`);
    } finally {
      elf.close();
    }
  }
});

test('identifiersOf() takes the identifiers of a qualified name, not what brackets hold', () => {
  assert.deepEqual(identifiersOf('node::Environment::Environment(node::IsolateData*,int)'), [
    'node',
    'Environment',
    'Environment',
  ]);
  assert.deepEqual(identifiersOf('std::vector<int,std::allocator<int>>::~vector()'), [
    'vector',
    'vector',
  ]);
  assert.deepEqual(identifiersOf('(anonymousnamespace)::Foo::operator()(int)const'), ['Foo']);
  assert.deepEqual(identifiersOf('<alloc::vec::Vec<T>ascore::ops::drop::Drop>::drop'), ['drop']);
  assert.deepEqual(identifiersOf('foo()::{lambda(int)#1}::operator()(int)const'), ['foo']);
  assert.deepEqual(identifiersOf('operator new(unsigned long)'), []);
});

// A glob over demangled names demangles only the names that hold its requiredFragments()
// (`uv_*` over node's 86,000 names had them all demangled, 500 ms): it matches what
// demangling every name and matching each (matchesAt()) matches, for C++ (node, libstdc++)
// and Rust (legacy and v0) names, with globs made from their own names and ones that reach
// for what demanglers write themselves (`*alloc*` in `std::allocator<int>::~allocator()`).
test('A glob matches the functions matching every demangled name finds, demangling fewer', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const files: [string, number][] = [
    ['/usr/bin/node', 8],
    ['/usr/lib/x86_64-linux-gnu/libstdc++.so.6', 25],
  ];
  const rustc = findRustc();
  if (rustc !== undefined) {
    for (const flags of [[], ['-C', 'symbol-mangling-version=v0']]) {
      files.push([compileRust(rustc, 'rust-names', ['-C', 'opt-level=1', ...flags]), 40]);
    }
  } else if (STRICT) assert.fail('rustc is needed to check Rust names');
  for (const [file, samples] of files) {
    const elf = openElf(file);
    try {
      const reference = new SymbolIndex(elf);
      reference.demangleAll();
      const globs = new Set(['*alloc*', '*string*', '*lambda*', '*operator*', 'std::*', '*5u*']);
      for (const glob of ['*::~*', '*isra*', '*closure*', '*i32*', '*fmt*', '*[Ss]tart*']) {
        globs.add(glob);
      }
      const every = Math.max(1, Math.floor(reference.length / samples));
      for (let k = 0; k < reference.length; k += every) {
        const demangled = reference.demangledAt(k);
        if (demangled === undefined) continue;
        const words = demangled.match(/[A-Za-z_][A-Za-z0-9_]*/g) ?? [];
        if (words.length > 0) globs.add(`*${words.at(-1)}*`);
        if (words.length > 1) globs.add(`*${words[0]}*${words.at(-1)}*`);
        globs.add(`${demangled.slice(0, 8)}*`);
        globs.add(`*${demangled.slice(-10)}`);
      }
      let narrowed = 0;
      // One index for every glob: what one demangled does not change what another matches.
      const index = new SymbolIndex(elf);
      for (const glob of globs) {
        const pattern = globToRegExp(glob);
        const expected: number[] = [];
        for (let k = 0; k < reference.length; k++) {
          if (reference.matchesAt(k, pattern)) expected.push(k);
        }
        assert.deepEqual(index.matching(glob, pattern), expected, `${file}: ${glob}`);
        if (requiredFragments(glob).length > 0) narrowed++;
      }
      assert.ok(narrowed >= 10, `${file}: ${narrowed} of ${globs.size} narrowed`);
    } finally {
      elf.close();
    }
  }
});

test('requiredFragments() takes the literal runs no demangler writes of its own', () => {
  assert.deepEqual(requiredFragments('uv_*'), ['uv_']);
  assert.deepEqual(requiredFragments('node::*Environment*'), ['node', 'Environment']);
  // Parts of words demanglers write, numbers and what follows them, and classes: none.
  assert.deepEqual(requiredFragments('*alloc*'), []);
  assert.deepEqual(requiredFragments('*operator()*'), []);
  assert.deepEqual(requiredFragments('foo<5u>*'), ['foo']);
  assert.deepEqual(requiredFragments('_ZN[1-9S]*'), ['_ZN']);
  assert.deepEqual(requiredFragments('*'), []);
  // A class's members are not literal: `]` first is one of them.
  assert.deepEqual(requiredFragments('*[!]abc]Widget*'), ['Widget']);
  assert.deepEqual(requiredFragments('*[]xyz]Start*'), ['Start']);
  assert.deepEqual(requiredFragments('*[Ss]tart*'), ['tart']);
});
