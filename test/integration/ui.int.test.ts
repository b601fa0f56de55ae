// `upscope ui` driven as a person would, in Debian's chromium (headless, playwright-core): pick
// a C target started here in the process list, search its function, start a count, a latency
// histogram and a flame graph with clicks, make the target call the function, and see the
// page show the target's own counts; Stop removes every probe (the server holds no BPF object
// or perf event, no tracefs group, no upscope group of a dead owner is left), and closing the
// page and the server leaves nothing either. Each view's screenshot is written under
// $UPSCOPE_TEST_ARTIFACTS (default: the test's TMPDIR, upscope-ui-artifacts/) and its path
// printed; a blank page or a console error fails. First paint and the bundle's size are
// measured and printed, not asserted.
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { type Browser, openBrowser } from '../helpers/browser.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { pickProcess, snapshot, until } from '../helpers/ui-page.js';
import { probesHeldBy, startUi } from '../helpers/ui-server.js';

const PAGE = new URL('../../dist/page/', import.meta.url).pathname;

test('upscope ui: pick a process, search a function, count, time and draw it: the numbers are the target’s own; Stop leaves nothing', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['3001', '17']);
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /waiting/, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    page.on('console', (msg) => {
      if (msg.type() === 'error') errors.push(msg.text());
    });
    const foreign: string[] = [];
    page.on('request', (req) => {
      if (!req.url().startsWith(ui.origin)) foreign.push(req.url());
    });
    await page.goto(ui.url);
    await page.locator('[data-test="process-search"]').waitFor();
    const paint = await page.evaluate(() => {
      const p = (
        globalThis as unknown as {
          performance: { getEntriesByName(name: string): { startTime: number }[] };
        }
      ).performance;
      const fcp = p.getEntriesByName('first-contentful-paint')[0]?.startTime;
      const fp = p.getEntriesByName('first-paint')[0]?.startTime;
      return { fp, fcp };
    });
    const js = readFileSync(join(PAGE, 'app.js'));
    const css = readFileSync(join(PAGE, 'app.css'));
    console.log(
      `ui test: first paint ${paint.fp?.toFixed(0)} ms, first contentful paint ${paint.fcp?.toFixed(0)} ms; bundle ${statSync(join(PAGE, 'app.js')).size + css.length} bytes, ${gzipSync(js).length + gzipSync(css).length} gzipped`,
    );

    // Targets: the machine's engines, the process list; search the target by its pid.
    await page.locator('[data-test="engines"]').waitFor();
    assert.match((await page.locator('[data-test="engines"]').textContent()) ?? '', /run on bpf/);
    await page.locator('[data-test="process-search"]').fill(String(target.pid));
    await page.locator(`[data-test="process-${target.pid}"]`).waitFor();
    await snapshot(browser, page, 'targets');
    await page.locator(`[data-test="process-${target.pid}"]`).click();

    // Functions: fuzzy search finds work; a click shows resolve's details and the source.
    await page.locator('[data-test="function-search"]').fill('wrk');
    const work = page.locator('[data-test="function"][data-name="work"]');
    await work.waitFor();
    await work.click();
    await page.locator('[data-test="resolve"]').waitFor();
    const resolved = (await page.locator('[data-test="resolve"]').textContent()) ?? '';
    const cli = runCli(['resolve', '-p', String(target.pid), `${app}:work`]);
    assert.equal(cli.status, 0, cli.stderr);
    // The same details as the command line's (the group name aside: it names the process).
    const unowned = (s: string) => s.replace(/upscope_\d+/g, 'upscope_N').trim();
    assert.equal(unowned(resolved), unowned(cli.stdout));
    await page.locator('[data-test="source"]').waitFor();
    assert.match(
      (await page.locator('[data-test="source"]').textContent()) ?? '',
      /per_kind\[kind\]\+\+/,
    );
    await snapshot(browser, page, 'functions');

    // Measure: count, latency and flame graph, each with one click.
    for (const kind of ['count', 'latency', 'stacks']) {
      await page.locator('[data-test="tab-functions"]').click();
      await page.locator(`[data-test="measure-${kind}"]`).click();
      await page
        .locator(`[data-test="measurement-${kind}"] [data-test="state"]`, { hasText: 'running' })
        .waitFor({ timeout: 60_000 });
    }
    assert.ok(probesHeldBy(ui.spawned.pid).length > 0, 'the server holds its probes');
    target.child.kill('SIGUSR1');
    await waitFor(target, /done/, 'stdout');
    const own = /work0=(\d+) work1=(\d+) work2=(\d+)/.exec(target.stdout)!;
    const calls = String(Number(own[1]) + Number(own[2]) + Number(own[3]));
    const count = page.locator('[data-test="measurement-count"] [data-test="count-value"]');
    const latency = page.locator('[data-test="measurement-latency"] [data-test="latency-count"]');
    await until('the page shows the target’s counts', async () => {
      return (
        ((await count.textContent()) ?? '') === calls &&
        ((await latency.textContent()) ?? '') === calls
      );
    });
    for (const p of ['p50', 'p90', 'p99']) {
      const cell = page.locator(`[data-test="measurement-latency"] [data-test="${p}"]`);
      const text = (await cell.textContent()) ?? '';
      assert.match(text, /^[\d.]+(ns|µs|ms)$/, `${p} is a duration: ${text}`);
    }
    const flame = page.locator('[data-test="measurement-stacks"] [data-test="flamegraph"]');
    await until('the flame graph shows main calling work', async () => {
      const frames: string[] = await flame
        .locator('.frame')
        .allTextContents()
        .catch(() => [] as string[]);
      return frames.includes('main') && frames.includes('work');
    });
    // The frame of work spans all of its calls: its title says so.
    const workFrame = flame.locator('.frame', { hasText: /^work$/ });
    assert.match(
      (await workFrame.getAttribute('title')) ?? '',
      new RegExp(`^work \\(${calls} hits`),
    );
    await snapshot(browser, page, 'measure');

    // Exports: the flame graph as the SVG renderer draws it, the count as JSON.
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.locator('[data-test="measurement-stacks"] [data-test="export-svg"]').click(),
    ]);
    const svg = readFileSync((await download.path())!, 'utf8');
    assert.match(svg, /^<\?xml|^<svg/);
    assert.match(svg, new RegExp(`<title>work \\(${Number(calls).toLocaleString('en-US')} hits`));

    // Stop: every measurement stops, the server holds no probe any more.
    await page.locator('[data-test="stop-all"]').click();
    await until('every measurement has stopped', async () => {
      const states = await page.locator('[data-test="state"]').allTextContents();
      return states.length === 3 && states.every((s) => s === 'stopped');
    });
    assert.deepEqual(probesHeldBy(ui.spawned.pid), []);
    assert.equal((await count.textContent()) ?? '', calls, 'the last count stays shown');
    await snapshot(browser, page, 'stopped');
    assert.deepEqual(errors, [], 'no console error');
    assert.deepEqual(foreign, [], 'nothing fetched from elsewhere');
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

