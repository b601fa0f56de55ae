import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { closest, didYouMean, levenshtein } from './suggest.js';

describe('levenshtein()', () => {
  it('counts insertions, deletions and substitutions', () => {
    // Textbook values.
    assert.equal(levenshtein('kitten', 'sitting'), 3);
    assert.equal(levenshtein('flaw', 'lawn'), 2);
    assert.equal(levenshtein('', 'abc'), 3);
    assert.equal(levenshtein('abc', ''), 3);
    assert.equal(levenshtein('same', 'same'), 0);
    assert.equal(levenshtein('libpthred', 'libpthread'), 1);
  });

  it('is symmetric', () => {
    const words = ['malloc', 'calloc', 'realloc', 'free', '', 'm'];
    for (const a of words)
      for (const b of words) assert.equal(levenshtein(a, b), levenshtein(b, a));
  });

  it('stops early past max and reports max + 1', () => {
    assert.equal(levenshtein('aaaaaaaa', 'bbbbbbbb', 2), 3);
    assert.equal(levenshtein('a', 'abcdefgh', 2), 3);
    assert.equal(levenshtein('kitten', 'sitting', 3), 3);
  });
});

describe('closest()', () => {
  it('returns the nearest candidates first and drops far ones', () => {
    const names = ['libffi', 'libz', 'libpthread', 'libm', 'libcrypt'];
    assert.deepEqual(closest('libpthred', names), ['libpthread']);
    assert.deepEqual(closest('libfi', names), ['libffi']);
    assert.deepEqual(closest('nothing-like-these', names), []);
  });

  it('ignores the name itself and duplicates and honours n', () => {
    assert.deepEqual(closest('malloc', ['malloc', 'calloc', 'calloc', 'malloc2', 'xalloc'], 2), [
      'malloc2',
      'calloc',
    ]);
  });

  it('prefers a longer common prefix among equally distant candidates', () => {
    assert.deepEqual(closest('libfoo', ['libgio', 'libffi', 'libform'], 3), [
      'libform',
      'libffi',
      'libgio',
    ]);
  });

  it('suggests a candidate that differs only in case', () => {
    assert.deepEqual(closest('MAIN', ['main', 'rain']), ['main']);
  });
});

describe('didYouMean()', () => {
  it('formats one or several suggestions as a hint', () => {
    assert.equal(didYouMean([]), undefined);
    assert.equal(didYouMean(['libffi']), 'Did you mean "libffi"?');
    assert.equal(didYouMean(['a', 'b', 'c']), 'Did you mean "a", "b" or "c"?');
  });
});
