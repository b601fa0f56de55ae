import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { TracefsSession, type TracefsSite } from '../../src/engines/tracefs/index.js';
import { isProbeError, type ProbeError } from '../../src/errors/index.js';
import { ensureTracefs } from '../../src/host/index.js';
import type { FetchArg } from '../../src/spec/index.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { readelfFileOffset, tool } from '../helpers/tools.js';

const SPAN = { start: 0, end: 0 };

/** An entry or return site of a function, from nm and readelf (not from our resolver). */
function siteOf(
  path: string,
  symbol: string,
  kind: 'entry' | 'return',
  fetches: FetchArg[] = [],
): TracefsSite {
  const row = tool('nm', [path])
    .split('\n')
    .find((line) => line.endsWith(` ${symbol}`));
  assert.ok(row, `nm lists ${symbol}`);
  const vaddr = BigInt(`0x${row.split(' ')[0]}`);
  return {
    kind,
    target: { path },
    fileOffset: readelfFileOffset(path, vaddr),
    usdt: undefined,
    fetches,
    symbol,
    symbolOffset: 0n,
    vaddr,
  };
}

function fetch(name: string, expr: FetchArg['expr'], type?: FetchArg['type']): FetchArg {
  return { name, nameExplicit: true, expr, type, span: SPAN };
}

/** Lines of uprobe_events in `group`. */
function groupLines(tracefs: string, group: string): string[] {
  return readFileSync(`${tracefs}/uprobe_events`, 'utf8')
    .split('\n')
    .filter((line) => line.startsWith(`p:${group}/`) || line.startsWith(`r:${group}/`));
}

/** Close the session and check that nothing of it is left in tracefs. */
function closeAndCheck(session: TracefsSession, tracefs: string, instance: string | undefined) {
  session.close();
  session.close();
  assert.deepEqual(groupLines(tracefs, session.group), [], 'no event of the session is left');
  if (instance !== undefined) {
    assert.equal(existsSync(`${tracefs}/instances/${instance}`), false, 'the instance is gone');
  }
}

/** How many times the trace text shows each event. */
function traceCounts(text: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /\s\d+\.\d+: (\S+): \(/.exec(line);
    if (match !== null) counts.set(match[1]!, (counts.get(match[1]!) ?? 0) + 1);
  }
  return counts;
}

test('TracefsSession defines, enables, filters and counts events in its own instance, then leaves nothing', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const tracefs = ensureTracefs();
  const program = compileProgram('tfs-counter', { flags: ['-O1'] });
  const session = new TracefsSession({ tracefs });
  let instance: string | undefined;
  try {
    const defined = session.define([
      siteOf(program, 'tfs_add', 'entry', [
        fetch('a', { kind: 'arg', index: 0, span: SPAN }, 's32'),
      ]),
      siteOf(program, 'tfs_add', 'return', [fetch('ret', { kind: 'retval', span: SPAN }, 's64')]),
      siteOf(program, 'tfs_twice', 'entry'),
    ]);
    assert.equal(session.group, `upscope_${process.pid}`);
    assert.deepEqual(
      defined.map((e) => e.event),
      ['tfs_add', 'tfs_add_2', 'tfs_twice'],
    );
    // The kernel lists each line as written, with the offset padded to 16 digits.
    const padded = defined.map((e) =>
      e.line.replace(/:0x([0-9a-f]+)/, (_, hex: string) => `:0x${hex.padStart(16, '0')}`),
    );
    assert.deepEqual(groupLines(tracefs, session.group), padded);

    const dir = session.createInstance({ bufferSizeKb: 512 });
    instance = session.instanceName;
    assert.equal(dir, `${tracefs}/instances/upscope_${process.pid}`);
    assert.match(readFileSync(`${dir}/trace_clock`, 'utf8'), /\[mono\]/);
    // The kernel rounds the size up to whole pages.
    const sizeKb = Number(readFileSync(`${dir}/buffer_size_kb`, 'utf8').trim());
    assert.ok(sizeKb >= 512 && sizeKb < 512 + 8, `buffer_size_kb ${sizeKb}`);
    session.enable();
    for (const e of defined) {
      assert.equal(readFileSync(`${dir}/events/${e.group}/${e.event}/enable`, 'utf8').trim(), '1');
    }

    // Only this test process, not its children: the run is not recorded.
    session.filterPids([process.pid], { followForks: false });
    const unseen = spawnSync(program, ['10'], { encoding: 'utf8' });
    assert.equal(unseen.status, 0);
    assert.deepEqual(traceCounts(readFileSync(`${dir}/trace`, 'utf8')), new Map());

    // With event-fork the child this process starts is followed.
    session.filterPids([process.pid], { followForks: true });
    assert.equal(readFileSync(`${dir}/options/event-fork`, 'utf8').trim(), '1');
    const run = spawnSync(program, ['40'], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    const [, adds, twices] = /tfs_add (\d+) tfs_twice (\d+)/.exec(run.stdout)!;
    const counts = traceCounts(readFileSync(`${dir}/trace`, 'utf8'));
    assert.equal(counts.get('tfs_add'), Number(adds));
    assert.equal(counts.get('tfs_add_2'), Number(adds));
    assert.equal(counts.get('tfs_twice'), Number(twices));

    const stats = session.stats();
    const recorded = Number(adds) * 2 + Number(twices);
    assert.ok(stats.cpus.length > 0);
    assert.equal(stats.entries, recorded);
    assert.equal(stats.overrun, 0);
    assert.equal(stats.dropped, 0);
    // uprobe_profile counts every hit, filtered out or not: both runs.
    const hits = new Map(stats.events.map((e) => [e.event, e.hits]));
    const unseenAdds = Number(/tfs_add (\d+)/.exec(unseen.stdout)![1]);
    assert.equal(hits.get('tfs_add'), unseenAdds + Number(adds));
    assert.equal(hits.get('tfs_add_2'), unseenAdds + Number(adds));

    session.disable();
    for (const e of defined) {
      assert.equal(readFileSync(`${dir}/events/${e.group}/${e.event}/enable`, 'utf8').trim(), '0');
    }
  } finally {
    closeAndCheck(session, tracefs, instance);
  }
});

