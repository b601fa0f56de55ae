/**
 * "Did you mean ...?" support: edit distance and the closest candidates to a misspelt name.
 */

/**
 * The edit distance between two strings: insertions, deletions, substitutions and swaps of two
 * adjacent characters each cost 1 (optimal string alignment, so `rid` is one edit from `rdi`),
 * counted in UTF-16 code units. With `max`, stops early and returns `max + 1` as soon as the
 * distance is known to exceed `max`.
 */
export function levenshtein(a: string, b: string, max = Number.POSITIVE_INFINITY): number {
  if (a === b) return 0;
  if (Math.abs(a.length - b.length) > max) return max + 1;
  if (a.length === 0) return b.length;
  if (b.length === 0) return a.length;
  let beforePrevious = new Array<number>(b.length + 1).fill(0);
  let previous = new Array<number>(b.length + 1);
  let current = new Array<number>(b.length + 1);
  for (let j = 0; j <= b.length; j++) previous[j] = j;
  for (let i = 1; i <= a.length; i++) {
    current[0] = i;
    let rowMin = i;
    const ca = a.charCodeAt(i - 1);
    for (let j = 1; j <= b.length; j++) {
      const cb = b.charCodeAt(j - 1);
      let value = Math.min(
        previous[j - 1]! + (ca === cb ? 0 : 1),
        previous[j]! + 1,
        current[j - 1]! + 1,
      );
      if (i > 1 && j > 1 && ca === b.charCodeAt(j - 2) && a.charCodeAt(i - 2) === cb) {
        value = Math.min(value, beforePrevious[j - 2]! + 1);
      }
      current[j] = value;
      if (value < rowMin) rowMin = value;
    }
    if (rowMin > max) return max + 1;
    [beforePrevious, previous, current] = [previous, current, beforePrevious];
  }
  return previous[b.length]!;
}

export interface ClosestOptions {
  /**
   * Largest distance still worth suggesting. Default: a third of the name's length, at least 1
   * and at most 4, so short names only match near-identical candidates.
   */
  readonly maxDistance?: number;
}

/**
 * Up to `n` candidates closest to `name` by edit distance, best first (ties: the longer common
 * prefix first, as typos are rarer at the start of a name, then candidate order), without
 * duplicates and without `name` itself. A candidate that differs from `name`
 * only in letter case counts as distance 1 whatever its length.
 */
export function closest(
  name: string,
  candidates: Iterable<string>,
  n = 3,
  options: ClosestOptions = {},
): string[] {
  const max = options.maxDistance ?? Math.min(4, Math.max(1, Math.floor(name.length / 3)));
  const lowerName = name.toLowerCase();
  const letters = sortedLetters(lowerName);
  const scored: {
    candidate: string;
    distance: number;
    sameLetters: number;
    prefix: number;
    order: number;
  }[] = [];
  const seen = new Set<string>();
  let order = 0;
  for (const candidate of candidates) {
    if (candidate === name || seen.has(candidate)) continue;
    seen.add(candidate);
    const distance = candidate.toLowerCase() === lowerName ? 1 : levenshtein(name, candidate, max);
    if (distance <= max) {
      scored.push({
        candidate,
        distance,
        sameLetters: sortedLetters(candidate.toLowerCase()) === letters ? 1 : 0,
        prefix: commonPrefix(name, candidate),
        order: order++,
      });
    }
  }
  // Ties: a candidate with the same letters (a swap typo: rid for rdi) first, then the one
  // sharing the longer prefix, then the first given.
  scored.sort(
    (x, y) =>
      x.distance - y.distance ||
      y.sameLetters - x.sameLetters ||
      y.prefix - x.prefix ||
      x.order - y.order,
  );
  return scored.slice(0, Math.max(0, n)).map((s) => s.candidate);
}

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** Join suggestions as a hint: `Did you mean "a"?` or `Did you mean "a", "b" or "c"?`. */
export function didYouMean(suggestions: readonly string[]): string | undefined {
  if (suggestions.length === 0) return undefined;
  const quoted = suggestions.map((s) => `"${s}"`);
  const last = quoted.pop()!;
  return `Did you mean ${quoted.length > 0 ? `${quoted.join(', ')} or ${last}` : last}?`;
}

function sortedLetters(text: string): string {
  return [...text].sort().join('');
}
