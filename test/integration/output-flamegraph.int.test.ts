// The flame graph opened as a person would: in Debian's chromium (headless, driven by
// playwright-core). The picture shows every frame at its share of the recorded counts; a click
// zooms into a frame; a search highlights the frames it matches and says their share; a
// tooltip gives each frame's count and percentage. No network, no script but its own.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Page } from 'playwright-core';
import { foldStacks, renderFlameGraph, type StackCount } from '../../src/output/index.js';
import { stackCounts } from '../fixtures/output/load.js';
import { type Browser, openBrowser, pixelsOf } from '../helpers/browser.js';
import { requireHost } from '../helpers/require-host.js';

const WIDTH = 1200;
const FRAMES = WIDTH - 20;

let browser: Browser | undefined;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'upscope-flamegraph-'));
});
after(async () => {
  await browser?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function open(t: { name: string; skip: (reason: string) => void }, svg: string) {
  if (!requireHost(t as never, { commands: ['chromium'] })) return undefined;
  browser ??= await openBrowser();
  const path = join(dir, `${Math.random().toString(36).slice(2)}.svg`);
  writeFileSync(path, svg);
  const page = await browser.context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(msg.text());
  });
  const requests: string[] = [];
  page.on('request', (req) => {
    if (!req.url().startsWith('file://')) requests.push(req.url());
  });
  await page.goto(`file://${path}`);
  return { page, errors, requests };
}

/** Each frame's title and rendered box (null when hidden), as the browser laid them out. */
async function frames(page: Page) {
  const out = [];
  for (const g of await page.locator('g.f').all()) {
    const title = (await g.locator('title').textContent()) ?? '';
    out.push({
      name: title.replace(/ \([^()]*\)$/, ''),
      title,
      box: (await g.isVisible()) ? await g.locator('rect').boundingBox() : null,
    });
  }
  return out;
}

/** The tree of the recorded stacks, computed from the fixture: each frame path and its total. */
function expectedFrames(rows: readonly StackCount[]) {
  const totals = new Map<string, bigint>();
  let all = 0n;
  for (const [stack, value] of foldStacks(rows)) {
    all += value;
    const names = stack.split(';');
    for (let i = 1; i <= names.length; i++) {
      const path = names.slice(0, i).join(';');
      totals.set(path, (totals.get(path) ?? 0n) + value);
    }
  }
  return { all, totals };
}

test('the flame graph shows every recorded frame at its share, and zooms on a click', async (t) => {
  const { rows } = stackCounts();
  const opened = await open(t, renderFlameGraph(rows, { width: WIDTH, minWidth: 0 }));
  if (opened === undefined) return;
  const { page, errors, requests } = opened;
  const { all, totals } = expectedFrames(rows);
  const shown = await frames(page);
  // 'all' plus one frame per distinct path of the recorded stacks.
  assert.equal(shown.length, totals.size + 1);
  const byName = (name: string) => shown.filter((f) => f.name === name);
  assert.equal(byName('all')[0]!.title, `all (${all} hits, 100.00%)`);
  for (const [path, value] of totals) {
    const name = path.split(';').at(-1)!;
    const width = (Number(value) / Number(all)) * FRAMES;
    assert.ok(
      byName(name).some((f) => f.box !== null && Math.abs(f.box.width - width) < 1),
      `a frame ${name} ${width.toFixed(1)} px wide (${value} of ${all})`,
    );
  }

  // The picture: at the middle of each wide frame, its own colour, not the background.
  const wide = shown.filter((f) => f.box !== null && f.box.width > 20);
  const png = await page.screenshot();
  const fills = await page
    .locator('g.f rect')
    .evaluateAll((rects) => rects.map((r) => r.getAttribute('fill') ?? ''));
  const pixels = await pixelsOf(
    browser!.context,
    png,
    wide.map((f) => ({ x: f.box!.x + f.box!.width / 2, y: f.box!.y + f.box!.height / 2 + 3 })),
  );
  const background = (await pixelsOf(browser!.context, png, [{ x: 5, y: 5 }]))[0];
  for (const [i, f] of wide.entries()) {
    assert.notEqual(pixels[i], background, `frame ${f.name} is drawn`);
    assert.equal(
      pixels[i],
      fills[shown.indexOf(f)]!.replace(/ /g, ''),
      `frame ${f.name} shows its colour`,
    );
  }

  // Zoom: via_b (two of three stack_leaf paths) fills the width, its child too; via_a goes.
  const viaB = page.locator('g.f', { has: page.locator('title', { hasText: /^via_b / }) });
  await viaB.click();
  const zoomed = await frames(page);
  const leafOfB = zoomed.find(
    (f) => f.name === 'stack_leaf' && f.box !== null && f.box.width > FRAMES - 1,
  );
  assert.ok(leafOfB, 'stack_leaf above via_b fills the width');
  assert.ok(Math.abs(zoomed.find((f) => f.name === 'via_b')!.box!.width - FRAMES) < 1);
  assert.equal(zoomed.find((f) => f.name === 'via_a')!.box, null, 'via_a is hidden');
  assert.ok(await page.locator('#unzoom').isVisible());
  await page.locator('#unzoom').click();
  const reset = await frames(page);
  assert.deepEqual(
    reset.map((f) => Math.round(f.box?.width ?? -1)),
    shown.map((f) => Math.round(f.box?.width ?? -1)),
  );
  assert.deepEqual(errors, []);
  assert.deepEqual(requests, []);
});

