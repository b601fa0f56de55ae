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
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';
import { MARK } from './running-reporter.mjs';

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

// Files run three at a time, each in a node process of its own: the machine has 2 cores, and
// a file keeps about 0.8 of one busy, the rest of its time waiting on the programs it runs (12
// integration files took 356 s two at a time, 259 s three at a time, none failing either way).
// The longest start first (by the times in scripts/test-durations.json), so that no long file
// starts last. A file's header can say:
//   `upscope-tests: alone (why)`: it looks at or changes what every upscope shares (tracefs as
//     a whole, groups of dead owners it makes or leaves on purpose, libc's functions in every
//     process): it runs after the others, one at a time, with only the tests of the pure
//     folders (src/spec, symbols, arch, aggregate, output, whose code never reaches the host)
//     and the fuzzers beside it, on the core it leaves;
//   `upscope-tests: apart NAME[,NAME] (why)`: it never runs beside another file naming one of
//     the same NAMEs (they use one thing that is not theirs alone, e.g. /usr/bin/python3).
// Each file's TAP is printed whole when it ends, its top-level tests numbered on from the
// files before it, and one summary closes the run.
const ALONE = 'upscope-tests: alone';
const APART = /upscope-tests: apart ([\w,-]+)/;
const concurrency = Math.max(1, Number(process.env.UPSCOPE_TEST_CONCURRENCY ?? 3) || 1);
const headers = new Map(files.map((file) => [file, readFileSync(join(root, file), 'utf8')]));
const alone = files.filter((file) => headers.get(file).includes(ALONE));
const apart = new Map(
  files.map((file) => [file, APART.exec(headers.get(file))?.[1].split(',') ?? []]),
);
const DURATIONS = join(root, 'scripts/test-durations.json');
const known = existsSync(DURATIONS) ? JSON.parse(readFileSync(DURATIONS, 'utf8')) : {};
// A file not timed yet is taken for a long one, so that it starts early.
const expected = (file) => known[file] ?? 60;
const longestFirst = (a, b) => expected(b) - expected(a) || a.localeCompare(b);
const PURE = /^(src\/(spec|symbols|arch|aggregate|output)\/.*(?<!\.int)\.test\.ts|test\/fuzz\/.*)$/;
const pure = files.filter((file) => PURE.test(file) && !alone.includes(file)).sort(longestFirst);
const together = files
  .filter((file) => !alone.includes(file) && !pure.includes(file))
  .sort(longestFirst);
// In the last part no two alone files run together.
for (const file of alone) apart.set(file, [...apart.get(file), '(alone)']);

const totals = {
  tests: 0,
  suites: 0,
  pass: 0,
  fail: 0,
  cancelled: 0,
  skipped: 0,
  todo: 0,
  duration_ms: 0,
};
let numbered = 0;
const skipped = [];
// Each failed test with the start of its error, said again after the summary: a log cut to its
// last lines (as CI's report is) still names what failed.
const failures = [];
const seconds = {};
const started = Date.now();
console.log('TAP version 13');

// A test that hangs must fail the run with its name, not hold it until CI's own limit ends it
// with nothing said: a file still running FILE_LIMIT_S after it began (the longest take about
// 3 minutes) is killed with every process it started (its process group: the upscopes and
// targets of its tests), and fails naming the tests it had begun and not ended and the
// processes it left. (node:test's --test-timeout applies only under --test, to whole files.)
const FILE_LIMIT_S = Number(process.env.UPSCOPE_TEST_FILE_LIMIT_S ?? 900) || 900;

/**
 * What a file killed at its limit was doing: its tests begun and not ended (the lines
 * running-reporter.mjs wrote among its stderr) and the processes of its group.
 */
