// upscope-tests: apart libc-allocator (it probes libc's allocator, as leaks.int does: another file's ptrace run on the same functions would meet its kernel uprobes).
// The Leaks of `upscope ui`'s Measure view, driven in Debian's chromium: a C target started
// here is picked in Targets and its leaks found from the page; then it leaks a known number
// of blocks and bytes from three call paths (its own counters say how many) and holds them.
// The page's live report shows, for each path, the target's own blocks and bytes, with named
// frames; the growth chart has a line per path; the flame graph weighs them by bytes; the
// exports are what upscope leaks writes (folded and JSON hold the same numbers, an SVG, a
// gzipped pprof). Stop removes every probe and the target runs on, unharmed. A command
// started from the page ends by itself, its last report what it had not freed at its exit;
// one whose program is not there fails as upscope leaks -c says it.
// No console error, nothing fetched from elsewhere, nothing left behind; screenshots are
// artifacts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import { type Browser, openBrowser } from '../helpers/browser.js';
import { compileProgram } from '../helpers/compile.js';
import { findGo } from '../helpers/go.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { pickProcess, snapshot, until, watchPage } from '../helpers/ui-page.js';
import { probesHeldBy, startUi } from '../helpers/ui-server.js';

const PATHS = ['leak_path_a', 'leak_path_b', 'leak_path_c'] as const;

type Numbers = Record<string, { count: number; bytes: number }>;

/** What the target says it leaked, per call path: blocks and bytes. */
function truthOf(file: string): Numbers {
  const truth: Numbers = {};
  for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
    const [name, count, bytes] = line.split(' ');
    truth[name!] = { count: Number(count), bytes: Number(bytes) };
  }
  return truth;
}

/** Whether a frame as the page shows it (`leak_path_a+0x1a (app) at app.c:22`) is `fn`'s. */
function isFrameOf(frame: string, fn: string): boolean {
  return frame.startsWith(`${fn}+`) || frame.startsWith(`${fn} `);
}

/** Blocks and bytes of the stacks through each path, summed, as the card's table shows them. */
async function shownPerPath(card: Locator): Promise<Numbers> {
  const rows = await card.locator('[data-test="leak-stack"]').evaluateAll((trs) =>
    trs.map((tr) => {
      const row = tr as unknown as {
        dataset: { count: string; bytes: string };
        querySelectorAll(s: string): ArrayLike<{ textContent: string | null }>;
      };
      return {
        count: Number(row.dataset.count),
        bytes: Number(row.dataset.bytes),
        frames: Array.from(row.querySelectorAll('[data-test="leak-frame"]')).map(
          (f) => f.textContent ?? '',
        ),
      };
    }),
  );
  const shown: Numbers = {};
  for (const path of PATHS) {
    shown[path] = { count: 0, bytes: 0 };
    for (const row of rows) {
      if (!row.frames.some((f) => isFrameOf(f, path))) continue;
      shown[path].count += row.count;
      shown[path].bytes += row.bytes;
    }
  }
  return shown;
}

/** Waits until the card shows the target's numbers for every path (fails showing both). */
async function untilShown(card: Locator, truth: Numbers, what: string): Promise<void> {
  const want = Object.fromEntries(PATHS.map((p) => [p, truth[p]]));
  let last: Numbers = {};
  try {
    await until(what, async () => {
      last = await shownPerPath(card);
      return JSON.stringify(last) === JSON.stringify(want);
    });
  } catch {
    assert.deepEqual(last, want, `${what}: the page's numbers are the target's own`);
  }
}

async function stateOf(card: Locator): Promise<string> {
  return ((await card.locator('[data-test="state"]').textContent()) ?? '').trim();
}

async function startLeaks(page: Page): Promise<void> {
  await page.locator('[data-test="tab-measure"]').click();
  await page.locator('[data-test="leaks-top"]').fill('50');
  await page.locator('[data-test="leaks-start"]').click();
}

