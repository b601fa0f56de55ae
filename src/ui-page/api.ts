// The page's side of the server's API: every request carries the token of the page's URL.
import { type ErrorView, type StreamMessage, TOKEN_HEADER } from '../api/ui-contract.js';

export const token = new URLSearchParams(location.search).get('token') ?? '';

/** An answer of the API that is an error: its text is what the command line would print. */
export class ApiError extends Error {}

async function answer<T>(response: Response): Promise<T> {
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try {
      message = (JSON.parse(text) as ErrorView).error;
    } catch {
      // not JSON: the text as it is
    }
    throw new ApiError(message);
  }
  return JSON.parse(text) as T;
}

export async function get<T>(path: string, query: Record<string, string | undefined> = {}) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, v);
  const response = await fetch(`${path}?${params}`, { headers: { [TOKEN_HEADER]: token } });
  return answer<T>(response);
}

export async function post<T>(path: string, body: unknown): Promise<T> {
  const response = await fetch(path, {
    method: 'POST',
    headers: { [TOKEN_HEADER]: token, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return answer<T>(response);
}

/**
 * Hands an answer to `use` (or its error to `fail`) only while what asked for it is still
 * shown: returns the effect's cleanup, after which a late answer is dropped (an earlier
 * request may answer after a later one: a large file's list after a small one's).
 */
export function whileShown<T>(
  asked: Promise<T>,
  use: (value: T) => void,
  fail: (err: unknown) => void,
): () => void {
  let shown = true;
  asked.then(
    (value) => shown && use(value),
    (err) => shown && fail(err),
  );
  return () => {
    shown = false;
  };
}

/** The event stream: one per page; the server ends the page's measurements when it closes. */
export function openStream(
  onMessage: (message: StreamMessage) => void,
  onState: (open: boolean) => void,
): EventSource {
  const source = new EventSource(`/api/events?token=${encodeURIComponent(token)}`);
  source.onmessage = (event) => onMessage(JSON.parse(event.data as string) as StreamMessage);
  source.onopen = () => onState(true);
  source.onerror = () => onState(false);
  return source;
}

export function exportUrl(id: string, format: string): string {
  return `/api/export/${id}/${format}?token=${encodeURIComponent(token)}`;
}
