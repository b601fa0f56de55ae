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

test('comparisons: value, operator and number, hex and negative numbers too', () => {
  const c = parseComparisonOrThrow('retval:s32 < -1', '--filter');
  assert.deepEqual([c.fetch.expr.kind, c.fetch.type, c.op, c.value], ['retval', 's32', '<', -1n]);
  assert.equal(parseComparisonOrThrow('arg1>=0x10', '--filter').value, 16n);
  assert.throws(
    () => parseComparisonOrThrow('arg0 ~ 3', '--filter'),
    (err: unknown) => err instanceof ProbeError && err.code === 'ERR_USAGE',
  );
});
