import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { compileProgram } from '../../test/helpers/compile.js';
import { requireHost } from '../../test/helpers/require-host.js';
import * as constants from './constants.js';

test('constants.ts holds the numbers this machine’s kernel headers define', (t) => {
  if (!requireHost(t, { commands: ['gcc'] })) return;
  // The C program prints every constant, as the UAPI headers and the compiler define them.
  const program = compileProgram('arch-native-abi');
  const truth = JSON.parse(execFileSync(program, { encoding: 'utf8' })) as Record<string, unknown>;
  assert.deepEqual(
    {
      SYSCALL: constants.SYSCALL,
      BPF_CMD: constants.BPF_CMD,
      BPF_MAP_TYPE: constants.BPF_MAP_TYPE,
      BPF_MAP_CREATE_ATTR: constants.BPF_MAP_CREATE_ATTR,
      MOUNT_FLAGS: constants.MOUNT_FLAGS,
      PTRACE: constants.PTRACE,
      PTRACE_O: constants.PTRACE_O,
      PTRACE_EVENT: constants.PTRACE_EVENT,
      WAIT: constants.WAIT,
      USER_REGS: constants.USER_REGS,
    },
    truth,
  );
});
