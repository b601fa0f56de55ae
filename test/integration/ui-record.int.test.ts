// The Record calls view of `upscope ui`, driven in Debian's chromium: record a running C
// target's calls from the page (-p), make it call its functions, stop, and see the call tree,
// the functions and the flame graph hold the target's own counts; the exports are what
// `upscope graph` writes and a Chrome trace with a slice per call. The same directory opened
// from the page shows the same tree; a path that is no recording is refused as `upscope
// report` refuses it. A command recorded into a temporary directory ends by itself, and Close
// removes that directory. Stop leaves no probe; no console error; screenshots are artifacts.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import { type Browser, openBrowser } from '../helpers/browser.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { pickProcess, snapshot, until, watchPage } from '../helpers/ui-page.js';
import { probesHeldBy, startUi } from '../helpers/ui-server.js';

/** The calls the call tree shows for a function at the top of the tree. */
async function rootCalls(card: Locator, name: string): Promise<string | null> {
  const row = card.locator(`[data-test="call-row"][data-depth="0"][data-name="${name}"]`);
  if ((await row.count()) !== 1) return null;
  return row.getAttribute('data-calls');
}

/** The newest recording card whose text matches. */
function card(page: Page, text: string | RegExp): Locator {
  return page.locator('[data-test="recording"]', { hasText: text }).first();
}

async function stateOf(c: Locator): Promise<string> {
  return ((await c.locator('[data-test="state"]').textContent()) ?? '').trim();
}

