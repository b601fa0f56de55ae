import { EXIT_STATUS } from './codes.js';
import { isProbeError, type ProbeError, type Span } from './probe-error.js';

/**
 * Render an error as the CLI prints it: one line `error[CODE]: message`, then, for spec
 * errors, the spec with a caret under the problem, then one `hint:` line per hint.
 */
export function renderError(err: ProbeError): string {
  const lines = [`error[${err.code}]: ${err.message}`];
  if (err.source !== undefined) lines.push(...renderCaret(err.source.text, err.source.span));
  for (const hint of err.hints) lines.push(`  hint: ${hint}`);
  return lines.join('\n');
}

/**
 * Render a warning (a ProbeError that did not stop anything: a pattern's skipped IFUNC
 * resolvers, the overloads a name placed probes on) as renderError() does, as `warning[CODE]`.
 */
export function renderWarning(err: ProbeError): string {
  return renderError(err).replace(/^error\[/, 'warning[');
}

export function renderCaret(text: string, span: Span): string[] {
  const start = Math.max(0, Math.min(span.start, text.length));
  const width = Math.max(1, Math.min(span.end, text.length) - start);
  return [`  ${text}`, `  ${' '.repeat(start)}${'^'.repeat(width)}`];
}

export function exitStatusOf(err: unknown): number {
  return isProbeError(err) ? EXIT_STATUS[err.category] : EXIT_STATUS.internal;
}
