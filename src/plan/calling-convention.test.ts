import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type FetchArg, parseSpecOrThrow, printFetchExpr } from '../spec/index.js';
import { type CallingConvention, lowerForConvention } from './calling-convention.js';

const SYSV: CallingConvention = { kind: 'sysv', why: '' };
const GO: CallingConvention = { kind: 'go-register', goVersion: 'go1.19', why: '' };
const GO_STACK: CallingConvention = { kind: 'go-stack', goVersion: 'go1.16', why: '' };

function fetches(text: string): readonly FetchArg[] {
  return parseSpecOrThrow(`r:./app:f ${text}`).fetches;
}

function lowered(text: string, convention: CallingConvention): string[] {
  return fetches(text).map((f) => printFetchExpr(lowerForConvention(f, convention, text).expr));
}

test("lowerForConvention() reads argN in Go's registers, then on the stack after the return address", () => {
  assert.deepEqual(lowered('arg0 arg1 arg2 arg3 arg4 arg5 arg6 arg7 arg8 arg9 arg10', GO), [
    '%rax',
    '%rbx',
    '%rcx',
    '%rdi',
    '%rsi',
    '%r8',
    '%r9',
    '%r10',
    '%r11',
    '+8(sp)',
    '+16(sp)',
  ]);
  assert.deepEqual(lowered('arg0 arg2 x=+8(arg1):u32', GO_STACK), [
    '+8(sp)',
    '+24(sp)',
    '+8(+16(sp))',
  ]);
  // The C ABI's argN is left for every engine to read as it does.
  assert.deepEqual(lowered('arg0 arg7', SYSV), ['arg0', 'arg7']);
});

test('lowerForConvention() reads retvalN in the result registers of the convention', () => {
  assert.deepEqual(lowered('retval retval1 retval2 retval8', GO), [
    'retval',
    '%rbx',
    '%rcx',
    '%r11',
  ]);
  assert.deepEqual(lowered('retval retval1', SYSV), ['retval', '%rdx']);
  assert.throws(() => lowered('retval2', SYSV), /the C ABI returns at most two registers/);
  assert.throws(() => lowered('retval', GO_STACK), /its results are on the stack/);
});
