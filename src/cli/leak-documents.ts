// What upscope leaks writes of a report in the stack formats (folded, flame graph, pprof,
// speedscope, weighed by bytes), shared by that command and by the Leaks view of `upscope ui`
// (its export buttons).
import type { LeakSnapshot } from '../api/index.js';
import { leakStackCounts, renderStacks, type StackFormat } from '../output/index.js';

/** What the documents are of: `Outstanding bytes of ./app 5`, `... of process 1234`. */
export function leakTitle(target: {
  readonly pid?: number | undefined;
  readonly command?: string | undefined;
}): string {
  return `Outstanding bytes of ${target.command ?? `process ${target.pid}`}`;
}

/** A report's stacks as one document, each as heavy as its outstanding bytes (none: empty). */
export function renderLeakStacks(
  report: LeakSnapshot | undefined,
  format: StackFormat,
  title: string,
): string | Uint8Array {
  return renderStacks(format, report === undefined ? [] : leakStackCounts(report), {
    weight: 'bytes',
    title,
  });
}
