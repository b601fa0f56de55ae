// speedscope itself (the npm package's static build, served on a loopback port) in Debian's
// chromium: what it shows of a file, and the file it exports from what it read.
import { readFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { type Browser, openBrowser, type StaticServer, serveStatic } from './browser.js';

const SPEEDSCOPE = new URL('../../node_modules/speedscope/dist/release', import.meta.url).pathname;

let browser: Browser | undefined;
let server: StaticServer | undefined;
const files: Record<string, string> = {};

/** Close the browser and the server (in an after() hook of the tests that opened files). */
export async function closeSpeedscope(): Promise<void> {
  await browser?.close();
  await server?.close();
  browser = undefined;
  server = undefined;
}

export interface Loaded {
  readonly page: Page;
  readonly title: string;
  /** The profile shown and how many there are: `name (1/N)`. */
  readonly profile: string;
  /** Page errors, alerts, console errors and speedscope's import warnings. */
  readonly problems: string[];
  /** speedscope's sandwich table: name -> total (the number it prints). */
  readonly sandwich: Map<string, string>;
}

/** Open `content` in speedscope as FILE (#profileURL=), and read what it shows. */
export async function openInSpeedscope(name: string, content: string): Promise<Loaded> {
  browser ??= await openBrowser();
  files[`/profiles/${name}`] = content;
  server ??= await serveStatic(SPEEDSCOPE, files);
  const page = await browser.context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('dialog', (dialog) => {
    problems.push(`alert: ${dialog.message()}`);
    void dialog.dismiss();
  });
  page.on('console', (msg) => {
    if (msg.type() === 'error' || /Failed to load|Tried to end|still open/.test(msg.text())) {
      problems.push(`console: ${msg.text()}`);
    }
  });
  const url = `${server.url}/profiles/${name}`;
  await page.goto(`${server.url}/index.html#profileURL=${encodeURIComponent(url)}`);
  await page
    .waitForFunction(
      () =>
        (globalThis as unknown as { document: { title: string } }).document.title.endsWith(
          ' - speedscope',
        ),
      null,
      { timeout: 30_000 },
    )
    .catch(() => problems.push('speedscope did not show the profile'));
  // biome-ignore lint/performance/useDomNodeTextContent: the text as shown, line by line
  const body = await page.locator('body').innerText();
  if (body.includes('Something went wrong')) problems.push('speedscope: Something went wrong');
  const profile = /^(.*\(\d+\/\d+\))$/m.exec(body)?.[1] ?? '';
  await page.keyboard.press('3'); // the sandwich view: a table of every function
  await page.getByText('Symbol Name').waitFor();
  // The table's header can be drawn before its rows (a loaded machine): wait for a row.
  const header = 'Total\tSelf\tSymbol Name';
  let lines: string[] = [];
  for (const until = Date.now() + 15_000; Date.now() < until; ) {
    // biome-ignore lint/performance/useDomNodeTextContent: the table as shown, line by line
    lines = (await page.locator('body').innerText()).split('\n');
    if (lines.length > lines.indexOf(header) + 3) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const sandwich = new Map<string, string>();
  for (let i = lines.indexOf(header) + 1; i + 2 < lines.length; i += 3) {
    // `700 (>99%)`: the total, then its share as speedscope rounds it.
    sandwich.set(lines[i + 2]!.trim(), lines[i]!.trim().split(' ')[0]!);
  }
  return { page, title: await page.title(), profile, problems, sandwich };
}

/** An evented profile of speedscope's own file format: frames opened and closed. */
export interface ExportedProfile {
  readonly type: string;
  readonly name: string;
  readonly events?: { type: 'O' | 'C'; frame: number; at: number }[];
}

/**
 * What speedscope read, as it writes it with its Export button (its own file format): the
 * profiles, and the frames they name.
 */
export async function exportFromSpeedscope(
  page: Page,
): Promise<{ profiles: ExportedProfile[]; shared: { frames: { name: string }[] } }> {
  const download = page.waitForEvent('download');
  await page.getByText('Export').click();
  const path = await (await download).path();
  return JSON.parse(readFileSync(path, 'utf8'));
}
