// The Record calls view: record the calls of a process or a command (upscope record's entry and
// return probes on the functions asked for) or open a recording on the server's disk, then
// see its merged call tree (calls, total and self time, expandable), its functions (upscope
// report) and its flame graph (time per call path), and export what graph and replay write.
import { useEffect, useMemo, useState } from 'preact/hooks';
import type {
  CallPathView,
  FunctionReportView,
  RecordingTreeView,
  RecordingView,
  StackRowView,
} from '../api/ui-contract.js';
import { get, post } from './api.js';
import { FlameGraph } from './flame.js';
import { duration, ErrorText, Exports, message, Progress, StopOrClose } from './parts.js';

/** What a recording runs on: the page's target, when it is a process or a command. */
export interface RecordTarget {
  readonly pid?: number;
  readonly command?: string;
  /** Its executable (what is recorded by default), and how the page names the target. */
  readonly file: string;
  readonly text: string;
}

const EXPORTS: readonly { format: string; text: string }[] = [
  { format: 'svg', text: 'flame graph SVG' },
  { format: 'folded', text: 'folded stacks' },
  { format: 'pprof', text: 'pprof' },
  { format: 'speedscope', text: 'speedscope' },
  { format: 'chrome', text: 'Chrome trace' },
  { format: 'report', text: 'report' },
  { format: 'json', text: 'call tree JSON' },
];

