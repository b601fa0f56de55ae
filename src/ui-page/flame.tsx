// A flame graph of stacks with weights (count --by ustack's hits, a recording's time per call
// path): the root at the bottom, each frame as wide as its share of the weight, a click zooms
// into a frame (its ancestors stay, full width), a click on the root zooms out. Colours by
// name, as the SVG export has them.
import { useMemo, useState } from 'preact/hooks';
import type { StackRowView } from '../api/ui-contract.js';
import { duration } from './parts.js';

interface Node {
  readonly name: string;
  readonly path: string;
  value: number;
  readonly children: Map<string, Node>;
}

function build(rows: readonly StackRowView[]): Node {
  const root: Node = { name: 'all', path: 'all', value: 0, children: new Map() };
  for (const row of rows) {
    root.value += row.count;
    let node = root;
    for (const frame of row.frames) {
      let child = node.children.get(frame);
      if (child === undefined) {
        child = { name: frame, path: `${node.path};${frame}`, value: 0, children: new Map() };
        node.children.set(frame, child);
      }
      child.value += row.count;
      node = child;
    }
  }
  return root;
}

function colour(name: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  if (/^0x[0-9a-f]+$|^\[|\+0x[0-9a-f]+$/.test(name)) return 'rgb(180,180,190)';
  return `rgb(${205 + ((h >>> 16) % 50)},${(h & 0xff) % 230},${((h >>> 8) & 0xff) % 55})`;
}

interface Box {
  readonly node: Node;
  readonly depth: number;
  readonly x: number;
  readonly width: number;
}

const ROW = 18;

/**
 * `rows`: each stack (outermost frame first) with its weight in `count`: hits, or with
 * `unit="ns"` the time spent in its last frame itself.
 */
export function FlameGraph({
  rows,
  unit = 'hits',
}: {
  rows: readonly StackRowView[];
  unit?: 'hits' | 'ns';
}) {
  const root = useMemo(() => build(rows), [rows]);
  const [zoom, setZoom] = useState<string>('all');
  const boxes: Box[] = [];
  // The zoomed frame's ancestors span the width; below them, its subtree at its scale.
  const chain = zoom.split(';');
  let focus: Node = root;
  boxes.push({ node: root, depth: 0, x: 0, width: 1 });
  for (let d = 1; d < chain.length; d++) {
    const next = focus.children.get(chain[d]!);
    if (next === undefined) break;
    focus = next;
    boxes.push({ node: focus, depth: d, x: 0, width: 1 });
  }
  const walk = (node: Node, depth: number, x: number, width: number) => {
    let at = x;
    for (const child of [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      const w = (child.value / node.value) * width;
      if (w >= 0.001) {
        boxes.push({ node: child, depth, x: at, width: w });
        walk(child, depth + 1, at, w);
      }
      at += w;
    }
  };
  if (focus.value > 0) walk(focus, boxes.length, 0, 1);
  const depth = Math.max(...boxes.map((b) => b.depth)) + 1;
  if (root.value === 0) {
    return (
      <p class="muted">
        {unit === 'hits' ? 'No stacks yet: the function has not been called.' : 'No calls.'}
      </p>
    );
  }
  const weight = (n: number) => (unit === 'hits' ? `${n} hits` : duration(n));
  return (
    <div class="flame" style={{ height: `${depth * ROW}px` }} data-test="flamegraph">
      {boxes.map((b) => (
        <button
          type="button"
          key={b.node.path}
          class="frame"
          title={`${b.node.name} (${weight(b.node.value)}, ${((b.node.value / root.value) * 100).toFixed(2)}%)`}
          style={{
            left: `${b.x * 100}%`,
            width: `${b.width * 100}%`,
            bottom: `${b.depth * ROW}px`,
            background: b.node === root ? 'rgb(230,180,90)' : colour(b.node.name),
          }}
          onClick={() => setZoom(b.node.path)}
        >
          {b.node.name}
        </button>
      ))}
    </div>
  );
}
