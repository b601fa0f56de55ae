// Fetching variables by name: the values each engine reads through DWARF must be the values
// test/programs/dwarf-vars.c prints just before each call.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { compileProgram, PROGRAMS } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { findRustc } from '../helpers/rustc.js';

const CALLS = 4;
const SEED = 6;

/** Each fetch and the name the target prints its value under. */
const FETCHES: readonly (readonly [fetch: string, field: string, printed: string])[] = [
  ['n', 'n', 'n'],
  ['size', 'size', 'size'],
  ['label:string', 'label', 'label'],
  ['req->id', 'req_id', 'id'],
  ['req->hdr.kind', 'req_hdr_kind', 'kind'],
  ['req->hdr.len', 'req_hdr_len', 'len'],
  ['req->name:string', 'req_name', 'name'],
  ['req->vals[2]', 'req_vals_2', 'vals2'],
  ['req->matrix[1][2]', 'req_matrix_1_2', 'm12'],
  ['c', 'c', 'c'],
  ['flag', 'flag', 'flag'],
  ['counter_global', 'counter_global', 'counter'],
];

const BUILDS: Record<string, string[]> = {
  '-O0': ['-O0'],
  '-O2': ['-O2'],
  '-O2 -gdwarf-4': ['-O2', '-gdwarf-4'],
  '-O2 -no-pie': ['-O2', '-no-pie'],
};

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
});

type Engine = 'tracefs' | 'ptrace' | 'bpf';

/**
 * `trace --json` of `command` with `spec` on `engine`, the program's output in upscope's: what
 * the program printed before each call (its `call name=value ...` lines, as records) and each
 * event's fields. Exits 0, with `calls` of each.
 */
function traceCalls(
  engine: Engine,
  command: string,
  spec: string,
  calls: number,
  options: readonly string[] = [],
): { printed: Record<string, string>[]; events: Record<string, unknown>[] } {
  const result = runCli([
    'trace',
    '--engine',
    engine,
    '--json',
    '--command-output',
    'inherit',
    ...options,
    '-c',
    command,
    spec,
  ]);
  assert.equal(result.status, 0, result.stderr);
  const lines = result.stdout.split('\n');
  const printed = lines
    .filter((l) => l.startsWith('call '))
    .map((l) =>
      Object.fromEntries([...l.slice(5).matchAll(/(\w+)=(\S*)/g)].map((m) => [m[1]!, m[2]!])),
    );
  const events = lines
    .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
    .map((l) => (JSON.parse(l) as { fields: Record<string, unknown> }).fields);
  assert.equal(printed.length, calls, result.stdout);
  assert.equal(events.length, calls, result.stdout);
  return { printed, events };
}

/** Traces dwarf-vars.c's calls with `engine`: each fetched value must be what it printed. */
function expectPrintedValues(engine: Engine, app: string, options: readonly string[] = []): void {
  const spec = `${app}:handle ${FETCHES.map(([fetch]) => fetch).join(' ')}`;
  const { printed, events } = traceCalls(engine, `${app} ${CALLS} ${SEED}`, spec, CALLS, options);
  for (let i = 0; i < CALLS; i++) {
    for (const [fetch, field, name] of FETCHES) {
      assert.equal(String(events[i]![field]), printed[i]![name], `call ${i}: ${fetch}`);
    }
  }
}

describe('trace with variables by name', () => {
  for (const engine of ['tracefs', 'ptrace', 'bpf'] as const) {
    for (const [label, flags] of Object.entries(BUILDS)) {
      test(`${engine}, ${label}: every fetched value is what the target passed`, (t) => {
        if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
        expectPrintedValues(engine, compileProgram('dwarf-vars', { flags }));
      });
    }
  }
});

/**
 * dwarf-vars.c built with -gsplit-dwarf (and `flags`) into a directory of its own: the
 * program and its .dwo file (which gcc names after the program).
 */
function splitBuild(flags: readonly string[]): { dir: string; app: string; dwo: string } {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-split-'));
  const app = join(dir, 'app');
  // Named relative to the build directory, as a build system names it: the .dwo is found
  // through the unit's compilation directory.
  execFileSync(
    'gcc',
    ['-g', '-gsplit-dwarf', ...flags, '-o', 'app', join(PROGRAMS, 'dwarf-vars.c')],
    {
      cwd: dir,
      stdio: 'pipe',
    },
  );
  const dwo = readdirSync(dir).find((name) => name.endsWith('.dwo'));
  assert.ok(dwo !== undefined, `gcc wrote no .dwo file in ${dir}`);
  return { dir, app, dwo: join(dir, dwo) };
}

