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
      BPF_PROG_TYPE: constants.BPF_PROG_TYPE,
      BPF_ATTACH_TYPE: constants.BPF_ATTACH_TYPE,
      BPF_FUNC: constants.BPF_FUNC,
      BPF_PROG_LOAD_ATTR: constants.BPF_PROG_LOAD_ATTR,
      BPF_BTF_LOAD_ATTR: constants.BPF_BTF_LOAD_ATTR,
      BPF_MAP_BATCH_ATTR: constants.BPF_MAP_BATCH_ATTR,
      BPF_MAP_ELEM_ATTR: constants.BPF_MAP_ELEM_ATTR,
      BPF_LINK_CREATE_ATTR: constants.BPF_LINK_CREATE_ATTR,
      BPF_RAW_TRACEPOINT_ATTR: constants.BPF_RAW_TRACEPOINT_ATTR,
      BPF_ATTR_BYTES: constants.BPF_ATTR_BYTES,
      PERF_EVENT_ATTR: constants.PERF_EVENT_ATTR,
      PERF_EVENT_IOC: constants.PERF_EVENT_IOC,
      BPF_MAP_CREATE_ATTR: constants.BPF_MAP_CREATE_ATTR,
      MOUNT_FLAGS: constants.MOUNT_FLAGS,
      PTRACE: constants.PTRACE,
      PTRACE_O: constants.PTRACE_O,
      PTRACE_EVENT: constants.PTRACE_EVENT,
      WAIT: constants.WAIT,
      PRCTL: constants.PRCTL,
      USER_REGS: constants.USER_REGS,
    },
    truth,
  );
});
