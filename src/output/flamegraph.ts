import { type FoldedOptions, foldStacks } from './folded.js';
import { type StackCount, type StackWeight, weightUnit } from './stacks.js';
import { escapeXml } from './xml.js';

export interface FlameGraphOptions extends FoldedOptions {
  /** The title at the top (default "Flame Graph"). */
  readonly title?: string | undefined;
  /** A line under the title: what was probed, how, when. */
  readonly subtitle?: string | undefined;
  /** Width of the image in pixels (default 1200). */
  readonly width?: number | undefined;
  /** Frames narrower than this many pixels are left out, as flamegraph.pl does (default 0.1). */
  readonly minWidth?: number | undefined;
}

interface Node {
  readonly name: string;
  value: bigint;
  readonly children: Map<string, Node>;
}

const FRAME_HEIGHT = 16;
const FONT_SIZE = 12;
/** Width of a character of the 12px monospace font, for cutting labels to their frame. */
const CHAR_WIDTH = 7.2;
const PAD_X = 10;
const PAD_TOP = 52;
const PAD_BOTTOM = 34;

/** `1234567` as `1,234,567`. */
function grouped(value: bigint): string {
  return value.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** `part` of `total` in percent, two decimals, computed exactly. */
function percent(part: bigint, total: bigint): string {
  if (total === 0n) return '0.00';
  const hundredths = (part * 10000n + total / 2n) / total;
  return `${hundredths / 100n}.${(hundredths % 100n).toString().padStart(2, '0')}`;
}

/** A stable 32-bit hash of a name (FNV-1a), for its colour. */
function hash(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * A frame's colour: warm hues chosen by its name (the same name, the same colour, in every
 * graph), grey for frames without a function name (an address, an object and offset).
 */
function colour(name: string): string {
  const h = hash(name);
  const a = (h & 0xff) / 255;
  const b = ((h >>> 8) & 0xff) / 255;
  const c = ((h >>> 16) & 0xff) / 255;
  if (/^0x[0-9a-f]+$|^\[|\+0x[0-9a-f]+$/.test(name)) {
    const v = 160 + Math.round(40 * a);
    return `rgb(${v},${v},${v + 10})`;
  }
  return `rgb(${205 + Math.round(50 * c)},${Math.round(230 * a)},${Math.round(55 * b)})`;
}

/** The label a frame shows: its name, cut with `..` to what fits, or nothing. */
function fit(name: string, width: number): string {
  const chars = Math.floor((width - 6) / CHAR_WIDTH);
  if (chars < 3) return '';
  return name.length <= chars ? name : `${name.slice(0, chars - 2)}..`;
}

function tree(folded: Map<string, bigint>): Node {
  const root: Node = { name: 'all', value: 0n, children: new Map() };
  for (const [stack, value] of folded) {
    root.value += value;
    let node = root;
    for (const name of stack.split(';')) {
      let child = node.children.get(name);
      if (child === undefined) {
        child = { name, value: 0n, children: new Map() };
        node.children.set(name, child);
      }
      child.value += value;
      node = child;
    }
  }
  return root;
}

function depthOf(node: Node): number {
  let deepest = 0;
  for (const child of node.children.values()) deepest = Math.max(deepest, depthOf(child) + 1);
  return deepest;
}

/**
 * A flame graph of the stacks: a self-contained SVG, interactive where scripts run (a
 * browser): click a frame to zoom into it, "Reset Zoom" (or Escape) to zoom out, "Search"
 * (or Ctrl-F) for a regular expression whose frames are highlighted and whose share of the
 * total is shown; each frame's tooltip gives its name, count and percentage. Root at the
 * bottom, children sorted by name, as flamegraph.pl draws them. No network, no external file.
 */
export function renderFlameGraph(
  rows: readonly StackCount[],
  options: FlameGraphOptions = {},
): string {
  const weight: StackWeight = options.weight ?? 'hits';
  const unit = weightUnit(weight);
  const width = options.width ?? 1200;
  const minWidth = options.minWidth ?? 0.1;
  const root = tree(foldStacks(rows, options));
  const total = root.value;
  const depth = depthOf(root);
  const height = PAD_TOP + (depth + 1) * FRAME_HEIGHT + PAD_BOTTOM;
  const frameWidth = width - 2 * PAD_X;
  const title = options.title ?? 'Flame Graph';

  const frames: string[] = [];
  const draw = (node: Node, start: bigint, level: number) => {
    const w = total === 0n ? 0 : (Number(node.value) / Number(total)) * frameWidth;
    if (w < minWidth) return;
    const x = PAD_X + (total === 0n ? 0 : (Number(start) / Number(total)) * frameWidth);
    const y = height - PAD_BOTTOM - (level + 1) * FRAME_HEIGHT;
    const name = escapeXml(node.name);
    const tip = `${name} (${grouped(node.value)} ${unit}, ${percent(node.value, total)}%)`;
    frames.push(
      `<g class="f" data-s="${start}" data-v="${node.value}" data-d="${level}">` +
        `<title>${tip}</title>` +
        `<rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${FRAME_HEIGHT - 1}" fill="${colour(node.name)}" rx="2" ry="2"/>` +
        `<text x="${(x + 3).toFixed(1)}" y="${y + FRAME_HEIGHT - 4.5}">${escapeXml(fit(node.name, w))}</text>` +
        `</g>`,
    );
    let offset = start;
    const children = [...node.children.values()].sort((a, b) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
    );
    for (const child of children) {
      draw(child, offset, level + 1);
      offset += child.value;
    }
  };
  if (total > 0n) draw(root, 0n, 0);

  const subtitle =
    options.subtitle === undefined
      ? ''
      : `<text class="sub" x="${width / 2}" y="42" text-anchor="middle">${escapeXml(options.subtitle)}</text>`;
  const empty =
    total === 0n
      ? `<text x="${width / 2}" y="${PAD_TOP + 12}" text-anchor="middle">No samples</text>`
      : '';
  return `<?xml version="1.0" standalone="no"?>
<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" data-total="${total}" data-unit="${unit}">
<title>${escapeXml(title)}</title>
<style>
text { font-family: monospace; font-size: ${FONT_SIZE}px; fill: rgb(0,0,0); }
text.title { font-size: 17px; }
text.sub { fill: rgb(90,90,90); }
g.f { cursor: pointer; }
g.f:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }
g.f.parent { opacity: 0.5; }
g.f.hidden { display: none; }
text.button { cursor: pointer; fill: rgb(0,0,160); }
text.button.hidden { display: none; }
</style>
<rect x="0" y="0" width="${width}" height="${height}" fill="rgb(248,248,248)"/>
<text class="title" x="${width / 2}" y="24" text-anchor="middle">${escapeXml(title)}</text>
${subtitle}
<text id="unzoom" class="button hidden" x="${PAD_X}" y="24">Reset Zoom</text>
<text id="search" class="button" x="${width - PAD_X}" y="24" text-anchor="end">Search</text>
<text id="matched" x="${width - PAD_X}" y="${height - 12}" text-anchor="end"></text>
<text id="details" x="${PAD_X}" y="${height - 12}"> </text>
${empty}
<g id="frames">
${frames.join('\n')}
</g>
<script type="text/ecmascript"><![CDATA[
${SCRIPT.replace('PAD_X', String(PAD_X)).replace('CHAR_WIDTH', String(CHAR_WIDTH))}
]]></script>
</svg>
`;
}

/**
 * The flame graph's behaviour, run by the browser. Frames carry their start and value (in
 * hits or bytes) and depth; zooming lays them out again from those, so nothing is recomputed
 * on the server side and the static picture needs no script.
 */
const SCRIPT = `(function () {
  'use strict';
  var svg = document.documentElement;
  var total = Number(svg.getAttribute('data-total'));
  var unit = svg.getAttribute('data-unit');
  var padX = PAD_X, charWidth = CHAR_WIDTH;
  var frameWidth = Number(svg.getAttribute('width')) - 2 * padX;
  var frames = Array.prototype.map.call(document.querySelectorAll('g.f'), function (g) {
    var rect = g.querySelector('rect');
    return {
      g: g, rect: g.querySelector('rect'), text: g.querySelector('text'),
      name: g.querySelector('title').textContent.replace(/ \\([^()]*\\)$/, ''),
      s: Number(g.getAttribute('data-s')), v: Number(g.getAttribute('data-v')),
      d: Number(g.getAttribute('data-d')), fill: rect.getAttribute('fill')
    };
  });
  var unzoom = document.getElementById('unzoom');
  var searchButton = document.getElementById('search');
  var matchedText = document.getElementById('matched');
  var details = document.getElementById('details');
  var searching = null;

  function fit(name, w) {
    var chars = Math.floor((w - 6) / charWidth);
    if (chars < 3) return '';
    return name.length <= chars ? name : name.slice(0, chars - 2) + '..';
  }
  function place(f, x, w) {
    f.rect.setAttribute('x', x.toFixed(1));
    f.rect.setAttribute('width', w.toFixed(1));
    f.text.setAttribute('x', (x + 3).toFixed(1));
    f.text.textContent = fit(f.name, w);
  }
  function zoom(z) {
    unzoom.classList.toggle('hidden', z === null || z.d === 0);
    var s0 = z === null ? 0 : z.s, v0 = z === null ? total : z.v, d0 = z === null ? 0 : z.d;
    frames.forEach(function (f) {
      var inside = f.d >= d0 && f.s >= s0 && f.s + f.v <= s0 + v0;
      var above = f.d < d0 && f.s <= s0 && f.s + f.v >= s0 + v0;
      f.g.classList.toggle('parent', above);
      var w = inside ? (f.v / v0) * frameWidth : frameWidth;
      f.g.classList.toggle('hidden', !(inside || above) || w < 0.1);
      if (inside) place(f, padX + ((f.s - s0) / v0) * frameWidth, w);
      else if (above) place(f, padX, frameWidth);
    });
  }
  function percent(v) { return (total === 0 ? 0 : (100 * v) / total).toFixed(2); }
  function search(term) {
    var re;
    try { re = new RegExp(term); } catch (e) { matchedText.textContent = 'Bad expression'; return; }
    searching = term;
    var matched = [];
    frames.forEach(function (f) {
      var hit = re.test(f.name);
      f.rect.setAttribute('fill', hit ? 'rgb(230,0,230)' : f.fill);
      if (hit) matched.push(f);
    });
    // Frames matched inside a matched frame are already counted in it.
    matched.sort(function (a, b) { return a.d - b.d; });
    var counted = [], sum = 0;
    matched.forEach(function (f) {
      for (var i = 0; i < counted.length; i++) {
        var c = counted[i];
        if (c.s <= f.s && f.s + f.v <= c.s + c.v) return;
      }
      counted.push(f);
      sum += f.v;
    });
    searchButton.textContent = 'Reset Search';
    matchedText.textContent = 'Matched: ' + percent(sum) + '%';
  }
  function resetSearch() {
    searching = null;
    frames.forEach(function (f) { f.rect.setAttribute('fill', f.fill); });
    searchButton.textContent = 'Search';
    matchedText.textContent = '';
  }
  function askSearch() {
    var term = window.prompt('Search for (regular expression):', searching || '');
    if (term !== null && term !== '') search(term);
  }
  frames.forEach(function (f) {
    f.g.addEventListener('click', function () { zoom(f.d === 0 ? null : f); });
    f.g.addEventListener('mouseover', function () {
      details.textContent = 'Function: ' + f.name + ' (' + f.v.toLocaleString('en-US') + ' ' +
        unit + ', ' + percent(f.v) + '%)';
    });
    f.g.addEventListener('mouseout', function () { details.textContent = ' '; });
  });
  unzoom.addEventListener('click', function () { zoom(null); });
  searchButton.addEventListener('click', function () {
    if (searching !== null) resetSearch(); else askSearch();
  });
  window.addEventListener('keydown', function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === 'f') { e.preventDefault(); askSearch(); }
    else if (e.key === 'Escape') { zoom(null); resetSearch(); }
  });
})();`;
