import type { ProbeError } from '../errors/index.js';
import { grouped } from '../internal/index.js';

/**
 * A site a pattern matched that cannot be probed (the kernel refuses its first instruction,
 * it is not code...), left out so that the rest are probed. A function named exactly is never
 * skipped: its spec fails instead.
 */
export interface SkippedSite {
  /** The spec text whose pattern matched it. */
  readonly spec: string;
  /** The file, as the user or the process sees it. */
  readonly target: string;
  /** The function, as it reads (demangled for C++ and Rust), if there is one. */
  readonly symbol: string | undefined;
  readonly vaddr: bigint;
  /** What kind of site it is, in a few words (`lock prefix`, `int3`): what summaries count. */
  readonly reason: string;
  /** The error the site alone would have given: what it is, why, and what to do. */
  readonly error: ProbeError;
}

/** How many sites were skipped for each reason, most first: `lock prefix 9, cs prefix 3`. */
export function skipCounts(skipped: readonly SkippedSite[]): string {
  const counts = new Map<string, number>();
  for (const site of skipped) counts.set(site.reason, (counts.get(site.reason) ?? 0) + 1);
  return [...counts]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([reason, count]) => `${reason} ${grouped(count)}`)
    .join(', ');
}

/**
 * The one line that ends a command's start line when patterns skipped sites (`probed`: how
 * many sites are probed; `engine`: the one they were skipped for): `12 of 21,345 sites
 * skipped: lock prefix 9, cs prefix 3; upscope resolve lists them`; undefined when none was
 * skipped.
 */
export function skipSummary(
  skipped: readonly SkippedSite[],
  probed: number,
  engine?: 'tracefs' | 'bpf' | 'ptrace',
): string | undefined {
  if (skipped.length === 0) return undefined;
  const total = grouped(probed + skipped.length);
  const count = grouped(skipped.length);
  const resolve = engine === 'ptrace' ? 'upscope resolve --engine ptrace' : 'upscope resolve';
  return `${count} of ${total} sites skipped: ${skipCounts(skipped)}; ${resolve} lists them`;
}