function lines(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** The forms: record the target's calls, or open a recording directory. */
export function RecordForms({
  target,
  client,
}: {
  target: RecordTarget | null;
  client: string | null;
}) {
  const [what, setWhat] = useState(target?.file ?? '');
  const [exclude, setExclude] = useState('');
  const [dir, setDir] = useState('');
  const [path, setPath] = useState('');
  const [error, setError] = useState<string | null>(null);
  useEffect(() => setWhat(target?.file ?? ''), [target?.file]);
  const start = async (url: string, body: Record<string, unknown>) => {
    setError(null);
    try {
      await post<{ id: string }>(url, { client, ...body });
    } catch (err) {
      setError(message(err));
    }
  };
  return (
    <div class="record-forms">
      <form
        class="panel"
        onSubmit={(e) => {
          e.preventDefault();
          if (target === null) return;
          void start('/api/record', {
            ...(target.pid !== undefined ? { pid: target.pid } : { command: target.command }),
            targets: lines(what),
            exclude: lines(exclude),
            dir: dir.trim() === '' ? undefined : dir.trim(),
          });
        }}
      >
        <h2>Record the calls of {target === null ? '…' : target.text}</h2>
        {target === null ? (
          <p class="muted">
            Pick a process, or a command to start, in Targets: its calls are recorded until Stop or
            its end.
          </p>
        ) : (
          <>
            <label class="field">
              <span>Functions</span>
              <input
                value={what}
                onInput={(e) => setWhat(e.currentTarget.value)}
                placeholder="./app (every function), ./app:parse_*, libc:mem*"
                data-test="record-targets"
              />
            </label>
            <label class="field">
              <span>Leave out</span>
              <input
                value={exclude}
                onInput={(e) => setExclude(e.currentTarget.value)}
                placeholder="globs, e.g. _* (optional)"
              />
            </label>
            <label class="field">
              <span>Keep in</span>
              <input
                value={dir}
                onInput={(e) => setDir(e.currentTarget.value)}
                placeholder="a directory (optional; else a temporary one, removed on Close)"
                data-test="record-dir"
              />
            </label>
            <div class="row">
              <button type="submit" class="primary" data-test="record-start">
                Record
              </button>
              <span class="muted">
                an entry and a return probe on each function, as upscope record -o DIR
              </span>
            </div>
          </>
        )}
      </form>
      <form
        class="panel"
        onSubmit={(e) => {
          e.preventDefault();
          if (path.trim() !== '') void start('/api/open', { path: path.trim() });
        }}
      >
        <h2>Or open a recording</h2>
        <div class="row">
          <input
            value={path}
            onInput={(e) => setPath(e.currentTarget.value)}
            placeholder="a directory made by upscope record -o DIR, on the server's machine"
            data-test="open-path"
          />
          <button type="submit" data-test="open-start">
            Open
          </button>
        </div>
      </form>
      {error !== null && <ErrorText text={error} />}
    </div>
  );
}

/** Each call path as a stack weighed by the time spent in its last function itself. */
/** A report row's time: none for a function whose returns are not probed (not 0). */
function timeOf(r: FunctionReportView, ns: number): string {
  return duration(r.untimed === r.calls ? null : ns);
}

function flameRows(tree: RecordingTreeView): StackRowView[] {
  const rows: StackRowView[] = [];
  const walk = (node: CallPathView, callers: readonly string[]) => {
    const frames = [...callers, tree.functions[node.fn] ?? `#${node.fn}`];
    rows.push({ frames, count: node.selfNs });
    for (const child of node.children) walk(child, frames);
  };
  for (const root of tree.roots) walk(root, []);
  return rows;
}

function CallRow({
  node,
  depth,
  tree,
  whole,
}: {
  node: CallPathView;
  depth: number;
  tree: RecordingTreeView;
  whole: number;
}) {
  const [open, setOpen] = useState(depth === 0);
  const name = tree.functions[node.fn] ?? `#${node.fn}`;
  const share = whole > 0 ? (node.totalNs / whole) * 100 : 0;
  // A function whose returns are not probed: counted, not timed.
  const untimed = node.untimed === node.calls;
  return (
    <>
      <tr data-test="call-row" data-name={name} data-depth={depth} data-calls={node.calls}>
        <td class="fn" style={{ paddingLeft: `${0.6 + depth * 1.1}em` }}>
          {node.children.length > 0 ? (
            <button
              type="button"
              class="toggle"
              onClick={() => setOpen(!open)}
              data-test="toggle"
              aria-expanded={open}
            >
              {open ? '▾' : '▸'}
            </button>
          ) : (
            <span class="toggle" />
          )}{' '}
          {name}
          {untimed ? (
            <span
              class="stepped"
              data-test="untimed"
              title="Its returns cannot be found safely (upscope resolve r:FUNCTION says why): its calls are counted, not timed, and what it calls is under its caller"
            >
              {' '}
              returns not probed
            </span>
          ) : null}
        </td>
        <td class="num" data-test="calls">
          {node.calls}
        </td>
        <td class="num">{duration(untimed ? null : node.totalNs)}</td>
        <td class="num">{duration(untimed ? null : node.selfNs)}</td>
        <td class="num share">
          <span class="bar" style={{ width: `${Math.min(100, share)}%` }} />
          <span class="pct">{share.toFixed(1)}%</span>
        </td>
      </tr>
      {open &&
        node.children.map((child, i) => (
          <CallRow key={i} node={child} depth={depth + 1} tree={tree} whole={whole} />
        ))}
    </>
  );
}

function CallTree({ tree }: { tree: RecordingTreeView }) {
  const whole = tree.roots.reduce((sum, r) => sum + r.totalNs, 0);
  return (
    <div class="table-wrap tall">
      <table class="calls" data-test="call-tree">
        <thead>
          <tr>
            <th>function (callers above callees)</th>
            <th>calls</th>
            <th>total</th>
            <th>self</th>
            <th>of all</th>
          </tr>
        </thead>
        <tbody>
          {tree.roots.map((root, i) => (
            <CallRow key={i} node={root} depth={0} tree={tree} whole={whole} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Report({ tree }: { tree: RecordingTreeView }) {
  return (
    <div class="table-wrap tall">
      <table class="numbers" data-test="report">
        <thead>
          <tr>
            <th>function</th>
            <th>calls</th>
            <th>total</th>
            <th>self</th>
            <th>min</th>
            <th>avg</th>
            <th>max</th>
            <th>unwound</th>
          </tr>
        </thead>
        <tbody>
          {tree.report.map((r) => (
            <tr key={r.function} data-test="report-row" data-name={r.function}>
              <td>
                {r.function}
                {r.kernelStepped === undefined ? null : (
                  <span
                    class="stepped"
                    data-test="kernel-stepped"
                    title={`The kernel single-steps this function's probe at its ${r.kernelStepped} (a trap more each call, which its times include)`}
                  >
                    {' '}
                    kernel-stepped {r.kernelStepped}
                  </span>
                )}
                {r.untimed === 0 ? null : (
                  <span
                    class="stepped"
                    data-test="untimed"
                    title="Its returns cannot be found safely (upscope resolve r:FUNCTION says why): its calls are counted, not timed"
                  >
                    {' '}
                    returns not probed
                  </span>
                )}
              </td>
              <td class="num" data-test="calls">
                {r.calls}
              </td>
              <td class="num">{timeOf(r, r.totalNs)}</td>
              <td class="num">{timeOf(r, r.selfNs)}</td>
              <td class="num">{timeOf(r, r.minNs)}</td>
              <td class="num">{timeOf(r, r.avgNs)}</td>
              <td class="num">{timeOf(r, r.maxNs)}</td>
              <td
                class="num"
                title={`${r.unwound} unwound, ${r.notReturned} not returned when the thread ended, ${r.unreported} returns left out by the kernel (calls nested over 64 deep)`}
              >
                {r.unwound + r.notReturned + r.unreported}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

type Part = 'tree' | 'report' | 'flame';

/** A recording's card: how it goes, then its tree, report and flame graph, and exports. */
export function RecordingCard({
  view,
  onStop,
  onForget,
}: {
  view: RecordingView;
  onStop: () => void;
  onForget: () => void;
}) {
  const [tree, setTree] = useState<RecordingTreeView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [part, setPart] = useState<Part>('tree');
  useEffect(() => {
    if (view.state !== 'ready' || tree !== null) return;
    get<RecordingTreeView>('/api/recording', { id: view.id }).then(setTree, (e) =>
      setError(message(e)),
    );
  }, [view.state]);
  const rows = useMemo(() => (tree === null ? [] : flameRows(tree)), [tree]);
  const running = view.state === 'starting' || view.state === 'recording';
  const busy = view.state === 'starting' || view.state === 'loading';
  return (
    <article class={`measurement ${view.state}`} data-test="recording">
      <header>
        <h3>
          Calls{view.specs.length > 0 && <code> {view.specs.join(' ')}</code>} of {view.target}
        </h3>
        <span
          class={`state ${view.state === 'recording' ? 'running' : view.state}`}
          data-test="state"
        >
          {view.state}
        </span>
        <StopOrClose running={running} onStop={onStop} onForget={onForget} />
      </header>
      {busy ? (
        <Progress
          text={view.progress}
          since={Date.now() - view.elapsedMs}
          fraction={view.fraction}
        />
      ) : (
        <p class="muted" data-test="summary">
          {view.progress}
          {view.lost > 0 ? ` · ${view.lost} events lost` : ''}
          {view.exit !== null ? ` · the program ended: ${view.exit}` : ''}
        </p>
      )}
      {view.notes.map((n) => (
        <p key={n} class="note">
          {n}
        </p>
      ))}
      {view.problems.map((p) => (
        <p key={p} class="warn" data-test="problem">
          {p}
        </p>
      ))}
      {view.error !== null && <ErrorText text={view.error} />}
      {error !== null && <ErrorText text={error} />}
      {view.dir !== null && view.state !== 'failed' && (
        <p class="muted">
          {view.temporary ? 'In a temporary directory (removed on Close): ' : 'In '}
          <code>{view.dir}</code> (upscope report, graph and replay read it)
        </p>
      )}
      {tree !== null && (
        <>
          <nav class="parts">
            {(
              [
                ['tree', 'Call tree'],
                ['report', 'Functions'],
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
            {tree.truncated && (
              <span class="muted">
                the {tree.paths} call paths are many: the lightest, and those over 256 levels deep,
                are left out here (the exports have more)
              </span>
            )}
          </nav>
          {part === 'tree' && <CallTree tree={tree} />}
          {part === 'report' && <Report tree={tree} />}
          {part === 'flame' && <FlameGraph rows={rows} unit="ns" />}
          <Exports id={view.id} formats={EXPORTS} />
        </>
      )}
    </article>
  );
}
