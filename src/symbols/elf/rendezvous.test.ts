import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AT_BASE,
  DT,
  findDebugEntry,
  LINK_MAP_BYTES,
  parseAuxv,
  parseLinkMapEntry,
  parseRDebug,
  R_DEBUG_BYTES,
  rendezvousState,
  walkLinkMap,
} from './index.js';

// Layouts from glibc's <link.h> for x86-64 (struct r_debug, struct link_map) and <elf.h>
// (Elf64_Dyn, Elf64_auxv_t), written out field by field.

function words(values: readonly bigint[]): Uint8Array {
  const bytes = new Uint8Array(values.length * 8);
  const view = new DataView(bytes.buffer);
  for (const [i, value] of values.entries()) {
    view.setBigUint64(i * 8, BigInt.asUintN(64, value), true);
  }
  return bytes;
}

/** struct r_debug: int r_version (padded), r_map, r_brk, int r_state (padded), r_ldbase. */
function rDebug(version: number, map: bigint, brk: bigint, state: number, ldbase: bigint) {
  return words([BigInt(version), map, brk, BigInt(state), ldbase]);
}

describe('parseRDebug()', () => {
  test('reads each field of struct r_debug', () => {
    const parsed = parseRDebug(
      rDebug(1, 0x7f00_0000_1190n, 0x7f00_0000_2060n, 0, 0x7f00_0000_0000n),
    );
    assert.deepEqual(parsed, {
      version: 1,
      map: 0x7f00_0000_1190n,
      brk: 0x7f00_0000_2060n,
      state: 'consistent',
      ldbase: 0x7f00_0000_0000n,
    });
    assert.equal(parseRDebug(rDebug(1, 0n, 0n, 1, 0n)).state, 'add');
    assert.equal(parseRDebug(rDebug(1, 0n, 0n, 2, 0n)).state, 'delete');
  });

  test('reads r_state as a 32-bit enum, whatever the padding after it holds', () => {
    const bytes = rDebug(1, 0n, 0n, 2, 0n);
    new DataView(bytes.buffer).setUint32(28, 0xdeadbeef, true);
    assert.equal(parseRDebug(bytes).state, 'delete');
    assert.equal(rendezvousState(7), 'unknown');
  });

  test('refuses fewer bytes than the structure has', () => {
    assert.throws(() => parseRDebug(new Uint8Array(R_DEBUG_BYTES - 1)), RangeError);
  });
});

describe('link maps', () => {
  test('parseLinkMapEntry() reads l_addr, l_name, l_ld, l_next, l_prev', () => {
    assert.deepEqual(parseLinkMapEntry(words([0x7f10_0000n, 0x5000n, 0x7f10_3e00n, 0x6000n, 0n])), {
      addr: 0x7f10_0000n,
      name: 0x5000n,
      ld: 0x7f10_3e00n,
      next: 0x6000n,
      prev: 0n,
    });
    assert.throws(() => parseLinkMapEntry(new Uint8Array(LINK_MAP_BYTES - 8)), RangeError);
  });

  test('walkLinkMap() follows l_next to the end, and stops at a loop', () => {
    const memory = new Map<bigint, Uint8Array>([
      [0x1000n, words([0n, 0x9000n, 0x3e00n, 0x2000n, 0n])],
      [0x2000n, words([0x7f00n, 0x9100n, 0x7f3en, 0x3000n, 0x1000n])],
      [0x3000n, words([0x8f00n, 0x9200n, 0x8f3en, 0n, 0x2000n])],
    ]);
    const read = (vaddr: bigint, length: number) => memory.get(vaddr)!.subarray(0, length);
    assert.deepEqual(
      walkLinkMap(read, 0x1000n).map((e) => e.addr),
      [0n, 0x7f00n, 0x8f00n],
    );
    memory.set(0x3000n, words([0x8f00n, 0x9200n, 0x8f3en, 0x1000n, 0x2000n]));
    assert.equal(walkLinkMap(read, 0x1000n).length, 3, 'a loop back to the first entry ends');
    assert.equal(walkLinkMap(read, 0x1000n, 2).length, 2, 'at most the limit');
    assert.deepEqual(walkLinkMap(read, 0n), []);
  });
});

describe('findDebugEntry()', () => {
  test('gives the value of DT_DEBUG and where that value is in the array', () => {
    const dynamic = words([
      DT.NEEDED,
      1n,
      DT.STRTAB,
      0x4a8n,
      DT.DEBUG,
      0x7f00_0003_4118n,
      DT.NULL,
      0n,
    ]);
    assert.deepEqual(findDebugEntry(dynamic), { at: 40, value: 0x7f00_0003_4118n });
  });

  test('gives 0 before ld.so has set it, and undefined without the entry', () => {
    assert.deepEqual(findDebugEntry(words([DT.DEBUG, 0n, DT.NULL, 0n])), { at: 8, value: 0n });
    assert.equal(findDebugEntry(words([DT.SONAME, 5n, DT.NULL, 0n, DT.DEBUG, 9n])), undefined);
  });
});

describe('parseAuxv()', () => {
  test('reads type and value pairs up to AT_NULL', () => {
    const auxv = parseAuxv(
      words([33n, 0x7ffd_0000n, AT_BASE, 0x7f00_0000_0000n, 0n, 0n, 6n, 4096n]),
    );
    assert.equal(auxv.get(AT_BASE), 0x7f00_0000_0000n);
    assert.equal(auxv.get(33n), 0x7ffd_0000n);
    assert.equal(auxv.has(6n), false, 'nothing after AT_NULL');
  });
});
