// Pieces every view of the page uses: an error as the command line prints it, a step under
// way with its time so far, durations and sizes.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, exportUrl } from './api.js';

export function message(err: unknown): string {
  return err instanceof ApiError || err instanceof Error ? err.message : String(err);
}

/** ns as a short duration: 812ns, 12.3µs, 4.56ms, 1.20s. */
export function duration(ns: number | null): string {
  if (ns === null) return '-';
  if (ns < 1000) return `${Math.round(ns)}ns`;
  if (ns < 1e6) return `${(ns / 1e3).toPrecision(3)}µs`;
  if (ns < 1e9) return `${(ns / 1e6).toPrecision(3)}ms`;
  return `${(ns / 1e9).toPrecision(3)}s`;
}

/** Bytes as a short size: 812 B, 12.3 KiB, 4.56 MiB, 1.20 GiB. */
export function bytes(n: number | null): string {
  if (n === null) return '-';
  if (Math.abs(n) < 1024) return `${Math.round(n)} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toPrecision(3)} ${units[unit]}`;
}

/**
 * A step that may take a while: what it does and for how long so far, and how far it got
 * (0 to 1) when that is known.
 */
export function Progress({
  text,
  since,
  fraction,
}: {
  text: string;
  since: number;
  fraction?: number | null | undefined;
}) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 250);
    return () => clearInterval(timer);
  }, []);
  return (
    <div class="progress" data-test="progress">
      <p>
        <span class="spinner" /> {text}… {((now - since) / 1000).toFixed(1)} s
      </p>
      {fraction !== undefined && fraction !== null && (
        <progress max={1} value={fraction} data-test="progress-bar" />
      )}
    </div>
  );
}

export function ErrorText({ text }: { text: string }) {
  return (
    <pre class="error" data-test="error">
      {text}
    </pre>
  );
}

/** A card's end button: Stop while it runs, Close after. */
export function StopOrClose({
  running,
  onStop,
  onForget,
}: {
  running: boolean;
  onStop: () => void;
  onForget: () => void;
}) {
  return running ? (
    <button type="button" class="stop" onClick={onStop} data-test="stop">
      Stop
    </button>
  ) : (
    <button type="button" onClick={onForget} data-test="close">
      Close
    </button>
  );
}

/** Download links for a result's documents, one per format the server renders. */
export function Exports({
  id,
  formats,
}: {
  id: string;
  formats: readonly { format: string; text: string }[];
}) {
  return (
    <div class="exports">
      Export:{' '}
      {formats.map((e) => (
        <a key={e.format} href={exportUrl(id, e.format)} download data-test={`export-${e.format}`}>
          {e.text}
        </a>
      ))}
    </div>
  );
}
