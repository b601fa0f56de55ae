// Seccomp filters run as the kernel runs them (Documentation/userspace-api/seccomp_filter.rst:
// every filter, the action of highest precedence taken). The filters are written as libseccomp
// and OpenSSH write theirs; what the kernel does with them is checked on real processes in
// faults-ptrace.int.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AUDIT_ARCH_X86_64,
  allows,
  decodeFilter,
  describeVerdict,
  runFilter,
  SECCOMP_RET,
  type SockFilter,
  seccompVerdict,
} from './seccomp.js';

const LD_ABS = 0x20;
const JEQ = 0x15;
const JSET = 0x45;
const RET = 0x06;
const stmt = (code: number, k: number): SockFilter => ({ code, jt: 0, jf: 0, k });
const jump = (code: number, k: number, jt: number, jf: number): SockFilter => ({ code, jt, jf, k });

const NR = 0;
const ARCH = 4;
const ARG2 = 16 + 2 * 8;
const call = (nr: number, args: bigint[] = [], arch = AUDIT_ARCH_X86_64) => ({
  nr,
  arch,
  instructionPointer: 0x7f00_0000_1234n,
  args,
});

/** mmap (9) or mprotect (10) with PROT_EXEC (4): `refuse`; the rest allowed. */
function execMemory(refuse: number): SockFilter[] {
  return [
    stmt(LD_ABS, NR),
    jump(JEQ, 9, 2, 0),
    jump(JEQ, 10, 1, 0),
    stmt(RET, SECCOMP_RET.ALLOW),
    stmt(LD_ABS, ARG2),
    jump(JSET, 4, 0, 1),
    stmt(RET, refuse),
    stmt(RET, SECCOMP_RET.ALLOW),
  ];
}

test('a filter refusing executable memory: mmap and mprotect with PROT_EXEC refused, without it and other calls allowed', () => {
  const filter = execMemory(SECCOMP_RET.ERRNO | 1);
  const refused = runFilter(filter, call(9, [0n, 4096n, 5n]))!;
  assert.equal(refused, (SECCOMP_RET.ERRNO | 1) >>> 0);
  assert.equal(allows(refused), false);
  assert.equal(describeVerdict(refused), 'fail it (EPERM)');
  assert.equal(runFilter(filter, call(10, [0n, 4096n, 7n])), (SECCOMP_RET.ERRNO | 1) >>> 0);
  assert.equal(runFilter(filter, call(9, [0n, 4096n, 3n])), SECCOMP_RET.ALLOW);
  assert.equal(runFilter(filter, call(319, [0n, 1n])), SECCOMP_RET.ALLOW);
});

test('the action of highest precedence wins across filters: kill over trap over errno over allow', () => {
  const all = (action: number) => [stmt(RET, action)];
  const kill = execMemory(SECCOMP_RET.KILL_PROCESS);
  const mmap = call(9, [0n, 4096n, 5n]);
  assert.equal(seccompVerdict([all(SECCOMP_RET.ALLOW), kill], mmap), SECCOMP_RET.KILL_PROCESS);
  assert.equal(describeVerdict(SECCOMP_RET.KILL_PROCESS), 'kill the process');
  assert.equal(
    seccompVerdict([all(SECCOMP_RET.ERRNO | 13), all(SECCOMP_RET.TRAP)], mmap),
    SECCOMP_RET.TRAP,
  );
  assert.equal(
    seccompVerdict([all(SECCOMP_RET.LOG), all(SECCOMP_RET.ALLOW)], mmap),
    SECCOMP_RET.LOG,
  );
  assert.equal(allows(SECCOMP_RET.LOG), true);
  assert.equal(seccompVerdict([], mmap), SECCOMP_RET.ALLOW);
  // KILL_THREAD is 0: below ALLOW, above nothing but KILL_PROCESS.
  assert.equal(
    seccompVerdict([all(SECCOMP_RET.KILL_THREAD), all(SECCOMP_RET.KILL_PROCESS)], mmap),
    SECCOMP_RET.KILL_PROCESS,
  );
});

test('a filter checks the architecture first, as every generated one does', () => {
  const filter = [
    stmt(LD_ABS, ARCH),
    jump(JEQ, AUDIT_ARCH_X86_64, 1, 0),
    stmt(RET, SECCOMP_RET.KILL_PROCESS),
    stmt(RET, SECCOMP_RET.ALLOW),
  ];
  assert.equal(runFilter(filter, call(9)), SECCOMP_RET.ALLOW);
  assert.equal(runFilter(filter, call(9, [], 0x4000_0003)), SECCOMP_RET.KILL_PROCESS);
});

test('scratch memory, the index register and arithmetic run as the kernel runs them', () => {
  // The argument's high word (offset + 4), kept in M[3], then through X: refuse when above 0.
  const filter: SockFilter[] = [
    stmt(LD_ABS, ARG2 + 4),
    stmt(0x02, 3), // ST M[3]
    stmt(0x61, 3), // LDX M[3]
    stmt(0x87, 0), // TXA
    stmt(0x54, 0xff), // AND #0xff
    jump(0x25, 0, 0, 1), // JGT #0
    stmt(RET, SECCOMP_RET.ERRNO | 22),
    stmt(RET, SECCOMP_RET.ALLOW),
  ];
  assert.equal(
    runFilter(filter, call(1, [0n, 0n, 0x1_0000_0000n])),
    (SECCOMP_RET.ERRNO | 22) >>> 0,
  );
  assert.equal(runFilter(filter, call(1, [0n, 0n, 0xffff_ffffn])), SECCOMP_RET.ALLOW);
  // An instruction no filter may hold: not run (the call is then taken for refused).
  assert.equal(runFilter([stmt(0x30, 0)], call(1)), undefined);
  assert.equal(seccompVerdict([[stmt(0x30, 0)]], call(1)), undefined);
});

test('filters as PTRACE_SECCOMP_GET_FILTER gives them: 8 bytes per instruction', () => {
  const bytes = new Uint8Array([0x20, 0, 0, 0, 4, 0, 0, 0, 0x15, 0, 1, 2, 0x3e, 0, 0, 0xc0]);
  assert.deepEqual(decodeFilter(bytes), [
    { code: 0x20, jt: 0, jf: 0, k: 4 },
    { code: 0x15, jt: 1, jf: 2, k: AUDIT_ARCH_X86_64 },
  ]);
});