function running(stderr, pgid) {
  const open = [];
  for (const line of stderr.split('\n')) {
    if (!line.startsWith(MARK)) continue;
    const m = /^(\d+) ([+-]) (.*)$/.exec(line.slice(MARK.length));
    if (m === null) continue;
    const entry = `${'  '.repeat(Number(m[1]))}${m[3]}`;
    if (m[2] === '+') open.push(entry);
    else open.splice(open.lastIndexOf(entry), 1);
  }
  const ps = spawnSync('ps', ['-eo', 'pid=,pgid=,stat=,etimes=,args='], { encoding: 'utf8' });
  const processes = (ps.stdout ?? '')
    .split('\n')
    .filter((line) => line.trim().split(/\s+/)[1] === String(pgid));
  return [
    'these tests still running:',
    ...(open.length > 0 ? open.map((t) => `  ${t}`) : ['  none (they had ended; it did not exit)']),
    'and these processes (pid, group, state, seconds, command):',
    ...processes.map((p) => `  ${p.trim()}`),
  ];
}

/** Run one file (`node --test-reporter=tap FILE`, no runner process of its own). */
function runFile(file) {
  const begin = Date.now();
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--test-reporter=tap',
      '--test-reporter-destination=stdout',
      `--test-reporter=${join(root, 'scripts/running-reporter.mjs')}`,
      '--test-reporter-destination=stderr',
      join(root, file),
    ],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TMPDIR: tmp },
      detached: true, // a process group of its own, to be killed whole at FILE_LIMIT_S
    },
  );
  const out = [];
  const err = [];
  child.stdout.on('data', (chunk) => out.push(chunk));
  child.stderr.on('data', (chunk) => err.push(chunk));
  // The pipes' last data arrives after `exit`; a descendant may hold them open for good.
  const drained = Promise.all(
    [child.stdout, child.stderr].map((pipe) => new Promise((done) => pipe.on('close', done))),
  );
  let overdue = false;
  let stillRunning = [];
  const killGroup = () => {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // the group is gone already
    }
  };
  const limit = setTimeout(() => {
    overdue = true;
    stillRunning = running(Buffer.concat(err).toString(), child.pid);
    killGroup();
  }, FILE_LIMIT_S * 1000);
  return new Promise((resolve) => {
    // `exit`, not `close`: a process of the file's that is left holding its pipes must not
    // hold the run. What the group still runs when the file ends is killed with it.
    child.on('exit', (code, signal) => {
      clearTimeout(limit);
      killGroup();
      void Promise.race([drained, new Promise((done) => setTimeout(done, 2000))]).then(() => {
        resolve({
          file,
          code,
          signal,
          overdue,
          stdout: Buffer.concat(out).toString(),
          stillRunning,
          stderr: Buffer.concat(err)
            .toString()
            .split('\n')
            .filter((line) => !line.startsWith(MARK))
            .join('\n'),
          seconds: (Date.now() - begin) / 1000,
        });
      });
    });
  });
}

