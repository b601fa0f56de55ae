import { readFileSync } from 'node:fs';
import { ProbeError } from '../errors/index.js';

/** One named aggregation kept attached by `upscope serve`. */
export interface ServedAggregation {
  /** Its name: the metric names' prefix (`upscope_NAME_...`). */
  readonly name: string;
  readonly kind: 'count' | 'hist' | 'latency';
  readonly specs: readonly string[];
  /** count: the key (`comm`, `pid`, `arg0`...). */
  readonly by?: string | undefined;
  /** hist: the value histogrammed. */
  readonly value?: string | undefined;
  /** Only this process (in a container too: its files are read through /proc/PID/root). */
  readonly pid?: number | undefined;
  readonly filter?: string | undefined;
}

/** What `upscope serve --config FILE` runs. */
export interface ServeConfig {
  /** Where /metrics and /ready are served (default 127.0.0.1:9464). */
  readonly listen: string;
  /** An OTLP/HTTP receiver to send the metrics to, as --otlp. */
  readonly otlp?: string | undefined;
  /** The most series per metric (default 1000). */
  readonly maxSeries?: number | undefined;
  readonly aggregations: readonly ServedAggregation[];
}

const KINDS = ['count', 'hist', 'latency'] as const;

function configError(file: string, message: string): ProbeError {
  return new ProbeError('ERR_CONFIG', `Cannot use the config "${file}": ${message}`, {
    hints: [
      'See deploy/upscope.yaml for an example: listen, otlp, and aggregations (name, kind, specs, by, value, pid, filter)',
    ],
  });
}

/**
 * Check a parsed config (JSON or YAML, the same shape): every field known and of its type,
 * names unique and usable in metric names; the first problem is the error.
 */
export function checkServeConfig(raw: unknown, file: string): ServeConfig {
  const fail = (message: string) => configError(file, message);
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw fail('it is not a mapping of listen, otlp and aggregations');
  }
  const top = raw as Record<string, unknown>;
  for (const key of Object.keys(top)) {
    if (!['listen', 'otlp', 'maxSeries', 'aggregations'].includes(key)) {
      throw fail(`unknown field "${key}"`);
    }
  }
  const listen = top['listen'] ?? '127.0.0.1:9464';
  if (typeof listen !== 'string' && typeof listen !== 'number') {
    throw fail('listen is not PORT or HOST:PORT');
  }
  if (top['otlp'] !== undefined && typeof top['otlp'] !== 'string') throw fail('otlp is not a URL');
  const maxSeries = top['maxSeries'];
  if (maxSeries !== undefined && !(Number.isInteger(maxSeries) && (maxSeries as number) > 0)) {
    throw fail('maxSeries is not a positive whole number');
  }
  const list = top['aggregations'];
  if (!Array.isArray(list) || list.length === 0)
    throw fail('aggregations is not a list of at least one');
  const names = new Set<string>();
  const aggregations = list.map((item, i): ServedAggregation => {
    const where = `aggregations[${i}]`;
    if (typeof item !== 'object' || item === null) throw fail(`${where} is not a mapping`);
    const a = item as Record<string, unknown>;
    for (const key of Object.keys(a)) {
      if (!['name', 'kind', 'specs', 'by', 'value', 'pid', 'filter'].includes(key)) {
        throw fail(`${where} has an unknown field "${key}"`);
      }
    }
    const name = a['name'];
    if (typeof name !== 'string' || !/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(name)) {
      throw fail(`${where}.name is not a name of letters, digits and _ (it prefixes metric names)`);
    }
    if (names.has(name)) throw fail(`two aggregations are named "${name}"`);
    names.add(name);
    const kind = a['kind'];
    if (!KINDS.includes(kind as never)) throw fail(`${where}.kind is not count, hist or latency`);
    const specs = typeof a['specs'] === 'string' ? [a['specs']] : a['specs'];
    if (!Array.isArray(specs) || specs.length === 0 || !specs.every((s) => typeof s === 'string')) {
      throw fail(`${where}.specs is not a probe spec or a list of them`);
    }
    for (const key of ['by', 'value', 'filter'] as const) {
      if (a[key] !== undefined && typeof a[key] !== 'string')
        throw fail(`${where}.${key} is not text`);
    }
    if (kind === 'hist' && a['value'] === undefined) throw fail(`${where} (hist) has no value`);
    if (kind !== 'hist' && a['value'] !== undefined) throw fail(`${where}.value is for hist only`);
    if (kind !== 'count' && a['by'] !== undefined) throw fail(`${where}.by is for count only`);
    const pid = a['pid'];
    if (pid !== undefined && !(Number.isInteger(pid) && (pid as number) > 0)) {
      throw fail(`${where}.pid is not a process ID`);
    }
    return {
      name,
      kind: kind as ServedAggregation['kind'],
      specs: specs as string[],
      by: a['by'] as string | undefined,
      value: a['value'] as string | undefined,
      pid: pid as number | undefined,
      filter: a['filter'] as string | undefined,
    };
  });
  return {
    listen: String(listen),
    otlp: top['otlp'] as string | undefined,
    maxSeries: maxSeries as number | undefined,
    aggregations,
  };
}

/** Read a config: JSON (`.json`, or text starting with `{`), else YAML (the `yaml` package). */
export async function readServeConfig(file: string): Promise<ServeConfig> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw configError(file, `it cannot be read (${(err as NodeJS.ErrnoException).code})`);
  }
  let raw: unknown;
  try {
    if (file.endsWith('.json') || text.trimStart().startsWith('{')) raw = JSON.parse(text);
    else raw = (await import('yaml')).parse(text);
  } catch (err) {
    throw configError(
      file,
      `it is not valid JSON or YAML: ${(err as Error).message.split('\n')[0]}`,
    );
  }
  return checkServeConfig(raw, file);
}
