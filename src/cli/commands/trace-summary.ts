/**
 * The last line of a trace: what was delivered, lost and missed; when --max-events ended it,
 * how many of the delivered events were printed (the rest were read with them, not printed).
 */
export function summaryLine(
  printed: number,
  max: number,
  stats: {
    readonly delivered: number;
    readonly lost: number;
    readonly missed?: number | undefined;
  },
): string {
  const rest = `${stats.lost} lost, ${stats.missed ?? 0} missed`;
  if (printed < max) return `${stats.delivered} events delivered, ${rest}`;
  return `${printed} events printed (--max-events ${max}) of ${stats.delivered} delivered, ${rest}`;
}
