#!/usr/bin/env node
// Runs every test file through node:test with tsx. Node 20 does not expand globs itself, so
// the files are found here: unit tests beside the code (src/**/*.test.ts) and the suites in
// test/ (integration and end-to-end). Arguments narrow the run to files containing them.
//
// As root, the Debian packages the tests use are installed first (scripts/setup-host.sh), so
// that a fresh machine runs every test with none skipped. As another user nothing is
// installed: the tests that need what is missing skip with their reason, and the run ends
// with the list of skipped tests and the one command that installs the rest.
//
// The tests' temporary files (TMPDIR) go to a directory of this run inside the checkout,
// removed at the end: the tests leave nothing in /tmp, even when one of them fails.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { createInterface } from 'node:readline';

const root = new URL('..', import.meta.url).pathname;
const setup = join(root, 'scripts/setup-host.sh');

function findTests(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'fixtures')
        found.push(...findTests(path));
    } else if (entry.name.endsWith('.test.ts')) {
      found.push(relative(root, path));
    }
  }
  return found;
}

const filters = process.argv.slice(2);
const files = [...findTests(join(root, 'src')), ...findTests(join(root, 'test'))]
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)))
  .sort();
if (files.length === 0) {
  console.error(`No test files match: ${filters.join(' ')}`);
  process.exit(1);
}

const isRoot = process.getuid?.() === 0;
const installed = spawnSync('bash', [setup, ...(isRoot ? [] : ['--check'])], {
  cwd: root,
  stdio: ['ignore', 'inherit', 'pipe'],
  encoding: 'utf8',
});
if (installed.status !== 0) {
  process.stderr.write(installed.stderr);
  if (isRoot) {
    console.error('run-tests: the set-up failed (above); the tests were not run');
    process.exit(1);
  }
}

const tmpParent = join(root, 'node_modules/.cache/upscope-tmp');
mkdirSync(tmpParent, { recursive: true });
const tmp = mkdtempSync(join(tmpParent, 'run-'));
chmodSync(tmp, 0o1777); // as /tmp: tests that run a command as nobody write here too

// Files run two at a time (the machine has 2 cores; most of a test's time is spent waiting on
// the programs it runs), except those marked `upscope-tests: alone`: they look at or change
// what every upscope shares (tracefs as a whole, groups of dead owners they make or leave on
// purpose, a compiled target's probes), so they run after the others, one at a time.
const ALONE = 'upscope-tests: alone';
const concurrency = Math.max(1, Number(process.env.UPSCOPE_TEST_CONCURRENCY ?? 2) || 1);
const alone = files.filter((file) => readFileSync(join(root, file), 'utf8').includes(ALONE));
const together = files.filter((file) => !alone.includes(file));

// TAP: a skipped test is "ok N - NAME # SKIP REASON"; nested ones are indented.
const skipped = [];
function run(list, parallel) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--test', `--test-concurrency=${parallel}`, ...list],
    { cwd: root, stdio: ['inherit', 'pipe', 'inherit'], env: { ...process.env, TMPDIR: tmp } },
  );
  const lines = createInterface({ input: child.stdout });
  lines.on('line', (line) => {
    process.stdout.write(`${line}\n`);
    const skip = /^\s*ok \d+ - (.*) # SKIP(?: (.*))?$/.exec(line);
    if (skip !== null) skipped.push(`${skip[1]}${skip[2] ? ` (${skip[2]})` : ''}`);
  });
  return new Promise((resolve) => child.on('close', (code) => resolve(code ?? 1)));
}
const statuses = [];
if (together.length > 0) statuses.push(await run(together, concurrency));
if (alone.length > 0) {
  console.log(`# ${alone.length} test files alone: ${alone.join(' ')}`);
  statuses.push(await run(alone, 1));
}
const status = statuses.find((code) => code !== 0) ?? 0;
rmSync(tmp, { recursive: true, force: true });
if (skipped.length > 0) {
  console.error(`\n${skipped.length} test${skipped.length === 1 ? '' : 's'} skipped:`);
  for (const name of skipped) console.error(`  ${name}`);
  if (!isRoot) console.error('Install what they need with: sudo bash scripts/setup-host.sh');
}
process.exit(status);
