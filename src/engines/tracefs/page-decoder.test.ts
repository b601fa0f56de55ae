import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HEADER_PAGE } from '../../../test/fixtures/tracefs-texts.js';
import { ProbeError } from '../../errors/index.js';
import { parseHeaderPage } from './event-format.js';
import { decodePage } from './page-decoder.js';

// events/header_page as the kernel (6.18, x86-64) prints it.
const HEADER = parseHeaderPage(HEADER_PAGE);

// Event types from the kernel's include/linux/ring_buffer.h (and events/header_event).
const PADDING = 29;
const TIME_EXTEND = 30;
const TIME_STAMP = 31;

/**
 * Writes a page the way the kernel lays it out: u64 time stamp, u64 commit, then events,
 * each a u32 of type_len (low 5 bits) and time_delta (high 27), then array[].
 */
class PageBuilder {
  readonly bytes: Uint8Array;
  private readonly view: DataView;
  private pos = 16;

  constructor(timestamp: bigint, sizeBytes = 4096) {
    this.bytes = new Uint8Array(sizeBytes);
    this.view = new DataView(this.bytes.buffer);
    this.view.setBigUint64(0, timestamp, true);
  }

  private word(typeLen: number, delta: number): void {
    this.view.setUint32(this.pos, ((delta << 5) | typeLen) >>> 0, true);
    this.pos += 4;
  }

  private u32(value: number): void {
    this.view.setUint32(this.pos, value, true);
    this.pos += 4;
  }

  /** A data event; lengths up to 112 bytes use type_len, longer (or `long`) array[0]. */
  data(delta: number, payload: Uint8Array, long = false): this {
    const padded = (payload.length + 3) & ~3;
    if (!long && padded <= 112 && padded > 0) {
      this.word(padded / 4, delta);
    } else {
      this.word(0, delta);
      this.u32(padded + 4);
    }
    this.bytes.set(payload, this.pos);
    this.pos += padded;
    return this;
  }

  extend(delta: bigint): this {
    this.word(TIME_EXTEND, Number(delta & 0x7ff_ffffn));
    this.u32(Number(delta >> 27n));
    return this;
  }

  absolute(ts: bigint): this {
    this.word(TIME_STAMP, Number(ts & 0x7ff_ffffn));
    this.u32(Number((ts >> 27n) & 0xffff_ffffn));
    return this;
  }

  /** A discarded event of `length` bytes in all. */
  discarded(delta: number, length: number): this {
    this.word(PADDING, delta);
    this.u32(length - 4);
    this.pos += length - 8;
    return this;
  }

  /** The end-of-page padding (time_delta 0): the rest is unused. */
  endPadding(): this {
    this.word(PADDING, 0);
    return this;
  }

  raw(...words: number[]): this {
    for (const w of words) this.u32(w);
    return this;
  }

  get size(): number {
    return this.pos - 16;
  }

  /** Set commit (as the kernel does, flags added to a long) and return the page. */
  finish(options: { size?: number; missed?: boolean; lost?: bigint } = {}): Uint8Array {
    const size = options.size ?? this.size;
    let commit = BigInt(size);
    if (options.lost !== undefined) {
      this.view.setBigUint64(16 + size, options.lost, true);
      commit += 1n << 30n;
    }
    // RB_MISSED_EVENTS is (1 << 31), an int: adding it to the long commit sets the high bits.
    if (options.missed === true || options.lost !== undefined) commit += -(1n << 31n);
    this.view.setBigUint64(8, BigInt.asUintN(64, commit), true);
    return this.bytes;
  }
}

function payload(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

function rejects(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ProbeError, `a ProbeError, not ${String(err)}`);
    assert.equal(err.code, 'ERR_TRACEFS_FORMAT');
    assert.match(err.message, pattern);
    return true;
  });
}

test('decodePage() returns each data event with its time stamp and bytes', () => {
  const page = new PageBuilder(1_000_000n)
    .data(5, payload(1, 2, 3, 4))
    .data(0, payload(9, 9, 9, 9, 9)) // 5 bytes, padded to 8
    .data(0x7ff_ffff, new Uint8Array(112).fill(7)) // type_len 28, the largest small event
    .finish();
  const decoded = decodePage(page, HEADER);
  assert.equal(decoded.timestamp, 1_000_000n);
  assert.equal(decoded.missedEvents, false);
  assert.equal(decoded.lostCount, undefined);
  assert.equal(decoded.dataSizeBytes, 8 + 12 + 116);
  assert.deepEqual(
    decoded.records.map((r) => [r.timestampNs, r.data.length]),
    [
      [1_000_005n, 4],
      [1_000_005n, 8],
      [1_000_005n + 0x7ff_ffffn, 112],
    ],
  );
  assert.deepEqual([...decoded.records[0]!.data], [1, 2, 3, 4]);
  assert.deepEqual([...decoded.records[1]!.data.subarray(0, 5)], [9, 9, 9, 9, 9]);
  assert.ok(decoded.records[2]!.data.every((b) => b === 7));
});

