// Function symbols of separate debug files: a stripped file's functions are named from the
// .symtab of its debug file, found by build-id (libc6-dbg's libc, a --debug-dir) or by
// .gnu_debuglink, in `resolve` and `list`, as gdb, perf probe and bpftrace name them. Truth
// from readelf on the debug file and on the program before it was split.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { buildIdOf, splitDebug, symtabFunctions } from '../helpers/split-debug.js';
import { readelfFileOffset } from '../helpers/tools.js';

const LIBC = '/lib/x86_64-linux-gnu/libc.so.6';

interface JsonSite {
  symbol: string;
  symbolFile?: string;
  vaddr: string;
  fileOffset: string;
  /** An entry probed past its first instructions (see resolve). */
  pastFirst?: { offset: string };
}

interface JsonListing {
  stripped: boolean;
  debugFile?: string;
  functions: { name: string; symbol: string; vaddr: string; binding: string; type: string }[];
}

function resolveJson(args: string[]): {
  sites: JsonSite[];
  errors: { code: string; hints: string[] }[];
} {
  const result = runCli(['resolve', '--json', ...args]);
  assert.equal(result.stderr.includes('ERR_INTERNAL'), false, result.stderr);
  return JSON.parse(result.stdout);
}

function listJson(args: string[]): JsonListing {
  const result = runCli(['list', '--json', ...args]);
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout);
}

/** libc6-dbg's debug file for this machine's libc, by its build-id (skip or fail without it). */
function libcDebugFile(t: { skip(reason: string): void; name: string }): string | undefined {
  const id = buildIdOf(LIBC);
  const path = `/usr/lib/debug/.build-id/${id.slice(0, 2)}/${id.slice(2)}.debug`;
  if (existsSync(path)) return path;
  const reason = `needs libc6-dbg (no ${path}): sudo bash scripts/setup-host.sh`;
  if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
  console.log(`# skipped "${t.name}": ${reason}`);
  t.skip(reason);
  return undefined;
}

describe("libc's debug symbols (libc6-dbg, by build-id)", () => {
  test("resolve libc:_int_malloc, a function only the debug file names, at readelf's address", (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const debug = libcDebugFile(t);
    if (debug === undefined) return;
    const truth = symtabFunctions(debug);
    for (const name of ['_int_malloc', '__strlen_evex', '__libc_start_call_main']) {
      const want = truth.filter((fn) => fn.name === name);
      assert.equal(want.length, 1, `readelf finds one ${name}`);
      const { sites, errors } = resolveJson([`libc:${name}`]);
      assert.deepEqual(errors, []);
      assert.equal(sites.length, 1);
      assert.equal(sites[0]!.symbol, name);
      assert.equal(sites[0]!.symbolFile, debug);
      // The probe is at the function's start, or past what resolve says it passed.
      const probed = BigInt(sites[0]!.vaddr);
      assert.equal(probed - BigInt(sites[0]!.pastFirst?.offset ?? 0), want[0]!.vaddr);
      assert.equal(BigInt(sites[0]!.fileOffset), readelfFileOffset(LIBC, probed));
    }
  });

  test("an IFUNC's implementations are named from the debug file, and probed (__strlen_evex, ...)", (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const debug = libcDebugFile(t);
    if (debug === undefined) return;
    // Probed at them, each by its name.
    const { sites, errors } = resolveJson(['libc:strlen']);
    assert.deepEqual(errors, []);
    const named = sites.map((site) => site.symbol!);
    // Every one a name, each a function of the debug file's .symtab of the strlen family.
    const strlens = new Set(
      symtabFunctions(debug)
        .map((fn) => fn.name)
        .filter((name) => name.startsWith('__strlen_')),
    );
    assert.ok(named.length >= 2, named.join(', '));
    for (const name of named) assert.ok(strlens.has(name), `${name} is a __strlen_ of readelf`);
    assert.ok(named.includes('__strlen_evex') && named.includes('__strlen_sse2'), named.join(', '));
  });

  test('list libc shows the functions of the debug file, with versions from libc itself', (t) => {
    if (!requireHost(t, { commands: ['readelf'] })) return;
    const debug = libcDebugFile(t);
    if (debug === undefined) return;
    const listing = listJson([LIBC, '_int_*']);
    assert.equal(listing.stripped, false);
    assert.equal(listing.debugFile, debug);
    const truth = symtabFunctions(debug).filter((fn) => fn.name.startsWith('_int_'));
    assert.ok(truth.length >= 4, 'readelf finds _int_malloc, _int_free, ...');
    assert.deepEqual(
      new Set(listing.functions.map((fn) => `${fn.symbol}@${BigInt(fn.vaddr)}`)),
      new Set(truth.map((fn) => `${fn.name}@${fn.vaddr}`)),
    );
    // An exported function keeps the version libc's own .dynsym gives it.
    const malloc = listJson([LIBC, 'malloc']).functions.find((fn) => fn.symbol === 'malloc');
    assert.equal(malloc?.name, 'malloc@@GLIBC_2.2.5');
    const table = runCli(['list', LIBC, '_int_malloc']);
    assert.match(
      table.stdout,
      new RegExp(`1 functions in ${LIBC} \\(.symtab of its debug file ${debug}\\)`),
    );
  });
});

