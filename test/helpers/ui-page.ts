// What the browser tests of `upscope ui` do to a page: wait for it, screenshot it as an
// artifact (failing on a blank page), collect its console errors.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { type Browser, pixelsOf } from './browser.js';

/** Where screenshots go: $UPSCOPE_TEST_ARTIFACTS, or upscope-ui-artifacts/ in TMPDIR. */
export const ARTIFACTS =
  process.env['UPSCOPE_TEST_ARTIFACTS'] ?? join(tmpdir(), 'upscope-ui-artifacts');

/** Waits until `check` holds (polling), failing after `ms`. */
export async function until(what: string, check: () => Promise<boolean> | boolean, ms = 60_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A screenshot of the page as an artifact; fails when the page is blank (one colour). */
export async function snapshot(browser: Browser, page: Page, name: string): Promise<void> {
  const png = await page.screenshot({ fullPage: true });
  const path = join(ARTIFACTS, `${name}.png`);
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(path, png);
  console.log(`ui test: screenshot ${path}`);
  const points = [];
  for (let x = 20; x < 1280; x += 60) for (let y = 10; y < 700; y += 45) points.push({ x, y });
  const colours = new Set(await pixelsOf(browser.context, png, points));
  assert.ok(colours.size >= 4, `${name}: the page is not blank (${colours.size} colours)`);
  const text = ((await page.locator('main').textContent()) ?? '').trim();
  assert.ok(text.length > 40, `${name}: the page shows text: ${JSON.stringify(text)}`);
}

/** The page's errors (uncaught, console.error) and requests to other origins, as they come. */
export function watchPage(page: Page, origin: string): { errors: string[]; foreign: string[] } {
  const seen = { errors: [] as string[], foreign: [] as string[] };
  page.on('pageerror', (err) => seen.errors.push(err.message));
  page.on('console', (msg) => {
    if (msg.type() === 'error') seen.errors.push(msg.text());
  });
  page.on('request', (req) => {
    if (!req.url().startsWith(origin)) seen.foreign.push(req.url());
  });
  return seen;
}

/**
 * Picks a process in Targets (the list refreshed, searched by its pid): the page goes on to
 * its Functions.
 */
export async function pickProcess(page: Page, pid: number): Promise<void> {
  await page.locator('[data-test="tab-targets"]').click();
  await page.locator('[data-test="process-refresh"]').click();
  await page.locator('[data-test="process-search"]').fill(String(pid));
  await page.locator(`[data-test="process-${pid}"]`).click();
}
