// upscope ui's page: Targets (a process, a file, a command; what this machine allows),
// Functions (fuzzy search, resolve's details and source lines on click), Measure (count,
// latency, event table, flame graph, leaks, live; Stop; exports) and Record calls. One event
// stream brings every measurement once a second.
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { render } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import type {
  DoctorView,
  FunctionRow,
  FunctionsView,
  LeakView,
  MeasureKind,
  MeasurementView,
  ProcessRow,
  RecordingView,
  ResolveView,
  TraceEventView,
  UsdtRow,
  ValidateView,
} from '../api/ui-contract.js';
import { exportUrl, get, openStream, post, whileShown } from './api.js';
import { FlameGraph } from './flame.js';
import { fuzzyFilter } from './fuzzy.js';
import { LeakCard, LeakForm } from './leaks.js';
import { duration, ErrorText, message, Progress, StopOrClose } from './parts.js';
import { RecordForms, RecordingCard, type RecordTarget } from './recording.js';

type Target =
  | { kind: 'pid'; pid: number; comm: string; file: string }
  | { kind: 'file'; file: string }
  | { kind: 'command'; command: string; file: string };

/** The page's views: one per step, and one per kind of result (measurements, recordings). */
type View = 'targets' | 'functions' | 'measure' | 'calls';

const KIND_WORDS: Record<MeasureKind, string> = {
  count: 'Count',
  latency: 'Latency',
  trace: 'Trace',
  stacks: 'Flame graph',
};

function targetText(t: Target): string {
  if (t.kind === 'pid') return `process ${t.pid} (${t.comm})`;
  if (t.kind === 'command') return `command ${t.command}`;
  return t.file;
}

// ---- Targets --------------------------------------------------------------------------------

