import type { ProbeSite } from './probe-site.js';

/**
 * What to tell a user who probes process `pid` in files it has not mapped (yet): one line per
 * file, e.g. `/opt/app/libfoo.so is not loaded in process 1234 yet; its probes attach when
 * it is loaded`. Sites resolved in the process without a runtime address are such sites.
 */
export function notLoadedNotes(sites: readonly ProbeSite[], pid: number): string[] {
  const files = new Set<string>();
  for (const site of sites) {
    if (site.runtimeAddress === undefined) files.add(site.target.displayPath);
  }
  return [...files].map(
    (file) => `${file} is not loaded in process ${pid} yet; its probes attach when it is loaded`,
  );
}