/** The listing of a program as its unsplit build lists it, less what says where it came from. */
function functionsOf(listing: JsonListing): string[] {
  return listing.functions.map(
    (fn) => `${fn.vaddr} ${fn.binding} ${fn.type} ${fn.name} ${fn.symbol}`,
  );
}

describe('a program split into a stripped file and a debug file', () => {
  for (const how of ['debuglink', 'build-id'] as const) {
    test(`C (${how}): resolve and list name its static functions as the unsplit program does`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'objcopy', 'strip', 'readelf'] })) return;
      const full = compileProgram('split-names', { flags: ['-O2'] });
      const split = splitDebug(full, how);
      const dirs = split.debugDir === undefined ? [] : ['--debug-dir', split.debugDir];
      // Before: stripped, the static functions are not in .dynsym.
      assert.deepEqual(symtabFunctions(split.app), []);
      const truth = symtabFunctions(split.debug);
      for (const name of ['leaf_work', 'middle_step']) {
        const want = truth.find((fn) => fn.name === name);
        assert.ok(want, `readelf finds ${name} in the debug file`);
        const { sites, errors } = resolveJson([...dirs, `${split.app}:${name}`]);
        assert.deepEqual(errors, []);
        assert.equal(BigInt(sites[0]!.vaddr), want.vaddr);
        assert.equal(BigInt(sites[0]!.fileOffset), readelfFileOffset(split.app, want.vaddr));
        assert.equal(sites[0]!.symbolFile, split.debug);
      }
      const listing = listJson([...dirs, split.app]);
      assert.equal(listing.debugFile, split.debug);
      assert.deepEqual(functionsOf(listing), functionsOf(listJson([full])));
      // Without the debug file's directory, a build-id split is stripped, and says where it looked.
      if (how === 'build-id') {
        const stripped = runCli(['list', split.app]);
        assert.match(stripped.stdout, /\(stripped: .dynsym only\)/);
        const { errors } = resolveJson([`${split.app}:leaf_work`]);
        assert.equal(errors[0]?.code, 'ERR_SYMBOL_NOT_FOUND');
        assert.ok(
          errors[0]!.hints.some((h) =>
            h.includes(`/usr/lib/debug/.build-id/${buildIdOf(full).slice(0, 2)}/`),
          ),
          errors[0]!.hints.join('\n'),
        );
      }
    });
  }

  test('C++: the debug file names its functions, demangled, as the unsplit program does', (t) => {
    if (!requireHost(t, { commands: ['g++', 'objcopy', 'strip'] })) return;
    const full = compileProgram('cxx-names', { flags: ['-O2'] });
    const split = splitDebug(full, 'debuglink');
    const listing = listJson([split.app]);
    assert.equal(listing.debugFile, split.debug);
    assert.deepEqual(functionsOf(listing), functionsOf(listJson([full])));
    const names = listing.functions.map((fn) => fn.name);
    assert.ok(names.includes('(anonymous namespace)::helper(long)'), names.join('\n'));
    const { sites, errors } = resolveJson([`${split.app}:'(anonymous namespace)::helper'`]);
    assert.deepEqual(errors, []);
    const truth = symtabFunctions(split.debug).find((fn) => fn.name.includes('6helperEl'));
    assert.equal(BigInt(sites[0]!.vaddr), truth?.vaddr);
  });

  test('Rust: the debug file names its functions by their paths', (t) => {
    const rustc = findRustc();
    if (rustc === undefined) {
      if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
      t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
      return;
    }
    if (!requireHost(t, { commands: ['objcopy', 'strip'] })) return;
    const full = compileRust(rustc, 'rust-names', ['-C', 'opt-level=1']);
    const split = splitDebug(full, 'debuglink');
    const listing = listJson([split.app, 'rust_names::*']);
    assert.equal(listing.debugFile, split.debug);
    assert.deepEqual(functionsOf(listing), functionsOf(listJson([full, 'rust_names::*'])));
    const { sites, errors } = resolveJson([`${split.app}:rust_names::main`]);
    assert.deepEqual(errors, []);
    const truth = symtabFunctions(split.debug).find((fn) => fn.name.includes('10rust_names4main'));
    assert.equal(BigInt(sites[0]!.vaddr), truth?.vaddr);
  });

  test('a file with the name .gnu_debuglink gives but another build-id is not used', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objcopy', 'strip'] })) return;
    const full = compileProgram('split-names', { flags: ['-O2'] });
    const split = splitDebug(full, 'debuglink');
    const dir = mkdtempSync(join(tmpdir(), 'upscope-debuglink-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    const app = join(dir, 'split-names');
    copyFileSync(split.app, app);
    // The name .gnu_debuglink gives, on the debug file of another build of the program.
    const other = splitDebug(compileProgram('split-names', { flags: ['-O1'] }), 'debuglink');
    const link = split.debug.slice(split.debug.lastIndexOf('/') + 1);
    copyFileSync(other.debug, join(dir, link));
    assert.match(runCli(['list', app]).stdout, /\(stripped: .dynsym only\)/);
    const { errors } = resolveJson([`${app}:leaf_work`]);
    assert.ok(
      errors[0]!.hints.some((h) => /Not used: .*its build-id [0-9a-f]+ is not [0-9a-f]+/.test(h)),
      errors[0]!.hints.join('\n'),
    );
  });
});
