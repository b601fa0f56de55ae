import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { requireHost } from '../../test/helpers/require-host.js';
import { tool } from '../../test/helpers/tools.js';
import { globToRegExp, isGlob } from './index.js';

const PATTERNS = [
  'mall*',
  '*alloc',
  'str[cn]py',
  'str[cn]*py',
  '?',
  '??',
  '[a-z]*',
  '[!_]*',
  '[^_]*',
  '[]x]',
  '[!]x]',
  '[a-]',
  '[-a]',
  'a[b',
  '*.*',
  'x$y*',
  'a+b',
  'f?o',
  '**',
  'ns::*',
  '(a)|b',
  '[.]*',
  'a{1,2}',
  '^x$',
  '[z-a]',
  '[!z-a]',
  '[a-cx-z]*',
];
const NAMES = [
  'malloc',
  'calloc',
  'strcpy',
  'strnpy',
  'strncpy',
  'strcxpy',
  'x',
  '',
  '_x',
  'ab',
  ']',
  'a[b',
  'a.b',
  'x$y',
  'x$yz',
  'a+b',
  'aab',
  'foo',
  '-',
  'a',
  'ns::f',
  '(a)|b',
  '.x',
  'a{1,2}',
  'a1',
  '^x$',
  'fo\no',
];

describe('isGlob()', () => {
  test('is true exactly when the text has *, ? or [', () => {
    assert.deepEqual(['mall*', 'f?o', 'str[cn]py', 'malloc', 'ns::f', 'a]b', 'x$y'].map(isGlob), [
      true,
      true,
      true,
      false,
      false,
      false,
      false,
    ]);
  });
});

describe('globToRegExp()', () => {
  test('matches the way bash matches the same patterns (LC_ALL=C)', (t) => {
    if (!requireHost(t, { commands: ['bash'] })) return;
    const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    const lines = ['shopt -u extglob'];
    for (const p of PATTERNS) {
      for (const n of NAMES) lines.push(`p=${q(p)}; n=${q(n)}; [[ $n == $p ]] && echo 1 || echo 0`);
    }
    const out = tool('env', ['LC_ALL=C', 'bash', '-c', lines.join('\n')])
      .trim()
      .split('\n');
    let k = 0;
    for (const p of PATTERNS) {
      const re = globToRegExp(p);
      for (const n of NAMES) {
        assert.equal(
          re.test(n),
          out[k] === '1',
          `pattern ${JSON.stringify(p)} on ${JSON.stringify(n)}`,
        );
        k++;
      }
    }
  });

  test('is anchored at both ends', () => {
    assert.equal(globToRegExp('alloc').test('malloc'), false);
    assert.equal(globToRegExp('mall').test('malloc'), false);
    assert.equal(globToRegExp('malloc').test('malloc'), true);
  });

  test('never builds an invalid expression: a backwards range matches nothing', () => {
    assert.equal(globToRegExp('[z-a]').test('m'), false);
    assert.equal(globToRegExp('[!z-a]').test('m'), true);
    assert.equal(globToRegExp('[\\]').test('\\'), true);
  });
});
