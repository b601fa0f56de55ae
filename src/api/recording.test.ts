import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  CALLS_FILE,
  loadRecording,
  type RecordingProgress,
  RecordingWriter,
  readRecording,
} from './recording.js';

/** A writer of a recording of ./app's functions `names`, in `dir`. */
function appWriter(dir: string, names: readonly string[]): RecordingWriter {
  return RecordingWriter.create(dir, {
    command: './app',
    pid: undefined,
    engine: 'bpf',
    startedAt: new Date(0).toISOString(),
    functions: names.map((name) => ({ name, object: '/app' })),
    objects: ['/app'],
    lost: 0,
  });
}

test('loadRecording reads what readRecording reads, saying how far it got and giving way between chunks', async () => {
  const dir = join(mkdtempSync(join(tmpdir(), 'upscope-load-')), 'rec');
  try {
    const writer = appWriter(dir, ['outer', 'inner']);
    // 60,000 calls of outer, each calling inner: 240,000 records, several 1 MiB chunks.
    let t = 1_000n;
    for (let i = 0; i < 60_000; i++) {
      for (const [kind, fn] of [
        ['entry', 0],
        ['entry', 1],
        ['return', 1],
        ['return', 0],
      ] as const) {
        writer.write({ kind, tid: 7, pid: 7, fn, timeNs: t });
        t += 10n;
      }
    }
    writer.thread(7, 7, 'app');
    writer.finish({ lost: 0 });
    const size = statSync(join(dir, CALLS_FILE)).size;

    const seen: RecordingProgress[] = [];
    let turns = 0;
    const other = setInterval(() => turns++, 0);
    let loaded: Awaited<ReturnType<typeof loadRecording>>;
    try {
      loaded = await loadRecording(dir, { onProgress: (p) => seen.push(p) });
    } finally {
      clearInterval(other);
    }
    assert.ok(seen.length >= 5, `${seen.length} steps`);
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i]!.bytes > seen[i - 1]!.bytes && seen[i]!.records > seen[i - 1]!.records);
    }
    assert.deepEqual(seen.at(-1), { bytes: size, totalBytes: size, records: 240_000 });
    assert.ok(turns > 0, 'timers ran while it loaded');
    assert.deepEqual(loaded, readRecording(dir));
    assert.equal(loaded.records, 240_000);
    assert.equal(loaded.threads[0]!.roots.length, 60_000);

    // Aborted: it stops between chunks.
    const abort = new AbortController();
    await assert.rejects(
      loadRecording(dir, { signal: abort.signal, onProgress: () => abort.abort() }),
      /Stopped reading the recording/,
    );
  } finally {
    rmSync(join(dir, '..'), { recursive: true, force: true });
  }
});

test('RecordingWriter writes the records it holds within a second (a recording read as it is made shows them)', async () => {
  const dir = join(mkdtempSync(join(tmpdir(), 'upscope-held-')), 'rec');
  try {
    const writer = appWriter(dir, ['f']);
    for (let i = 0; i < 10; i++) {
      writer.write({ kind: i % 2 === 0 ? 'entry' : 'return', tid: 7, pid: 7, fn: 0, timeNs: 5n });
    }
    const size = () => statSync(join(dir, CALLS_FILE)).size;
    assert.equal(size(), 16, 'held: far from the 64 KiB written at once');
    const deadline = Date.now() + 5000;
    while (size() === 16 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(size(), 16 + 10 * 24);
    const live = readRecording(dir);
    assert.equal(live.records, 10);
    assert.match(
      live.problems[0] ?? '',
      /^the recording is still being made \(by upscope, process \d+\)/,
    );
    writer.finish({ lost: 0 });
    assert.deepEqual(readRecording(dir).problems, []);
  } finally {
    rmSync(join(dir, '..'), { recursive: true, force: true });
  }
});
