import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  decodeEvent,
  decodePage,
  type EventFormat,
  parseEventFormat,
  parseHeaderPage,
} from '../../src/engines/tracefs/index.js';
import { HEADER_PAGE, UPROBE_FORMAT } from '../fixtures/tracefs-texts.js';
import {
  type ByteSeed,
  fuzz,
  isProbeError,
  mutatedBytes,
  mutatedSeed,
  mutatedText,
} from './harness.js';

// The ring-buffer page decoder and the event decoder over damaged pages and records. The page
// layout is this kernel's events/header_page (the text below, as 6.18 printed it, when tracefs
// is not readable); the seeds are pages laid out as kernel/trace/ring_buffer.c writes them
// (data events with type_len and array[0] lengths, time extends, absolute time stamps,
// discarded events, the end padding) and records of the formats tracefs prints.

const TRACING = '/sys/kernel/tracing';

function tracefsText(path: string, fallback: string): string {
  try {
    return existsSync(path) ? readFileSync(path, 'utf8') : fallback;
  } catch {
    return fallback;
  }
}

class PageWriter {
  readonly bytes = new Uint8Array(4096);
  private readonly view = new DataView(this.bytes.buffer);
  private pos = 16;

  constructor(timestamp: bigint) {
    this.view.setBigUint64(0, timestamp, true);
  }

  private u32(value: number): void {
    this.view.setUint32(this.pos, value >>> 0, true);
    this.pos += 4;
  }

  data(delta: number, length: number, long = false): this {
    const padded = (length + 3) & ~3;
    if (!long && padded <= 112 && padded > 0) this.u32((delta << 5) | (padded / 4));
    else {
      this.u32(delta << 5);
      this.u32(padded + 4);
    }
    for (let i = 0; i < padded; i++) this.bytes[this.pos + i] = (i * 37) & 0xff;
    this.pos += padded;
    return this;
  }

  extend(delta: number, high: number): this {
    this.u32((delta << 5) | 30);
    this.u32(high);
    return this;
  }

  absolute(low: number, high: number): this {
    this.u32((low << 5) | 31);
    this.u32(high);
    return this;
  }

  discarded(length: number): this {
    this.u32((7 << 5) | 29);
    this.u32(length - 4);
    this.pos += length - 8;
    return this;
  }

  /** Sets commit (with the missed-events flags) and, when stored, the lost count. */
  finish(flags = 0, lost?: number): Uint8Array {
    this.view.setBigUint64(8, BigInt(((this.pos - 16) | flags) >>> 0), true);
    if (lost !== undefined) this.view.setBigUint64(this.pos, BigInt(lost), true);
    return this.bytes;
  }
}

function pageSeeds(): ByteSeed[] {
  const hot: [number, number][] = [[0, 96]];
  return [
    new PageWriter(1000n).data(5, 40).data(7, 12).data(0, 120).finish(),
    new PageWriter(5n).extend(3, 9).data(1, 40).absolute(4, 2).data(2, 8, true).finish(),
    new PageWriter(77n).discarded(24).data(9, 64).data(1, 4).finish(0x8000_0000),
    new PageWriter(1n).data(1, 40).data(1, 40).finish(0xc000_0000, 12),
    new PageWriter(0n).finish(),
  ].map((bytes, i) => ({ label: `page ${i}`, bytes, hotspots: hot }));
}

function recordSeeds(formats: readonly EventFormat[]): (ByteSeed & { format: EventFormat })[] {
  return formats.map((format) => {
    const size = Math.max(...format.fields.map((f) => f.offset + f.sizeBytes)) + 16;
    const bytes = new Uint8Array((size + 3) & ~3);
    const view = new DataView(bytes.buffer);
    view.setUint16(0, format.id, true);
    view.setInt32(4, 4242, true);
    for (const field of format.fields) {
      if (field.location === 'data_loc')
        view.setUint32(field.offset, ((4 << 16) | (size - 12)) >>> 0, true);
    }
    bytes.set([0x61, 0x62, 0x63, 0], size - 12);
    return { label: format.name, bytes, format, hotspots: [[0, size]] };
  });
}

test('fuzz: the ring-buffer page decoder throws only ERR_TRACEFS_FORMAT', (t) => {
  const header = parseHeaderPage(tracefsText(`${TRACING}/events/header_page`, HEADER_PAGE));
  fuzz(t, {
    name: 'tracefs-page',
    input: fc.oneof(mutatedBytes(pageSeeds()), fc.uint8Array({ maxLength: 128 })),
    run: (page) => decodePage(page, header),
    expected: isProbeError('ERR_TRACEFS_FORMAT'),
    shortRuns: 1000,
  });
});

test('fuzz: the event decoder throws only ProbeError on damaged records', (t) => {
  const formats = [parseEventFormat(UPROBE_FORMAT)];
  for (const event of ['sched/sched_switch', 'ftrace/print', 'sched/sched_process_exec']) {
    const text = tracefsText(`${TRACING}/events/${event}/format`, '');
    if (text !== '') formats.push(parseEventFormat(text));
  }
  fuzz(t, {
    name: 'tracefs-event',
    input: mutatedSeed(recordSeeds(formats)),
    run: ({ seed, bytes }) => decodeEvent(bytes, seed.format),
    expected: isProbeError('ERR_TRACEFS_FORMAT'),
    shortRuns: 1000,
  });
  const formatTexts = [
    UPROBE_FORMAT,
    tracefsText(`${TRACING}/events/sched/sched_switch/format`, UPROBE_FORMAT),
  ];
  fuzz(t, {
    name: 'tracefs-format',
    input: mutatedText(formatTexts, 'field:;offset:size:signed:01234567[]_ \t\nnameIDformat'),
    run: (text) => {
      parseEventFormat(text);
    },
    expected: isProbeError(),
    shortRuns: 1000,
  });
});
