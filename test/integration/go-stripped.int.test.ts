// Go programs stripped of their symbol table (`go build -ldflags='-s -w'`, as release builds
// and Debian's are): their functions are named by the pclntab Go's runtime keeps. The truth
// is nm on the same program built with its symbol table (the same code at the same
// addresses), the program's own counts, and Debian's stripped `go` command.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  mkdtempSync,
  openSync,
  realpathSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, test } from 'node:test';
import { compileGo, countOn, findGo, programCounts } from '../helpers/go.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

/** go-returns built with its symbol table, and without it (nor DWARF). */
function builds(t: Parameters<typeof requireHost>[0]) {
  const go = findGo();
  if (!requireHost(t, { root: true, commands: go === undefined ? ['go', 'nm'] : ['nm'] })) {
    return undefined;
  }
  return {
    go: go!,
    full: compileGo(go!, 'go-returns'),
    stripped: compileGo(go!, 'go-returns', { ldflags: '-s -w' }),
  };
}

interface Listed {
  symbol: string;
  vaddr: string;
  sizeBytes: number;
}

test('list of a stripped Go program: every function nm finds in its unstripped build, at its address, of its size', (t) => {
  const b = builds(t);
  if (b === undefined) return;
  const sections = execFileSync('readelf', ['-S', '-W', b.stripped], { encoding: 'utf8' });
  assert.doesNotMatch(sections, /\s\.symtab\s/, 'the build has no symbol table');
  const result = runCli(['list', '--json', b.stripped]);
  assert.equal(result.status, 0, result.stderr);
  const listing = JSON.parse(result.stdout) as {
    stripped: boolean;
    goPclntab: boolean;
    functions: Listed[];
  };
  assert.equal(listing.stripped, false);
  assert.equal(listing.goPclntab, true);
  // Functions with a size (runtime.text and runtime.etext mark the text's ends); a name may
  // hold spaces (type..eq.struct { runtime.gList; runtime.n int32 }).
  const nm = execFileSync('nm', ['-S', '--defined-only', b.full], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /^([0-9a-f]+) ([0-9a-f]+) [Tt] (.+)$/.exec(line))
    .filter((m) => m !== null)
    .map((m) => ({ vaddr: BigInt(`0x${m[1]}`), size: Number(`0x${m[2]}`), name: m[3]! }));
  assert.ok(nm.length > 1000, `nm lists ${nm.length} functions`);
  const byAddress = new Map(listing.functions.map((f) => [BigInt(f.vaddr), f]));
  assert.equal(listing.functions.length, nm.length, 'as many functions as nm lists');
  for (const sym of nm) {
    const listed = byAddress.get(sym.vaddr);
    assert.ok(listed !== undefined, `${sym.name} at 0x${sym.vaddr.toString(16)} is listed`);
    assert.equal(listed.sizeBytes, sym.size, `${sym.name}: its size`);
    // The pclntab names an assembly function without the ABI suffix the symbol table gives
    // it (runtime.rt0_go.abi0), and an array type's equality function without its length.
    const name = sym.name.replace(/\.abi0$/, '');
    if (name.startsWith('type..eq.')) assert.match(listed.symbol, /^type\.\.eq\./, name);
    else assert.equal(listed.symbol, name);
  }
  // A name it does not hold: said where names were looked for, with the nearest.
  const missing = runCli(['resolve', `${b.stripped}:main.dep`]);
  assert.equal(missing.status, 3, missing.stderr);
  assert.match(
    missing.stderr,
    /^error\[ERR_SYMBOL_NOT_FOUND\]: Cannot resolve symbol "main\.dep" in ".*": not in its \.gopclntab \(a stripped Go program: its Go functions by the names its runtime gives them\)$/m,
  );
  assert.match(missing.stderr, /main\.deep/, 'the nearest name is suggested');
  const text = runCli(['list', b.stripped, 'main.*']);
  assert.equal(text.status, 0, text.stderr);
  assert.match(text.stdout, /^0x?[0-9a-f]+ .* main\.deep$/m);
  assert.match(text.stdout, /functions in .* \(stripped Go program: named by its \.gopclntab\)$/m);
});

test('count on a stripped Go program, bpf and ptrace: calls, returns and the calls a panic unwound, as the program counts them', (t) => {
  const b = builds(t);
  if (b === undefined) return;
  /** The program's own counts, from its line starting with `word`. */
  const own = (stdout: string, word: string) => {
    const line = stdout.split('\n').find((l) => l.startsWith(`${word} `));
    assert.ok(line !== undefined, stdout);
    return programCounts(line);
  };
  for (const engine of ['bpf', 'ptrace'] as const) {
    const deep = countOn(engine, `${b.stripped} deep 3`, [
      `${b.stripped}:main.deep`,
      `r:${b.stripped}:main.deep`,
    ]);
    const d = own(deep.result.stdout, 'deep');
    assert.deepEqual(
      deep.byProbe,
      { 'main.deep': d['calls'], 'r:main.deep': d['returns'] },
      engine,
    );
    const panic = countOn(engine, `${b.stripped} panic 20`, [`r:${b.stripped}:main.mayPanic`]);
    const p = own(panic.result.stdout, 'panic');
    assert.deepEqual(
      panic.byProbe,
      { 'r:main.mayPanic': p['returns'], 'r:main.mayPanic (unwound)': p['calls']! - p['returns']! },
      engine,
    );
  }
});

