import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { Profile } from 'pprof-format';
import { stackFrames } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { renderPprof } from './pprof.js';
import type { StackCount } from './stacks.js';

function decode(bytes: Uint8Array) {
  const profile = Profile.decode(gunzipSync(bytes));
  const str = (i: number | bigint) => profile.stringTable.strings[Number(i)]!;
  return { profile, str };
}

test('renderPprof() writes recorded stacks as a gzipped profile.proto', () => {
  const { rows } = stackFrames();
  const bytes = renderPprof(rows, { comments: ['upscope count --by ustack'] });
  assert.deepEqual([...bytes.subarray(0, 2)], [0x1f, 0x8b]);
  assertGolden('ustack.pb', gunzipSync(bytes));
  const { profile, str } = decode(bytes);
  assert.deepEqual(
    profile.sampleType.map((t) => [str(t.type), str(t.unit)]),
    [['hits', 'count']],
  );
  assert.deepEqual(
    profile.sample.map((s) => s.value.map(Number)),
    rows.map((r) => [Number(r.count)]),
  );
  // Every mapping names its file and build-id, and says its functions are there.
  const objects = new Map<string, string>();
  for (const row of rows)
    for (const f of row.stack!.frames) {
      if (typeof f !== 'string' && f.object !== undefined) objects.set(f.object, f.buildId!);
    }
  assert.deepEqual(new Map(profile.mapping.map((m) => [str(m.filename), str(m.buildId)])), objects);
  assert.ok(profile.mapping.every((m) => m.hasFunctions));
  assert.ok(profile.location.every((l) => l.line.length > 0 && Number(l.line[0]!.functionId) > 0));
});

test('byte totals have the sample types bytes and allocations, bytes first', () => {
  const rows: StackCount[] = [
    {
      probe: 'malloc',
      stack: { pid: 7, frames: ['malloc (libc.so.6)', 'main (app)'] },
      count: 3n,
      bytes: 96n,
    },
  ];
  const { profile, str } = decode(renderPprof(rows, { weight: 'bytes' }));
  assert.deepEqual(
    profile.sampleType.map((t) => [str(t.type), str(t.unit)]),
    [
      ['bytes', 'bytes'],
      ['allocations', 'count'],
    ],
  );
  assert.equal(str(profile.defaultSampleType), 'bytes');
  assert.deepEqual(profile.sample[0]!.value.map(Number), [96, 3]);
  assert.deepEqual(
    profile.sample[0]!.label.map((l) => [str(l.key), l.str ? str(l.str) : Number(l.num)]),
    [
      ['probe', 'malloc'],
      ['pid', 7],
    ],
  );
});

test('inlined frames share the location of the frame they were inlined into', () => {
  const rows: StackCount[] = [
    {
      probe: 'p',
      stack: {
        pid: 1,
        frames: [
          { function: 'helper', inlined: true, object: '/app', fileOffset: 0x1010n, line: 7 },
          { function: 'work', object: '/app', fileOffset: 0x1010n, line: 20 },
          { function: 'main', object: '/app', fileOffset: 0x1100n, line: 30 },
        ],
      },
      count: 1n,
    },
  ];
  const { profile, str } = decode(renderPprof(rows));
  assert.equal(profile.sample[0]!.locationId.length, 2);
  const first = profile.location.find((l) => l.id === profile.sample[0]!.locationId[0])!;
  const name = (id: number | bigint) => str(profile.function.find((f) => f.id === id)!.name);
  assert.deepEqual(
    first.line.map((l) => [name(l.functionId), Number(l.line)]),
    [
      ['helper', 7],
      ['work', 20],
    ],
  );
});