/** Print a file's TAP as part of the run's: top-level tests renumbered, its summary summed. */
function report({ file, code, signal, overdue, stillRunning, stdout, stderr, seconds: took }) {
  seconds[file] = Math.round(took * 10) / 10;
  const lines = [`# ${file}: ${took.toFixed(1)} s`];
  const counts = {};
  let planned = false;
  let failing = null;
  for (const line of stdout.split('\n')) {
    if (failing !== null) {
      if (/^\s*\.\.\.$/.test(line) || /^\s*(not ok|ok) /.test(line)) failing = null;
      else if (failing.length < 14) failing.push(line);
    }
    // A failed test at any depth (a suite's own line, which only says that some of its tests
    // failed, is left out).
    const failed = /^(\s+)not ok \d+ - (.*)$/.exec(line);
    if (failed !== null) {
      failing = [`${file}: ${failed[2]}`];
      failures.push(failing);
    }
    if (line === '' || line === 'TAP version 13') continue;
    const top = /^(not ok|ok) \d+ - (.*)$/.exec(line);
    if (top !== null) {
      lines.push(`${top[1]} ${++numbered} - ${top[2]}`);
      if (top[1] === 'not ok') {
        failing = [`${file}: ${top[2]}`];
        failures.push(failing);
      }
    } else if (/^1\.\.\d+$/.test(line)) {
      planned = true;
    } else if (
      planned &&
      /^# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) [\d.]+$/.test(line)
    ) {
      const [, key, value] = line.split(' ');
      counts[key] = Number(value);
    } else if (/^(\s|#|Bail out!)/.test(line)) {
      lines.push(line);
    } else {
      // What the file printed itself (console.log), as a comment.
      lines.push(`# ${line}`);
    }
    const skip = /^\s*ok \d+ - (.*) # SKIP(?: (.*))?$/.exec(line);
    if (skip !== null) skipped.push(`${skip[1]}${skip[2] ? ` (${skip[2]})` : ''}`);
  }
  if (counts.tests === undefined && code === 0 && stdout.trim() === '') {
    // A file that defines no test (a helper named .test.ts) ends quietly: passed, as
    // node --test says of it.
    lines.push(`ok ${++numbered} - ${file}`);
    counts.tests = 1;
    counts.pass = 1;
  } else if (overdue || counts.tests === undefined || (code !== 0 && !(counts.fail > 0))) {
    // The file ended before node:test could say how its tests went (it did not load, or it
    // was killed): one failure in its name.
    const why = overdue
      ? `was killed after ${FILE_LIMIT_S} s, its tests still running`
      : `ended with ${signal ?? `exit code ${code}`} before its tests had ended`;
    lines.push(
      `not ok ${++numbered} - ${file}`,
      '  ---',
      `  error: 'its test process ${why}'`,
      ...stillRunning.map((line) => `  # ${line}`),
      '  ...',
    );
    counts.tests = (counts.tests ?? 0) + 1;
    counts.fail = (counts.fail ?? 0) + 1;
    failures.push([`${file}: ${why}`, ...stillRunning]);
  }
  for (const key of Object.keys(totals)) totals[key] += counts[key] ?? 0;
  process.stdout.write(`${lines.join('\n')}\n`);
  if (stderr !== '') process.stderr.write(`# stderr of ${file}:\n${stderr}`);
}

/** Run `list` with at most `slots` files at a time, none beside a file it must be apart from. */
function runPool(list, slots) {
  const queue = [...list];
  const running = new Set();
  return new Promise((resolve) => {
    const next = () => {
      while (running.size < slots) {
        const i = queue.findIndex((file) =>
          [...running].every((other) => !apart.get(file).some((n) => apart.get(other).includes(n))),
        );
        if (i < 0) break;
        const [file] = queue.splice(i, 1);
        running.add(file);
        void runFile(file).then((result) => {
          running.delete(file);
          report(result);
          next();
        });
      }
      if (queue.length === 0 && running.size === 0) resolve();
    };
    next();
  });
}

await runPool(together, concurrency);
if (alone.length > 0) {
  console.log(`# ${alone.length} test files alone: ${alone.join(' ')}`);
  console.log(`# beside them, one at a time: ${pure.join(' ')}`);
}
await runPool([...alone, ...pure], alone.length > 0 ? 2 : concurrency);
totals.duration_ms = Date.now() - started;
console.log(`1..${numbered}`);
for (const [key, value] of Object.entries(totals)) console.log(`# ${key} ${value}`);
if (failures.length > 0) {
  const own = failures.filter((f) => !f.some((l) => /failureType: 'subtestsFailed'/.test(l)));
  console.log(`# ${own.length} failed:`);
  for (const [name, ...error] of own) {
    console.log(`# - ${name}`);
    for (const line of error.filter((l) => !/^\s*(---|duration_ms|type|location):?/.test(l)))
      console.log(`#   ${line.trim()}`);
  }
}
rmSync(tmp, { recursive: true, force: true });
if (process.env.UPSCOPE_RECORD_DURATIONS === '1') {
  // Kept for the order of the next runs (files not run this time keep their old times).
  const merged = { ...known, ...seconds };
  const sorted = Object.fromEntries(
    Object.keys(merged)
      .sort()
      .map((k) => [k, merged[k]]),
  );
  writeFileSync(DURATIONS, `${JSON.stringify(sorted, null, 2)}\n`);
}
if (skipped.length > 0) {
  console.error(`\n${skipped.length} test${skipped.length === 1 ? '' : 's'} skipped:`);
  for (const name of skipped) console.error(`  ${name}`);
  if (!isRoot) console.error('Install what they need with: sudo bash scripts/setup-host.sh');
}
process.exit(totals.fail > 0 || totals.cancelled > 0 ? 1 : 0);
