/**
 * JSON text for output: bigints (addresses) become `0x...` strings, so that values too large for
 * a JavaScript number survive and read as they do in readelf or objdump.
 */
export function renderJson(value: unknown, indent = 2): string {
  return JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? hex(v) : v), indent);
}

export function hex(value: bigint): string {
  return value < 0n ? `-0x${(-value).toString(16)}` : `0x${value.toString(16)}`;
}

/** A fixed-width table from rows of cells; the last column is not padded. */
export function renderTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = header.map((h, i) =>
    Math.max(h.length, ...rows.map((row) => row[i]?.length ?? 0)),
  );
  const line = (cells: readonly string[]) =>
    cells.map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}
