#!/usr/bin/env node
// The npm registry this project is built from serves only the Linux builds of some packages
// that ship one optional package per platform (biome's @biomejs/cli-win32-x64, ...). npm then
// leaves those optional packages out of package-lock.json, and `npm ci` refuses the lock file
// as out of sync. This adds a lock entry for each missing one, with the os/cpu its name says,
// so that npm ci skips it on Linux without fetching it. Run after `npm install` changes the lock.
import { readFileSync, writeFileSync } from 'node:fs';

const path = new URL('../package-lock.json', import.meta.url).pathname;
const lock = JSON.parse(readFileSync(path, 'utf8'));
const packages = lock.packages;
const PLATFORM =
  /-(win32|darwin|linux|android|freebsd|openbsd|netbsd|sunos|aix)-(x64|arm64|ia32|arm|ppc64|s390x|riscv64|loong64|mips64el)(-musl|-gnu|-msvc)?$/;
let added = 0;
for (const [key, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const where = `node_modules/${name}`;
    if (packages[where] !== undefined) continue;
    const match = PLATFORM.exec(name);
    if (match === null) {
      console.error(`lock-platforms: cannot tell the platform of ${name} (needed by ${key})`);
      process.exit(1);
    }
    packages[where] = {
      version,
      cpu: [match[2]],
      ...(entry.dev === true ? { dev: true } : {}),
      ...(match[3] === '-musl' ? { libc: ['musl'] } : {}),
      optional: true,
      os: [match[1]],
    };
    added++;
  }
}
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`lock-platforms: added ${added} platform-specific optional package entries`);
