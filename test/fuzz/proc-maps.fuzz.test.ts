import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import { mappedObjects, parseProcMaps } from '../../src/symbols/index.js';
import { fuzz, isProbeError, mutatedText } from './harness.js';

// The /proc/PID/maps parser over this process's own maps text, damaged, and over lines built
// from the kernel's format (start-end perms offset major:minor inode path).

const hex = fc.oneof(
  fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((n) => n.toString(16)),
  fc.bigInt({ min: 2n ** 64n, max: 2n ** 80n }).map((n) => n.toString(16)),
  fc.constantFrom('', '0', 'g', '-1'),
);
const perms = fc
  .tuple(
    fc.constantFrom('r', '-', 'x'),
    fc.constantFrom('w', '-'),
    fc.constantFrom('x', '-'),
    fc.constantFrom('p', 's', '-'),
  )
  .map((p) => p.join(''));
const path = fc.oneof(
  fc.constantFrom(
    '',
    '/usr/lib/libc.so.6',
    '[heap]',
    '[vdso]',
    '/tmp/a (deleted)',
    '/tmp/a\\012b',
    ' ',
  ),
  fc.string({ maxLength: 20 }),
);
const line = fc
  .tuple(
    hex,
    hex,
    perms,
    hex,
    hex,
    hex,
    fc.oneof(fc.nat().map(String), fc.bigInt({ min: 0n, max: 2n ** 70n }).map(String)),
    path,
  )
  .map(
    ([start, end, p, offset, major, minor, inode, file]) =>
      `${start}-${end} ${p} ${offset} ${major}:${minor} ${inode}${file === '' ? '' : `  ${file}`}`,
  );
const generated = fc.array(line, { maxLength: 6 }).map((lines) => lines.join('\n'));

test('fuzz: the /proc/PID/maps parser throws only ERR_MAPS_INVALID', (t) => {
  const text = readFileSync('/proc/self/maps', 'utf8');
  const lines = text.split('\n');
  const seeds = [text, lines.slice(0, 8).join('\n'), ...lines.filter((l) => l !== '').slice(0, 40)];
  fuzz(t, {
    name: 'proc-maps',
    input: fc.oneof(mutatedText(seeds, '0123456789abcdef-: rwxps[]/\n'), generated),
    run: (input) => mappedObjects(parseProcMaps(input, { source: '/proc/1/maps' })),
    expected: isProbeError('ERR_MAPS_INVALID'),
    shortRuns: 1000,
  });
});
