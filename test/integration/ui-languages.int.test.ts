// `upscope ui` on C++ (exceptions pass through the probed function), Rust and Go targets, in
// one chromium and one server: pick the running program, search its function, start a count
// and a latency histogram with clicks, let it call the function, and see the page show the
// program's own count of calls (Go: at least them, its runtime may enter a function twice for
// one call) and as many timed calls (C++: less those an exception unwound), with percentiles;
// the measurements end with the program, which ends as it would; nothing is left behind.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { type Browser, openBrowser } from '../helpers/browser.js';
import { COEXIST_TARGETS } from '../helpers/coexist-targets.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { findRustc } from '../helpers/rustc.js';
import { ended, spawnCollected, waitFor } from '../helpers/spawned.js';
import { pickProcess, snapshot, until, watchPage } from '../helpers/ui-page.js';
import { probesHeldBy, startUi } from '../helpers/ui-server.js';

test('upscope ui on C++ (throwing), Rust and Go: the counts shown are the program’s own, latency is timed, nothing is left', async (t) => {
  if (!requireHost(t, { root: true, commands: ['chromium', 'g++', 'go'] })) return;
  if (findRustc() === undefined && STRICT) assert.fail('Cannot run test under CI: needs rustc');
  const scratch = mkdtempSync(join(tmpdir(), 'upscope-ui-languages-'));
  const ui = await startUi();
  let browser: Browser | undefined;
  const programs: ReturnType<typeof spawnCollected>[] = [];
  try {
    browser = await openBrowser();
    const page = await browser.context.newPage();
    const seen = watchPage(page, ui.origin);
    await page.goto(ui.url);
    for (const target of COEXIST_TARGETS) {
      if (target.language === 'Rust' && findRustc() === undefined) {
        console.log('# Rust skipped: needs rustc');
        continue;
      }
      const app = target.build();
      const go = join(scratch, `go-${target.language}`);
      const stop = join(scratch, `stop-${target.language}`);
      const program = spawnCollected(app, [go, stop]);
      programs.push(program);
      await waitFor(program, /^ready \d+$/m, 'stdout');
      await pickProcess(page, program.pid);
      // The function, found by a fuzzy search of its name, shown demangled.
      await page.locator('[data-test="function-search"]').fill(target.fn.replace(/^.*::/, ''));
      const fn = page.locator(`[data-test="function"][data-name="${target.probe}"]`);
      await fn.waitFor();
      await fn.click();
      for (const kind of ['count', 'latency']) {
        await page.locator('[data-test="tab-functions"]').click();
        await page.locator(`[data-test="measure-${kind}"]`).click();
        await page
          .locator(`[data-test="measurement-${kind}"] [data-test="state"]`, { hasText: 'running' })
          .waitFor({ timeout: 60_000 });
      }
      writeFileSync(go, '');
      await new Promise((r) => setTimeout(r, 1500));
      writeFileSync(stop, '');
      const done = await waitFor(program, /^calls (\d+)(?: thrown (\d+))?/m, 'stdout');
      const exit = await ended(program);
      assert.equal(exit.code, 0, `${target.language}: ${program.stderr}`);
      const calls = Number(done[1]);
      const timed = calls - Number(done[2] ?? 0);
      assert.ok(timed > 0, `${target.language}: calls were made`);
      // Both measurements end with the program, their last readings shown.
      await until(`${target.language}: both measurements ended`, async () => {
        const states = await page.locator('[data-test="state"]').allTextContents();
        return states.length === 2 && states.every((s) => s === 'stopped');
      });
      const count = Number(
        await page
          .locator('[data-test="measurement-count"] [data-test="count-value"]')
          .textContent(),
      );
      if (target.language === 'Go')
        assert.ok(count >= calls, `Go: ${count} entries, ${calls} calls`);
      else assert.equal(count, calls, `${target.language}: the count is the program's own`);
      const latency = page.locator('[data-test="measurement-latency"]');
      assert.equal(
        Number(await latency.locator('[data-test="latency-count"]').textContent()),
        timed,
        `${target.language}: every call that returned is timed`,
      );
      for (const p of ['p50', 'p90', 'p99']) {
        const text = (await latency.locator(`[data-test="${p}"]`).textContent()) ?? '';
        assert.match(text, /^[\d.]+(ns|µs|ms)$/, `${target.language}: ${p} is a duration`);
      }
      // A first instruction the kernel single-steps (as resolve says it) is in the times: the
      // latency card says so, as latency does.
      const resolved = runCli(['resolve', `${app}:${target.fn}`]);
      assert.equal(resolved.status, 0, resolved.stderr);
      const steps = /kernel\s+single-steps "([^"]+)"/.exec(resolved.stdout)?.[1];
      const said = (await latency.locator('.note').allTextContents()).find((n) =>
        n.includes('single-steps'),
      );
      if (steps === undefined) assert.equal(said, undefined, target.language);
      else
        assert.ok(
          said?.includes(`first instruction ("${steps}") of `),
          `${target.language}: ${said}`,
        );
      await snapshot(browser, page, `measure-${target.language.replaceAll('+', 'p')}`);
      assert.deepEqual(probesHeldBy(ui.spawned.pid), [], `${target.language}: no probe held`);
      // Closed: the next target's measurements are the only ones shown.
      await until('the cards are closed', async () => {
        const close = page.locator('[data-test="close"]');
        if ((await close.count()) === 0) return true;
        await close.first().click();
        return false;
      });
    }
    assert.deepEqual(seen.errors, [], 'no console error');
    assert.deepEqual(seen.foreign, [], 'nothing fetched from elsewhere');
  } finally {
    await browser?.close();
    ui.spawned.child.kill('SIGINT');
    const end = await ended(ui.spawned);
    for (const program of programs) {
      program.child.kill('SIGKILL');
      await ended(program);
    }
    rmSync(scratch, { recursive: true, force: true });
    assert.equal(end.code, 0, ui.spawned.stderr);
  }
  assert.deepEqual(leftovers(), []);
  assert.deepEqual(
    leftovers(true).filter((l) => l.includes(`upscope_${ui.spawned.pid}`)),
    [],
  );
});