describe('trace with variables by name, the debug info split into .dwo files (-gsplit-dwarf)', () => {
  for (const engine of ['tracefs', 'ptrace', 'bpf'] as const) {
    test(`${engine}, -O2: every fetched value is what the target passed, read from its .dwo`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
      const { dir, app, dwo } = splitBuild(['-O2']);
      try {
        // The program's own DWARF has no function: only the .dwo does.
        const own = execFileSync('readelf', ['--debug-dump=info,no-follow-links', app], {
          encoding: 'utf8',
        });
        assert.doesNotMatch(own, /DW_TAG_subprogram/);
        assert.match(own, /DW_AT_dwo_name/);
        assert.ok(existsSync(dwo));
        expectPrintedValues(engine, app);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  test('a .dwo moved with its program is found beside it', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const { dir, app, dwo } = splitBuild(['-O2']);
    const moved = mkdtempSync(join(tmpdir(), 'upscope-moved-'));
    try {
      const there = join(moved, 'app');
      renameSync(app, there);
      renameSync(dwo, join(moved, basename(dwo)));
      rmSync(dir, { recursive: true, force: true });
      expectPrintedValues('ptrace', there);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(moved, { recursive: true, force: true });
    }
  });

  test("DWARF 4 (GCC's extension of it: -gdwarf-4 -gsplit-dwarf), -O2: every fetched value is what the target passed, read from its .dwo", (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const { dir, app } = splitBuild(['-O2', '-gdwarf-4']);
    try {
      const own = execFileSync('readelf', ['--debug-dump=info,no-follow-links', app], {
        encoding: 'utf8',
      });
      assert.match(own, /DW_AT_GNU_dwo_name/);
      assert.doesNotMatch(own, /DW_TAG_subprogram/);
      expectPrintedValues('ptrace', app);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('its .dwo gone: one line says where the variables are and what to do', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const { dir, app, dwo } = splitBuild(['-O2']);
    try {
      rmSync(dwo);
      const result = runCli(['resolve', `${app}:handle n`]);
      assert.notEqual(result.status, 0);
      assert.match(
        result.stderr,
        /is split into a \.dwo file "app-dwarf-vars\.dwo" \(-gsplit-dwarf\), which is not in "\/[^"]*upscope-split-[^"]*" nor beside the program \(or is of another build\)$/m,
      );
      assert.match(result.stderr, /hint: Put "app-dwarf-vars\.dwo" beside /);
      assert.doesNotMatch(result.stderr, /\n\s+at /, 'no stack trace');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('Rust without optimization (-C opt-level=0), its debug info in the program or in .dwo files (-C split-debuginfo=unpacked)', () => {
  for (const split of [false, true]) {
    test(`${split ? 'in .dwo files' : 'in the program'}: each call's argument is the one main passed (read past the prologue LLVM marks)`, (t) => {
      if (!requireHost(t, { commands: ['readelf'] })) return;
      const rustc = findRustc();
      if (rustc === undefined) {
        assert.notEqual(process.env['CI'], 'true', 'rustc is needed under CI');
        t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
        return;
      }
      const dir = mkdtempSync(join(tmpdir(), 'upscope-rust-'));
      try {
        const flags = ['-C', 'opt-level=0', ...(split ? ['-C', 'split-debuginfo=unpacked'] : [])];
        execFileSync(rustc, ['-g', ...flags, '-o', 'app', join(PROGRAMS, 'rust-vars.rs')], {
          cwd: dir,
          stdio: 'pipe',
        });
        const app = join(dir, 'app');
        const own = execFileSync('readelf', ['--debug-dump=info,no-follow-links', app], {
          encoding: 'utf8',
          maxBuffer: 512 * 1024 * 1024,
        });
        assert.equal(/DW_AT_GNU_dwo_name/.test(own), split, 'readelf: the units name .dwo files');
        const result = runCli([
          'trace',
          '--engine',
          'ptrace',
          '--json',
          '-c',
          `${app} 3`,
          `${app}:rust_vars::process n`,
        ]);
        assert.equal(result.status, 0, result.stderr);
        const ns = result.stdout
          .split('\n')
          .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
          .map((l) => (JSON.parse(l) as { fields: { n: unknown } }).fields.n);
        // main calls process(i) for i in 0..3.
        assert.deepEqual(ns.map(String), ['0', '1', '2'], result.stdout);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});

/**
 * Traces cxx-vars.cpp's visit() on ptrace: each member fetched through the reference `d`, the
 * pointer `p` (a base class's among them) and `k` is what the program printed it passed.
 */
function expectCxxMembers(app: string): void {
  const { printed, events } = traceCalls(
    'ptrace',
    `${app} 4`,
    `${app}:visit d.id d.kind d.extra p->id p->kind n k`,
    4,
  );
  assert.deepEqual(
    events.map((f) =>
      [f['d_id'], f['d_kind'], f['d_extra'], f['p_id'], f['p_kind'], f['n'], f['k']].map(String),
    ),
    printed.map((p) => [p['id'], p['kind'], p['extra'], p['id'], p['kind'], p['n'], p['kind']]),
  );
}

/**
 * SOURCE (in test/programs) built twice (the second with a macro more: the same code) into a
 * directory of its own, then dwz'd together as a distribution's debug packages are made (dwz
 * -m): what the two share (types, names) moves to a supplementary file, named (by an absolute
 * path, -M) in .gnu_debugaltlink, or with `dwarf5` in .debug_sup. readelf, the truth, shows
 * references into it: types and names kept there.
 */
function dwzBuild(
  source: string,
  dwarf5: boolean,
): { dir: string; app: string; shared: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-dwz-'));
  const compiler = source.endsWith('.cpp') ? 'g++' : 'gcc';
  const app = join(dir, 'app');
  const twin = join(dir, 'twin');
  const shared = join(dir, 'shared.debug');
  for (const [out, extra] of [
    [app, []],
    [twin, ['-DTWIN=1']],
  ] as const) {
    execFileSync(compiler, ['-g', '-O2', ...extra, '-o', out, join(PROGRAMS, source)], {
      stdio: 'pipe',
    });
  }
  execFileSync('dwz', [...(dwarf5 ? ['-5'] : []), '-m', shared, '-M', shared, app, twin], {
    stdio: 'pipe',
  });
  const sections = execFileSync('readelf', ['-S', app], { encoding: 'utf8' });
  assert.match(sections, dwarf5 ? /\.debug_sup/ : /\.gnu_debugaltlink/);
  // Types and names the DIEs refer to in the supplementary file (the abbreviations' forms).
  const forms = execFileSync('readelf', ['--debug-dump=abbrev', app], { encoding: 'utf8' });
  const [ref, strp] = dwarf5 ? ['ref_sup4', 'strp_sup'] : ['GNU_ref_alt', 'GNU_strp_alt'];
  assert.match(forms, new RegExp(`DW_AT_type\\s+DW_FORM_${ref}`), 'types are there');
  assert.match(forms, new RegExp(`DW_AT_name\\s+DW_FORM_${strp}`), 'names are there');
  return { dir, app, shared, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

describe('trace with variables by name, the debug info shared with another program by dwz (a supplementary file)', () => {
  for (const [engine, dwarf5] of [
    ['tracefs', false],
    ['ptrace', false],
    ['bpf', false],
    ['ptrace', true],
    ['bpf', true],
  ] as const) {
    test(`${engine}, ${dwarf5 ? "DWARF 5's .debug_sup" : '.gnu_debugaltlink'}: every fetched value is what the target passed, its types read from the supplementary file`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc', 'dwz', 'readelf'] })) {
        return;
      }
      const { app, cleanup } = dwzBuild('dwarf-vars.c', dwarf5);
      try {
        expectPrintedValues(engine, app);
      } finally {
        cleanup();
      }
    });
  }

  test('C++: the classes moved to the supplementary file, their members and bases read through a reference and a pointer', (t) => {
    if (!requireHost(t, { commands: ['g++', 'dwz', 'readelf'] })) return;
    const { app, cleanup } = dwzBuild('cxx-vars.cpp', false);
    try {
      expectCxxMembers(app);
    } finally {
      cleanup();
    }
  });

  test("a stripped program's debug file found through a build-id link, its supplementary file named relative to where the link points (a distribution's layout)", (t) => {
    if (!requireHost(t, { commands: ['gcc', 'dwz', 'readelf', 'objcopy', 'strip'] })) return;
    const dir = mkdtempSync(join(tmpdir(), 'upscope-dwz-tree-'));
    try {
      // DIR/usr/libexec/tool/app.debug, its supplementary file DIR/.dwz/common named from
      // there (../../../.dwz/common), and DIR/.build-id/xx/rest.debug a link to it: from the
      // link's directory the name leads elsewhere.
      const build = join(dir, 'build');
      mkdirSync(build);
      for (const [name, extra] of [
        ['app', []],
        ['twin', ['-DTWIN=1']],
      ] as const) {
        execFileSync('gcc', [
          '-g',
          '-O2',
          ...extra,
          '-o',
          join(build, name),
          join(PROGRAMS, 'dwarf-vars.c'),
        ]);
      }
      mkdirSync(join(dir, '.dwz'));
      execFileSync(
        'dwz',
        ['-m', join(dir, '.dwz', 'common'), '-M', '../../../.dwz/common', 'app', 'twin'],
        {
          cwd: build,
        },
      );
      const real = join(dir, 'usr', 'libexec', 'tool', 'app.debug');
      mkdirSync(dirname(real), { recursive: true });
      execFileSync('objcopy', ['--only-keep-debug', join(build, 'app'), real]);
      const id = /Build ID: ([0-9a-f]+)/.exec(
        execFileSync('readelf', ['-n', real], { encoding: 'utf8' }),
      )![1]!;
      const link = join(dir, '.build-id', id.slice(0, 2), `${id.slice(2)}.debug`);
      mkdirSync(dirname(link), { recursive: true });
      symlinkSync(join('..', '..', 'usr', 'libexec', 'tool', 'app.debug'), link);
      const app = join(dir, 'app');
      execFileSync('strip', ['-o', app, join(build, 'app')]);
      expectPrintedValues('ptrace', app, ['--debug-dir', dir]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('found by its build-id under /usr/lib/debug when not where its name says; gone, one line names it', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'dwz', 'readelf'] })) return;
    const { app, shared, cleanup } = dwzBuild('dwarf-vars.c', false);
    const id = /Build ID: ([0-9a-f]+)/.exec(
      execFileSync('readelf', ['-n', shared], { encoding: 'utf8' }),
    )?.[1];
    assert.ok(id !== undefined, 'dwz gave the supplementary file a build-id');
    const byId = join('/usr/lib/debug/.build-id', id.slice(0, 2), `${id.slice(2)}.debug`);
    assert.ok(!existsSync(byId), `${byId} is not there before the test`);
    // Left as it was: the file, and its directory where the test made it.
    const made = !existsSync(dirname(byId));
    try {
      mkdirSync(dirname(byId), { recursive: true });
      copyFileSync(shared, byId);
      rmSync(shared);
      expectPrintedValues('ptrace', app);
      rmSync(byId);
      const gone = runCli([
        'trace',
        '--engine',
        'ptrace',
        '-c',
        `${app} 1 7`,
        `${app}:handle req->id`,
      ]);
      assert.equal(gone.status, 3, gone.stderr);
      assert.match(
        gone.stderr,
        new RegExp(
          `^error\\[ERR_VARIABLE_UNAVAILABLE\\]: Cannot fetch "req->id": the type of "req" is not known: its type is in the supplementary debug file dwz moved it to \\(${shared.replace(/[.]/g, '\\.')}\\), which was not found`,
          'm',
        ),
      );
    } finally {
      rmSync(byId, { force: true });
      if (made) rmSync(dirname(byId), { recursive: true, force: true });
      cleanup();
    }
  });
});

describe('C++: a reference read as its object (its members with ".", as in the source), a base class\'s members as the class\'s own', () => {
  for (const build of [['-O0'], ['-O2']]) {
    test(`${build.join(' ')}: each fetched member is what the program passed`, (t) => {
      if (!requireHost(t, { commands: ['g++'] })) return;
      const app = compileProgram('cxx-vars', { flags: build });
      expectCxxMembers(app);
    });
  }
});

describe('a parameter the compiler replaced by a constant (DW_AT_const_value): given as that constant', () => {
  for (const engine of ['tracefs', 'ptrace', 'bpf'] as const) {
    test(`${engine}: scaled.constprop.0's factor is the 3 every call passes, x what each passed`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc', 'readelf'] })) return;
      const app = compileProgram('const-param', { flags: ['-O2'] });
      const info = execFileSync('readelf', ['--debug-dump=info', app], {
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
      });
      assert.match(info, /DW_AT_const_value\s*:\s*3\b/, 'readelf: the DWARF gives factor as 3');
      const { printed, events } = traceCalls(engine, `${app} 3`, `${app}:scaled x factor`, 3);
      assert.deepEqual(
        events.map((f) => [String(f['x']), String(f['factor'])]),
        printed.map((p) => [p['x'], p['factor']]),
      );
    });
  }
});
