import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { requireHost } from '../../../test/helpers/require-host.js';
import { ProbeError } from '../../errors/index.js';
import { call, exit, mov64Imm, mov64Reg } from './insn.js';
import { BpfMap, closeFd, loadProgram, uprobePmu, verifierReason } from './kernel.js';

test('a program the verifier refuses gives its reason in one line, and the whole log in the details', (t) => {
  if (!requireHost(t, { root: true })) return;
  // r2 is never written before it is read.
  assert.throws(
    () => loadProgram([mov64Reg(0, 2), exit()], { name: 'upscope_bad', purpose: 'a test' }),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_BPF_VERIFIER' &&
      err.message ===
        "Cannot load the BPF program for a test: the kernel's verifier refused it: R2 !read_ok" &&
      typeof err.details['verifierLog'] === 'string' &&
      (err.details['verifierLog'] as string).includes('R2 !read_ok'),
  );
});

test('a helper the kernel does not have is named as a missing kernel feature', (t) => {
  if (!requireHost(t, { root: true })) return;
  assert.throws(
    () =>
      loadProgram([call(9999), mov64Imm(0, 0), exit()], {
        name: 'upscope_bad',
        purpose: 'a test',
      }),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_NOT_SUPPORTED' &&
      /this kernel lacks the helper \S*9999/.test(err.message) &&
      err.hints.some((h) => h.includes('--engine')),
  );
});

test('a kernel without the perf uprobe PMU is named as the cause', () => {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-no-pmu-'));
  try {
    assert.throws(
      () => uprobePmu(dir),
      (err: unknown) =>
        err instanceof ProbeError &&
        err.code === 'ERR_NOT_SUPPORTED' &&
        err.message.startsWith(`Cannot use the perf uprobe PMU: ${dir} is missing or unreadable`) &&
        err.hints.some((h) => h.includes('CONFIG_UPROBE_EVENTS')),
    );
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test('the verifier’s reason is its last line before the summary', () => {
  const log = [
    '0: R1=ctx() R10=fp0',
    '0: (bf) r0 = r2',
    'R2 !read_ok',
    'processed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0',
  ].join('\n');
  assert.equal(verifierReason(log), 'R2 !read_ok');
  assert.equal(verifierReason(''), 'no reason given');
});

test('an element of a hash map is deleted (the kernel takes the key alone)', (t) => {
  if (!requireHost(t, { root: true })) return;
  const map = BpfMap.create({
    kind: 'hash',
    name: 'upscope_del',
    keyBytes: 4,
    valueBytes: 8,
    maxEntries: 4,
  });
  try {
    const key = new Uint8Array([1, 0, 0, 0]);
    map.update(key, new Uint8Array(8).fill(7));
    assert.deepEqual(map.lookup(key), new Uint8Array(8).fill(7));
    assert.equal(map.delete(key), true);
    assert.equal(map.lookup(key), undefined);
    assert.equal(map.delete(key), false, 'a key not there: false, not an error');
  } finally {
    map.close();
  }
});

test('a program loads under a sampling profiler (the verifier gives up at a signal pending for the thread)', async (t) => {
  if (!requireHost(t, { root: true })) return;
  // Long enough to verify that the profiler's SIGPROF comes meanwhile (every 100 us).
  const insns = [...Array.from({ length: 200_000 }, () => mov64Imm(0, 0)), exit()];
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 100 });
    await session.post('Profiler.start');
    for (let round = 0; round < 3; round++) {
      closeFd(loadProgram(insns, { name: 'upscope_profiled', purpose: 'a test' }));
    }
  } finally {
    await session.post('Profiler.stop');
    session.disconnect();
  }
});
