import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stackCounts } from '../../test/fixtures/output/load.js';
import { assertGolden } from '../../test/helpers/golden.js';
import { renderFlameGraph } from './flamegraph.js';
import type { StackCount } from './stacks.js';

test('renderFlameGraph() draws recorded ustack counts as a self-contained SVG', () => {
  const { rows, program } = stackCounts();
  const svg = renderFlameGraph(rows, { title: 'stack_leaf', subtitle: program });
  assertGolden('ustack.svg', svg);
  // Nothing is fetched: no link, no external script or stylesheet.
  assert.doesNotMatch(svg, /href=|src=|@import|url\(/);
});

test('each frame is as wide as its share of the total, and says its count and percentage', () => {
  const rows: StackCount[] = [
    { probe: 'p', stack: { pid: 1, frames: ['leaf (app)', 'main (app)'] }, count: 3n },
    { probe: 'p', stack: { pid: 1, frames: ['other (app)', 'main (app)'] }, count: 1n },
  ];
  const svg = renderFlameGraph(rows, { width: 420 });
  const frames = [
    ...svg.matchAll(/<title>([^<]*)<\/title><rect x="([\d.]+)" y="\d+" width="([\d.]+)"/g),
  ].map((m) => ({ title: m[1], x: Number(m[2]), width: Number(m[3]) }));
  assert.deepEqual(frames, [
    { title: 'all (4 hits, 100.00%)', x: 10, width: 400 },
    { title: 'main (4 hits, 100.00%)', x: 10, width: 400 },
    { title: 'leaf (3 hits, 75.00%)', x: 10, width: 300 },
    { title: 'other (1 hits, 25.00%)', x: 310, width: 100 },
  ]);
});

test('names are escaped for XML, and bytes are said as bytes', () => {
  const rows: StackCount[] = [
    {
      probe: 'malloc',
      stack: { pid: 1, frames: [{ function: 'operator<<(std::ostream&, char const*)' }] },
      count: 1n,
      bytes: 2048n,
    },
  ];
  const svg = renderFlameGraph(rows, { weight: 'bytes', title: 'a "b" <c>' });
  assert.match(
    svg,
    /<title>operator&lt;&lt;\(std::ostream&amp;, char const\*\) \(2,048 bytes, 100.00%\)<\/title>/,
  );
  assert.match(svg, />a &quot;b&quot; &lt;c&gt;</);
});

test('an empty profile is a valid picture that says so', () => {
  const svg = renderFlameGraph([]);
  assert.match(svg, /No samples/);
  assert.doesNotMatch(svg, /class="f"/);
});
