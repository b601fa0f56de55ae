import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeError } from '../errors/index.js';
import { parseComparisonOrThrow, parseFetchOrThrow } from './parse-fetch.js';

test('one fetch on its own, with its type', () => {
  const fetch = parseFetchOrThrow('+8(arg0):u32', '--by');
  assert.equal(fetch.expr.kind, 'deref');
  assert.equal(fetch.type, 'u32');
  assert.equal(parseFetchOrThrow('retval:s64', '--by').expr.kind, 'retval');
});

test('a bad fetch names the option and points into its own text', () => {
  assert.throws(
    () => parseFetchOrThrow('arg0:u33', '--by'),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.source?.text === 'arg0:u33' &&
      err.source.span.start >= 4 &&
      !err.message.includes('_:_'),
  );
  assert.throws(
    () => parseFetchOrThrow('arg0 arg1', '--by'),
    (err: unknown) => err instanceof ProbeError && /give one value/.test(err.message),
  );
});

test("a fetch's spans are ranges in the text given, or in the whole text it is part of", () => {
  // A variable's span is where a later error (not visible there) puts its caret.
  const alone = parseFetchOrThrow('foo', '--by');
  assert.equal(alone.expr.kind, 'variable');
  assert.deepEqual(alone.expr.span, { start: 0, end: 3 });
  const part = parseFetchOrThrow('+8(foo)', '--by', { text: 'comm, +8(foo)', offset: 6 });
  assert.equal(part.expr.kind, 'deref');
  if (part.expr.kind !== 'deref') return;
  assert.deepEqual(part.expr.inner.span, { start: 9, end: 12 });
  assert.equal('comm, +8(foo)'.slice(9, 12), 'foo');
  const compared = parseComparisonOrThrow('bar > 1', '--filter');
  assert.deepEqual(compared.fetch.expr.span, { start: 0, end: 3 });
  assert.throws(
    () => parseFetchOrThrow('ar(g', '--by', { text: 'comm,ar(g', offset: 5 }),
    (err: unknown) =>
      err instanceof ProbeError && err.source?.text === 'comm,ar(g' && err.source.span.start === 7,
  );
});

test('comparisons: value, operator and number, hex and negative numbers too', () => {
  const c = parseComparisonOrThrow('retval:s32 < -1', '--filter');
  assert.deepEqual([c.fetch.expr.kind, c.fetch.type, c.op, c.value], ['retval', 's32', '<', -1n]);
  assert.equal(parseComparisonOrThrow('arg1>=0x10', '--filter').value, 16n);
  assert.throws(
    () => parseComparisonOrThrow('arg0 ~ 3', '--filter'),
    (err: unknown) => err instanceof ProbeError && err.code === 'ERR_USAGE',
  );
});
