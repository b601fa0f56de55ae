// upscope-tests: alone (its probes on every function of libc go into every process on the machine while /bin/true runs: another file's ptrace run in libc would meet them).
// Progress while a pattern's functions are planned: one line on a terminal's stderr (util-
// linux's `script` gives the run a terminal), cleared before the start line; none in a pipe.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const PLANNING = /upscope: planning ([\d,]+) of ([\d,]+) functions of \S*libc\.so\.6/;

/**
 * The progress line cleared (a carriage return, then erase to the end of the line), then the
 * plan's warnings, if any (`warning[...]` and its indented lines), then the start line.
 */
function clearedBefore(verb: string): RegExp {
  return new RegExp(`\\r\\x1b\\[K(?:warning\\[[^\\n]*\\n(?: {2}[^\\n]*\\n)*)*${verb} \\d+ probes`);
}

test("count 'libc:*' on a terminal says how far the planning of libc's functions got, then clears the line; in a pipe it says nothing of it", (t) => {
  if (!requireHost(t, { root: true, commands: ['script', 'nm'] })) return;
  const onTerminal = execFileSync(
    'script',
    ['-qec', `${process.execPath} ${BIN} count -c /bin/true 'libc:*'`, '/dev/null'],
    { encoding: 'utf8', maxBuffer: 64 << 20 },
  );
  const said = PLANNING.exec(onTerminal);
  assert.ok(said, onTerminal.slice(0, 2000));
  // Every function libc exports is planned (with libc6-dbg, its local ones too).
  const exported = new Set(
    tool('nm', ['-D', '--defined-only', '/lib/x86_64-linux-gnu/libc.so.6'])
      .split('\n')
      .filter((line) => / [TtiW] /.test(line))
      .map((line) => line.split(' ')[0]),
  ).size;
  const total = Number(said[2]!.replace(/,/g, ''));
  assert.ok(total >= exported, `${total} functions planned, libc exports ${exported}`);
  // Cleared (carriage return and erase to the end of the line) before the start line and
  // what the plan warns of (libc's IFUNC resolvers, probed at their implementations),
  // which come before it.
  assert.match(onTerminal, clearedBefore('Counting'), JSON.stringify(onTerminal.slice(-400)));
  const inPipe = runCli(['count', '-c', '/bin/true', 'libc:*']);
  assert.equal(inPipe.status, 0, inPipe.stderr);
  assert.doesNotMatch(inPipe.stderr, /planning/);
});

test('trace --engine tracefs on a terminal says how many of its probes are attached (one uprobe event at a time), then clears the line; in a pipe it says nothing of it', (t) => {
  if (!requireHost(t, { root: true, commands: ['script'] })) return;
  const command = `${process.execPath} ${BIN} trace --engine tracefs -c /bin/true 'libc:strc*'`;
  const onTerminal = execFileSync('script', ['-qec', command, '/dev/null'], {
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  const steps = [
    ...onTerminal.matchAll(/upscope: attaching ([\d,]+) of ([\d,]+) probes \(tracefs\)/g),
  ];
  assert.ok(steps.length > 0, onTerminal.slice(0, 2000));
  const total = Number(steps[0]![2]!.replace(/,/g, ''));
  assert.ok(
    steps.some((step) => Number(step[1]!.replace(/,/g, '')) < total),
    'a step before the last',
  );
  const said = /Tracing ([\d,]+) probes/.exec(onTerminal);
  assert.ok(said, onTerminal.slice(-2000));
  assert.equal(total, Number(said[1]!.replace(/,/g, '')), 'attached as many as it traces');
  assert.match(onTerminal, clearedBefore('Tracing'), JSON.stringify(onTerminal.slice(-400)));
  const inPipe = runCli(['trace', '--engine', 'tracefs', '-c', '/bin/true', 'libc:strc*']);
  assert.equal(inPipe.status, 0, inPipe.stderr);
  assert.doesNotMatch(inPipe.stderr, /attaching/);
});
