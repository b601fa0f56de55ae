// The ring-buffer decoders against the running kernel. The test makes its own tracefs instance
// and uprobe event group (both named upscope_test_<pid>; nothing else is touched), probes a C
// program that calls a function with known values and counts its calls, reads every CPU's
// trace_pipe_raw page by page, and checks each call is decoded once with the values passed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { after, type TestContext, test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfFileOffset, tool } from '../../../test/helpers/tools.js';
import { ensureTracefs, findTracefs } from '../../host/index.js';
import { decodeEvent, recordType } from './decode-event.js';
import { parseEventFormat, parseHeaderPage } from './event-format.js';
import { decodePage } from './page-decoder.js';

const NAME = `upscope_test_${process.pid}`;
const EVENT = 'rb_record';
const CALLS = 10_000;

/** What rb-calls.c passes on call i (the program's comment gives the same rules). */
function expected(i: number): { a: number; b: bigint; s: string } {
  const a = i === 3 ? -2147483648 : (i & 1 ? -1 : 1) * i * 7919;
  const b = 0xfedc_ba98_7654_3210n ^ BigInt(i);
  const s =
    i % 50 === 0
      ? ''
      : i % 100 === 7
        ? `long-${i}-${'x'.repeat(150)}`
        : `call-${i}-${'abcdefghijklmnopqrstuvwxyz'.slice(0, i % 20)}`;
  return { a: a === 0 ? 0 : a, b, s };
}

function ourUprobeLines(tracefs: string): string[] {
  return readFileSync(join(tracefs, 'uprobe_events'), 'utf8')
    .split('\n')
    .filter((line) => line.includes(`${NAME}/`));
}

after(() => {
  const tracefs = findTracefs();
  if (tracefs === undefined) return;
  const instance = join(tracefs, 'instances', NAME);
  const enable = join(instance, 'events', NAME, EVENT, 'enable');
  if (existsSync(enable)) writeFileSync(enable, '0');
  if (existsSync(instance)) rmdirSync(instance);
  if (ourUprobeLines(tracefs).length > 0) {
    appendFileSync(join(tracefs, 'uprobe_events'), `-:${NAME}/${EVENT}\n`);
  }
  assert.deepEqual(ourUprobeLines(tracefs), [], 'no event of this test is left in uprobe_events');
  assert.equal(existsSync(instance), false, 'the test instance is removed');
});

/** Every page of a CPU's trace_pipe_raw, read without blocking until the kernel has no more. */
function readPages(path: string, pageSizeBytes: number): Uint8Array[] {
  const pages: Uint8Array[] = [];
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    for (;;) {
      const page = new Uint8Array(pageSizeBytes);
      let got: number;
      try {
        got = readSync(fd, page, 0, pageSizeBytes, null);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break;
        throw err;
      }
      if (got === 0) break;
      assert.equal(got, pageSizeBytes, `${path} gives whole pages`);
      pages.push(page);
    }
  } finally {
    closeSync(fd);
  }
  return pages;
}

