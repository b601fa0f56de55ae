import assert from 'node:assert/strict';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { loadPlan, planCacheDir, planKey, savePlan } from './plan-cache.js';
import type { ProbeSite, TargetFile } from './probe-site.js';

const work = mkdtempSync(join(tmpdir(), 'upscope-plan-cache-unit-'));
const saved = process.env.UPSCOPE_CACHE_DIR;
before(() => {
  process.env.UPSCOPE_CACHE_DIR = join(work, 'cache');
});
after(() => {
  if (saved === undefined) delete process.env.UPSCOPE_CACHE_DIR;
  else process.env.UPSCOPE_CACHE_DIR = saved;
  rmSync(work, { recursive: true, force: true });
});

const file: TargetFile = {
  path: '/bin/app',
  displayPath: '/bin/app',
  dev: 1n,
  inode: 2n,
  buildId: 'ab12',
  elfType: 'dyn',
};

function site(kind: 'entry' | 'return', vaddr: bigint): ProbeSite {
  const handling = { strategy: 'emulate', what: 'push' } as const;
  return {
    spec: 'r:/bin/app:*',
    kind,
    target: file,
    symbol: `_Z1fi${vaddr}`,
    demangled: `f(int) ${vaddr}`,
    aliases: [],
    symbolOffset: 0n,
    vaddr,
    fileOffset: vaddr - 0x1000n,
    usdt: undefined,
    instructions: [],
    handling,
    fetches: [],
    runtimeAddress: undefined,
    returns:
      kind === 'entry'
        ? undefined
        : {
            mode: 'sites',
            why: 'an unwinder can pass through it',
            frames: 'thread',
            entry: { vaddr, fileOffset: vaddr - 0x1000n },
            sites: [
              {
                vaddr: vaddr + 9n,
                fileOffset: vaddr + 9n - 0x1000n,
                kind: 'ret',
                text: 'ret',
                handling,
              },
              {
                vaddr: vaddr + 20n,
                fileOffset: vaddr + 20n - 0x1000n,
                kind: 'tail-call',
                text: 'jmp',
                handling,
              },
            ],
          },
  };
}

