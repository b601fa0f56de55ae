import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';

/**
 * The Debian package that installed `path`, from `dpkg -S`; undefined when dpkg is absent or no
 * package owns it. On a merged-/usr system dpkg records /bin and /lib paths while the real path
 * is under /usr, so both spellings are asked.
 */
export function owningPackage(path: string): string | undefined {
  const names = new Set<string>([path]);
  try {
    names.add(realpathSync(path));
  } catch {
    // The path itself is still worth asking about.
  }
  for (const name of [...names]) {
    const merged = /^\/usr(\/(?:bin|sbin|lib|lib32|lib64|libx32)\/.*)$/.exec(name);
    if (merged !== null) names.add(merged[1]!);
  }
  const result = spawnSync('dpkg', ['-S', ...names], { encoding: 'utf8', timeout: 10_000 });
  if (result.error !== undefined || typeof result.stdout !== 'string') return undefined;
  for (const line of result.stdout.split('\n')) {
    // "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6", "coreutils: /bin/ls"; diversions start
    // with "diversion by".
    const m = /^([^\s:,][^\s,]*?)(?::[a-z0-9]+)?(?:, [^:]+)?: (\/.*)$/.exec(line);
    if (m !== null && !line.startsWith('diversion ') && names.has(m[2]!)) return m[1];
  }
  return undefined;
}

/** The Debian package of `owner`'s separate debug info (from the debian-debug archive). */
export function debugPackageName(owner: string): string {
  return `${owner}-dbgsym`;
}