test('upscope ui: record a process’s calls from the page; tree, functions and flame graph hold the target’s counts; exports; open from disk', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'chromium'] })) return;
  const app = compileProgram('export-target');
  const target = spawnCollected(app, ['301', '7']);
  const scratch = mkdtempSync(join(tmpdir(), 'upscope-ui-record-'));
  const kept = join(scratch, 'rec');
  const ui = await startUi();
  let browser: Browser | undefined;
  try {
    await waitFor(target, /waiting/, 'stdout');
    browser = await openBrowser();
    const page = await browser.context.newPage();
    const seen = watchPage(page, ui.origin);
    await page.goto(ui.url);
    await pickProcess(page, target.pid);
    await page.locator('[data-test="tab-calls"]').click();
    // Every function of the program (its path, prefilled), kept in a directory.
    assert.equal(await page.locator('[data-test="record-targets"]').inputValue(), app);
    await page.locator('[data-test="record-dir"]').fill(kept);
    await page.locator('[data-test="record-start"]').click();
    const recording = card(page, `process ${target.pid}`);
    await until('the recording runs', async () => (await stateOf(recording)) === 'recording');
    assert.ok(probesHeldBy(ui.spawned.pid).length > 0, 'the server holds its probes');

    target.child.kill('SIGUSR1');
    await waitFor(target, /done/, 'stdout');
    const own = /work0=(\d+) work1=(\d+) work2=(\d+) other=(\d+)/.exec(target.stdout)!;
    const work = String(Number(own[1]) + Number(own[2]) + Number(own[3]));
    const other = own[4]!;
    // The calls and returns written so far: every one of work's and other's, then Stop.
    const wanted = 2 * (Number(work) + Number(other));
    await until('the page says every call was recorded', async () => {
      const text = (await recording.textContent()) ?? '';
      const m = /recording: (\d+) calls and returns so far/.exec(text);
      return m !== null && Number(m[1]) >= wanted;
    });
    await recording.locator('[data-test="stop"]').click();
    await until('the recording is read back', async () => (await stateOf(recording)) === 'ready');
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'Stop removed every probe');
    assert.equal(target.child.exitCode, null, 'the process runs on');

    // The call tree: main was running before, so work and other are outermost calls.
    await recording.locator('[data-test="call-tree"]').waitFor();
    assert.equal(await rootCalls(recording, 'work'), work);
    assert.equal(await rootCalls(recording, 'other'), other);
    await snapshot(browser, page, 'recording-tree');
    // The functions: as `upscope report DIR --json` says them.
    await recording.locator('[data-test="part-report"]').click();
    const reportRow = (name: string) =>
      recording.locator(`[data-test="report-row"][data-name="${name}"] [data-test="calls"]`);
    assert.equal(await reportRow('work').textContent(), work);
    assert.equal(await reportRow('other').textContent(), other);
    const cli = runCli(['report', kept, '--json']);
    assert.equal(cli.status, 0, cli.stderr);
    const report = JSON.parse(cli.stdout) as {
      function: string;
      calls: number;
      totalNs: number;
      selfNs: number;
    }[];
    const shown = await recording
      .locator('[data-test="report-row"]')
      .evaluateAll((rows) =>
        rows.map((r) => (r as unknown as { dataset: { name: string } }).dataset.name),
      );
    assert.deepEqual(
      shown,
      report.map((r) => r.function),
    );
    // The flame graph: a frame per function, as wide as its time.
    await recording.locator('[data-test="part-flame"]').click();
    const flame = recording.locator('[data-test="flamegraph"]');
    await flame.waitFor();
    // Every function here is an outermost call (report's totals are the flame's weights); a
    // frame under 0.1 % of the width is left out, as a busy machine can make of other's 7
    // calls when on_usr1, the signal's handler, waits long for a CPU.
    const frames = await flame.locator('.frame').allTextContents();
    const sum = report.reduce((s, r) => s + r.selfNs, 0);
    const wide = report.filter((r) => r.totalNs / sum >= 0.001).map((r) => r.function);
    assert.ok(wide.includes('work'), JSON.stringify(report));
    assert.deepEqual(frames.filter((f) => f !== 'all').sort(), wide.sort(), JSON.stringify(report));
    assert.match(
      (await flame.locator('.frame', { hasText: /^work$/ }).getAttribute('title')) ?? '',
      /^work \([\d.]+(ns|µs|ms|s), [\d.]+%\)$/,
    );
    await snapshot(browser, page, 'recording-flame');

    // Exports: folded stacks as upscope graph writes them; a Chrome trace slice per call.
    const download = async (format: string) => {
      const [file] = await Promise.all([
        page.waitForEvent('download'),
        recording.locator(`[data-test="export-${format}"]`).click(),
      ]);
      return readFileSync((await file.path())!, 'utf8');
    };
    const graph = runCli(['graph', kept, '--format', 'folded']);
    assert.equal(graph.status, 0, graph.stderr);
    assert.equal(await download('folded'), graph.stdout);
    const trace = JSON.parse(await download('chrome')) as {
      traceEvents: { name: string; ph: string }[];
    };
    const slices = (name: string) =>
      String(trace.traceEvents.filter((e) => e.ph === 'X' && e.name === name).length);
    assert.equal(slices('work'), work);
    assert.equal(slices('other'), other);
    assert.match(await download('svg'), /<svg/);

    // The same directory, opened from the page: the same tree.
    await page.locator('[data-test="open-path"]').fill(kept);
    await page.locator('[data-test="open-start"]').click();
    const opened = card(page, `of recording ${kept}`);
    await until('the opened recording is read', async () => (await stateOf(opened)) === 'ready');
    await opened.locator('[data-test="call-tree"]').waitFor();
    assert.equal(await rootCalls(opened, 'work'), work);
    assert.equal(await rootCalls(opened, 'other'), other);
    // A path that is no recording: refused as the command line refuses it.
    const missing = join(scratch, 'none');
    await page.locator('[data-test="open-path"]').fill(missing);
    await page.locator('[data-test="open-start"]').click();
    const failed = card(page, `of recording ${missing}`);
    await until('the bad path fails', async () => (await stateOf(failed)) === 'failed');
    const refused = runCli(['report', missing]);
    assert.notEqual(refused.status, 0);
    assert.equal(
      ((await failed.locator('[data-test="error"]').textContent()) ?? '').trim(),
      refused.stderr.trim(),
    );
    await snapshot(browser, page, 'recording-open');

    // A command, recorded into a temporary directory: it ends by itself; its tree nests (a
    // mutual recursion, expanded with a click) as the program's own counters say; Close
    // removes the directory.
    const calls = compileProgram('calls-target', { flags: ['-O2', '-g'], link: ['-lpthread'] });
    const counters = JSON.parse(
      execFileSync(calls, ['all'], { encoding: 'utf8' })
        .split('\n')
        .find((l) => l.includes('"is_even"'))!,
    ) as { is_even: number; is_odd: number };
    await page.locator('[data-test="tab-targets"]').click();
    const command = `${calls} all`;
    await page.locator('input[placeholder^="./app --flag"]').fill(command);
    await page.locator('input[placeholder^="./app --flag"]').press('Enter');
    await page.locator('[data-test="tab-calls"]').click();
    await page.locator('[data-test="record-targets"]').fill(`${calls}:is_*`);
    await page.locator('[data-test="record-dir"]').fill('');
    await page.locator('[data-test="record-start"]').click();
    const ran = card(page, `command ${command}`);
    await until('the command’s recording is read', async () => (await stateOf(ran)) === 'ready');
    assert.match((await ran.locator('[data-test="summary"]').textContent()) ?? '', /exit 0/);
    assert.deepEqual(probesHeldBy(ui.spawned.pid), [], 'nothing held once the command ended');
    await ran.locator('[data-test="call-tree"]').waitFor();
    assert.equal(await rootCalls(ran, 'is_even'), '1');
    // The outermost calls are open: is_odd below is_even; deeper paths open with a click.
    const odd = ran.locator('[data-test="call-row"][data-depth="1"][data-name="is_odd"]');
    assert.equal(await odd.getAttribute('data-calls'), '1');
    const deeper = ran.locator('[data-test="call-row"][data-depth="2"][data-name="is_even"]');
    assert.equal(await deeper.count(), 0, 'collapsed below the first level');
    await odd.locator('[data-test="toggle"]').click();
    assert.equal(await deeper.getAttribute('data-calls'), '1');
    await ran.locator('[data-test="part-report"]').click();
    const calledOf = (name: string) =>
      ran.locator(`[data-test="report-row"][data-name="${name}"] [data-test="calls"]`);
    assert.equal(await calledOf('is_even').textContent(), String(counters.is_even));
    assert.equal(await calledOf('is_odd').textContent(), String(counters.is_odd));
    const dir = /temporary directory \(removed on Close\): (\S+)/.exec(
      (await ran.textContent()) ?? '',
    )?.[1];
    assert.ok(dir !== undefined && existsSync(dir), `the temporary recording ${dir} exists`);
    // The functions whose probes the kernel single-steps (is_even and is_odd start with an
    // addq to their counter at -O2), marked as `upscope report` marks them.
    const cliReport = runCli(['report', dir!, '--json']);
    assert.equal(cliReport.status, 0, cliReport.stderr);
    const marked = await ran.locator('[data-test="report-row"]').evaluateAll((rows) =>
      rows.map((r) => {
        const row = r as unknown as {
          dataset: { name: string };
          querySelector(s: string): { textContent: string | null } | null;
        };
        return [row.dataset.name, row.querySelector('[data-test="kernel-stepped"]')?.textContent];
      }),
    );
    const stepped = (
      JSON.parse(cliReport.stdout) as { function: string; kernelStepped?: string }[]
    ).map((r) => [
      r.function,
      r.kernelStepped === undefined ? undefined : ` kernel-stepped ${r.kernelStepped}`,
    ]);
    assert.ok(
      stepped.some(([, s]) => s !== undefined),
      cliReport.stdout,
    );
    assert.deepEqual(marked, stepped);
    await ran.locator('[data-test="close"]').click();
    await until('Close removed the temporary recording', () => !existsSync(dir));
    assert.deepEqual(seen.errors, [], 'no console error');
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
