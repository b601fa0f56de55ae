import { ProbeError, quote } from '../errors/index.js';
import { cachedFor, forgetFor, type Host, systemHost } from './host.js';
import { isRoot } from './identity.js';

/** Where tracefs is mounted by convention, best first. */
export const TRACEFS_PLACES = ['/sys/kernel/tracing', '/sys/kernel/debug/tracing'] as const;

export const TRACEFS_MOUNT_COMMAND = 'mount -t tracefs nodev /sys/kernel/tracing';

export interface MountEntry {
  readonly mountPoint: string;
  readonly fsType: string;
  readonly source: string;
}

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
function unescapeOctal(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) =>
    String.fromCharCode(Number.parseInt(octal, 8)),
  );
}

/** The mounts listed in /proc/self/mountinfo text (see proc(5)); malformed lines are skipped. */
export function parseMountinfo(text: string): MountEntry[] {
  const mounts: MountEntry[] = [];
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    const separator = fields.indexOf('-', 6);
    if (fields.length < 10 || separator < 0 || separator + 2 >= fields.length) continue;
    mounts.push({
      mountPoint: unescapeOctal(fields[4]!),
      fsType: fields[separator + 1]!,
      source: unescapeOctal(fields[separator + 2]!),
    });
  }
  return mounts;
}

function locate(host: Host): string | undefined {
  const mounts = parseMountinfo(host.fs.readFile('/proc/self/mountinfo') ?? '');
  const tracefs = mounts.filter((m) => m.fsType === 'tracefs').map((m) => m.mountPoint);
  return TRACEFS_PLACES.find((place) => tracefs.includes(place)) ?? tracefs[0];
}

/**
 * Where tracefs is mounted (from /proc/self/mountinfo): /sys/kernel/tracing when it is
 * there, else /sys/kernel/debug/tracing, else any tracefs mount. A found place is cached; a
 * missing one is looked for again on the next call.
 */
export function findTracefs(host: Host = systemHost()): string | undefined {
  const found = cachedFor(host, 'tracefs', () => locate(host));
  if (found === undefined) forgetFor(host, 'tracefs');
  return found;
}

/**
 * Where tracefs is mounted, mounting it at /sys/kernel/tracing first when it is not and we
 * are root. Throws ProbeError ERR_TRACEFS_NOT_MOUNTED (with the mount command as a hint) when
 * it is not mounted and we are not root, or when mounting fails.
 */
export function ensureTracefs(host: Host = systemHost()): string {
  const found = findTracefs(host);
  if (found !== undefined) return found;
  const target = TRACEFS_PLACES[0];
  if (!isRoot(host)) {
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      'Cannot find tracefs: no tracefs entry in /proc/self/mountinfo',
      { hints: [`Mount it as root: ${TRACEFS_MOUNT_COMMAND}`] },
    );
  }
  host.mountTracefs(target);
  const mounted = findTracefs(host);
  if (mounted === undefined) {
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      `Cannot find tracefs: mounting it at ${quote(target)} succeeded, but /proc/self/mountinfo does not list it`,
      { hints: [TRACEFS_MOUNT_COMMAND] },
    );
  }
  return mounted;
}