describe('plan cache', () => {
  test('the cache directory: $UPSCOPE_CACHE_DIR, none when it is empty', () => {
    assert.equal(planCacheDir(), join(work, 'cache', 'plans'));
    process.env.UPSCOPE_CACHE_DIR = '';
    try {
      assert.equal(planCacheDir(), undefined);
    } finally {
      process.env.UPSCOPE_CACHE_DIR = join(work, 'cache');
    }
  });

  test('a key changes with the file (its modification time) and with what the plan depends on', () => {
    const path = join(work, 'app');
    writeFileSync(path, 'elf');
    const parts = { path, buildId: 'ab', spec: 'r:app:*', options: { mode: 'auto' } };
    const first = planKey(parts);
    assert.ok(first !== undefined);
    assert.equal(planKey(parts), first);
    assert.notEqual(planKey({ ...parts, spec: 'app:*' }), first);
    assert.notEqual(planKey({ ...parts, options: { mode: 'sites' } }), first);
    assert.notEqual(planKey({ ...parts, buildId: 'cd' }), first);
    utimesSync(path, new Date(1000), new Date(2000));
    assert.notEqual(planKey(parts), first);
    assert.equal(planKey({ ...parts, path: join(work, 'missing') }), undefined);
  });

  test('a plan kept is given back as it was made: sites, returns, skipped sites, warnings', () => {
    const trampoline = site('return', 0x1200n);
    const looping = site('return', 0x1100n);
    const sites = [
      { ...looping, returns: { ...looping.returns!, loopsAtEntry: true } },
      { ...trampoline, returns: { ...trampoline.returns!, mode: 'trampoline' as const } },
    ];
    const error = (message: string) =>
      Object.assign(new Error(message), { code: 'ERR_RETURNS_NOT_FOUND', hints: ['Probe it'] });
    savePlan('k.plan', 'return', {
      sites,
      skipped: [
        {
          spec: 'r:/bin/app:*',
          target: '/bin/app',
          symbol: 'g',
          vaddr: 0x1300n,
          reason: 'returns not found',
          error: error('Cannot place a return probe on g') as never,
        },
      ],
      warnings: [error('Skipped 1 IFUNC resolver') as never],
    });
    const back = loadPlan('k.plan', {
      spec: 'r:/bin/app:*',
      pattern: '*',
      file,
      path: '/nonexistent',
      runtimeAddress: (offset) => BigInt(offset) + 0x7f00_0000_0000n,
    });
    assert.ok(back !== undefined);
    assert.equal(back.sites.length, 2);
    const [one] = back.sites;
    assert.equal(one!.symbol, '_Z1fi4352');
    assert.equal(one!.demangled, 'f(int) 4352');
    assert.equal(one!.vaddr, 0x1100n);
    assert.equal(one!.fileOffset, 0x100n);
    assert.equal(one!.runtimeAddress, 0x7f00_0000_0100n);
    assert.deepEqual(one!.handling, { strategy: 'emulate', what: 'push' });
    const returns = one!.returns!;
    assert.equal(returns.mode, 'sites');
    assert.equal(returns.loopsAtEntry, true);
    assert.equal(returns.why, 'an unwinder can pass through it');
    assert.deepEqual(returns.entry, { vaddr: 0x1100n, fileOffset: 0x100n });
    assert.deepEqual(
      returns.sites.map((s) => [s.vaddr, s.fileOffset, s.kind]),
      [
        [0x1109n, 0x109n, 'ret'],
        [0x1114n, 0x114n, 'tail-call'],
      ],
    );
    // Through the trampoline, its exits are still given back (made when read).
    const other = back.sites[1]!.returns!;
    assert.equal(other.mode, 'trampoline');
    assert.equal(other.loopsAtEntry, undefined);
    assert.deepEqual(
      other.sites.map((s) => [s.vaddr, s.fileOffset, s.kind]),
      [
        [0x1209n, 0x209n, 'ret'],
        [0x1214n, 0x214n, 'tail-call'],
      ],
    );
    assert.equal(other.sites, other.sites, 'made once');
    assert.equal(back.skipped[0]!.symbol, 'g');
    assert.equal(back.skipped[0]!.reason, 'returns not found');
    assert.equal(back.skipped[0]!.error.code, 'ERR_RETURNS_NOT_FOUND');
    assert.deepEqual(back.skipped[0]!.error.hints, ['Probe it']);
    assert.equal(back.warnings[0]!.message, 'Skipped 1 IFUNC resolver');
  });

  test('no plan, or one that is damaged or of another format, is none; plans of the JSON format are removed', () => {
    const place = { spec: 's', pattern: 's', file, path: '/x', runtimeAddress: () => undefined };
    assert.equal(loadPlan('none.plan', place), undefined);
    const dir = planCacheDir()!;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'older.json'), '{"format": 1, "vaddrs": []}');
    savePlan('ok.plan', 'entry', { sites: [site('entry', 0x1100n)], skipped: [], warnings: [] });
    assert.equal(existsSync(join(dir, 'older.json')), false, 'a JSON plan is removed');
    const whole = readFileSync(join(dir, 'ok.plan'));
    // Cut anywhere: in the header, in the columns, in the names.
    for (const at of [2, 20, whole.length - 30, whole.length - 1]) {
      writeFileSync(join(dir, 'bad.plan'), whole.subarray(0, at));
      assert.equal(loadPlan('bad.plan', place), undefined, `cut at ${at}`);
    }
    const header = whole.readUInt32LE(0);
    const other = Buffer.from(whole);
    other.write(
      whole.toString('utf8', 4, 4 + header).replace(/"format":\d+/, '"format":9999'),
      4,
      'utf8',
    );
    writeFileSync(join(dir, 'other.plan'), other);
    assert.equal(loadPlan('other.plan', place), undefined);
    assert.equal(loadPlan('ok.plan', place)?.sites.length, 1);
  });

  test('a plan of no sites, and names of any characters, are kept', () => {
    const place = { spec: 's', pattern: 's', file, path: '/x', runtimeAddress: () => undefined };
    savePlan('empty.plan', 'entry', { sites: [], skipped: [], warnings: [] });
    assert.deepEqual(loadPlan('empty.plan', place)?.sites, []);
    const named = { ...site('entry', 0x1100n), symbol: 'caf\u00e9\u{1f600}', demangled: undefined };
    savePlan('named.plan', 'entry', {
      sites: [named, site('entry', 0x1200n)],
      skipped: [],
      warnings: [],
    });
    const back = loadPlan('named.plan', place)!.sites;
    assert.deepEqual(
      back.map((s) => [s.symbol, s.demangled]),
      [
        ['caf\u00e9\u{1f600}', undefined],
        ['_Z1fi4608', 'f(int) 4608'],
      ],
    );
  });

  test("a plan of a file and pattern taken before gives another plan of them its sites' values", () => {
    const entry = (vaddr: bigint) => site('entry', vaddr);
    // The entries' plan, then a plan of returns that lacks one (its returns were not found),
    // has one more, and one at an address of the first under another name (an alias).
    savePlan('entries.plan', 'entry', {
      sites: [entry(0x1100n), entry(0x1200n), entry(0x1300n), entry(0x1400n)],
      skipped: [],
      warnings: [],
    });
    const alias = { ...site('return', 0x1400n), symbol: 'alias', demangled: undefined };
    savePlan('returns.plan', 'return', {
      sites: [site('return', 0x1100n), site('return', 0x1300n), site('return', 0x1350n), alias],
      skipped: [],
      warnings: [],
    });
    const place = {
      spec: 's',
      pattern: 'p',
      file: { ...file },
      path: '/x',
      runtimeAddress: (offset: number) => BigInt(offset) + 0x5000n,
    };
    const entries = loadPlan('entries.plan', place)!.sites;
    const returns = loadPlan('returns.plan', { ...place, spec: 'r:s' })!.sites;
    assert.deepEqual(
      entries.map((s) => [s.kind, s.symbol, s.vaddr]),
      [0x1100n, 0x1200n, 0x1300n, 0x1400n].map((a) => ['entry', `_Z1fi${a}`, a]),
    );
    assert.deepEqual(
      returns.map((s) => [s.kind, s.symbol, s.demangled, s.vaddr, s.fileOffset, s.runtimeAddress]),
      [
        ['return', '_Z1fi4352', 'f(int) 4352', 0x1100n, 0x100n, 0x5100n],
        ['return', '_Z1fi4864', 'f(int) 4864', 0x1300n, 0x300n, 0x5300n],
        ['return', '_Z1fi4944', 'f(int) 4944', 0x1350n, 0x350n, 0x5350n],
        ['return', 'alias', undefined, 0x1400n, 0x400n, 0x5400n],
      ],
    );
    assert.ok(returns.every((s) => s.spec === 'r:s' && s.returns !== undefined));
    // Planned without demangling (another run's options): its own names, none demangled.
    savePlan('plain.plan', 'entry', {
      sites: [{ ...entry(0x1100n), demangled: undefined }],
      skipped: [],
      warnings: [],
    });
    const plain = loadPlan('plain.plan', place)!.sites;
    assert.deepEqual(
      plain.map((s) => [s.symbol, s.demangled]),
      [['_Z1fi4352', undefined]],
    );
  });
});