test('TracefsSession.define() reports the kernel error_log line for a refused fetch and leaves nothing', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const tracefs = ensureTracefs();
  const program = compileProgram('tfs-counter', { flags: ['-O1'] });
  const session = new TracefsSession({ tracefs });
  try {
    const good = siteOf(program, 'tfs_add', 'entry');
    const bad = siteOf(program, 'tfs_twice', 'entry', [
      fetch('x', { kind: 'register', name: 'nosuchreg', span: SPAN }),
    ]);
    let caught: ProbeError | undefined;
    try {
      session.define([good, bad]);
    } catch (err) {
      assert.ok(isProbeError(err), String(err));
      caught = err;
    }
    assert.ok(caught, 'define() throws');
    assert.equal(caught.code, 'ERR_KERNEL_REFUSED_PROBE');
    assert.equal(caught.category, 'resolution');
    const line = caught.details['line'] as string;
    assert.match(line, /^p:upscope_\d+\/tfs_twice .* x=%nosuchreg$/);
    // The message is the kernel's own complaint, as error_log has it for this line.
    const log = readFileSync(`${tracefs}/error_log`, 'utf8').split('\n');
    const at = log.lastIndexOf(`  Command: ${line}`);
    assert.ok(at > 0, 'error_log has an entry for the line');
    const complaint = /error: (.*)$/.exec(log[at - 1]!)![1]!.trim();
    assert.equal(
      caught.message,
      `Cannot define uprobe event "${session.group}/tfs_twice": ${complaint}`,
    );
    assert.equal(caught.hints[0], `Line written: ${line}`);
    // The caret sits under the same character as the kernel's.
    const kernelCaret = log[at + 1]!.indexOf('^') - '  Command: '.length;
    assert.equal(caught.hints[1], `${' '.repeat('Line written: '.length + kernelCaret)}^`);
    assert.ok(kernelCaret > line.indexOf(' x=%nosuchreg'), 'the kernel points at the fetch');
    // The good event defined before the refusal is removed again.
    assert.deepEqual(groupLines(tracefs, session.group), []);
    assert.deepEqual(session.events, []);
  } finally {
    closeAndCheck(session, tracefs, undefined);
  }
});

test('TracefsSession.close() does not fail for events and an instance removed behind its back', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const tracefs = ensureTracefs();
  const program = compileProgram('tfs-counter', { flags: ['-O1'] });
  const session = new TracefsSession({ tracefs });
  let instance: string | undefined;
  try {
    const [event] = session.define([siteOf(program, 'tfs_add', 'entry')]);
    const dir = session.createInstance();
    instance = session.instanceName;
    session.enable();
    // Someone else removes both: the instance (which disables the event) and then the event.
    spawnSync('rmdir', [dir]);
    spawnSync('sh', ['-c', `echo '-:${event!.group}/${event!.event}' >> ${tracefs}/uprobe_events`]);
    assert.deepEqual(groupLines(tracefs, session.group), []);
  } finally {
    closeAndCheck(session, tracefs, instance);
  }
});
