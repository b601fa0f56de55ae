import { gzipSync } from 'node:zlib';
import {
  Label,
  Line,
  Location,
  Mapping,
  Function as PprofFunction,
  Profile,
  Sample,
  StringTable,
  ValueType,
} from 'pprof-format';
import type { StackFrame } from '../events/index.js';
import { frameLabel, rootFirst, type StackCount, type StackWeight, weightOf } from './stacks.js';

export interface PprofOptions {
  /**
   * What the samples count: `hits` (sample type "hits", unit "count"), `bytes` (sample
   * types "bytes"/"bytes" and "allocations"/"count", bytes shown by default), or `time`
   * (sample types "time"/"nanoseconds" and "calls"/"count", time shown by default).
   */
  readonly weight?: StackWeight | undefined;
  /** When the data was taken, and over how long, in nanoseconds (wall clock). */
  readonly timeNanos?: bigint | undefined;
  readonly durationNanos?: bigint | undefined;
  /** Lines shown with the profile (`pprof -comments`): the command, the probes. */
  readonly comments?: readonly string[] | undefined;
}

/**
 * The stacks as a pprof profile (profile.proto, gzipped), what `go tool pprof` and the
 * profilers built on it read. Every location carries its function (so pprof symbolizes
 * nothing again: each mapping says it has functions), and its mapping the object's path and
 * build-id where the frames name them. Each sample is labelled with its probe and pid.
 * Frames marked inlined join the location of the frame they were inlined into.
 */
export function renderPprof(rows: readonly StackCount[], options: PprofOptions = {}): Uint8Array {
  const weight = options.weight ?? 'hits';
  const strings = new StringTable();
  const mappings = new Map<string, Mapping>();
  const functions = new Map<string, PprofFunction>();
  const locations = new Map<string, Location>();

  const mappingOf = (frame: StackFrame): Mapping | undefined => {
    if (frame.object === undefined) return undefined;
    const key = `${frame.object}\0${frame.buildId ?? ''}`;
    let mapping = mappings.get(key);
    if (mapping === undefined) {
      mapping = new Mapping({
        id: mappings.size + 1,
        filename: strings.dedup(frame.object),
        buildId: strings.dedup(frame.buildId ?? ''),
        hasFunctions: true,
        hasFilenames: frame.file !== undefined,
        hasLineNumbers: frame.line !== undefined,
        hasInlineFrames: true,
      });
      mappings.set(key, mapping);
    }
    return mapping;
  };
  const functionOf = (frame: StackFrame): PprofFunction => {
    const name = frameLabel(frame);
    const key = `${name}\0${frame.object ?? ''}\0${frame.file ?? ''}`;
    let fn = functions.get(key);
    if (fn === undefined) {
      fn = new PprofFunction({
        id: functions.size + 1,
        name: strings.dedup(name),
        systemName: strings.dedup(frame.symbol ?? frame.function ?? name),
        filename: strings.dedup(frame.file ?? ''),
      });
      functions.set(key, fn);
    }
    return fn;
  };
  /** A location: one machine frame, and the frames inlined into it (innermost first). */
  const locationOf = (frames: readonly StackFrame[]): Location => {
    const outer = frames.at(-1)!;
    const where =
      outer.object !== undefined && outer.fileOffset !== undefined
        ? `${outer.object}@${outer.fileOffset}`
        : outer.address !== undefined
          ? `@${outer.address}`
          : '';
    const key = `${where}\0${frames.map((f) => `${frameLabel(f, true)}:${f.line ?? 0}`).join('\0')}`;
    let location = locations.get(key);
    if (location === undefined) {
      // Mappings start at 0 with offset 0: a location's address in its object is its file
      // offset, what a symbolizer of that file would be given.
      const mapping = mappingOf(outer);
      location = new Location({
        id: locations.size + 1,
        mappingId: mapping?.id ?? 0,
        address: (mapping === undefined ? outer.address : outer.fileOffset) ?? 0n,
        line: frames.map((f) => new Line({ functionId: functionOf(f).id, line: f.line ?? 0 })),
      });
      locations.set(key, location);
    }
    return location;
  };

  const probeKey = strings.dedup('probe');
  const pidKey = strings.dedup('pid');
  const samples: Sample[] = [];
  for (const row of rows) {
    const value = weightOf(row, weight);
    if (value <= 0n && row.count <= 0n) continue;
    // Leaf first, as pprof lists a sample's locations; inlined frames grouped with their caller.
    const frames = rootFirst(row).reverse();
    const ids: number[] = [];
    let group: StackFrame[] = [];
    for (const frame of frames) {
      group.push(frame);
      if (frame.inlined !== true) {
        ids.push(Number(locationOf(group).id));
        group = [];
      }
    }
    if (group.length > 0) ids.push(Number(locationOf(group).id));
    const labels = [new Label({ key: probeKey, str: strings.dedup(row.probe) })];
    if (row.stack !== undefined) labels.push(new Label({ key: pidKey, num: row.stack.pid }));
    samples.push(
      new Sample({
        locationId: ids,
        value: weight === 'hits' ? [value] : [value, row.count],
        label: labels,
      }),
    );
  }

  const type = (name: string, unit: string) =>
    new ValueType({ type: strings.dedup(name), unit: strings.dedup(unit) });
  const sampleType =
    weight === 'bytes'
      ? [type('bytes', 'bytes'), type('allocations', 'count')]
      : weight === 'time'
        ? [type('time', 'nanoseconds'), type('calls', 'count')]
        : [type('hits', 'count')];
  const profile = new Profile({
    sampleType,
    sample: samples,
    mapping: [...mappings.values()],
    location: [...locations.values()],
    function: [...functions.values()],
    stringTable: strings,
    timeNanos: options.timeNanos ?? 0n,
    durationNanos: options.durationNanos ?? 0n,
    comment: (options.comments ?? []).map((c) => strings.dedup(c)),
    defaultSampleType: sampleType[0]!.type,
  });
  return gzipSync(profile.encode(), { level: 9 });
}
