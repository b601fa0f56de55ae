// The ranges the walker reads when the memory map is locked: a range as prefixes (pure), and
// the kernel's longest-prefix-match trie finding an address by them (root), as the walker's
// lookup key (every bit of the address) does.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { requireHost } from '../../../test/helpers/require-host.js';
import { BpfMap } from './kernel.js';
import { rangeKey, rangePrefixes, VMA_RANGE_KEY_BYTES } from './unwind-maps.js';

test('rangePrefixes() covers a range exactly, with aligned blocks, largest first', () => {
  const start = 0x5594_7b9f_7000n;
  const end = 0x5594_7ba0_2000n;
  const prefixes = rangePrefixes(start, end);
  assert.deepEqual(prefixes, [
    { base: 0x5594_7b9f_7000n, bits: 52 }, // 4 KiB
    { base: 0x5594_7b9f_8000n, bits: 49 }, // 32 KiB
    { base: 0x5594_7ba0_0000n, bits: 51 }, // 8 KiB
  ]);
  let at = start;
  for (const { base, bits } of prefixes) {
    const size = 1n << BigInt(64 - bits);
    assert.equal(base, at);
    assert.equal(base % size, 0n, 'aligned on its size');
    at += size;
  }
  assert.equal(at, end);
  assert.deepEqual(rangePrefixes(0n, 1n << 40n), [{ base: 0n, bits: 24 }]);
  assert.deepEqual(rangePrefixes(10n, 10n), []);
});

test('the kernel trie finds an address of a range by its prefixes, and nothing outside it', (t) => {
  if (!requireHost(t, { root: true })) return;
  const trie = BpfMap.create({
    kind: 'lpm-trie',
    name: 'test_ranges',
    keyBytes: VMA_RANGE_KEY_BYTES,
    valueBytes: 8,
    maxEntries: 64,
  });
  try {
    const value = (n: number) => new Uint8Array([n, 0, 0, 0, 0, 0, 0, 0]);
    for (const { base, bits } of rangePrefixes(0x7f00_0000_1000n, 0x7f00_0015_3000n)) {
      trie.update(rangeKey(42, base, bits), value(1));
    }
    for (const { base, bits } of rangePrefixes(0x7f00_0015_3000n, 0x7f00_0015_5000n)) {
      trie.update(rangeKey(42, base, bits), value(2));
    }
    const at = (pid: number, address: bigint) => trie.lookup(rangeKey(pid, address, 64))?.[0];
    assert.equal(at(42, 0x7f00_0000_1000n), 1);
    assert.equal(at(42, 0x7f00_0010_0abcn), 1);
    assert.equal(at(42, 0x7f00_0015_2fffn), 1);
    assert.equal(at(42, 0x7f00_0015_3000n), 2);
    assert.equal(at(42, 0x7f00_0015_4fffn), 2);
    assert.equal(at(42, 0x7f00_0000_0fffn), undefined);
    assert.equal(at(42, 0x7f00_0015_5000n), undefined);
    assert.equal(at(43, 0x7f00_0010_0000n), undefined, 'another process: nothing');
    // Taken out by the same prefixes (a delete gives the kernel the key alone).
    for (const { base, bits } of rangePrefixes(0x7f00_0015_3000n, 0x7f00_0015_5000n)) {
      assert.equal(trie.delete(rangeKey(42, base, bits)), true);
    }
    assert.equal(at(42, 0x7f00_0015_3000n), undefined);
    assert.equal(at(42, 0x7f00_0015_2fffn), 1);
  } finally {
    trie.close();
  }
});
