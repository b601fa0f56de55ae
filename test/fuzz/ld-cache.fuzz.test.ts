import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parseLdCacheFile } from '../../src/symbols/index.js';
import { type ByteSeed, fuzz, isProbeError, mutatedBytes } from './harness.js';

// The ld.so.cache reader over damaged copies of this machine's /etc/ld.so.cache (the header,
// the entry table after it, and the string table are all in reach of the mutations).

test('fuzz: the ld.so.cache reader throws only ERR_LDCACHE_INVALID', (t) => {
  const path = '/etc/ld.so.cache';
  if (!existsSync(path)) {
    t.skip(`needs ${path}`);
    return;
  }
  const bytes = readFileSync(path);
  // The header and the first entries, then the rest where the strings are.
  const seeds: ByteSeed[] = [
    {
      label: path,
      bytes,
      hotspots: [
        [0, 256],
        [0, 48],
        [bytes.length - 256, bytes.length],
      ],
    },
    { label: `${path} cut to 4 KiB`, bytes: bytes.subarray(0, 4096), hotspots: [[0, 256]] },
  ];
  fuzz(t, {
    name: 'ld-cache',
    input: mutatedBytes(seeds),
    run: (input) => {
      const cache = parseLdCacheFile(input);
      for (const entry of cache.entries) void entry.path;
    },
    expected: isProbeError('ERR_LDCACHE_INVALID'),
    shortRuns: 300,
  });
});
