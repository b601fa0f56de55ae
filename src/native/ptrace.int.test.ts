// The ptrace, waitpid and spawn bindings against the kernel: a child started with spawn()
// stops itself, is seized, and is followed through its exec to its exit.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PTRACE, PTRACE_EVENT, PTRACE_O, USER_REGS, WAIT } from './constants.js';
import { loadNative } from './load.js';

const SIGSTOP = 19;
const SIGCONT = 18;

test('spawn() starts a child libuv does not own; ptrace follows it through exec to exit', () => {
  const native = loadNative();
  const pid = native.spawn(
    ['sh', '-c', 'kill -STOP $$ && exec "$0" "$@"', 'true'],
    ['PATH=/usr/bin:/bin'],
  );
  assert.ok(pid > 0, `spawn: ${pid}`);
  const status = new Int32Array(1);
  try {
    assert.equal(native.waitpid(pid, status, WAIT.WUNTRACED), pid);
    assert.equal(status[0]! & 0xff, 0x7f, 'stopped');
    assert.equal((status[0]! >> 8) & 0xff, SIGSTOP);
    const options = BigInt(PTRACE_O.PTRACE_O_TRACEEXEC | PTRACE_O.PTRACE_O_EXITKILL);
    assert.equal(native.ptrace(PTRACE.PTRACE_SEIZE, pid, 0n, options), 0);
    process.kill(pid, 'SIGCONT');
    let execRip = 0n;
    for (;;) {
      assert.equal(native.waitpid(pid, status, WAIT.__WALL), pid);
      const s = status[0]!;
      if ((s & 0x7f) === 0) {
        assert.equal((s >> 8) & 0xff, 0, 'true exits 0');
        break;
      }
      assert.equal(s & 0xff, 0x7f, `a stop, not ${s.toString(16)}`);
      const signal = (s >> 8) & 0xff;
      const event = (s >> 16) & 0xff;
      if (event === PTRACE_EVENT.PTRACE_EVENT_EXEC) {
        const regs = new Uint8Array(USER_REGS.sizeBytes);
        assert.equal(native.ptraceBuffer(PTRACE.PTRACE_GETREGS, pid, 0n, regs), 0);
        execRip = new DataView(regs.buffer).getBigUint64(USER_REGS.rip, true);
      }
      const deliver = event !== 0 || signal === SIGCONT || signal === 5 ? 0 : signal;
      assert.equal(native.ptrace(PTRACE.PTRACE_CONT, pid, 0n, BigInt(deliver)), 0);
    }
    assert.ok(execRip > 0n, 'stopped at the exec, at the new image’s first instruction');
  } finally {
    native.waitpid(pid, status, WAIT.WNOHANG);
  }
  assert.ok(native.ptrace(PTRACE.PTRACE_CONT, pid, 0n, 0n) < 0, 'the child is gone');
  assert.ok(native.tgkill(pid, pid, 0) < 0);
});
