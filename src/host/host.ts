/**
 * The boundary between upscope and the machine it runs on: the files of /proc and /sys, who
 * we are, the kernel release, and the two actions the environment probes take (mounting
 * tracefs, trying a BPF syscall). Everything in host/ goes through a `Host`, so unit tests
 * can describe a machine with a few fake files.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { release, userInfo } from 'node:os';
import { ProbeError, quote } from '../errors/index.js';
import {
  BPF_CMD,
  BPF_MAP_TYPE,
  describeErrno,
  loadNative,
  mapCreateAttr,
} from '../native/index.js';

export interface HostFs {
  /** The text of a file, or undefined when it does not exist or cannot be read. */
  readFile(path: string): string | undefined;
  exists(path: string): boolean;
  /** Whether this process may read or write the file (access(2)); false when missing. */
  access(path: string, mode: 'read' | 'write'): boolean;
}

export interface Host {
  readonly fs: HostFs;
  uid(): number;
  euid(): number;
  /** The name of the effective user, when the user database has one. */
  userName(): string | undefined;
  /** The kernel release, as `uname -r` prints it. */
  kernelRelease(): string;
  /** Mount tracefs at `target`; throws ProbeError ERR_TRACEFS_NOT_MOUNTED when it cannot. */
  mountTracefs(target: string): void;
  /**
   * Create a one-entry BPF array map and close it: 0 when that worked, else `-errno`. Throws
   * ProbeError when the native layer cannot be loaded.
   */
  tryBpfMapCreate(): number;
}

const systemFs: HostFs = {
  readFile(path) {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  },
  exists: (path) => existsSync(path),
  access(path, mode) {
    try {
      accessSync(path, mode === 'write' ? constants.W_OK : constants.R_OK);
      return true;
    } catch {
      return false;
    }
  },
};

function mountWithCommand(target: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tracefs', 'nodev', target], { stdio: 'pipe' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false; // no mount(8)
    const stderr = String((err as { stderr?: unknown }).stderr ?? '').trim();
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      `Cannot mount tracefs at ${quote(target)}: ${stderr === '' ? (err as Error).message : stderr}`,
      { cause: err, hints: [`mount -t tracefs nodev ${target}`] },
    );
  }
}

function mountWithSyscall(target: string): void {
  const result = loadNative().mount('nodev', target, 'tracefs', 0, null);
  if (result < 0) {
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      `Cannot mount tracefs at ${quote(target)}: mount(2) failed with ${describeErrno(result)}`,
      { hints: [`mount -t tracefs nodev ${target}`] },
    );
  }
}

let system: Host | undefined;

/** The machine upscope runs on. */
export function systemHost(): Host {
  system ??= {
    fs: systemFs,
    uid: () => process.getuid?.() ?? -1,
    euid: () => process.geteuid?.() ?? -1,
    userName() {
      try {
        return userInfo().username;
      } catch {
        return undefined;
      }
    },
    kernelRelease: () => release(),
    mountTracefs(target) {
      // mount(8) first, so that mounting does not load the native layer; mount(2) without it.
      if (!mountWithCommand(target)) mountWithSyscall(target);
    },
    tryBpfMapCreate() {
      const native = loadNative();
      const attr = mapCreateAttr({
        mapType: BPF_MAP_TYPE.BPF_MAP_TYPE_ARRAY,
        keySizeBytes: 4,
        valueSizeBytes: 8,
        maxEntries: 1,
        name: 'upscope_probe',
      });
      const fd = native.bpf(BPF_CMD.BPF_MAP_CREATE, attr);
      if (fd < 0) return fd;
      native.close(fd);
      return 0;
    },
  };
  return system;
}

const caches = new WeakMap<Host, Map<string, unknown>>();

/** A value computed once per host (the system host lives as long as the process). */
export function cachedFor<T>(host: Host, key: string, compute: () => T): T {
  let cache = caches.get(host);
  if (cache === undefined) {
    cache = new Map();
    caches.set(host, cache);
  }
  if (!cache.has(key)) cache.set(key, compute());
  return cache.get(key) as T;
}

/** Forget a cached value (after the machine changed, e.g. tracefs was mounted). */
export function forgetFor(host: Host, key: string): void {
  caches.get(host)?.delete(key);
}
