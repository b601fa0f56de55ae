import assert from 'node:assert/strict';
import { constants } from 'node:os';
import { test } from 'node:test';
import { describeErrno, errnoName, errnoNumber } from './errno.js';

test('errnoName() names errno values given as errno or -errno', () => {
  assert.equal(errnoName(constants.errno.EPERM), 'EPERM');
  assert.equal(errnoName(-constants.errno.EBADF), 'EBADF');
  assert.equal(errnoName(524), 'ENOTSUPP');
  assert.equal(errnoName(100000), 'errno 100000');
});

test('describeErrno() gives the name and the meaning', () => {
  assert.match(describeErrno(-constants.errno.EPERM), /^EPERM \(.*not permitted\)$/i);
  assert.equal(describeErrno(-524), 'ENOTSUPP (Operation not supported by this kernel)');
});

test('errnoNumber() finds the number of a name', () => {
  assert.equal(errnoNumber('EACCES'), constants.errno.EACCES);
  assert.equal(errnoNumber('ENOTSUPP'), 524);
  assert.equal(errnoNumber('ENOPE'), undefined);
});
