import { type ProbeSite, probeName } from '../api/index.js';

/**
 * What is said of timed functions whose first instruction the kernel single-steps (runs out
 * of line after a trap, where it emulates a push or a jmp): the time from their entry probe
 * includes that trap, 13 us and more in a virtual machine, against a call of a few ns.
 * latency, top and the page's latency cards time every site: stepsNote(sites, 'calls').
 * trace and the page's traces time the returns of return probes: stepsNote(sites, 'returns').
 */
export function stepsNote(
  sites: readonly ProbeSite[],
  timed: 'calls' | 'returns',
): string | undefined {
  const timedSites = timed === 'calls' ? sites : sites.filter((site) => site.kind === 'return');
  const stepped = timedSites.filter((site) => site.handling.strategy === 'single-step');
  if (stepped.length === 0) return undefined;
  const first = (site: ProbeSite) => (site.handling as { what: string }).what;
  const how = '(upscope resolve shows how each probe is run)';
  if (stepped.length === 1) {
    return `the kernel single-steps the first instruction ("${first(stepped[0]!)}") of ${probeName(stepped[0]!)}: it runs it out of line after a trap, and the times include that trap ${how}`;
  }
  const count =
    stepped.length === timedSites.length
      ? `all ${timedSites.length}`
      : `${stepped.length} of the ${timedSites.length}`;
  const what = timed === 'calls' ? 'functions timed' : 'functions whose returns are timed';
  const named = stepped.slice(0, 3).map((site) => `${probeName(site)}: ${first(site)}`);
  return `the kernel single-steps the first instruction of ${count} ${what} (${named.join(', ')}${stepped.length > 3 ? ', ...' : ''}): it runs them out of line after a trap, and their times include that trap ${how}`;
}