test('decodePage() reads long events (type_len 0, length in array[0]) as views, not copies', () => {
  const big = new Uint8Array(300).map((_, i) => i & 0xff);
  const page = new PageBuilder(10n)
    .data(1, big)
    .data(2, payload(1, 2, 3, 4), true)
    .finish();
  const [first, second] = decodePage(page, HEADER).records;
  assert.deepEqual([...first!.data], [...big]);
  assert.equal(first!.data.buffer, page.buffer, 'the record shares the page buffer');
  assert.equal(first!.data.byteOffset, 16 + 8);
  assert.deepEqual([...second!.data], [1, 2, 3, 4]);
  assert.deepEqual([first!.timestampNs, second!.timestampNs], [11n, 13n]);
});

test('decodePage() adds time extends (array[0] << 27 + time_delta) to the next event', () => {
  const gap = (5n << 27n) + 12345n; // over 27 bits
  const huge = 0xffff_ffffn << 27n; // the largest extend
  const page = new PageBuilder(100n)
    .data(1, payload(1, 0, 0, 0))
    .extend(gap)
    .data(0, payload(2, 0, 0, 0))
    .extend(huge)
    .data(3, payload(3, 0, 0, 0))
    .finish();
  assert.deepEqual(
    decodePage(page, HEADER).records.map((r) => r.timestampNs),
    [101n, 101n + gap, 101n + gap + huge + 3n],
  );
});

test('decodePage() sets the time from absolute time stamps, keeping the 5 top bits', () => {
  const page = new PageBuilder(500n)
    .data(1, payload(1, 0, 0, 0))
    .absolute(9_000_000_000n)
    .data(7, payload(2, 0, 0, 0))
    .finish();
  assert.deepEqual(
    decodePage(page, HEADER).records.map((r) => r.timestampNs),
    [501n, 9_000_000_007n],
  );
  // A running time with top bits set: the stamp (59 bits) takes them, carrying on overflow.
  const top = 0x0800_0000_0000_0000n; // bit 59
  const high = new PageBuilder(top + 1000n)
    .absolute(2000n)
    .data(0, payload(1, 0, 0, 0))
    .finish();
  assert.equal(decodePage(high, HEADER).records[0]!.timestampNs, top + 2000n);
  const wrap = new PageBuilder(top + (1n << 59n) - 10n).absolute(5n).data(0, payload(1, 0, 0, 0));
  assert.equal(decodePage(wrap.finish(), HEADER).records[0]!.timestampNs, 2n * top + 5n);
});

test('decodePage() skips discarded events (counting their delta) and stops at end padding', () => {
  const page = new PageBuilder(0n)
    .data(1, payload(1, 0, 0, 0))
    .discarded(4, 24)
    .data(2, payload(2, 0, 0, 0))
    .endPadding()
    .raw(0x41, 0xdead_beef) // after the end padding: never read
    .finish();
  const decoded = decodePage(page, HEADER);
  assert.deepEqual(
    decoded.records.map((r) => [r.timestampNs, r.data[0]]),
    [
      [1n, 1],
      [7n, 2],
    ],
  );
});

test('decodePage() reads only the committed bytes', () => {
  const builder = new PageBuilder(0n).data(1, payload(1, 0, 0, 0));
  const committed = builder.size;
  builder.data(1, payload(2, 0, 0, 0)).raw(0xffff_ffff);
  const decoded = decodePage(builder.finish({ size: committed }), HEADER);
  assert.deepEqual(
    decoded.records.map((r) => r.data[0]),
    [1],
  );
  // An empty page: commit 0.
  assert.deepEqual(decodePage(new PageBuilder(7n).finish(), HEADER).records, []);
});

test('decodePage() reports missed events, with the lost count when the kernel stored it', () => {
  const missed = decodePage(
    new PageBuilder(0n).data(1, payload(1, 0, 0, 0)).finish({ missed: true }),
    HEADER,
  );
  assert.deepEqual(
    [missed.missedEvents, missed.lostCount, missed.records.length],
    [true, undefined, 1],
  );
  assert.equal(missed.dataSizeBytes, 8, 'the flag bits are not part of the size');
  const stored = decodePage(
    new PageBuilder(0n).data(1, payload(1, 0, 0, 0)).finish({ lost: 1234n }),
    HEADER,
  );
  assert.deepEqual([stored.missedEvents, stored.lostCount, stored.records.length], [true, 1234, 1]);
});