test('upscope ui: closing the page detaches its measurements; a bad spec is said as the CLI says it', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['100', '1']);
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /waiting/, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    await page.goto(ui.url);
    await page.locator('[data-test="tab-measure"]').click();
    // The spec editor: the grammar's error, inline, as `upscope trace` prints it.
    const bad = `${app}:work n=arg0:u99`;
    await page.locator('[data-test="spec-editor"]').fill(bad);
    await page.locator('[data-test="error"]').waitFor();
    const shown = (await page.locator('[data-test="error"]').textContent()) ?? '';
    const cli = runCli(['trace', '-p', String(target.pid), bad]);
    assert.notEqual(cli.status, 0);
    assert.equal(shown.trim(), cli.stderr.trim());
    // A good one: an event table of the target's calls, on the kernel's tracefs uprobes.
    await page.locator('[data-test="spec-editor"]').fill(`${app}:work kind=arg0`);
    await until(
      'the error is gone',
      async () => (await page.locator('[data-test="error"]').count()) === 0,
    );
    await page.locator('form.editor button[type="submit"]').click();
    await page
      .locator('[data-test="measurement-trace"] [data-test="state"]', { hasText: 'running' })
      .waitFor({ timeout: 60_000 });
    assert.ok(
      leftovers(true).some((l) => l.includes(`upscope_${ui.spawned.pid}`)),
      'the trace has its tracefs group',
    );
    target.child.kill('SIGUSR1');
    await waitFor(target, /done/, 'stdout');
    await until('the event table shows the calls', async () => {
      const text = (await page.locator('[data-test="measurement-trace"]').textContent()) ?? '';
      return /100 events/.test(text);
    });
    await snapshot(browser, page, 'trace');
    // Closing the page closes its stream: the server removes the probes by itself.
    await page.close();
    await waitFor(ui.spawned, /page p\d+ gone: 1 measurements stopped, detached/);
    assert.deepEqual(
      leftovers(true).filter((l) => l.includes(`upscope_${ui.spawned.pid}`)),
      [],
    );
    assert.deepEqual(probesHeldBy(ui.spawned.pid), []);
  } finally {
    await browser?.close();
    ui.spawned.child.kill('SIGINT');
    await ended(ui.spawned);
    target.child.kill('SIGKILL');
    await ended(target);
  }
  assert.deepEqual(leftovers(), []);
});

test('upscope ui: the function list is the last picked process’s, though the one picked before answers after it', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['100', '1']);
  // node's own functions (85,000: seconds to list) answer long after the small target's.
  const large = spawnCollected(process.execPath, ['-e', 'setInterval(() => {}, 1000)']);
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /waiting/, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    await page.goto(ui.url);
    const largeListed = page.waitForResponse(
      (r) => r.url().includes('/api/functions') && r.url().includes(`pid=${large.pid}`),
      { timeout: 120_000 },
    );
    await pickProcess(page, large.pid);
    await pickProcess(page, target.pid);
    await page.locator('[data-test="function"][data-name="work"]').waitFor();
    // The large process's list has come to the page too, after the target's: it is not shown.
    await largeListed;
    await new Promise((r) => setTimeout(r, 500));
    const header = (await page.locator('.functions p.muted').first().textContent()) ?? '';
    assert.ok(header.includes(app), `the target's list is shown: ${header}`);
    assert.equal(await page.locator('[data-test="function"][data-name="work"]').count(), 1);
  } finally {
    await browser?.close();
    ui.spawned.child.kill('SIGINT');
    await ended(ui.spawned);
    target.child.kill('SIGKILL');
    await ended(target);
    large.child.kill('SIGKILL');
    await ended(large);
  }
  assert.deepEqual(leftovers(), []);
});
