import type { ProbeEvent } from '../events/index.js';
import { CallPairer } from './calls.js';
import type { Sink, Write } from './sink.js';
import { frameLabel, rootFirst, type StackCount, type StackWeight, weightOf } from './stacks.js';

const SCHEMA = 'https://www.speedscope.app/file-format-schema.json';

interface Frame {
  readonly name: string;
  readonly file?: string;
  readonly line?: number;
}

/** speedscope's shared frame table: each distinct frame once, by index. */
class Frames {
  readonly list: Frame[] = [];
  readonly #index = new Map<string, number>();

  of(frame: Frame): number {
    const key = `${frame.name}\0${frame.file ?? ''}\0${frame.line ?? ''}`;
    let i = this.#index.get(key);
    if (i === undefined) {
      i = this.list.length;
      this.list.push(frame);
      this.#index.set(key, i);
    }
    return i;
  }
}

function document(name: string, frames: Frames, profiles: unknown[]): string {
  return `${JSON.stringify({
    $schema: SCHEMA,
    name,
    exporter: 'upscope',
    activeProfileIndex: 0,
    shared: { frames: frames.list },
    profiles,
  })}\n`;
}

export interface SpeedscopeStacksOptions {
  readonly weight?: StackWeight | undefined;
  /** The name of the file's profile group (default "upscope"). */
  readonly name?: string | undefined;
}

/**
 * Stack counts as a speedscope file: a sampled profile per probe, each stack root first with
 * its weight (hits, or bytes), frames named as in flame graphs with their object or source file.
 */
export function renderSpeedscopeStacks(
  rows: readonly StackCount[],
  options: SpeedscopeStacksOptions = {},
): string {
  const weight = options.weight ?? 'hits';
  const frames = new Frames();
  const profiles = new Map<string, { samples: number[][]; weights: number[]; total: number }>();
  for (const row of rows) {
    const value = Number(weightOf(row, weight));
    if (value <= 0) continue;
    let profile = profiles.get(row.probe);
    if (profile === undefined) {
      profile = { samples: [], weights: [], total: 0 };
      profiles.set(row.probe, profile);
    }
    profile.samples.push(
      rootFirst(row).map((f) => {
        const file = f.file ?? f.object;
        return frames.of({
          name: frameLabel(f),
          ...(file === undefined ? {} : { file }),
          ...(f.line === undefined ? {} : { line: f.line }),
        });
      }),
    );
    profile.weights.push(value);
    profile.total += value;
  }
  return document(
    options.name ?? 'upscope',
    frames,
    [...profiles].map(([probe, p]) => ({
      type: 'sampled',
      name: probe,
      unit: weight === 'bytes' ? 'bytes' : weight === 'time' ? 'nanoseconds' : 'none',
      startValue: 0,
      endValue: p.total,
      samples: p.samples,
      weights: p.weights,
    })),
  );
}

export interface SpeedscopeTraceOptions {
  /**
   * The probes that have a return probe (by name): entries of the others are not held for a
   * return. Default: every entry waits for one (at most 256 per thread).
   */
  readonly returning?: ReadonlySet<string> | undefined;
  /** Time zero, CLOCK_MONOTONIC in nanoseconds; default the first event's. */
  readonly startNs?: bigint | undefined;
  readonly name?: string | undefined;
}

/**
 * A trace as a speedscope file: an evented profile per thread, where each call (an entry and
 * its return on that thread) is a frame opened and closed at its times, in nanoseconds.
 * Hits that are not calls (entries without a return probe, USDT and instruction probes) have
 * no place in speedscope's model and are left out. A whole-file format: written at end().
 */
export class SpeedscopeTraceSink implements Sink<ProbeEvent> {
  readonly #write: Write;
  readonly #options: SpeedscopeTraceOptions;
  readonly #pairer: CallPairer;
  readonly #threads = new Map<
    number,
    { pid: number; comm: string; calls: { name: string; start: bigint; end: bigint }[] }
  >();
  #origin: bigint | undefined;
  #last = 0n;

  constructor(write: Write, options: SpeedscopeTraceOptions = {}) {
    this.#write = write;
    this.#options = options;
    this.#origin = options.startNs;
    this.#pairer = new CallPairer(options.returning);
  }

  begin(): void {}

  value(event: ProbeEvent): void {
    this.#origin ??= event.timestampNs;
    if (event.timestampNs > this.#last) this.#last = event.timestampNs;
    let thread = this.#threads.get(event.tid);
    if (thread === undefined) {
      thread = { pid: event.pid, comm: event.comm, calls: [] };
      this.#threads.set(event.tid, thread);
    }
    thread.comm = event.comm;
    for (const done of this.#pairer.push(event)) {
      if (done.kind === 'call') {
        this.#threads.get(done.ret.tid)!.calls.push({
          name: done.ret.probe,
          start: done.startNs,
          end: done.endNs,
        });
      }
    }
  }

  lost(_count: number): void {}

  end(): void {
    const frames = new Frames();
    const origin = this.#origin ?? 0n;
    const at = (ns: bigint) => Number(ns - origin);
    const profiles = [];
    for (const [tid, thread] of this.#threads) {
      if (thread.calls.length === 0) continue;
      // Calls in order of start, the longer first; one that outlasts its parent is cut to it.
      const calls = thread.calls.sort((a, b) =>
        a.start !== b.start ? (a.start < b.start ? -1 : 1) : a.end > b.end ? -1 : 1,
      );
      const events: { type: 'O' | 'C'; frame: number; at: number }[] = [];
      const open: { frame: number; end: bigint }[] = [];
      /** Close the open calls that end by `until` (all of them without it). */
      const close = (until?: bigint) => {
        while (open.length > 0 && (until === undefined || open.at(-1)!.end <= until)) {
          const top = open.pop()!;
          events.push({ type: 'C', frame: top.frame, at: at(top.end) });
        }
      };
      for (const call of calls) {
        close(call.start);
        const parentEnd = open.at(-1)?.end;
        const end = parentEnd !== undefined && call.end > parentEnd ? parentEnd : call.end;
        const frame = frames.of({ name: call.name });
        events.push({ type: 'O', frame, at: at(call.start) });
        open.push({ frame, end });
      }
      close();
      profiles.push({
        type: 'evented',
        name: `${thread.comm} (pid ${thread.pid}, tid ${tid})`,
        unit: 'nanoseconds',
        startValue: 0,
        endValue: Math.max(at(this.#last), events.at(-1)?.at ?? 0),
        events,
      });
    }
    this.#write(document(this.#options.name ?? 'upscope trace', frames, profiles));
  }
}

/** A whole trace as a speedscope file (see SpeedscopeTraceSink). */
export function renderSpeedscopeTrace(
  events: Iterable<ProbeEvent>,
  options: SpeedscopeTraceOptions = {},
): string {
  let text = '';
  const sink = new SpeedscopeTraceSink((chunk) => {
    text += chunk;
  }, options);
  sink.begin();
  for (const event of events) sink.value(event);
  sink.end();
  return text;
}
