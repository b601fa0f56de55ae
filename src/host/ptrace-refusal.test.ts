import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeHost, ROOT_STATUS, USER_STATUS } from './fake-host.test.js';
import { isKernelThread, ptraceRefusal, tracerOf } from './ptrace-refusal.js';

const STAT = (flags: number) => `42 (my app) S 1 42 42 0 -1 ${flags} 100 0 0 0`;

test('tracerOf() names the process in TracerPid, and nothing when it is 0', () => {
  const host = fakeHost({
    files: {
      '/proc/42/status': 'Name:\tapp\nTracerPid:\t77\n',
      '/proc/77/comm': 'gdb\n',
      '/proc/43/status': 'Name:\tapp\nTracerPid:\t0\n',
    },
  });
  assert.deepEqual(tracerOf(42, host), { pid: 77, comm: 'gdb' });
  assert.equal(tracerOf(43, host), undefined);
  assert.equal(tracerOf(44, host), undefined, 'gone');
});

test('isKernelThread() reads PF_KTHREAD after a name with spaces and parentheses', () => {
  const host = fakeHost({
    files: {
      '/proc/2/stat': '2 (kthreadd) S 0 0 0 0 -1 2129984 0 0',
      '/proc/42/stat': STAT(4194560),
      '/proc/43/stat': '43 (a) b (c) S 1 43 43 0 -1 4194560 1',
    },
  });
  assert.equal(isKernelThread(2, host), true);
  assert.equal(isKernelThread(42, host), false);
  assert.equal(isKernelThread(43, host), false);
});

test('ptraceRefusal() blames privileges only when they are the cause', () => {
  const base = { '/proc/42/stat': STAT(4194560), '/proc/42/status': 'TracerPid:\t0\n' };
  const traced = fakeHost({
    files: {
      ...base,
      '/proc/42/status': 'TracerPid:\t77\n',
      '/proc/77/comm': 'strace\n',
      '/proc/self/status': ROOT_STATUS,
    },
  });
  assert.deepEqual(ptraceRefusal(42, traced), {
    kind: 'traced',
    tracer: { pid: 77, comm: 'strace' },
  });
  const kernel = fakeHost({ files: { ...base, '/proc/42/stat': STAT(0x00200040) } });
  assert.deepEqual(ptraceRefusal(42, kernel), { kind: 'kernel-thread' });
  const yama3 = fakeHost({
    files: {
      ...base,
      '/proc/sys/kernel/yama/ptrace_scope': '3\n',
      '/proc/self/status': ROOT_STATUS,
    },
  });
  assert.deepEqual(ptraceRefusal(42, yama3), { kind: 'yama-admin-only' });
  const user = fakeHost({
    uid: 1000,
    files: {
      ...base,
      '/proc/sys/kernel/yama/ptrace_scope': '1\n',
      '/proc/self/status': USER_STATUS,
    },
  });
  assert.deepEqual(ptraceRefusal(42, user), { kind: 'privileges', yamaScope: 1 });
  const noYama = fakeHost({ uid: 1000, files: { ...base, '/proc/self/status': USER_STATUS } });
  assert.deepEqual(ptraceRefusal(42, noYama), { kind: 'privileges', yamaScope: undefined });
  const root = fakeHost({ files: { ...base, '/proc/self/status': ROOT_STATUS } });
  assert.deepEqual(ptraceRefusal(42, root), { kind: 'unknown' });
});
