import { listUsdtProbes, type UsdtListing } from '../../api/index.js';
import { hex, renderJson, renderTable } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';

/** `upscope list --usdt [TARGET] [PATTERN] [-p PID] [--json]`. */
export async function runListUsdt(
  io: Io,
  result: CommandResult,
  target: string | undefined,
  pattern: string | undefined,
  options: { readonly pid?: number | undefined; readonly json?: boolean | undefined },
): Promise<void> {
  const listing = await listUsdtProbes(target, { pid: options.pid, pattern });
  io.out(options.json === true ? `${renderJson(usdtJson(listing))}\n` : renderUsdt(listing));
  if (listing.objects.length === 0) result.status = 1;
}

/** Addresses as hex strings, as readelf prints them. */
function usdtJson(listing: UsdtListing) {
  return {
    pid: listing.pid,
    objects: listing.objects.map((object) => ({
      path: object.path,
      displayPath: object.displayPath,
      buildId: object.buildId,
      probes: object.probes.map((probe) => ({
        provider: probe.provider,
        name: probe.name,
        vaddr: probe.vaddr,
        fileOffset: probe.fileOffset,
        semaphore: probe.semaphoreVaddr,
        args: probe.args,
        runtimeAddress: probe.runtimeAddress,
      })),
    })),
  };
}

function renderUsdt(listing: UsdtListing): string {
  const out: string[] = [];
  let total = 0;
  for (const object of listing.objects) {
    const runtime = object.probes.some((p) => p.runtimeAddress !== undefined);
    const header = ['PROVIDER', 'NAME', 'VADDR', ...(runtime ? ['RUNTIME'] : []), 'SEMAPHORE'];
    const rows = object.probes.map((probe) => [
      probe.provider,
      probe.name,
      hex(probe.vaddr),
      ...(runtime ? [probe.runtimeAddress === undefined ? '-' : hex(probe.runtimeAddress)] : []),
      probe.semaphoreVaddr === undefined ? '-' : hex(probe.semaphoreVaddr),
      probe.args === '' ? '-' : probe.args,
    ]);
    total += rows.length;
    if (listing.objects.length > 1) out.push(`${object.displayPath}:\n`);
    out.push(`${renderTable([...header, 'ARGUMENTS'], rows)}\n`);
  }
  const where =
    listing.objects.length === 1
      ? listing.objects[0]!.displayPath
      : listing.pid === undefined
        ? 'the target'
        : `the ${listing.objects.length} objects of process ${listing.pid} that have any`;
  out.push(
    total === 0
      ? `No USDT probes${listing.pid === undefined ? '' : ` in process ${listing.pid}`}\n`
      : `${total} USDT probe${total === 1 ? '' : 's'} in ${where}\n`,
  );
  return out.join(listing.objects.length > 1 ? '\n' : '');
}
