import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeError } from '../errors/index.js';
import { type SkippedSite, skipCounts, skipSummary } from './skipped-sites.js';

function skipped(reason: string, n: number): SkippedSite[] {
  return Array.from({ length: n }, (_, i) => ({
    spec: './app:f*',
    target: './app',
    symbol: `f${i}`,
    vaddr: BigInt(0x1000 + i),
    reason,
    error: new ProbeError('ERR_UNPROBEABLE_INSTRUCTION', 'Cannot place probe'),
  }));
}

test('skipCounts() counts each reason, most first, ties by name', () => {
  const sites = [...skipped('lock prefix', 3), ...skipped('int3', 1), ...skipped('hlt', 1)];
  assert.equal(skipCounts(sites), 'lock prefix 3, hlt 1, int3 1');
});

test('skipSummary() says how many of all the sites were skipped, and where to see them', () => {
  assert.equal(skipSummary([], 10), undefined);
  const sites = [...skipped('lock prefix', 9), ...skipped('cs prefix', 1_003)];
  assert.equal(
    skipSummary(sites, 20_333),
    '1,012 of 21,345 sites skipped: cs prefix 1,003, lock prefix 9; upscope resolve lists them',
  );
  assert.match(skipSummary(sites, 1, 'ptrace')!, /; upscope resolve --engine ptrace lists them$/);
});