test('a search highlights the frames it matches and says their share of the total', async (t) => {
  const { rows } = stackCounts();
  const opened = await open(t, renderFlameGraph(rows, { width: WIDTH }));
  if (opened === undefined) return;
  const { page, errors } = opened;
  const { all, totals } = expectedFrames(rows);
  let matched = 0n;
  for (const [path, value] of totals) if (path.endsWith(';stack_leaf')) matched += value;
  page.once('dialog', (dialog) => void dialog.accept('^stack_'));
  await page.locator('#search').click();
  const percent = ((Number(matched) / Number(all)) * 100).toFixed(2);
  assert.equal(await page.locator('#matched').textContent(), `Matched: ${percent}%`);
  const shown = await frames(page);
  const fills = await page
    .locator('g.f rect')
    .evaluateAll((rects) => rects.map((r) => r.getAttribute('fill')));
  for (const [i, f] of shown.entries()) {
    assert.equal(fills[i] === 'rgb(230,0,230)', f.name.startsWith('stack_'), f.name);
  }
  const leaf = shown.find((f) => f.name === 'stack_leaf' && f.box !== null)!;
  const png = await page.screenshot();
  const [pixel] = await pixelsOf(browser!.context, png, [
    { x: leaf.box!.x + leaf.box!.width / 2, y: leaf.box!.y + 3 },
  ]);
  assert.equal(pixel, 'rgb(230,0,230)');
  // The tooltip's details line on hover; a second click on the button resets the search.
  await page.locator('g.f', { has: page.locator('title', { hasText: /^main / }) }).hover();
  assert.equal(
    await page.locator('#details').textContent(),
    `Function: main (${all.toLocaleString('en-US')} hits, 100.00%)`,
  );
  await page.locator('#search').click();
  assert.equal(await page.locator('#matched').textContent(), '');
  assert.deepEqual(errors, []);
});

test('names that are not plain text still make a valid picture', async (t) => {
  const control = String.fromCharCode(1);
  const names = [
    'operator<<(std::ostream&, char const*)',
    'a "quoted" \'name\'',
    `ctl${control}char`,
    'ns::Box<int>::get() const',
  ];
  const rows: StackCount[] = names.map((name, i) => ({
    probe: 'p',
    stack: { pid: 1, frames: [{ function: name }, { function: 'main' }] },
    count: BigInt(i + 1),
  }));
  const opened = await open(t, renderFlameGraph(rows, { width: WIDTH }));
  if (opened === undefined) return;
  const { page, errors } = opened;
  assert.equal(await page.locator('parsererror').count(), 0);
  const shown = (await frames(page)).map((f) => f.name).sort();
  assert.deepEqual(
    shown,
    [
      'a "quoted" \'name\'',
      'all',
      'ctl\ufffdchar',
      'main',
      ...names.filter((n) => !n.includes('"') && !n.includes(control)),
    ].sort(),
  );
  assert.deepEqual(errors, []);
});
