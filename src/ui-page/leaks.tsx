// The Measure view's Leaks: upscope leaks on the picked process or command (its allocator's
// functions probed, each block paired with its free), then, every second, the call stacks
// holding the most bytes not freed yet (frames named, with their blocks, bytes and the age of
// the oldest), the growth of the outstanding bytes, a flame graph of them, and the exports
// upscope leaks writes.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import type { LeakView, StackRowView } from '../api/ui-contract.js';
import { post } from './api.js';
import { FlameGraph } from './flame.js';
import { bytes, ErrorText, Exports, message, Progress, StopOrClose } from './parts.js';
import type { RecordTarget } from './recording.js';

const EXPORTS: readonly { format: string; text: string }[] = [
  { format: 'svg', text: 'flame graph SVG' },
  { format: 'folded', text: 'folded stacks' },
  { format: 'pprof', text: 'pprof' },
  { format: 'text', text: 'report' },
  { format: 'json', text: 'JSON' },
];

const COLOURS = ['#1f2328', '#cf222e', '#0969da', '#1a7f37', '#bf8700', '#8250df', '#bc4c00'];

/** The form: find the leaks of the target (a process, or a command it starts). */
export function LeakForm({
  target,
  client,
}: {
  target: RecordTarget | null;
  client: string | null;
}) {
  const [top, setTop] = useState('10');
  const [older, setOlder] = useState('');
  const [mmap, setMmap] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const start = async () => {
    if (target === null || client === null) return;
    setError(null);
    setBusy(true);
    try {
      await post<{ id: string }>('/api/leaks', {
        client,
        ...(target.pid !== undefined ? { pid: target.pid } : { command: target.command }),
        top: top.trim() === '' ? undefined : Number(top),
        olderThanMs: older.trim() === '' ? undefined : Number(older) * 1000,
        mmap,
      });
    } catch (err) {
      setError(message(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form
      class="panel leak-form"
      onSubmit={(e) => {
        e.preventDefault();
        void start();
      }}
    >
      <h2>Leaks of {target === null ? '…' : target.text}</h2>
      {target === null ? (
        <p class="muted">
          Pick a process, or a command to start, in Targets: the blocks its allocator hands out and
          it does not free are shown by call stack.
        </p>
      ) : (
        <div class="row">
          <label class="inline">
            top{' '}
            <input
              type="number"
              min={1}
              value={top}
              onInput={(e) => setTop(e.currentTarget.value)}
              data-test="leaks-top"
            />{' '}
            stacks
          </label>
          <label class="inline">
            older than{' '}
            <input
              type="number"
              min={0}
              step="any"
              placeholder="0"
              value={older}
              onInput={(e) => setOlder(e.currentTarget.value)}
            />{' '}
            s
          </label>
          <label class="inline">
            <input
              type="checkbox"
              checked={mmap}
              onChange={(e) => setMmap(e.currentTarget.checked)}
            />{' '}
            mmap too
          </label>
          <button type="submit" class="primary" disabled={busy} data-test="leaks-start">
            Find leaks
          </button>
          <span class="muted">malloc, free and the rest of its allocator, as upscope leaks</span>
        </div>
      )}
      {error !== null && <ErrorText text={error} />}
    </form>
  );
}

/** Outstanding bytes over time: every block's, and each top stack's. */
function GrowthChart({ view }: { view: LeakView }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const labels = view.growth.stacks.map((s) => s.label);
  const key = labels.join('\n');
  const data = (): uPlot.AlignedData => [
    [...view.growth.t],
    [...view.growth.total],
    ...view.growth.stacks.map((s) => [...s.bytes]),
  ];
  // The series change when another stack joins the top ones: the chart is made again.
  useEffect(() => {
    if (box.current === null) return;
    plot.current = new uPlot(
      {
        width: Math.min(box.current.clientWidth || 600, 900),
        height: 220,
        scales: { x: { time: false } },
        axes: [
          { label: 'seconds' },
          { label: 'outstanding', size: 70, values: (_u, ticks) => ticks.map((v) => bytes(v)) },
        ],
        series: [
          {},
          { label: 'all', stroke: COLOURS[0], width: 2, value: (_u, v) => bytes(v) },
          ...labels.map((label, i) => ({
            label,
            stroke: COLOURS[1 + (i % (COLOURS.length - 1))],
            width: 1.5,
            value: (_u: uPlot, v: number | null) => bytes(v),
          })),
        ],
      },
      data(),
      box.current,
    );
    return () => plot.current?.destroy();
  }, [key]);
  useEffect(() => {
    plot.current?.setData(data());
  }, [view]);
  return <div ref={box} class="chart" data-test="leaks-growth" />;
}

function StackTable({ view }: { view: LeakView }) {
  return (
    <div class="table-wrap tall">
      <table class="numbers leaks" data-test="leak-stacks">
        <thead>
          <tr>
            <th>bytes</th>
            <th>blocks</th>
            <th>oldest</th>
            <th>pid</th>
            <th>call stack (the allocator first)</th>
          </tr>
        </thead>
        <tbody>
          {view.stacks.map((s, i) => (
            <tr key={i} data-test="leak-stack" data-bytes={s.bytes} data-count={s.count}>
              <td class="num" data-test="leak-bytes">
                {bytes(Number(s.bytes))}
              </td>
              <td class="num" data-test="leak-count">
                {s.count}
              </td>
              <td class="num">{(s.oldestAgeMs / 1000).toFixed(1)} s</td>
              <td class="num">{s.pid}</td>
              <td>
                <ol class="frames">
                  {s.frames.map((f, j) => (
                    <li key={j} data-test="leak-frame">
                      {f}
                    </li>
                  ))}
                </ol>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** What the allocator's probes counted, as upscope leaks says it at its end. */
function counterText(counters: Readonly<Record<string, string>>): string {
  const n = (k: string) => counters[k] ?? '0';
  const parts = [
    `${n('allocations')} allocations and ${n('frees')} frees seen`,
    `${n('unknownFrees')} frees of addresses not seen allocated`,
  ];
  if (n('failed') !== '0') parts.push(`${n('failed')} failed allocations`);
  if (n('dropped') !== '0') {
    parts.push(`${n('dropped')} allocations NOT tracked: the map of blocks was full`);
  }
  if (n('stacksFull') !== '0') {
    parts.push(
      `${n('stacksFull')} allocations kept without their stack (the map of stacks was full)`,
    );
  }
  return parts.join(', ');
}

type Part = 'stacks' | 'flame';

/** A leak report's card: how it goes, then its stacks, growth and flame graph, and exports. */
export function LeakCard({
  view,
  onStop,
  onForget,
}: {
  view: LeakView;
  onStop: () => void;
  onForget: () => void;
}) {
  const [part, setPart] = useState<Part>('stacks');
  const rows = useMemo(
    (): StackRowView[] =>
      view.stacks.map((s) => ({
        frames: s.names.length === 0 ? ['[no user stack]'] : s.names,
        count: Number(s.bytes),
      })),
    [view],
  );
  const running = view.state === 'running' || view.state === 'starting';
  const out = view.outstanding;
  return (
    <article class={`measurement ${view.state}`} data-test="leaks">
      <header>
        <h3>Leaks of {view.target}</h3>
        <span class={`state ${view.state}`} data-test="state">
          {view.state}
        </span>
        <StopOrClose running={running} onStop={onStop} onForget={onForget} />
      </header>
      {view.state === 'starting' ? (
        <Progress text={view.progress} since={Date.now() - view.elapsedMs} />
      ) : (
        <p class="muted">
          {view.progress} · {(view.elapsedMs / 1000).toFixed(0)} s
        </p>
      )}
      {view.notes.map((n) => (
        <p key={n} class="note">
          {n}
        </p>
      ))}
      {view.error !== null && <ErrorText text={view.error} />}
      {out !== null && (
        <>
          <p data-test="leaks-summary">
            <b>{view.final ? 'Outstanding at the end' : 'Outstanding'}:</b>{' '}
            {bytes(Number(out.bytes))} ({out.bytes} bytes) in {out.count} blocks from {out.stacks}{' '}
            stacks
            {view.stacks.length < out.stacks ? ` (top ${view.stacks.length} shown)` : ''}
            {view.olderThanMs !== null ? `, older than ${view.olderThanMs / 1000} s` : ''}
          </p>
          <p class="muted" data-test="leaks-counters">
            {counterText(view.counters)}
          </p>
          <GrowthChart view={view} />
          <nav class="parts">
            {(
              [
                ['stacks', 'Stacks'],
                ['flame', 'Flame graph'],
              ] as const
            ).map(([p, text]) => (
              <button
                type="button"
                key={p}
                class={part === p ? 'tab on' : 'tab'}
                onClick={() => setPart(p)}
                data-test={`part-${p}`}
              >
                {text}
              </button>
            ))}
          </nav>
          {part === 'stacks' && <StackTable view={view} />}
          {part === 'flame' && <FlameGraph rows={rows} unit="bytes" />}
          <Exports id={view.id} formats={EXPORTS} />
        </>
      )}
    </article>
  );
}
