import { listVariables, type VariableListing } from '../../api/index.js';
import { hex, renderJson, renderTable } from '../../output/index.js';

/** `upscope list TARGET --vars FUNCTION`: the listing as text or JSON. */
export async function listVarsOutput(
  target: string,
  fn: string,
  options: {
    readonly pid?: number | undefined;
    readonly json?: boolean | undefined;
    readonly debugDir?: readonly string[] | undefined;
  },
): Promise<string> {
  const listing = await listVariables(target, fn, {
    pid: options.pid,
    debugDirs: options.debugDir,
  });
  return options.json === true ? `${renderJson(listing)}\n` : renderVariables(listing);
}

/** One block per instance: where the probe goes, then a row per variable. */
export function renderVariables(listing: VariableListing): string {
  const blocks = listing.instances.map((instance) => {
    const where = instance.inlined
      ? `inlined into ${instance.caller ?? '?'} at ${hex(instance.vaddr)}`
      : `at ${hex(instance.vaddr)}`;
    const runtime =
      instance.runtimeAddress === undefined ? '' : ` (runtime ${hex(instance.runtimeAddress)})`;
    const head = `${instance.name} ${where}${runtime} in ${listing.target.displayPath}:`;
    if (instance.variables.length === 0) return `${head}\n  (no parameters or local variables)\n`;
    const rows = instance.variables.map((v) => [
      v.kind,
      v.declaration,
      v.location ?? `(${v.unavailable ?? 'not available'})`,
    ]);
    return `${head}\n${renderTable(['KIND', 'DECLARATION', 'LOCATION'], rows)}\n`;
  });
  return blocks.join('\n');
}
