import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { test } from 'node:test';
import { runFreshProcess } from '../../test/helpers/fresh-process.js';
import { requireHost } from '../../test/helpers/require-host.js';
import { ProbeError } from '../errors/index.js';
import { mapCreateAttr } from './bpf-attr.js';
import { BPF_CMD, BPF_MAP_TYPE } from './constants.js';
import { loadNative, loadNativeWith } from './load.js';

const realRequire = createRequire(import.meta.url);

test('importing the native folder does not load koffi', () => {
  const printed = runFreshProcess([
    "const native = await import('./src/native/index.ts');",
    'const before = native.isNativeLoaded();',
    "const koffiBefore = Object.keys((await import('node:module')).createRequire(import.meta.url).cache).some((k) => k.includes('/koffi/'));",
    'native.loadNative();',
    'console.log(JSON.stringify([before, koffiBefore, native.isNativeLoaded()]));',
  ]);
  assert.deepEqual(printed, [false, false, true]);
});

test('loadNativeWith() refuses anything but Linux x86-64', () => {
  for (const [platform, arch] of [
    ['darwin', 'x64'],
    ['linux', 'arm64'],
    ['win32', 'x64'],
  ]) {
    assert.throws(
      () =>
        loadNativeWith({
          platform: platform!,
          arch: arch!,
          require: realRequire,
          libraries: ['libc.so.6'],
        }),
      (err: unknown) =>
        err instanceof ProbeError &&
        err.code === 'ERR_NOT_SUPPORTED_ON_OS' &&
        err.message.includes(`${platform}/${arch}`),
    );
  }
});

test('loadNativeWith() lists everything it tried when koffi cannot be loaded', () => {
  assert.throws(
    () =>
      loadNativeWith({
        platform: 'linux',
        arch: 'x64',
        require: () => {
          throw new Error("Cannot find module 'koffi'");
        },
        libraries: ['libc.so.6'],
      }),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_NATIVE_UNAVAILABLE' &&
      err.message === "Cannot load the native syscall layer: koffi: Cannot find module 'koffi'" &&
      err.hints.length > 0,
  );
});

test('loadNativeWith() lists every C library it could not open', () => {
  assert.throws(
    () =>
      loadNativeWith({
        platform: 'linux',
        arch: 'x64',
        require: realRequire,
        libraries: ['libnope-1.so', 'libnope-2.so'],
      }),
    (err: unknown) =>
      err instanceof ProbeError &&
      err.code === 'ERR_NATIVE_UNAVAILABLE' &&
      /libnope-1\.so: .*; libnope-2\.so: /.test(err.message) &&
      (err.details['tried'] as string[]).length === 2,
  );
});

test('loadNative() returns the kernel’s -errno from a failing syscall', () => {
  const native = loadNative();
  assert.equal(loadNative(), native, 'the binding is cached');
  assert.equal(native.close(-1), -constants.errno.EBADF);
  assert.equal(native.getErrno(), constants.errno.EBADF);
  // An unknown bpf command: EINVAL (or EPERM when BPF is closed to this user).
  const result = native.bpf(0x7fff, new Uint8Array(8));
  assert.ok(
    result === -constants.errno.EINVAL || result === -constants.errno.EPERM,
    String(result),
  );
});

test('loadNative() creates and closes a BPF array map as root', (t) => {
  if (!requireHost(t, { root: true })) return;
  const native = loadNative();
  const attr = mapCreateAttr({
    mapType: BPF_MAP_TYPE.BPF_MAP_TYPE_ARRAY,
    keySizeBytes: 4,
    valueSizeBytes: 8,
    maxEntries: 1,
    name: 'upscope_test',
  });
  const fd = native.bpf(BPF_CMD.BPF_MAP_CREATE, attr);
  assert.ok(fd >= 0, `bpf(BPF_MAP_CREATE) returned ${fd}`);
  assert.equal(native.close(fd), 0);
});