test('upscope ui: the leaks of a process, live, each path’s blocks and bytes the target’s own; growth, flame graph, exports; Stop leaves nothing', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('leaks-target', { flags: ['-O1'], link: ['-lpthread'] });
  const scratch = mkdtempSync(join(tmpdir(), 'upscope-ui-leaks-'));
  const truthFile = join(scratch, 'truth');
  const target = spawnCollected(app, [truthFile, 'hold'], {}, 'pipe');
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /^ready$/m, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    const seen = watchPage(page, ui.origin);
    await page.goto(ui.url);
    await pickProcess(page, target.pid);
    await startLeaks(page);
    const card = page.locator('[data-test="leaks"]', { hasText: `process ${target.pid}` });
    await until('the leak report runs', async () => (await stateOf(card)) === 'running');
    assert.ok(probesHeldBy(ui.spawned.pid).length > 0, 'the server holds its probes');

    // The target allocates, frees most, leaks some, and holds them.
    target.child.stdin!.write('go\n');
    await waitFor(target, /^held$/m, 'stdout');
    const truth = truthOf(truthFile);
    await untilShown(card, truth, 'the live report shows every path');
    assert.match(
      (await card.locator('[data-test="leaks-summary"]').textContent()) ?? '',
      /^Outstanding: /,
      'a live report, not the final one',
    );
    // Frames are named, with the target's source lines (it has DWARF), the allocator first.
    const a = card.locator('[data-test="leak-stack"]', { hasText: 'leak_path_a' }).first();
    const frames = await a.locator('[data-test="leak-frame"]').allTextContents();
    assert.match(frames[0]!, /^malloc\b/, frames.join(' <- '));
    assert.match(frames.find((f) => isFrameOf(f, 'leak_path_a'))!, / at \S*leaks-target\.c:\d+$/);
    assert.ok(
      frames.some((f) => isFrameOf(f, 'worker')),
      frames.join(' <- '),
    );
    assert.match(
      (await card.locator('[data-test="leaks-counters"]').textContent()) ?? '',
      /^\d+ allocations and \d+ frees seen/,
    );
    // The growth chart: a line for all the bytes and one per path.
    const legend = await card.locator('[data-test="leaks-growth"] .u-legend').textContent();
    for (const path of PATHS) assert.ok(legend?.includes(path), `${path} in ${legend}`);
    await snapshot(browser, page, 'leaks-stacks');

    // The flame graph: each path's frame as heavy as its bytes.
    await card.locator('[data-test="part-flame"]').click();
    const flame = card.locator('[data-test="flamegraph"]');
    await flame.waitFor();
    for (const path of PATHS) {
      const title = await flame
        .locator('.frame', { hasText: new RegExp(`^${path}$`) })
        .getAttribute('title');
      assert.ok(title?.includes(`, ${truth[path]!.bytes} bytes, `), `${path}: ${title}`);
    }
    await snapshot(browser, page, 'leaks-flame');

    // Exports, as upscope leaks writes them.
    const download = async (format: string) => {
      const [file] = await Promise.all([
        page.waitForEvent('download'),
        card.locator(`[data-test="export-${format}"]`).click(),
      ]);
      return readFileSync((await file.path())!);
    };
    const folded = (await download('folded')).toString('utf8');
    for (const path of PATHS) {
      const bytes = folded
        .split('\n')
        .filter((line) => line.includes(`;${path};`))
        .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
      assert.equal(bytes, truth[path]!.bytes, `folded: ${path}`);
    }
    const json = JSON.parse((await download('json')).toString('utf8')) as {
      final: boolean;
      stacks: { count: number; bytes: number; frames: { function?: string }[] }[];
      growth: { stack: string }[];
    };
    assert.equal(json.final, false);
    for (const path of PATHS) {
      const through = json.stacks.filter((s) => s.frames.some((f) => f.function === path));
      assert.deepEqual(
        {
          count: through.reduce((n, s) => n + s.count, 0),
          bytes: through.reduce((n, s) => n + s.bytes, 0),
        },
        truth[path],
        `json: ${path}`,
      );
      assert.ok(json.growth.some((g) => g.stack.includes(path)));
    }
    const svg = (await download('svg')).toString('utf8');
    assert.match(svg, /^<\?xml|^<svg/);
    assert.ok(svg.includes('leak_path_c'));
    const pprof = await download('pprof');
    assert.deepEqual([...pprof.subarray(0, 2)], [0x1f, 0x8b], 'a gzipped pprof profile');
    const go = findGo();
    if (go !== undefined) {
      const file = join(scratch, 'leaks.pb.gz');
      writeFileSync(file, pprof);
      const raw = spawnSync(go, ['tool', 'pprof', '-raw', file], { encoding: 'utf8' });
      assert.match(raw.stdout, /bytes\/bytes\[dflt\] allocations\/count/, raw.stderr);
    }

    // Stop: every probe removed; the last report stays; the target runs on.
    await card.locator('[data-test="stop"]').click();
    await until('the leak report stops', async () => (await stateOf(card)) === 'stopped');
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'Stop removed every probe');
    assert.equal(target.child.exitCode, null, 'the process runs on');
    await card.locator('[data-test="part-stacks"]').click();
    await untilShown(card, truth, 'the last report stays');
    assert.match(
      (await card.locator('[data-test="leaks-summary"]').textContent()) ?? '',
      /^Outstanding at the end: /,
    );
    target.child.stdin!.end();
    const exit = await ended(target);
    assert.deepEqual(exit, { code: 0, signal: null }, 'the target is unharmed');

    // A command started from the page: it ends by itself; its last report is what it had not
    // freed when it exited.
    const commandTruth = join(scratch, 'command-truth');
    const command = `${app} ${commandTruth}`;
    await page.locator('[data-test="tab-targets"]').click();
    await page.locator('input[placeholder^="./app --flag"]').fill(command);
    await page.locator('input[placeholder^="./app --flag"]').press('Enter');
    await startLeaks(page);
    const ran = page.locator('[data-test="leaks"]', { hasText: `command ${command}` });
    await until('the command’s report ends', async () => (await stateOf(ran)) === 'stopped');
    assert.match((await ran.textContent()) ?? '', /the command ended/);
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'nothing held once the command ended');
    await untilShown(ran, truthOf(commandTruth), 'the command’s last report');
    await snapshot(browser, page, 'leaks-command');
    await ran.locator('[data-test="close"]').click();
    await until('Close removes the card', async () => (await ran.count()) === 0);

    assert.deepEqual(seen.errors, [], 'no console error');
    assert.deepEqual(seen.foreign, [], 'nothing fetched from elsewhere');

    // A command whose program is not there: the card says so as upscope leaks -c does (and
    // the Functions view, which lists the program's functions when it is picked, fails: the
    // one error the console may show from here on).
    const missing = join(scratch, 'no-such-app');
    await page.locator('[data-test="tab-targets"]').click();
    await page.locator('input[placeholder^="./app --flag"]').fill(missing);
    await page.locator('input[placeholder^="./app --flag"]').press('Enter');
    await startLeaks(page);
    const failed = page.locator('[data-test="leaks"]', { hasText: `command ${missing}` });
    await until('the missing program fails', async () => (await stateOf(failed)) === 'failed');
    const refused = runCli(['leaks', '-c', missing]);
    assert.equal(refused.status, 3, refused.stderr);
    assert.match(
      refused.stderr,
      /^error\[ERR_TARGET_NOT_FOUND\]: Cannot run ".*no-such-app": no such executable file$/m,
    );
    assert.equal(
      ((await failed.locator('[data-test="error"]').textContent()) ?? '').trim(),
      refused.stderr.trim(),
    );
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'nothing held by the failed start');
    assert.ok(
      seen.errors.every((e) => /status of 400 \(Bad Request\)/.test(e)),
      seen.errors.join('\n'),
    );
    assert.deepEqual(seen.foreign, [], 'nothing fetched from elsewhere');
  } finally {
    await browser?.close();
    ui.spawned.child.kill('SIGINT');
    const end = await ended(ui.spawned);
    target.child.kill('SIGKILL');
    await ended(target);
    rmSync(scratch, { recursive: true, force: true });
    assert.equal(end.code, 0, ui.spawned.stderr);
  }
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(
    leftovers(true).filter((l) => l.includes(`upscope_${ui.spawned.pid}`)),
    [],
  );
});