test('parseEventFormat() and parseHeaderPage() read every format file of this kernel', (t) => {
  if (!requireHost(t, { root: true })) return;
  const tracefs = ensureTracefs();
  const header = parseHeaderPage(readFileSync(join(tracefs, 'events/header_page'), 'utf8'));
  const subbufKb = join(tracefs, 'buffer_subbuf_size_kb');
  if (existsSync(subbufKb)) {
    const kb = Number(readFileSync(subbufKb, 'utf8').trim());
    assert.equal(
      header.data.offset + header.data.sizeBytes,
      kb * 1024,
      'header + data = sub-buffer',
    );
  }
  // Other tests (and tools) add and remove event groups meanwhile: a group or event that
  // vanishes between listing and reading is skipped.
  const gone = <T>(read: () => T): T | undefined => {
    try {
      return read();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  };
  let parsed = 0;
  for (const system of readdirSync(join(tracefs, 'events'), { withFileTypes: true })) {
    if (!system.isDirectory()) continue;
    const dir = join(tracefs, 'events', system.name);
    for (const event of gone(() => readdirSync(dir, { withFileTypes: true })) ?? []) {
      if (!event.isDirectory()) continue;
      const text = gone(() => readFileSync(join(dir, event.name, 'format'), 'utf8'));
      if (text === undefined) continue;
      const format = parseEventFormat(text);
      assert.equal(format.name, event.name, `${dir}/${event.name}`);
      // ftrace's own events have no id file.
      const id = gone(() => readFileSync(join(dir, event.name, 'id'), 'utf8'));
      if (id !== undefined) assert.equal(format.id, Number(id), `${dir}/${event.name}: ID is id`);
      parsed++;
    }
  }
  t.diagnostic(`parsed ${parsed} format files`);
  assert.ok(parsed > 100, `${parsed} format files`);
});

interface Traced {
  readonly run: ReturnType<typeof spawnSync>;
  readonly before: bigint;
  readonly after: bigint;
  readonly calls: { timestampNs: bigint; a: unknown; b: unknown; s: unknown }[];
  readonly pages: number;
  /** Records over 112 bytes: the kernel writes their length in array[0] (type_len 0). */
  readonly longRecords: number;
  readonly missedPages: number;
  readonly storedLost: number;
  /** Pages flagged after a loss but with no room for the count. */
  readonly unstoredLost: number;
  /** Events the kernel overwrote, summed over the CPUs' stats files. */
  readonly overrun: number;
}

/**
 * Probe rb-calls.c in this test's instance (made on first use) with a ring buffer of
 * `bufferKb` per CPU, run it, and decode every page of every CPU.
 */
function trace(t: TestContext, bufferKb: number, args: readonly string[]): Traced {
  const tracefs = ensureTracefs();
  const instance = join(tracefs, 'instances', NAME);
  const enable = join(instance, 'events', NAME, EVENT, 'enable');
  if (!existsSync(instance)) {
    const program = compileProgram('rb-calls');
    const symbol = tool('nm', [program])
      .split('\n')
      .find((line) => line.endsWith(` T ${EVENT}`));
    assert.ok(symbol, `nm lists ${EVENT}`);
    const fileOffset = readelfFileOffset(program, BigInt(`0x${symbol.split(' ')[0]}`));
    mkdirSync(instance);
    appendFileSync(
      join(tracefs, 'uprobe_events'),
      `p:${NAME}/${EVENT} ${program}:0x${fileOffset.toString(16)} a=%di:s32 b=%si:u64 s=+0(%dx):string\n`,
    );
    writeFileSync(join(instance, 'trace_clock'), 'mono');
  }
  writeFileSync(join(instance, 'buffer_size_kb'), String(bufferKb));
  writeFileSync(join(instance, 'trace'), ''); // empties the buffer and its counters
  writeFileSync(enable, '1');
  const before = process.hrtime.bigint();
  const run = spawnSync(compileProgram('rb-calls'), args, { encoding: 'utf8' });
  const after = process.hrtime.bigint();
  writeFileSync(enable, '0');
  assert.equal(run.status, 0, String(run.stderr));
  assert.equal(Number(String(run.stdout).trim()), Number(args[0]), 'the program counts its calls');

  const format = parseEventFormat(
    readFileSync(join(instance, 'events', NAME, EVENT, 'format'), 'utf8'),
  );
  const header = parseHeaderPage(readFileSync(join(tracefs, 'events/header_page'), 'utf8'));
  const pageSizeBytes = header.data.offset + header.data.sizeBytes;
  const calls: Traced['calls'] = [];
  let pages = 0;
  let longRecords = 0;
  let missedPages = 0;
  let storedLost = 0;
  let unstoredLost = 0;
  let overrun = 0;
  const cpus = readdirSync(join(instance, 'per_cpu')).filter((name) => /^cpu\d+$/.test(name));
  for (const cpu of cpus) {
    const stats = readFileSync(join(instance, 'per_cpu', cpu, 'stats'), 'utf8');
    overrun += Number(/^overrun: (\d+)$/m.exec(stats)?.[1]);
    let last = -1n;
    for (const page of readPages(join(instance, 'per_cpu', cpu, 'trace_pipe_raw'), pageSizeBytes)) {
      pages++;
      const decoded = decodePage(page, header);
      if (decoded.missedEvents) missedPages++;
      storedLost += decoded.lostCount ?? 0;
      if (decoded.missedEvents && decoded.lostCount === undefined) unstoredLost++;
      for (const record of decoded.records) {
        assert.equal(recordType(record.data), format.id, 'only our event is in our instance');
        assert.ok(record.timestampNs > last, `${cpu}: time stamps increase`);
        last = record.timestampNs;
        if (record.data.length > 112) longRecords++;
        const event = decodeEvent(record.data, format);
        assert.equal(event.pid, run.pid, 'common_pid is the program');
        const { a, b, s } = event.fields;
        calls.push({ timestampNs: record.timestampNs, a, b, s });
      }
    }
  }
  calls.sort((x, y) =>
    x.timestampNs < y.timestampNs ? -1 : x.timestampNs > y.timestampNs ? 1 : 0,
  );
  t.diagnostic(
    `${calls.length} records in ${pages} pages from ${cpus.length} CPUs; ${missedPages} pages after a loss, ${storedLost} lost counted in pages, ${overrun} overrun in stats`,
  );
  return {
    run,
    before,
    after,
    calls,
    pages,
    longRecords,
    missedPages,
    storedLost,
    unstoredLost,
    overrun,
  };
}

test('decodePage() and decodeEvent() give back every call of a probed program with its values', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const pauseAt = 5000;
  const traced = trace(t, 4096, [String(CALLS), String(pauseAt)]);
  assert.equal(traced.missedPages, 0, 'no events lost');
  assert.equal(traced.overrun, 0);
  assert.equal(traced.calls.length, CALLS, 'every call is seen exactly once');
  assert.equal(traced.longRecords, CALLS / 100, 'the long strings made long records');
  for (const [i, call] of traced.calls.entries()) {
    assert.deepEqual({ a: call.a, b: call.b, s: call.s }, expected(i), `call ${i}`);
  }
  // trace_clock mono is the clock of process.hrtime.bigint().
  assert.ok(traced.calls[0]!.timestampNs > traced.before, 'the first hit is after the start');
  assert.ok(traced.calls.at(-1)!.timestampNs < traced.after, 'the last hit is before the end');
  // The 200 ms pause is over 27 bits of ns: the kernel wrote a time extend there.
  const gap = traced.calls[pauseAt]!.timestampNs - traced.calls[pauseAt - 1]!.timestampNs;
  assert.ok(gap >= 200_000_000n && gap < 1_000_000_000n, `the pause is seen as ${gap} ns`);
});

test('decodePage() flags the pages after events the kernel overwrote, as its counters do', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  // A ring buffer of a few pages per CPU, overrun many times by the calls.
  const traced = trace(t, 16, [String(CALLS)]);
  assert.ok(traced.overrun > 0, 'the kernel counts overwritten events');
  assert.ok(traced.missedPages > 0, 'a page says events were missed before it');
  if (traced.unstoredLost === 0) {
    assert.equal(traced.storedLost, traced.overrun, 'the lost counts in pages add up to it');
  } else {
    assert.ok(traced.storedLost <= traced.overrun, 'lost counts stored in pages are a part of it');
  }
  assert.equal(traced.calls.length + traced.overrun, CALLS, 'what was read plus what was lost');
  // Each call read has its own values (b tells which call it was: b ^ i is a constant).
  const indexes = new Set<number>();
  for (const call of traced.calls) {
    const i = Number((call.b as bigint) ^ 0xfedc_ba98_7654_3210n);
    assert.ok(i >= 0 && i < CALLS && !indexes.has(i), `call ${i} is read once`);
    indexes.add(i);
    assert.deepEqual({ a: call.a, b: call.b, s: call.s }, expected(i), `call ${i}`);
  }
});
