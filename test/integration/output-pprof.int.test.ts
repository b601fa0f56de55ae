// pprof files read back by `go tool pprof` (Debian's golang-go): the totals, each function's
// flat and cumulative counts, each sample's stack and labels, and the mappings' files and
// build-ids equal the recorded stacks; pprof symbolizes nothing (no message, no binary
// looked for).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { frameLabel, frameOf, renderPprof, type StackCount } from '../../src/output/index.js';
import { stackCounts, stackFrames } from '../fixtures/output/load.js';
import { requireHost } from '../helpers/require-host.js';

const dir = mkdtempSync(join(tmpdir(), 'upscope-pprof-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** `go tool pprof ARGS FILE`, with nowhere to find binaries and no home of its own. */
function pprof(bytes: Uint8Array, args: readonly string[]) {
  const file = join(dir, `${Math.random().toString(36).slice(2)}.pb.gz`);
  writeFileSync(file, bytes);
  const run = spawnSync('go', ['tool', 'pprof', ...args, file], {
    encoding: 'utf8',
    env: { ...process.env, HOME: dir, PPROF_TMPDIR: dir, PPROF_BINARY_PATH: join(dir, 'none') },
  });
  assert.equal(run.status, 0, run.stderr);
  return run;
}

/** `-top` rows: function -> [flat, cum] as numbers (bytes with -unit=byte). */
function top(stdout: string): Map<string, [number, number]> {
  const rows = new Map<string, [number, number]>();
  for (const line of stdout.split('\n')) {
    const m = /^\s*(\d+)B?\s+[\d.]+%\s+[\d.]+%\s+(\d+)B?\s+[\d.]+%\s+(.+)$/.exec(line);
    if (m !== null) rows.set(m[3]!, [Number(m[1]), Number(m[2])]);
  }
  return rows;
}

/** The truth from the recording: each function's flat (leaf) and cumulative weight. */
function expected(rows: readonly StackCount[], weight: (row: StackCount) => bigint) {
  const out = new Map<string, [number, number]>();
  let total = 0;
  for (const row of rows) {
    const value = Number(weight(row));
    total += value;
    const names = row.stack!.frames.map((f) => frameLabel(frameOf(f)));
    for (const name of new Set(names)) {
      const entry = out.get(name) ?? [0, 0];
      entry[1] += value;
      out.set(name, entry);
    }
    out.get(names[0]!)![0] += value;
  }
  return { total, functions: out };
}

const FLAGS = ['-nodefraction=0', '-edgefraction=0', '-nodecount=10000'];

for (const [name, load] of [
  ['structured frames', stackFrames],
  ['frames as text', stackCounts],
] as const) {
  test(`go tool pprof -top prints the recorded totals (${name})`, (t) => {
    if (!requireHost(t, { commands: ['go'] })) return;
    const { rows } = load();
    const run = pprof(renderPprof(rows), ['-top', ...FLAGS]);
    const truth = expected(rows, (row) => row.count);
    assert.match(run.stdout, new RegExp(`of ${truth.total} total`));
    assert.match(run.stdout, /^Type: hits$/m);
    assert.deepEqual(top(run.stdout), truth.functions);
    assert.equal(run.stderr, '', 'pprof symbolized nothing and said nothing');
  });
}

test('go tool pprof -traces gives each sample its recorded stack, probe and pid', (t) => {
  if (!requireHost(t, { commands: ['go'] })) return;
  const { rows } = stackFrames();
  const run = pprof(renderPprof(rows), ['-traces', ...FLAGS]);
  const traces = run.stdout
    .split(/^-+\+-+$/m)
    .slice(1)
    .map((block) => block.trim())
    .filter((block) => block !== '');
  const seen = traces.map((block) => {
    const probe = /probe:\s+(\S+)/.exec(block)![1];
    const pid = Number(/pid:\s+(\d+)/.exec(block)![1]);
    const lines = block.split('\n').filter((l) => !/^\s*(probe|pid):/.test(l));
    const [, count, leaf] = /^\s*(\d+)\s+(.+)$/.exec(lines[0]!)!;
    const frames = [leaf!, ...lines.slice(1).map((l) => l.trim())];
    return JSON.stringify({ probe, pid, count: Number(count), frames });
  });
  const recorded = rows.map((row) =>
    JSON.stringify({
      probe: row.probe,
      pid: row.stack!.pid,
      count: Number(row.count),
      frames: row.stack!.frames.map((f) => frameLabel(frameOf(f))),
    }),
  );
  assert.deepEqual(seen.sort(), recorded.sort());
});

test('go tool pprof -raw shows each mapping with its file and build-id, functions present', (t) => {
  if (!requireHost(t, { commands: ['go'] })) return;
  const { rows } = stackFrames();
  const run = pprof(renderPprof(rows), ['-raw']);
  const mappings = run.stdout.slice(run.stdout.indexOf('Mappings'));
  const objects = new Map<string, string>();
  for (const row of rows) {
    for (const f of row.stack!.frames.map(frameOf)) objects.set(f.object!, f.buildId!);
  }
  assert.equal(objects.size, 2);
  for (const [object, buildId] of objects) {
    assert.match(mappings, new RegExp(`${object.replace(/[.]/g, '\\.')} ${buildId} \\[FN\\]`));
  }
});

test('go tool pprof reads byte totals as bytes, and their allocations as a second index', (t) => {
  if (!requireHost(t, { commands: ['go'] })) return;
  // Bytes per stack as a leak report will give them: here 48 bytes per recorded hit.
  const rows = stackFrames().rows.map((row) => ({ ...row, bytes: row.count * 48n }));
  const bytes = renderPprof(rows, { weight: 'bytes' });
  const byBytes = pprof(bytes, ['-top', '-unit=byte', ...FLAGS]);
  const truth = expected(rows, (row) => row.bytes ?? 0n);
  assert.match(byBytes.stdout, /^Type: bytes$/m);
  assert.match(byBytes.stdout, new RegExp(`of ${truth.total}B total`));
  assert.deepEqual(top(byBytes.stdout), truth.functions);
  const byCount = pprof(bytes, ['-top', '-sample_index=allocations', ...FLAGS]);
  assert.deepEqual(top(byCount.stdout), expected(rows, (row) => row.count).functions);
});
