import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fakeHost } from './fake-host.test.js';
import {
  CAPABILITY_NAMES,
  decodeCapabilities,
  effectiveCapabilities,
  isRoot,
  kernelVersion,
  parseKernelRelease,
} from './identity.js';

const CAPABILITY_HEADER = '/usr/include/linux/capability.h';

test('CAPABILITY_NAMES numbers capabilities as linux/capability.h does', (t) => {
  if (!existsSync(CAPABILITY_HEADER)) {
    t.skip(`no ${CAPABILITY_HEADER}`);
    return;
  }
  const header = readFileSync(CAPABILITY_HEADER, 'utf8');
  const defined = [...header.matchAll(/^#define (CAP_[A-Z_]+)\s+(\d+)\s*$/gm)];
  assert.ok(defined.length >= 38);
  for (const [, name, bit] of defined) assert.equal(CAPABILITY_NAMES[Number(bit)], name);
});

test('decodeCapabilities() names the bits of a CapEff mask', () => {
  assert.equal(decodeCapabilities('000001ffffffffff').size, 41);
  assert.deepEqual(
    [...decodeCapabilities('0000000000280000')],
    ['CAP_SYS_PTRACE', 'CAP_SYS_ADMIN'],
  );
  assert.deepEqual([...decodeCapabilities('000000c000000000')], ['CAP_PERFMON', 'CAP_BPF']);
  assert.deepEqual([...decodeCapabilities('0')], []);
  assert.deepEqual([...decodeCapabilities('8000000000000000')], ['CAP_63']);
  assert.deepEqual([...decodeCapabilities('not hex')], []);
});

test('effectiveCapabilities() reads CapEff from /proc/self/status', () => {
  const host = fakeHost({
    files: {
      '/proc/self/status': 'Name:\tx\nCapPrm:\t0000000000200000\nCapEff:\t0000008000000000\n',
    },
  });
  assert.deepEqual([...effectiveCapabilities(host)], ['CAP_BPF']);
  assert.deepEqual([...effectiveCapabilities(fakeHost({ files: {} }))], []);
});

test('effectiveCapabilities() of this process matches its CapEff line', () => {
  const line = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]!;
  const bits = [...BigInt(`0x${line}`).toString(2)].filter((b) => b === '1').length;
  assert.equal(effectiveCapabilities().size, bits);
});

test('isRoot() looks at the effective uid', () => {
  assert.equal(isRoot(fakeHost({ uid: 1000, euid: 0 })), true);
  assert.equal(isRoot(fakeHost({ uid: 0, euid: 1000 })), false);
});

test('parseKernelRelease() reads major, minor and patch', () => {
  assert.deepEqual(parseKernelRelease('6.18.44-fc-v669'), {
    major: 6,
    minor: 18,
    patch: 44,
    release: '6.18.44-fc-v669',
  });
  assert.deepEqual(parseKernelRelease('6.1.0-18-amd64'), {
    major: 6,
    minor: 1,
    patch: 0,
    release: '6.1.0-18-amd64',
  });
  assert.deepEqual(parseKernelRelease('5.15'), { major: 5, minor: 15, patch: 0, release: '5.15' });
  assert.equal(parseKernelRelease('linux'), undefined);
});

test('kernelVersion() is the version uname -r prints', () => {
  const release = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  const v = kernelVersion();
  assert.equal(v.release, release);
  assert.ok(release.startsWith(`${v.major}.${v.minor}`));
});
