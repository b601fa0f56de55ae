/**
 * Fuzzy matching of function names: the query's characters in order in the name, scored
 * higher for a match at the start, after a separator, in a run, and for a short name; a plain
 * substring beats any scattered match. Undefined when the name does not match.
 */
export function fuzzyScore(query: string, name: string): number | undefined {
  if (query === '') return 0;
  const q = query.toLowerCase();
  const n = name.toLowerCase();
  const at = n.indexOf(q);
  if (at >= 0) return 1000 - at * 2 - (n.length - q.length) / 10 + (at === 0 ? 500 : 0);
  let score = 0;
  let from = 0;
  let run = 0;
  for (const c of q) {
    const i = n.indexOf(c, from);
    if (i < 0) return undefined;
    run = i === from ? run + 1 : 0;
    const boundary = i === 0 || /[_:.\s]/.test(n[i - 1]!);
    score += 1 + run * 3 + (boundary ? 5 : 0) - Math.min(i - from, 10) / 5;
    from = i + 1;
  }
  return score - n.length / 20;
}

/** The best `limit` of `items` for the query, best first. */
export function fuzzyFilter<T>(
  items: readonly T[],
  query: string,
  name: (item: T) => string,
  limit: number,
): T[] {
  const trimmed = query.trim();
  if (trimmed === '') return items.slice(0, limit);
  const scored: { item: T; score: number }[] = [];
  for (const item of items) {
    const score = fuzzyScore(trimmed, name(item));
    if (score !== undefined) scored.push({ item, score });
  }
  scored.sort((a, b) => b.score - a.score);
  return scored.slice(0, limit).map((s) => s.item);
}
