import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeError } from '../../errors/index.js';
import { parseSpec } from '../../spec/index.js';
import { evaluateFetch, type FetchSource } from './fetch.js';
import { Registers } from './registers.js';

/** A stopped thread made up: registers, and memory at 0x1000 (a struct) and 0x2000 (a string). */
function source(retval?: bigint): FetchSource {
  const regs = new Registers();
  regs.set('rdi', 0x1000n);
  regs.set('rsi', -5n);
  regs.set('rdx', 0x2000n);
  regs.set('rcx', 0x1234_5678_9abc_def0n);
  regs.set('r9', 6n);
  regs.set('rax', 0xffn);
  regs.rsp = 0x3000n;
  regs.rip = 0x401136n;
  const memory = new Map<bigint, number>();
  const put = (at: bigint, bytes: number[]) => {
    bytes.forEach((b, i) => {
      memory.set(at + BigInt(i), b);
    });
  };
  put(0x1000n, [0x2a, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0x00, 0x20, 0, 0, 0, 0, 0, 0]);
  put(0x2000n, [...Buffer.from('héllo'), 0]);
  // The stack at entry: the return address, then the 7th and 8th arguments.
  put(0x3000n, [0x10, 0x20, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]);
  const read = (vaddr: bigint, length: number) => {
    const bytes = new Uint8Array(length);
    for (let i = 0; i < length; i++) {
      const b = memory.get(vaddr + BigInt(i));
      if (b === undefined) {
        throw new ProbeError('ERR_TARGET_MEMORY', `Cannot read at 0x${vaddr.toString(16)}`);
      }
      bytes[i] = b;
    }
    return bytes;
  };
  return {
    regs,
    retval,
    read,
    readCString: (vaddr) => {
      const out: number[] = [];
      for (let at = vaddr; ; at++) {
        const b = read(at, 1)[0]!;
        if (b === 0) return Buffer.from(out).toString('utf8');
        out.push(b);
      }
    },
    comm: () => 'app',
  };
}

function fetch(text: string, retval?: bigint): Record<string, unknown> {
  const { spec, diagnostics } = parseSpec(`${retval === undefined ? '' : 'r:'}./app:f ${text}`);
  assert.ok(spec, JSON.stringify(diagnostics));
  const src = source(retval);
  return Object.fromEntries(spec.fetches.map((f) => [f.name, evaluateFetch(f, src)]));
}

test('arguments come from the ABI registers, then the stack, typed like the kernel types them', () => {
  assert.deepEqual(fetch('a=arg0 b=arg1:s32 c=arg1:u8 d=arg3:s64 e=arg5:u16 g=arg6 h=arg7:s8'), {
    a: 0x1000n,
    b: -5,
    c: 0xfb,
    d: 0x1234_5678_9abc_def0n,
    e: 6,
    g: 7n,
    h: 8,
  });
});

test('dereferences read the width of their type; strings are read up to their NUL', () => {
  assert.deepEqual(fetch('id=+0(arg0):s32 neg=+4(arg0):s32 p=+8(arg0):x64 s=+0(arg2):string'), {
    id: 42,
    neg: -2,
    p: 0x2000n,
    s: 'héllo',
  });
  assert.deepEqual(fetch('s=+0(+8(arg0)):string'), { s: 'héllo' }, 'a pointer in a struct');
  assert.deepEqual(fetch('bad=+0(arg1):u32 str=+0(arg3):string'), { bad: null, str: null });
});

test('registers by any name, retval, ip, sp and comm', () => {
  assert.deepEqual(fetch('a=%ax b=%al c=%cx:u16 d=%ecx ip=ip sp=sp r=retval:s8 n=comm', -1n), {
    a: 0xffn,
    b: 0xffn,
    c: 0xdef0,
    d: 0x9abc_def0n,
    ip: 0x401136n,
    sp: 0x3000n,
    r: -1,
    n: 'app',
  });
});
