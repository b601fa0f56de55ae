import { frameLabel, rootFirst, type StackCount, type StackWeight, weightOf } from './stacks.js';

export interface FoldedOptions {
  /** What a line counts: hits (default) or bytes. */
  readonly weight?: StackWeight | undefined;
  /** Keep each function's offset (`parse+0x1a`): call sites apart, at the cost of merging. */
  readonly offsets?: boolean | undefined;
}

/** A frame label as a folded line may hold it: no `;` (the separator), no line break. */
function clean(label: string): string {
  return label.replace(/;/g, ':').replace(/[\r\n]/g, ' ');
}

/**
 * Stacks folded: each stack's frames root first, joined by `;`, with the total weight of the
 * rows that fold to it (rows of different probes or processes with the same frames add up).
 * Sorted by the folded stack, so that two runs compare and merge line by line.
 */
export function foldStacks(
  rows: readonly StackCount[],
  options: FoldedOptions = {},
): Map<string, bigint> {
  const weight = options.weight ?? 'hits';
  const totals = new Map<string, bigint>();
  for (const row of rows) {
    const value = weightOf(row, weight);
    if (value <= 0n) continue;
    const key = rootFirst(row)
      .map((frame) => clean(frameLabel(frame, options.offsets === true)))
      .join(';');
    totals.set(key, (totals.get(key) ?? 0n) + value);
  }
  return new Map([...totals].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Brendan Gregg's collapsed-stack format, one line per stack: `main;parse;alloc 42`, root
 * first, the count after the last space: what flamegraph.pl, speedscope, inferno and
 * difffolded.pl read.
 */
export function renderFolded(rows: readonly StackCount[], options: FoldedOptions = {}): string {
  let text = '';
  for (const [stack, value] of foldStacks(rows, options)) text += `${stack} ${value}\n`;
  return text;
}
