import type { ProbeEvent } from '../events/index.js';
import { formatValue, type HexFields, jsonValue } from './fields.js';
import { formatDuration } from './histogram.js';

/** Formats one event as a line (without its line feed). */
export type EventFormatter = (event: ProbeEvent) => string;

/** '000' to '999', for the microseconds of a time. */
const THREE_DIGITS = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, '0'));

/**
 * Text lines: seconds since `startNs` (to the microsecond), comm, pid/tid, probe, fields, and
 * a return's latency. Built for speed (a line per event at a million events a second): the
 * part naming the thread and probe is kept while consecutive events share it.
 */
export function eventTextFormatter(hex: HexFields, startNs: bigint): EventFormatter {
  let last: ProbeEvent | undefined;
  let who = '';
  let own: ReadonlyMap<string, boolean> | undefined;
  let second = Number.NaN;
  let secondText = '';
  return (event) => {
    const ns = Number(event.timestampNs - startNs);
    let time: string;
    if (ns >= 0) {
      const us = Math.floor(ns / 1000);
      const s = Math.floor(us / 1e6);
      if (s !== second) {
        second = s;
        secondText = `${s}.`;
      }
      const fraction = us - s * 1e6;
      const high = Math.floor(fraction / 1000);
      time = secondText + THREE_DIGITS[high]! + THREE_DIGITS[fraction - high * 1000]!;
    } else {
      time = (ns / 1e9).toFixed(6); // older than the trace's start: not expected
    }
    if (
      last === undefined ||
      event.tid !== last.tid ||
      event.probe !== last.probe ||
      event.kind !== last.kind ||
      event.comm !== last.comm ||
      event.pid !== last.pid
    ) {
      const probe = event.kind === 'return' ? `r:${event.probe}` : event.probe;
      who = ` ${event.comm} ${event.pid}/${event.tid} ${probe}`;
      own = hex.get(event.probe);
    }
    last = event;
    let fields = '';
    const values = event.fields;
    for (const name in values) fields += ` ${name}=${formatValue(values[name]!, own?.get(name))}`;
    const latency = event.latencyNs === undefined ? '' : ` (${formatDuration(event.latencyNs)})`;
    const exit =
      event.exit === undefined ? '' : event.exit === 'unwind' ? ' (unwound)' : ' (tail call)';
    return time + who + fields + latency + exit;
  };
}

/** JSON lines: 64-bit values and hex fields as strings, byte arrays as hex. */
export function eventJsonFormatter(hex: HexFields): EventFormatter {
  return (event) => {
    const own = hex.get(event.probe);
    const fields: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(event.fields)) {
      fields[name] = jsonValue(value, own?.get(name));
    }
    return JSON.stringify({
      timeNs: String(event.timestampNs),
      probe: event.probe,
      kind: event.kind,
      pid: event.pid,
      tid: event.tid,
      cpu: event.cpu,
      comm: event.comm,
      fields,
      ...(event.latencyNs === undefined ? {} : { latencyNs: String(event.latencyNs) }),
      ...(event.exit === undefined ? {} : { exit: event.exit }),
    });
  };
}
