import { InternalError } from '../errors/index.js';
import { cachedFor, type Host, systemHost } from './host.js';

/** Capability numbers (linux/capability.h); capabilities.test.ts checks them against it. */
export const CAPABILITY_NAMES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

/** The capabilities that matter for tracing, in the order the doctor shows them. */
export const TRACING_CAPABILITIES = [
  'CAP_SYS_ADMIN',
  'CAP_BPF',
  'CAP_PERFMON',
  'CAP_SYS_PTRACE',
  'CAP_DAC_OVERRIDE',
] as const;

/** Names of the capabilities set in a hexadecimal mask such as CapEff's `000001ffffffffff`. */
export function decodeCapabilities(mask: string): Set<string> {
  const names = new Set<string>();
  if (!/^[0-9a-fA-F]{1,16}$/.test(mask)) return names;
  const bits = BigInt(`0x${mask}`);
  for (let bit = 0; bit < 64; bit++) {
    if ((bits >> BigInt(bit)) & 1n) names.add(CAPABILITY_NAMES[bit] ?? `CAP_${bit}`);
  }
  return names;
}

/** The effective capabilities of this process (CapEff in /proc/self/status). */
export function effectiveCapabilities(host: Host = systemHost()): Set<string> {
  return cachedFor(host, 'capabilities', () => {
    const status = host.fs.readFile('/proc/self/status') ?? '';
    const mask = /^CapEff:\s*([0-9a-fA-F]+)\s*$/m.exec(status)?.[1];
    return mask === undefined ? new Set<string>() : decodeCapabilities(mask);
  });
}

/** Whether the effective user is root. */
export function isRoot(host: Host = systemHost()): boolean {
  return host.euid() === 0;
}

export interface KernelVersion {
  readonly major: number;
  readonly minor: number;
  readonly patch: number;
  /** The full release string (`6.18.44-fc-v669`). */
  readonly release: string;
}

/** Major, minor and patch of a kernel release string such as `6.1.0-18-amd64`. */
export function parseKernelRelease(release: string): KernelVersion | undefined {
  const m = /^(\d+)\.(\d+)(?:\.(\d+))?/.exec(release.trim());
  if (m === null) return undefined;
  return {
    major: Number(m[1]),
    minor: Number(m[2]),
    patch: m[3] === undefined ? 0 : Number(m[3]),
    release: release.trim(),
  };
}

/** The running kernel's version (uname release). */
export function kernelVersion(host: Host = systemHost()): KernelVersion {
  return cachedFor(host, 'kernel', () => {
    const release = host.kernelRelease();
    const version = parseKernelRelease(release);
    if (version === undefined) {
      throw new InternalError(
        `Cannot read the kernel version: release "${release}" has no major.minor`,
      );
    }
    return version;
  });
}