function Targets({ target, onPick }: { target: Target | null; onPick: (t: Target) => void }) {
  const [doctor, setDoctor] = useState<DoctorView | null>(null);
  const [processes, setProcesses] = useState<ProcessRow[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [query, setQuery] = useState('');
  const [file, setFile] = useState('');
  const [command, setCommand] = useState('');
  const [since] = useState(Date.now());
  const load = () => {
    get<ProcessRow[]>('/api/processes').then(setProcesses, (e) => setError(message(e)));
  };
  useEffect(() => {
    load();
    get<DoctorView>('/api/doctor').then(setDoctor, (e) => setError(message(e)));
  }, []);
  const shown = useMemo(() => {
    const q = query.trim().toLowerCase();
    const all = processes ?? [];
    if (q === '') return all;
    return all.filter(
      (p) =>
        String(p.pid) === q ||
        p.comm.toLowerCase().includes(q) ||
        p.commandLine.toLowerCase().includes(q) ||
        p.user.toLowerCase().includes(q),
    );
  }, [processes, query]);
  return (
    <section class="targets">
      <div class="machine">
        <h2>This machine</h2>
        {doctor === null ? (
          <Progress text="checking what this machine allows" since={since} />
        ) : (
          <>
            <p data-test="engines">
              Probing as <b>{doctor.user}</b>. Count, latency and flame graphs run on{' '}
              <b>{doctor.engines.aggregate ?? 'no engine'}</b>; traces on{' '}
              <b>{doctor.engines.trace ?? 'no engine'}</b>.
            </p>
            {doctor.why !== null && <p class="warn">{doctor.why}</p>}
            <ul class="checks">
              {doctor.checks.map((c) => (
                <li key={c.id} class={`check ${c.status}`} title={c.fix ?? ''}>
                  <span class="status">{c.status}</span> <b>{c.title}</b> {c.detail}
                </li>
              ))}
            </ul>
          </>
        )}
      </div>
      <div class="pickers">
        <h2>A process</h2>
        <div class="row">
          <input
            type="search"
            placeholder="pid, command or user"
            value={query}
            onInput={(e) => setQuery(e.currentTarget.value)}
            data-test="process-search"
          />
          <button type="button" onClick={load} data-test="process-refresh">
            Refresh
          </button>
        </div>
        {error !== null && <ErrorText text={error} />}
        {processes === null ? (
          <Progress text="listing processes" since={since} />
        ) : (
          <div class="table-wrap">
            <table class="processes">
              <thead>
                <tr>
                  <th>pid</th>
                  <th>user</th>
                  <th>command</th>
                </tr>
              </thead>
              <tbody>
                {shown.slice(0, 200).map((p) => (
                  <tr
                    key={p.pid}
                    class={target?.kind === 'pid' && target.pid === p.pid ? 'picked' : ''}
                    onClick={() =>
                      p.exe !== null &&
                      onPick({ kind: 'pid', pid: p.pid, comm: p.comm, file: p.exe })
                    }
                    data-test={`process-${p.pid}`}
                  >
                    <td>{p.pid}</td>
                    <td>{p.user}</td>
                    <td class="cmd">{p.commandLine}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        <h2>Or a file</h2>
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            if (file.trim() !== '') onPick({ kind: 'file', file: file.trim() });
          }}
        >
          <input
            placeholder="/usr/bin/app, or a library: libc"
            value={file}
            onInput={(e) => setFile(e.currentTarget.value)}
          />
          <button type="submit">Use (every process)</button>
        </form>
        <h2>Or a command to start</h2>
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            const c = command.trim();
            if (c !== '') onPick({ kind: 'command', command: c, file: c.split(/\s+/)[0]! });
          }}
        >
          <input
            placeholder="./app --flag (started by each measurement)"
            value={command}
            onInput={(e) => setCommand(e.currentTarget.value)}
          />
          <button type="submit">Use</button>
        </form>
      </div>
    </section>
  );
}

// ---- Functions ------------------------------------------------------------------------------

/** What a recording of calls can run on: a process or a command (not a file alone). */
function recordTarget(target: Target | null): RecordTarget | null {
  if (target === null || target.kind === 'file') return null;
  return {
    ...specTarget(target),
    file: target.file,
    text: targetText(target),
  };
}

function specTarget(target: Target): { pid?: number; command?: string } {
  if (target.kind === 'pid') return { pid: target.pid };
  if (target.kind === 'command') return { command: target.command };
  return {};
}

function Functions({
  target,
  onMeasure,
}: {
  target: Target;
  onMeasure: (kind: MeasureKind, specs: string[]) => void;
}) {
  const [file, setFile] = useState(target.file);
  const [listing, setListing] = useState<FunctionsView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [query, setQuery] = useState('');
  const [picked, setPicked] = useState<FunctionRow | UsdtRow | null>(null);
  const [since, setSince] = useState(Date.now());
  // A new target makes a new list (see the key this is rendered with); a file picked among
  // the process's objects, another, and the answer for a file no longer shown is dropped.
  useEffect(() => {
    setListing(null);
    setError(null);
    setPicked(null);
    setSince(Date.now());
    return whileShown(
      get<FunctionsView>('/api/functions', {
        target: file,
        pid: target.kind === 'pid' ? String(target.pid) : undefined,
      }),
      setListing,
      (e) => setError(message(e)),
    );
  }, [file]);
  const matches = useMemo(
    () => (listing === null ? [] : fuzzyFilter(listing.functions, query, (f) => f.name, 300)),
    [listing, query],
  );
  const probes = useMemo(
    () =>
      listing === null
        ? []
        : fuzzyFilter(listing.usdt, query, (u) => `${u.provider}:${u.name}`, 100),
    [listing, query],
  );
  const path = listing?.path ?? file;
  const specOf = (row: FunctionRow | UsdtRow) =>
    'symbol' in row ? `${path}:${row.symbol}` : `u:${path}:${row.provider}:${row.name}`;
  return (
    <section class="functions">
      <div class="list">
        <div class="row">
          <input
            type="search"
            placeholder="search functions (fuzzy): prsreq finds parse_request"
            value={query}
            onInput={(e) => setQuery(e.currentTarget.value)}
            data-test="function-search"
            autofocus
          />
          {listing !== null && listing.objects.length > 1 && (
            <select value={file} onChange={(e) => setFile(e.currentTarget.value)}>
              {[...new Set([target.file, ...listing.objects])].map((o) => (
                <option key={o} value={o}>
                  {o}
                </option>
              ))}
            </select>
          )}
        </div>
        {error !== null && <ErrorText text={error} />}
        {listing === null && error === null && (
          <Progress text={`reading the symbols of ${file}`} since={since} />
        )}
        {listing !== null && (
          <>
            <p class="muted">
              {listing.displayPath}: {listing.functions.length} functions
              {listing.usdt.length > 0 ? `, ${listing.usdt.length} USDT probes` : ''}
              {listing.stripped ? ' (stripped: exported functions only)' : ''}
              {listing.debugFile !== null ? `, symbols from ${listing.debugFile}` : ''}
            </p>
            <ul class="fn-list" data-test="functions">
              {matches.map((f) => (
                <li key={f.vaddr + f.symbol} class={picked === f ? 'picked' : ''}>
                  <button
                    type="button"
                    class="item"
                    onClick={() => setPicked(f)}
                    data-test="function"
                    data-name={f.name}
                  >
                    <span class="name">{f.name}</span>
                    <span class="addr">
                      {f.vaddr} · {f.size} B
                    </span>
                  </button>
                </li>
              ))}
              {probes.map((u) => (
                <li key={`${u.provider}:${u.name}:${u.vaddr}`} class={picked === u ? 'picked' : ''}>
                  <button type="button" class="item" onClick={() => setPicked(u)}>
                    <span class="name">
                      <span class="tag">USDT</span> {u.provider}:{u.name}
                    </span>
                    <span class="addr">{u.args}</span>
                  </button>
                </li>
              ))}
            </ul>
          </>
        )}
      </div>
      <div class="details">
        {picked === null ? (
          <p class="muted">
            Pick a function to see where a probe goes, its source, and measure it.
          </p>
        ) : (
          <Details
            key={specOf(picked)}
            spec={specOf(picked)}
            fn={'symbol' in picked ? picked.symbol : undefined}
            file={path}
            target={target}
            onMeasure={onMeasure}
          />
        )}
      </div>
    </section>
  );
}

function Details(props: {
  spec: string;
  fn: string | undefined;
  file: string;
  target: Target;
  onMeasure: (kind: MeasureKind, specs: string[]) => void;
}) {
  const [view, setView] = useState<ResolveView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [since] = useState(Date.now());
  useEffect(() => {
    setView(null);
    setError(null);
    return whileShown(
      post<ResolveView>('/api/resolve', {
        specs: [props.spec],
        function: props.fn,
        target: props.file,
        pid: props.target.kind === 'pid' ? props.target.pid : undefined,
      }),
      setView,
      (e) => setError(message(e)),
    );
  }, [props.spec]);
  return (
    <div data-test="details">
      <h2 class="spec">{props.spec}</h2>
      <div class="actions">
        {(['count', 'latency', 'trace', 'stacks'] as const).map((kind) => (
          <button
            type="button"
            key={kind}
            disabled={props.fn === undefined && kind === 'latency'}
            onClick={() => props.onMeasure(kind, [props.spec])}
            data-test={`measure-${kind}`}
          >
            {KIND_WORDS[kind]}
          </button>
        ))}
      </div>
      {error !== null && <ErrorText text={error} />}
      {view === null && error === null && <Progress text="resolving" since={since} />}
      {view !== null && (
        <>
          {view.errors.map((e) => (
            <ErrorText key={e} text={e} />
          ))}
          <pre class="resolve" data-test="resolve">
            {view.text}
          </pre>
          {view.source !== null ? (
            <>
              <h3>{view.source.file}</h3>
              <pre class="source" data-test="source">
                {view.source.lines.map((l) => (
                  <div key={l.line} class={l.probe ? 'probe' : ''}>
                    <span class="ln">{String(l.line).padStart(5)}</span>
                    {l.probe ? ' ● ' : '   '}
                    {l.text ?? ''}
                  </div>
                ))}
              </pre>
            </>
          ) : (
            view.sourceWhy !== null && <p class="muted">No source lines: {view.sourceWhy}</p>
          )}
        </>
      )}
    </div>
  );
}

// ---- Measure --------------------------------------------------------------------------------

interface Live {
  view: MeasurementView;
  /** Latency: p50/p90/p99 (µs) over time. */
  history: { t: number[]; p50: (number | null)[]; p90: (number | null)[]; p99: (number | null)[] };
  events: TraceEventView[];
}

function CountTable({ view }: { view: MeasurementView }) {
  return (
    <table class="numbers" data-test="counts">
      <thead>
        <tr>
          <th>probe</th>
          <th>count</th>
          <th>per second</th>
        </tr>
      </thead>
      <tbody>
        {(view.counts ?? []).map((r) => (
          <tr key={r.probe + (r.key ?? '')}>
            <td>{r.probe}</td>
            <td class="num" data-test="count-value">
              {r.count}
            </td>
            <td class="num">{r.rate.toFixed(1)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function LatencyChart({ live }: { live: Live }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (box.current === null) return;
    plot.current = new uPlot(
      {
        width: Math.min(box.current.clientWidth || 600, 900),
        height: 200,
        scales: { x: { time: false } },
        axes: [{ label: 'seconds' }, { label: 'µs' }],
        series: [
          {},
          { label: 'p50', stroke: '#2da44e', width: 2 },
          { label: 'p90', stroke: '#bf8700', width: 2 },
          { label: 'p99', stroke: '#cf222e', width: 2 },
        ],
      },
      [[], [], [], []],
      box.current,
    );
    return () => plot.current?.destroy();
  }, []);
  const h = live.history;
  useEffect(() => {
    plot.current?.setData([h.t, h.p50, h.p90, h.p99] as uPlot.AlignedData);
  }, [h.t.length]);
  return <div ref={box} class="chart" data-test="latency-chart" />;
}

function LatencyTable({ live }: { live: Live }) {
  return (
    <>
      <table class="numbers" data-test="latency">
        <thead>
          <tr>
            <th>function</th>
            <th>calls</th>
            <th>per second</th>
            <th>p50</th>
            <th>p90</th>
            <th>p99</th>
            <th>max</th>
          </tr>
        </thead>
        <tbody>
          {(live.view.latency ?? []).map((r) => (
            <tr key={r.probe}>
              <td>{r.probe}</td>
              <td class="num" data-test="latency-count">
                {r.count}
              </td>
              <td class="num">{r.rate.toFixed(1)}</td>
              <td class="num" data-test="p50">
                {duration(r.p50Ns)}
              </td>
              <td class="num" data-test="p90">
                {duration(r.p90Ns)}
              </td>
              <td class="num" data-test="p99">
                {duration(r.p99Ns)}
              </td>
              <td class="num">{duration(r.maxNs)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <LatencyChart live={live} />
      {(live.view.latency ?? []).map((r) => {
        const most = Math.max(1, ...r.buckets.map((b) => Number(b.count)));
        return (
          <div key={r.probe} class="buckets">
            <h3>{r.probe}: calls per duration (µs)</h3>
            {r.buckets.map((b) => (
              <div key={b.low} class="bucket">
                <span class="range">
                  [{b.low}, {b.high})
                </span>
                <span class="bar" style={{ width: `${(Number(b.count) / most) * 60}%` }} />
                <span class="num">{b.count}</span>
              </div>
            ))}
          </div>
        );
      })}
    </>
  );
}

function EventTable({ live }: { live: Live }) {
  const fields = useMemo(() => {
    const names = new Set<string>();
    for (const e of live.events) for (const k of Object.keys(e.fields)) names.add(k);
    return [...names];
  }, [live.events]);
  return (
    <>
      <p class="muted">
        {live.view.eventsTotal ?? 0} events
        {(live.view.eventsLost ?? 0) > 0 ? `, ${live.view.eventsLost} lost` : ''}; the last{' '}
        {live.events.length} shown
      </p>
      <div class="table-wrap">
        <table class="events" data-test="events">
          <thead>
            <tr>
              <th>time (ns)</th>
              <th>probe</th>
              <th>pid/tid</th>
              <th>comm</th>
              {fields.map((f) => (
                <th key={f}>{f}</th>
              ))}
              <th>latency</th>
            </tr>
          </thead>
          <tbody>
            {live.events
              .slice(-300)
              .reverse()
              .map((e, i) => (
                <tr key={`${e.timeNs}-${e.tid}-${i}`}>
                  <td class="num">{e.timeNs}</td>
                  <td>{e.probe}</td>
                  <td class="num">
                    {e.pid}/{e.tid}
                  </td>
                  <td>{e.comm}</td>
                  {fields.map((f) => (
                    <td key={f} class="num">
                      {e.fields[f] === undefined ? '' : String(e.fields[f])}
                    </td>
                  ))}
                  <td class="num">
                    {e.latencyNs === undefined ? '' : duration(Number(e.latencyNs))}
                  </td>
                </tr>
              ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function MeasurementCard({
  live,
  onStop,
  onForget,
}: {
  live: Live;
  onStop: () => void;
  onForget: () => void;
}) {
  const v = live.view;
  return (
    <article class={`measurement ${v.state}`} data-test={`measurement-${v.kind}`}>
      <header>
        <h3>
          {KIND_WORDS[v.kind]} <code>{v.specs.join(' ')}</code> on {v.target}
        </h3>
        <span class={`state ${v.state}`} data-test="state">
          {v.state}
        </span>
        <StopOrClose
          running={v.state === 'running' || v.state === 'starting'}
          onStop={onStop}
          onForget={onForget}
        />
      </header>
      {v.state === 'starting' ? (
        <Progress text={v.progress} since={Date.now() - v.elapsedMs} fraction={v.fraction} />
      ) : (
        <p class="muted">
          {v.progress} · {(v.elapsedMs / 1000).toFixed(0)} s
          {v.skipped > 0 ? ` · ${v.skipped} sites skipped` : ''}
        </p>
      )}
      {v.notes.map((n) => (
        <p key={n} class="note">
          {n}
        </p>
      ))}
      {v.error !== null && <ErrorText text={v.error} />}
      {v.kind === 'count' && <CountTable view={v} />}
      {v.kind === 'latency' && <LatencyTable live={live} />}
      {v.kind === 'trace' && <EventTable live={live} />}
      {v.kind === 'stacks' && <FlameGraph rows={v.stacks ?? []} />}
      {v.state !== 'failed' && v.state !== 'starting' && (
        <div class="exports">
          Export:{' '}
          {v.kind === 'stacks' && (
            <a href={exportUrl(v.id, 'svg')} download data-test="export-svg">
              flame graph SVG
            </a>
          )}
          {v.kind === 'trace' && (
            <a href={exportUrl(v.id, 'chrome')} download data-test="export-chrome">
              Chrome trace
            </a>
          )}
          <a href={exportUrl(v.id, 'json')} download data-test="export-json">
            JSON
          </a>
        </div>
      )}
    </article>
  );
}

function SpecEditor({
  target,
  onStart,
}: {
  target: Target | null;
  onStart: (kind: MeasureKind, specs: string[]) => void;
}) {
  const [text, setText] = useState('');
  const [kind, setKind] = useState<MeasureKind>('trace');
  const [errors, setErrors] = useState<string[]>([]);
  useEffect(() => {
    const specs = text.split('\n').filter((s) => s.trim() !== '');
    if (specs.length === 0) {
      setErrors([]);
      return;
    }
    let asked: (() => void) | undefined;
    const timer = setTimeout(() => {
      asked = whileShown(
        post<ValidateView>('/api/validate', { specs }),
        (v) => setErrors(v.errors.flat()),
        (e) => setErrors([message(e)]),
      );
    }, 200);
    return () => {
      clearTimeout(timer);
      asked?.();
    };
  }, [text]);
  const specs = text.split('\n').filter((s) => s.trim() !== '');
  return (
    <form
      class="editor"
      onSubmit={(e) => {
        e.preventDefault();
        if (specs.length > 0 && errors.length === 0) onStart(kind, specs);
      }}
    >
      <h2>Specs</h2>
      <textarea
        rows={3}
        spellcheck={false}
        placeholder={
          'one spec a line, e.g.\n./app:parse_request len=arg1:u64\nr:./app:parse_request ret=retval:s32'
        }
        value={text}
        onInput={(e) => setText(e.currentTarget.value)}
        data-test="spec-editor"
      />
      {errors.map((e) => (
        <ErrorText key={e} text={e} />
      ))}
      <div class="row">
        <select value={kind} onChange={(e) => setKind(e.currentTarget.value as MeasureKind)}>
          {(Object.keys(KIND_WORDS) as MeasureKind[]).map((k) => (
            <option key={k} value={k}>
              {KIND_WORDS[k]}
            </option>
          ))}
        </select>
        <button type="submit" disabled={specs.length === 0 || errors.length > 0}>
          Start on {target === null ? 'every process' : targetText(target)}
        </button>
      </div>
    </form>
  );
}

// ---- The page -------------------------------------------------------------------------------

function App() {
  const [view, setView] = useState<View>('targets');
  const [target, setTarget] = useState<Target | null>(null);
  const [client, setClient] = useState<string | null>(null);
  const [connected, setConnected] = useState(false);
  const [lives, setLives] = useState<Map<string, Live>>(new Map());
  const [recordings, setRecordings] = useState<Map<string, RecordingView>>(new Map());
  const [leakViews, setLeakViews] = useState<Map<string, LeakView>>(new Map());
  const [startError, setStartError] = useState<string | null>(null);
  const [starting, setStarting] = useState<{ text: string; since: number } | null>(null);
  useEffect(() => {
    const source = openStream((m) => {
      if (m.type === 'hello') setClient(m.client);
      if (m.type === 'progress') {
        // A step of a start under way, as it happens: its card says it at once.
        const { id, progress, fraction } = m;
        setLives((old) => {
          const live = old.get(id);
          if (live === undefined) return old;
          return new Map(old).set(id, { ...live, view: { ...live.view, progress, fraction } });
        });
        setRecordings((old) => {
          const view = old.get(id);
          if (view === undefined) return old;
          return new Map(old).set(id, { ...view, progress, fraction });
        });
      }
      if (m.type === 'results') {
        // Each kind of result to its view.
        const measurements: MeasurementView[] = [];
        const recorded = new Map<string, RecordingView>();
        const found = new Map<string, LeakView>();
        for (const r of m.results) {
          if (r.kind === 'recording') recorded.set(r.id, r);
          else if (r.kind === 'leaks') found.set(r.id, r);
          else measurements.push(r);
        }
        setRecordings(recorded);
        setLeakViews(found);
        setLives((old) => {
          const next = new Map<string, Live>();
          for (const v of measurements) {
            const prev = old.get(v.id);
            const history = prev?.history ?? { t: [], p50: [], p90: [], p99: [] };
            const first = v.latency?.[0];
            if (v.kind === 'latency' && first !== undefined && v.state === 'running') {
              history.t.push(v.elapsedMs / 1000);
              history.p50.push(first.p50Ns === null ? null : first.p50Ns / 1000);
              history.p90.push(first.p90Ns === null ? null : first.p90Ns / 1000);
              history.p99.push(first.p99Ns === null ? null : first.p99Ns / 1000);
            }
            const events = [...(prev?.events ?? []), ...(v.events ?? [])].slice(-1000);
            next.set(v.id, { view: v, history, events });
          }
          return next;
        });
      }
    }, setConnected);
    return () => source.close();
  }, []);
  const start = async (kind: MeasureKind, specs: string[]) => {
    if (client === null) return;
    setView('measure');
    setStartError(null);
    setStarting({
      text: `attaching ${KIND_WORDS[kind].toLowerCase()} ${specs.join(' ')}`,
      since: Date.now(),
    });
    try {
      await post<{ id: string }>('/api/measure', {
        client,
        kind,
        specs,
        ...(target === null ? {} : specTarget(target)),
      });
    } catch (err) {
      setStartError(message(err));
    } finally {
      setStarting(null);
    }
  };
  const stop = (id?: string) => post('/api/stop', { client, id }).catch(() => {});
  const forget = (id: string) => {
    post('/api/forget', { client, id }).catch(() => {});
    setLives((old) => {
      const next = new Map(old);
      next.delete(id);
      return next;
    });
    setRecordings((old) => {
      const next = new Map(old);
      next.delete(id);
      return next;
    });
    setLeakViews((old) => {
      const next = new Map(old);
      next.delete(id);
      return next;
    });
  };
  const running =
    [...lives.values()].filter((l) => l.view.state === 'running').length +
    [...leakViews.values()].filter((l) => l.state === 'running').length;
  const recordingNow = [...recordings.values()].filter(
    (r) => r.state === 'recording' || r.state === 'starting',
  ).length;
  return (
    <>
      <header class="top">
        <h1>upscope</h1>
        <nav>
          {(['targets', 'functions', 'measure', 'calls'] as const).map((v) => (
            <button
              type="button"
              key={v}
              class={view === v ? 'tab on' : 'tab'}
              onClick={() => setView(v)}
              disabled={v === 'functions' && target === null}
              data-test={`tab-${v}`}
            >
              {v === 'targets'
                ? 'Targets'
                : v === 'functions'
                  ? 'Functions'
                  : v === 'measure'
                    ? `Measure (${running})`
                    : `Record calls (${recordingNow})`}
            </button>
          ))}
        </nav>
        <span class="target" data-test="target">
          {target === null ? 'no target picked' : targetText(target)}
        </span>
        <span class={connected ? 'link on' : 'link'} title="the live stream to upscope">
          {connected ? 'live' : 'disconnected'}
        </span>
        <button
          type="button"
          class="stop"
          disabled={running + recordingNow === 0}
          onClick={() => stop()}
          data-test="stop-all"
        >
          Stop all
        </button>
      </header>
      <main>
        {/* Every view stays mounted (hidden when not shown): a search, a pick, a chart keep. */}
        <div hidden={view !== 'targets'}>
          <Targets
            target={target}
            onPick={(t) => {
              setTarget(t);
              setView('functions');
            }}
          />
        </div>
        <div hidden={view !== 'functions'}>
          {target !== null && (
            <Functions key={targetText(target)} target={target} onMeasure={start} />
          )}
        </div>
        <section class="measure" hidden={view !== 'measure'}>
          <SpecEditor target={target} onStart={start} />
          <LeakForm target={recordTarget(target)} client={client} />
          {startError !== null && <ErrorText text={startError} />}
          {/* Until its card comes (then the card says how its start goes). */}
          {starting !== null && ![...lives.values()].some((l) => l.view.state === 'starting') && (
            <Progress text={starting.text} since={starting.since} />
          )}
          {lives.size + leakViews.size === 0 && starting === null && (
            <p class="muted">
              Nothing measured yet: pick a function, write specs above, or find leaks.
            </p>
          )}
          {[...leakViews.values()].reverse().map((l) => (
            <LeakCard key={l.id} view={l} onStop={() => stop(l.id)} onForget={() => forget(l.id)} />
          ))}
          {[...lives.values()].reverse().map((l) => (
            <MeasurementCard
              key={l.view.id}
              live={l}
              onStop={() => stop(l.view.id)}
              onForget={() => forget(l.view.id)}
            />
          ))}
        </section>
        <section class="calls" hidden={view !== 'calls'}>
          <RecordForms target={recordTarget(target)} client={client} />
          {recordings.size === 0 && (
            <p class="muted">
              Nothing recorded yet: record a process or a command, or open a recording.
            </p>
          )}
          {[...recordings.values()].reverse().map((r) => (
            <RecordingCard
              key={r.id}
              view={r}
              onStop={() => stop(r.id)}
              onForget={() => forget(r.id)}
            />
          ))}
        </section>
      </main>
    </>
  );
}

const root = document.getElementById('app');
if (root !== null) {
  root.textContent = '';
  render(<App />, root);
}