test('decodePage() rejects truncated and corrupt pages with a clear message', () => {
  rejects(
    () => decodePage(new Uint8Array(10), HEADER),
    /page is 10 bytes, shorter than its 16-byte header/,
  );
  const oversize = new PageBuilder(0n, 64).finish({ size: 100 });
  rejects(
    () => decodePage(oversize, HEADER),
    /commit says 100 bytes of data, but the page holds 48/,
  );
  // A small event whose type_len reaches past the commit.
  const past = new PageBuilder(0n).raw((1 << 5) | 10).finish({ size: 8 });
  rejects(
    () => decodePage(past, HEADER),
    /event at 0x10 is 44 bytes and runs past the committed data end 0x18/,
  );
  // A long event whose array[0] reaches past the commit, and one shorter than its length word.
  const longPast = new PageBuilder(0n).raw(0, 0x1000).finish();
  rejects(() => decodePage(longPast, HEADER), /event at 0x10 is 4100 bytes and runs past/);
  const longShort = new PageBuilder(0n).raw(0, 2).finish();
  rejects(
    () => decodePage(longShort, HEADER),
    /event at 0x10 has length 2, shorter than its length word/,
  );
  // A time extend cut by the commit, and a header word cut by it.
  const extendCut = new PageBuilder(0n).raw(TIME_EXTEND, 1).finish({ size: 4 });
  rejects(() => decodePage(extendCut, HEADER), /event at 0x10 is 8 bytes and runs past/);
  const wordCut = new PageBuilder(0n).raw((1 << 5) | 1, 0, 0).finish({ size: 10 });
  rejects(
    () => decodePage(wordCut, HEADER),
    /event header at 0x18 runs past the committed data end 0x1a/,
  );
  // A discarded event whose length runs past the commit.
  const padPast = new PageBuilder(0n).raw(PADDING | (1 << 5), 0x2000).finish();
  rejects(() => decodePage(padPast, HEADER), /runs past the committed data end/);
  // The lost count stored past the end of a short read.
  const lostCut = new PageBuilder(0n, 24).finish({ size: 8, missed: true });
  new DataView(lostCut.buffer).setUint32(8, (8 | (3 << 30)) >>> 0, true);
  rejects(
    () => decodePage(lostCut, HEADER),
    /lost-events count at 0x18 runs past the page \(24 bytes\)/,
  );
});

test('decodePage() never throws anything but ProbeError and never hangs on random pages', () => {
  let seed = 12345;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed;
  };
  let decoded = 0;
  let refused = 0;
  for (let i = 0; i < 3000; i++) {
    const size = 16 + (random() % 600);
    const page = new Uint8Array(size);
    const view = new DataView(page.buffer);
    for (let at = 0; at + 4 <= size; at += 4) {
      // Mostly small type_len values, so many pages decode a few events before failing.
      const word = random();
      view.setUint32(at, random() % 3 === 0 ? word : (word & ~0x1f) | (word % 31), true);
    }
    view.setUint32(8, random() % 3 === 0 ? random() : random() % (size + 8), true);
    try {
      decodePage(page, HEADER);
      decoded++;
    } catch (err) {
      assert.ok(err instanceof ProbeError, `page ${i}: ${String(err)}`);
      refused++;
    }
  }
  assert.ok(decoded > 0 && refused > 0, `${decoded} decoded, ${refused} refused`);
});

test('decodePage() decodes a large synthetic buffer, every record', (t) => {
  const pages: Uint8Array[] = [];
  for (let p = 0; p < 2000; p++) {
    const builder = new PageBuilder(BigInt(p) * 1_000_000n);
    // 48-byte records, as a uprobe with a few arguments makes.
    while (builder.size + 52 <= 4080) builder.data(100, new Uint8Array(48).fill(p & 0xff));
    pages.push(builder.finish());
  }
  let records = 0;
  const start = process.hrtime.bigint();
  for (let round = 0; round < 5; round++) {
    for (const page of pages) records += decodePage(page, HEADER).records.length;
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const rate = Math.round(records / seconds);
  t.diagnostic(`decodePage: ${records} records in ${seconds.toFixed(3)} s = ${rate} records/s`);
  assert.equal(records, 5 * 2000 * 78);
  // The rate is said, not asserted: speed is for `npm run bench` (a loaded machine is slow).
});