test('count --by ustack on stripped Go programs (one with cgo), bpf and ptrace: the stacks of their unstripped builds, walked by the pclntab', (t) => {
  const b = builds(t);
  if (b === undefined) return;
  // With cgo, C's objects bring an .eh_frame, which covers none of the Go code.
  const cgo = {
    full: compileGo(b.go, 'go-cgo', { cgo: true }),
    stripped: compileGo(b.go, 'go-cgo', { cgo: true, ldflags: '-s -w' }),
  };
  for (const engine of ['bpf', 'ptrace'] as const) {
    /** The stacks and their counts, frames without the file name and `.abi0`. */
    const stacks = (app: string, args: string, where: string) => {
      const { rows } = countOn(engine, `${app}${args}`, [`${app}:${where}`], ['--by', 'ustack']);
      return rows
        .map(
          (r) =>
            `${r.count} ${r.frames!.map((f) => f.replace(/ \(.*\)$/, '').replace('.abi0+', '+')).join(' < ')}`,
        )
        .sort();
    };
    const cases: { app: { full: string; stripped: string }; args: string; where: string }[] = [
      { app: b, args: ' deep 2', where: 'main.deep' },
      { app: cgo, args: '', where: 'main.goAdd3' },
    ];
    for (const { app, args, where } of cases) {
      // The unstripped build's stacks come from the .debug_frame Go's linker writes.
      const full = stacks(app.full, args, where);
      const stripped = stacks(app.stripped, args, where);
      const what = `${engine}: ${where}`;
      assert.ok(full.length > 0, what);
      for (const stack of full) {
        assert.match(
          stack,
          / < runtime\.main\+0x[0-9a-f]+ < runtime\.goexit\+0x1$|main\.runDeep\.func2\+0x[0-9a-f]+ < runtime\.goexit\+0x1$/,
          what,
        );
      }
      assert.deepEqual(stripped, full, what);
    }
  }
});

test("Debian's go command (stripped): its functions listed and probed by name", (t) => {
  const go = findGo();
  if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return;
  // The go command itself: Debian's golang-go builds it without a symbol table.
  const command = realpathSync(go!);
  const sections = execFileSync('readelf', ['-S', '-W', command], { encoding: 'utf8' });
  assert.doesNotMatch(sections, /\s\.symtab\s/, `${command} is stripped, as Debian builds it`);
  const listed = runCli(['list', command, 'main.main']);
  assert.equal(listed.status, 0, listed.stderr);
  assert.match(listed.stdout, / main\.main$/m);
  // `go version` runs main.main once, and prints the version its own build info holds.
  const { result: run, rows } = countOn('bpf', `${command} version`, [
    `${command}:main.main`,
    `${command}:runtime.newproc`,
  ]);
  assert.match(run.stdout, /^go version go\d+\.\d+/m);
  assert.deepEqual(
    rows.filter((r) => r.probe.startsWith('main.')),
    [{ probe: 'main.main', count: 1 }],
    run.stdout,
  );
  // runtime.newproc is two functions in the pclntab (the function, and its ABI0 wrapper that
  // assembly calls: `.abi0` in a symbol table): both probed, each named with its address.
  const newproc = rows.filter((r) => /^runtime\.newproc \(0x[0-9a-f]+\)$/.test(r.probe));
  assert.equal(newproc.length, 2, run.stdout);
  assert.ok(newproc.reduce((n, r) => n + r.count, 0) > 0, `goroutines were started: ${run.stdout}`);
});

test('a stripped Go program whose pclntab is cut short: one line says so, and nothing runs', (t) => {
  const b = builds(t);
  if (b === undefined) return;
  const dir = mkdtempSync(join(tmpdir(), 'upscope-go-stripped-'));
  try {
    const bad = join(dir, 'bad');
    copyFileSync(b.stripped, bad);
    chmodSync(bad, 0o755);
    // The function count (8 bytes into the table, offset from readelf) made 2^31 - 1.
    const line = execFileSync('readelf', ['-S', '-W', bad], { encoding: 'utf8' })
      .split('\n')
      .find((l) => l.includes(' .gopclntab '))!;
    const offset = Number.parseInt(/PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)/.exec(line)![1]!, 16);
    const fd = openSync(bad, 'r+');
    writeSync(fd, Buffer.from([0xff, 0xff, 0xff, 0x7f]), 0, 4, offset + 8);
    closeSync(fd);
    for (const args of [
      ['list', bad],
      ['count', '-c', `${bad} deep 1`, `${bad}:main.deep`],
    ]) {
      const run = runCli(args);
      assert.notEqual(run.status, 0, run.stdout);
      assert.match(
        run.stderr,
        /^error\[ERR_ELF_INVALID\]: Cannot read ELF file ".*": its \.gopclntab at 0x[0-9a-f]+ is not a Go pclntab: 2147483647 functions$/m,
      );
      assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
      assert.doesNotMatch(run.stdout, /deep calls/, 'the command was not run');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
