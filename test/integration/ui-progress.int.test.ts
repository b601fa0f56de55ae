// upscope-tests: alone (it probes every function of libc, which every process on the machine runs: another file's ptrace run in libc would meet its kernel uprobes).
// Progress in `upscope ui`'s page, driven in Debian's chromium: a count of `libc:*` (thousands
// of functions) on a C target picked in Targets says, while it plans, how far the planning
// of libc's functions got (`planning 1,000 of 3,706 functions of .../libc.so.6`, with a
// progress bar), before its result; the count that follows holds the target's own calls of
// its function; Stop leaves nothing. What the page shows is collected by a MutationObserver,
// so a step shown for a moment is seen however loaded the machine is.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Browser, openBrowser } from '../helpers/browser.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { pickProcess, until, watchPage } from '../helpers/ui-page.js';
import { probesHeldBy, startUi } from '../helpers/ui-server.js';

const PLANNING = /planning ([\d,]+) of ([\d,]+) functions of (\S*libc\.so\.6)/;

test('upscope ui: counting libc:* shows the planning of its functions as it goes, then the right count', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['1234', '5']);
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /waiting/, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    const seen = watchPage(page, ui.origin);
    await page.goto(ui.url);
    await pickProcess(page, target.pid);
    await page.locator('[data-test="tab-measure"]').click();
    // Every text a progress shows, and whether a count was shown by then, as the page changes.
    await page.evaluate(() => {
      const g = globalThis as unknown as {
        document: {
          body: unknown;
          querySelectorAll(s: string): ArrayLike<{ textContent: string | null }>;
        };
        MutationObserver: new (
          f: () => void,
        ) => { observe(n: unknown, o: Record<string, boolean>): void };
        shown: { text: string; counted: boolean }[];
      };
      g.shown = [];
      new g.MutationObserver(() => {
        const counted = g.document.querySelectorAll('[data-test="count-value"]').length > 0;
        for (const p of Array.from(g.document.querySelectorAll('[data-test="progress"]'))) {
          const text = p.textContent ?? '';
          if (g.shown.at(-1)?.text !== text) g.shown.push({ text, counted });
        }
      }).observe(g.document.body, { childList: true, subtree: true, characterData: true });
    });
    await page.locator('[data-test="spec-editor"]').fill(`libc:*\n${app}:work`);
    await page.locator('.editor select').selectOption('count');
    await page.locator('.editor button[type="submit"]').click();
    const card = page.locator('[data-test="measurement-count"]');
    await until(
      'the count runs',
      async () => (await card.locator('[data-test="state"]').textContent()) === 'running',
      120_000,
    );
    const shown = (await page.evaluate(
      () => (globalThis as unknown as { shown: unknown }).shown,
    )) as { text: string; counted: boolean }[];
    const steps = shown.flatMap(({ text, counted }) => {
      const m = PLANNING.exec(text);
      if (m === null) return [];
      return [
        { done: Number(m[1]!.replace(/,/g, '')), total: Number(m[2]!.replace(/,/g, '')), counted },
      ];
    });
    assert.ok(
      steps.some((s) => s.done < s.total && s.total > 1000),
      `a step of the planning shown: ${JSON.stringify(shown.map((s) => s.text))}`,
    );
    assert.ok(
      steps.every((s) => !s.counted),
      'the planning shows before the count',
    );
    assert.ok(probesHeldBy(ui.spawned.pid).length > 0, 'the server holds its probes');
    // What the plan warns of is a note of the card: libc's IFUNC resolvers, probed at their
    // implementations.
    const notes = await card.locator('.note').allTextContents();
    assert.ok(
      notes.some((note) =>
        /^Probed \d+ IFUNC resolvers matched by "\*" at their implementations .*the implementations are probed instead/.test(
          note,
        ),
      ),
      JSON.stringify(notes),
    );

    // The count that follows is right: the target's own calls of work.
    target.child.kill('SIGUSR1');
    await waitFor(target, /done/, 'stdout');
    const own = /work0=(\d+) work1=(\d+) work2=(\d+)/.exec(target.stdout)!;
    const calls = String(Number(own[1]) + Number(own[2]) + Number(own[3]));
    // The rows of work (the program's function; libc has none of that name).
    const workRows = async () =>
      card
        .locator('tr')
        .evaluateAll((trs) =>
          trs
            .map((tr) =>
              Array.from(
                (tr as unknown as { cells: ArrayLike<{ textContent: string | null }> }).cells,
              ).map((c) => c.textContent ?? ''),
            )
            .filter((cells) => /(^|:)work$/.test(cells[0] ?? '')),
        );
    let rows: string[][] = [];
    try {
      await until('the page shows the target’s calls of work', async () => {
        rows = await workRows();
        return rows.length === 1 && rows[0]![1] === calls;
      });
    } catch {
      assert.deepEqual(rows, [['work', calls]], 'the count of work is the target’s own');
    }
    await card.locator('[data-test="stop"]').click();
    await until(
      'the count stops',
      async () => (await card.locator('[data-test="state"]').textContent()) === 'stopped',
    );
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'Stop removed every probe');
    assert.deepEqual(seen.errors, [], 'no console error');
    assert.deepEqual(seen.foreign, [], 'nothing fetched from elsewhere');
  } finally {
    await browser?.close();
    ui.spawned.child.kill('SIGINT');
    const end = await ended(ui.spawned);
    target.child.kill('SIGKILL');
    await ended(target);
    assert.equal(end.code, 0, ui.spawned.stderr);
  }
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(
    leftovers(true).filter((l) => l.includes(`upscope_${ui.spawned.pid}`)),
    [],
  );
});
