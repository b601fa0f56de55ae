import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { grouped } from './grouped.js';

describe('grouped()', () => {
  it('writes integers as toLocaleString("en-US") does', () => {
    for (const n of [
      0,
      7,
      12,
      999,
      1000,
      48414,
      119751,
      1000000,
      2 ** 53 - 1,
      -5,
      -1234,
      -999999,
    ]) {
      assert.equal(grouped(n), n.toLocaleString('en-US'), String(n));
    }
  });

  it('leaves fractions and huge numbers to toLocaleString()', () => {
    assert.equal(grouped(1234.5), (1234.5).toLocaleString('en-US'));
    assert.equal(grouped(2 ** 60), (2 ** 60).toLocaleString('en-US'));
  });
});
