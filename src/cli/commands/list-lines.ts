import type { SourceLineListing } from '../../api/index.js';
import { hex } from '../../output/index.js';

const HOW = {
  embedded: 'in the file itself',
  'build-id': 'by build-id',
  debuglink: 'by .gnu_debuglink',
} as const;

/**
 * `list TARGET --lines FUNC` as text, like `perf probe -L`: a heading naming the function, the
 * source file and the debug info read, then the lines; a line a probe can go on is marked `*`.
 */
export function renderSourceLines(listing: SourceLineListing): string {
  const first = listing.lines[0]?.line ?? 0;
  const last = listing.lines.at(-1)?.line ?? 0;
  const what = listing.function === undefined ? '' : `${listing.function} in `;
  const out = [
    `${what}${listing.file}:${first}-${last} (${listing.target.displayPath}; debug info: ${listing.debugFile.path}, ${HOW[listing.debugFile.how]})`,
  ];
  const width = String(last).length;
  for (const line of listing.lines) {
    const number = String(line.line).padStart(width);
    const text = line.text === undefined ? '' : `  ${line.text}`;
    out.push(`${line.probe ? '*' : ' '} ${number}${text}`.trimEnd());
  }
  if (!listing.sourceFound) {
    out.push(`(source not found at ${listing.file}: line numbers only)`);
  }
  const example = listing.lines.find((l) => l.probe);
  out.push(
    example === undefined
      ? 'No line here has code a probe can go on'
      : `* = a probe can go on the line, e.g. upscope trace '${listing.target.displayPath}:${listing.file.slice(listing.file.lastIndexOf('/') + 1)}:${example.line}'`,
  );
  return `${out.join('\n')}\n`;
}

/** The JSON of a source-line listing: addresses as hex strings. */
export function sourceLinesJson(listing: SourceLineListing) {
  return {
    target: listing.target,
    function: listing.function,
    file: listing.file,
    sourceFound: listing.sourceFound,
    debugFile: listing.debugFile,
    lines: listing.lines.map((line) => ({
      line: line.line,
      text: line.text,
      probe: line.probe,
      addresses: line.addresses.map((a) => hex(a)),
    })),
  };
}
