// The inject engine's memory and string fetches: each hooked entry copies the memory its
// fetches read inside the process, with a fault-proof copy (process_vm_readv(2) of itself),
// so a probe with `+8(arg1)` or `:string` keeps its inline hook, no trap per hit. The truth
// is what each target passed (a rule of the call's number, the program's own sum); pointers
// into unmapped pages and a string running into one give no value and do not harm the
// program; after each run nothing is left.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { processBytes, symbolBytes } from '../helpers/code-bytes.js';
import { compileProgram } from '../helpers/compile.js';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { ended, spawnCollected, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

type Fields = Record<string, string | number | null>;

/** The fields of each event of `trace --json`, in order. */
function events(stdout: string): Fields[] {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"probe"'))
    .map((l) => (JSON.parse(l) as { fields: Fields }).fields);
}

/** `calls N ... sum S` as the program printed it. */
function own(stdout: string): { calls: number; sum: bigint; thrown: number } {
  const m = /^calls (\d+)(?: thrown (\d+))? sum (-?\d+)$/m.exec(stdout);
  assert.ok(m, `the program printed its totals:\n${stdout.slice(-300)}`);
  return { calls: Number(m[1]), thrown: Number(m[2] ?? 0), sum: BigInt(m[3]!) };
}

/** The C program's sum over calls `from` to `to` (see test/programs/inject-fetches.c). */
function cSum(from: bigint, to: bigint): bigint {
  let sum = 0n;
  for (let i = from; i < to; i++) {
    sum += i % 10n === 0n || i % 10n === 5n ? 7n : 2n * i + 1n;
    if (i % 10n !== 0n) sum += 1n; // label_of(i) was not NULL
  }
  return sum;
}

function inlineOnly(stderr: string): void {
  assert.doesNotMatch(stderr, /served by an int3/, 'an inline hook served it');
}

// C: 4 threads; NULL and unmapped pointers, a string cut by an unmapped page, a string longer
// than the copy (cut at 256 bytes), a pointer followed twice.
test('trace --engine inject -c on C: strings and memory read through pointers, from 4 threads, each as the program passed it; faulting pointers give no value and no harm', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('inject-fetches', { flags: ['-O2'], link: ['-lpthread'] });
  const calls = 1500;
  const result = runCli(
    [
      'trace',
      '--engine',
      'inject',
      '--json',
      '-c',
      `${app} ${calls} 4`,
      `${app}:greet name=+0(arg0):string id=+0(arg1):s64 label=+0(+8(arg1)):string small=+16(arg1):s32 tag=+0(+8(arg1)):u8 first=+0(arg0):u8`,
    ],
    { timeoutMs: 300_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  inlineOnly(result.stderr);
  // The command's own output is on stderr (stdout is upscope's JSON).
  const program = own(result.stderr);
  assert.equal(program.calls, 4 * calls);
  const sum = cSum(0n, 4n * BigInt(calls));
  assert.equal(program.sum, sum, 'the program computed what it computes untraced');
  const seen = events(result.stdout);
  const lost = Number(/(\d+) events delivered, (\d+) lost/.exec(result.stderr)?.[2]);
  assert.equal(seen.length + lost, 4 * calls, 'every call delivered or said lost');
  assert.ok(seen.length >= calls, `most calls delivered (${seen.length})`);
  const ids = new Set<number>();
  let cut = 0;
  let faulted = 0;
  for (const fields of seen) {
    if (fields['id'] === null) {
      // NULL name and a rec in unmapped pages (i % 10 == 0), or 3 bytes before an unmapped
      // page with no NUL (i % 10 == 5): no value, for each field read through them.
      faulted++;
      assert.equal(fields['label'], null);
      assert.equal(fields['small'], null);
      assert.equal(fields['tag'], null);
      assert.equal(fields['name'], null);
      continue;
    }
    const i = Number(fields['id']);
    ids.add(i);
    assert.notEqual(i % 10, 0);
    assert.notEqual(i % 10, 5);
    const name = i % 10 === 3 ? 'x'.repeat(256) : `call-${i}`;
    if (i % 10 === 3) cut++;
    assert.deepEqual(
      fields,
      {
        name,
        id: String(i),
        label: `label-${i % 7}`,
        small: -i,
        tag: 'l'.charCodeAt(0),
        first: name.charCodeAt(0),
      },
      `call ${i}`,
    );
  }
  assert.equal(ids.size, seen.length - faulted, 'each call once');
  assert.ok(cut > 0 && faulted > 0, `long strings (${cut}) and faults (${faulted}) were seen`);
  assert.deepEqual(tracedChildren(), []);
  assert.deepEqual(leftovers(), []);
});

test('trace --engine inject -c on C: a string read at each return, through the pointer returned, copied by the return trampoline', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('inject-fetches', { flags: ['-O2'], link: ['-lpthread'] });
  const calls = 3000;
  const result = runCli(
    [
      'trace',
      '--engine',
      'inject',
      '--json',
      '-c',
      `${app} ${calls} 1`,
      `r:${app}:label_of s=+0(retval):string c=+6(retval):u8 r=retval`,
    ],
    { timeoutMs: 300_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  inlineOnly(result.stderr);
  assert.equal(own(result.stderr).sum, cSum(0n, BigInt(calls)), 'the program is unharmed');
  assert.match(result.stderr, new RegExp(`${calls} events delivered, 0 lost`));
  const seen = events(result.stdout);
  assert.equal(seen.length, calls, 'one event per return');
  for (const [i, fields] of seen.entries()) {
    // NULL (i % 10 == 0) and 3 bytes before a page that cannot be read (i % 10 == 5): no
    // string; else the label the program returned.
    const label = i % 10 === 0 || i % 10 === 5 ? null : `label-${i % 7}`;
    assert.deepEqual(
      { s: fields['s'], c: fields['c'], zero: fields['r'] === '0' },
      {
        s: label,
        c: i % 10 === 0 ? null : i % 10 === 5 ? null : '0123456'.charCodeAt(i % 7),
        zero: i % 10 === 0,
      },
      `return ${i}`,
    );
  }
  assert.deepEqual(tracedChildren(), []);
  assert.deepEqual(leftovers(), []);
});

test('resolve --engine inject says the reads an entry or a return copies; one it cannot make is served by an int3, said why', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  const app = compileProgram('inject-fetches', { flags: ['-O2'], link: ['-lpthread'] });
  const resolved = runCli([
    'resolve',
    '--engine',
    'inject',
    `${app}:greet name=+0(arg0):string label=+0(+8(arg1)):string`,
    `r:${app}:label_of s=+0(retval):string`,
  ]);
  assert.equal(resolved.status, 0, resolved.stderr);
  assert.match(
    resolved.stdout,
    /inline hook: .* each entry copies the memory its fetches read \(3 reads of at most 256 bytes, with process_vm_readv\(2\)/,
  );
  assert.match(
    resolved.stdout,
    /inline hook: .* each return copies the memory its fetches read \(1 read of at most 256 bytes/,
  );
  // %rip at a return is where it returned to: no register holds it for the trampoline.
  const traced = runCli([
    'trace',
    '--engine',
    'inject',
    '-c',
    `${app} 20`,
    `r:${app}:label_of x=+0(%ip):u8 r=retval`,
  ]);
  assert.equal(traced.status, 0, traced.stderr);
  assert.match(
    traced.stderr,
    /label_of: served by an int3 \(a trap per hit\) instead of an inline hook: its fetch "x": an address made from %rip at a return/,
  );
  assert.equal(
    traced.stdout.split('\n').filter((l) => / r:label_of x=\d+ r=\d+ /.test(l)).length,
    20,
  );
  assert.deepEqual(leftovers(), []);
});

test('trace --engine inject -p on C: detach while 4 threads copy memory in their hooks, at entries and returns, restores every byte, unmaps, and leaves the program unharmed', async (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'objdump'] })) return;
  const app = compileProgram('inject-fetches', { flags: ['-O2'], link: ['-lpthread'] });
  const dir = mkdtempSync(join(tmpdir(), 'upscope-fetches-'));
  const calls = 20_000;
  const running = spawnCollected(app, [String(calls), '4', join(dir, 'stop')]);
  try {
    await waitFor(running, /^ready \d+$/m, 'stdout');
    for (let round = 0; round < 3; round++) {
      const traced = spawnUpscope([
        'trace',
        '--engine',
        'inject',
        '--json',
        '-p',
        String(running.pid),
        '--duration',
        '1',
        `${app}:greet name=+0(arg0):string label=+0(+8(arg1)):string id=+0(arg1):s64`,
        // Its returns' reads too: a thread may be stopped inside the routine the return
        // trampoline calls for them.
        `r:${app}:label_of s=+0(retval):string`,
      ]);
      const done = await ended(traced, 60_000);
      assert.equal(done.code, 0, traced.stderr);
      inlineOnly(traced.stderr);
      const all = events(traced.stdout);
      const seen = all.filter((f) => 'id' in f && f['id'] !== null);
      assert.ok(seen.length > 0, 'it saw calls before the detach');
      const labels = all.filter((f) => 's' in f).map((f) => f['s']);
      assert.ok(labels.length > 0, 'it saw returns before the detach');
      assert.ok(
        labels.every((l) => l === null || /^label-[0-6]$/.test(String(l))),
        'each return with its label, or none',
      );
      for (const fields of seen.slice(0, 2000)) {
        const i = Number(fields['id']);
        const name = i % 10 === 3 ? 'x'.repeat(256) : `call-${i}`;
        assert.deepEqual(fields, { name, label: `label-${i % 7}`, id: String(i) });
      }
      assert.match(readFileSync(`/proc/${running.pid}/status`, 'utf8'), /^TracerPid:\s+0$/m);
      assert.deepEqual(processBytes(running.pid, app, 'greet', 16), symbolBytes(app, 'greet', 16));
      assert.doesNotMatch(readFileSync(`/proc/${running.pid}/maps`, 'utf8'), /upscope-inject/);
    }
    writeFileSync(join(dir, 'stop'), '');
    const exit = await ended(running, 120_000);
    assert.deepEqual(exit, { code: 0, signal: null }, running.stderr);
    // Each thread's sum is its rounds times the sum of one round of its numbers.
    let sum = 0n;
    for (const m of running.stdout.matchAll(/^thread (\d+) rounds (\d+)$/gm)) {
      const first = BigInt(m[1]!) * BigInt(calls);
      sum += BigInt(m[2]!) * cSum(first, first + BigInt(calls));
    }
    assert.equal(own(running.stdout).sum, sum, 'its sum is that of an untouched run');
  } finally {
    running.child.kill('SIGKILL');
    await ended(running);
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(tracedChildren(), []);
});

// C++ (an exception thrown through the hooked function), Rust and Go (its own ABI: the
// record's pointer in %rax, followed to a NUL-terminated name; the hook after its stack
// check, on the goroutine's stack).
const LANGUAGES = [
  {
    language: 'C++',
    needs: ['g++'],
    build: () => compileProgram('inject-fetches-cxx', { flags: ['-O2'] }),
    spec: (app: string) =>
      `${app}:app::greet name=+0(arg0):string id=+0(arg1):s64 label=+0(+8(arg1)):string`,
    calls: 3000,
    expect: (i: number): Fields =>
      i % 10 === 0
        ? { name: null, id: null, label: null }
        : { name: `call-${i}`, id: String(i), label: `label-${i % 7}` },
    sum: (calls: number) => {
      let sum = 0n;
      for (let i = 0; i < calls; i++) {
        if (i % 8 !== 7) sum += i % 10 === 0 ? 7n : 2n * BigInt(i) + 1n;
        if (i % 8 !== 7 && i % 10 !== 0) sum += 1n; // label_of's label
      }
      return sum;
    },
    // label_of throws for each i % 8 == 7: no return for those.
    returns: {
      spec: (app: string) => `r:${app}:app::label_of s=+0(retval):string`,
      expect: (calls: number) =>
        Array.from({ length: calls }, (_, i) => i)
          .filter((i) => i % 8 !== 7)
          .map((i) => ({ s: i % 10 === 0 ? null : `label-${i % 7}` })),
    },
  },
  {
    language: 'Rust',
    needs: [],
    build: () => compileRust(findRustc()!, 'inject-fetches', ['-C', 'opt-level=2']),
    spec: (app: string) =>
      `${app}:fetch_greet name=+0(arg0):string id=+0(arg1):s64 label=+0(+8(arg1)):string`,
    calls: 3000,
    expect: (i: number): Fields =>
      i % 10 === 0
        ? { name: null, id: null, label: null }
        : { name: `call-${i}`, id: String(i), label: `label-${i % 7}` },
    sum: (calls: number) => {
      let sum = 0n;
      for (let i = 0; i < calls; i++) sum += i % 10 === 0 ? 7n : 2n * BigInt(i) + 2n;
      return sum;
    },
    returns: {
      spec: (app: string) => `r:${app}:fetch_label s=+0(retval):string`,
      expect: (calls: number) =>
        Array.from({ length: calls }, (_, i) => ({ s: i % 10 === 0 ? null : `label-${i % 7}` })),
    },
  },
  {
    language: 'Go',
    needs: ['go'],
    build: () => compileGo(findGo()!, 'inject-fetches'),
    spec: (app: string) =>
      `${app}:main.greet id=+0(arg0):s64 name=+0(+8(arg0)):string small=+16(arg0):s32`,
    calls: 1000,
    expect: (i: number): Fields => ({
      id: String(i),
      name: i % 10 === 0 ? null : `call-${i}`,
      small: i === 0 ? 0 : -i,
    }),
    sum: (calls: number) => {
      let sum = 0n;
      for (let i = 0; i < 4 * calls; i++) sum += 2n * BigInt(i) + 1n;
      return sum;
    },
    // Go's return probes are caught at its exits (int3s), never through the trampoline.
    returns: undefined,
  },
] as const;

for (const language of LANGUAGES) {
  test(`trace --engine inject -c on ${language.language}: strings and memory read through pointers, each as the program passed it; unmapped ones give no value and no harm`, (t) => {
    if (!requireHost(t, { commands: language.needs })) return;
    if (language.language === 'Rust' && findRustc() === undefined) {
      if (STRICT) assert.fail('Cannot run test under CI: needs rustc');
      t.skip('needs rustc');
      return;
    }
    const app = language.build();
    const result = runCli(
      [
        'trace',
        '--engine',
        'inject',
        '--json',
        '-c',
        `${app} ${language.calls}`,
        language.spec(app),
      ],
      { timeoutMs: 300_000 },
    );
    assert.equal(result.status, 0, result.stderr);
    inlineOnly(result.stderr);
    const program = own(result.stderr);
    assert.equal(
      program.sum,
      language.sum(language.calls),
      'the program computed what it computes untraced',
    );
    if (language.language === 'C++') assert.equal(program.thrown, Math.floor(language.calls / 8));
    const seen = events(result.stdout);
    assert.match(result.stderr, new RegExp(`${program.calls} events delivered, 0 lost`));
    assert.equal(seen.length, program.calls, 'one event per call');
    const byId = new Map<number, Fields>();
    for (const [n, fields] of seen.entries()) {
      // The id comes with the fields for Go; in C++ and Rust an unreadable rec has none: the
      // calls are in order on their one thread.
      const i = language.language === 'Go' ? Number(fields['id']) : n;
      byId.set(i, fields);
      assert.deepEqual(fields, language.expect(i), `call ${i}`);
    }
    assert.equal(byId.size, program.calls, 'each call once');
    if (language.returns !== undefined) {
      // A string through the pointer returned, copied by the return trampoline (which C++'s
      // throws unwind through: their calls give no return).
      const returned = runCli(
        [
          'trace',
          '--engine',
          'inject',
          '--return-probes=trampoline',
          '--json',
          '-c',
          `${app} ${language.calls}`,
          language.returns.spec(app),
        ],
        { timeoutMs: 300_000 },
      );
      assert.equal(returned.status, 0, returned.stderr);
      inlineOnly(returned.stderr);
      assert.equal(own(returned.stderr).sum, program.sum, 'the program is unharmed');
      assert.deepEqual(events(returned.stdout), language.returns.expect(language.calls));
    }
    assert.deepEqual(tracedChildren(), []);
    assert.deepEqual(leftovers(), []);
  });
}

test('latency --engine inject --return-probes=trampoline -c on C++: calls an exception ends are said as not timed, and with those timed make every call', (t) => {
  if (!requireHost(t, { commands: ['g++'] })) return;
  const app = compileProgram('inject-fetches-cxx', { flags: ['-O2'] });
  const calls = 4000;
  const result = runCli(
    [
      'latency',
      '--engine',
      'inject',
      '--return-probes=trampoline',
      '-c',
      `${app} ${calls}`,
      `${app}:app::label_of`,
    ],
    { timeoutMs: 300_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  // The command's own output goes where upscope's does (no --json).
  const program = own(result.stdout);
  // label_of throws when greet does: for each i % 8 == 7.
  assert.equal(program.thrown, calls / 8);
  const timed = Number(
    /label_of\(char const\* const\*, long\): count (\d+),/.exec(result.stdout)?.[1],
  );
  assert.equal(timed, calls - program.thrown, `each call that returned timed:\n${result.stdout}`);
  assert.match(
    result.stderr,
    new RegExp(
      `${program.thrown} calls ended by an unwind \\(an exception, a panic\\) or in flight when an exception began, not timed`,
    ),
  );
  assert.deepEqual(tracedChildren(), []);
  assert.deepEqual(leftovers(), []);
});
