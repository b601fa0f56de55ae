import assert from 'node:assert/strict';
import { test } from 'node:test';
import { READ_LIMITS, readLayout } from '../../arch/index.js';
import { ProbeError } from '../../errors/index.js';
import { type FetchArg, parseSpec, registerInfo } from '../../spec/index.js';
import { evaluateFetch, type FetchSource } from './fetch.js';
import type { InlineMemory, InlineRead } from './inline-hooks.js';
import {
  INLINE_STRING_BYTES,
  planInlineReads,
  readCopied,
  readCopiedString,
} from './inline-reads.js';
import { Registers } from './registers.js';

/** A thread at a function's entry: registers, and memory as a map of bytes. */
function thread(): { regs: Registers; memory: Map<bigint, number> } {
  const regs = new Registers();
  regs.set('rdi', 0x1000n);
  regs.set('rsi', -5n);
  regs.set('rdx', 0x2000n);
  regs.set('rcx', 0x10n);
  regs.set('rax', 0x1234n);
  regs.rsp = 0x3000n;
  regs.rip = 0x401136n;
  const memory = new Map<bigint, number>();
  const put = (at: bigint, bytes: number[]) => {
    bytes.forEach((b, i) => {
      memory.set(at + BigInt(i), b);
    });
  };
  // A struct at 0x1000: u32 42, s32 -2, a pointer to the string at 0x2000, a pointer to 0x1000.
  put(0x1000n, [0x2a, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff]);
  put(0x1008n, [0x00, 0x20, 0, 0, 0, 0, 0, 0]);
  put(0x1010n, [0x00, 0x10, 0, 0, 0, 0, 0, 0]);
  put(0x2000n, [...Buffer.from('héllo'), 0]);
  // 300 bytes with no NUL, then memory that cannot be read.
  put(0x4000n, new Array(300).fill(0x78));
  // The stack at the entry: the return address, then arguments 6 to 9 (arg8 points to 0x1000).
  put(0x3000n, [0x10, 0x20, 0, 0, 0, 0, 0, 0]);
  put(0x3008n, [7, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]);
  put(0x3018n, [0x00, 0x10, 0, 0, 0, 0, 0, 0, 0x00, 0x20, 0, 0, 0, 0, 0, 0]);
  return { regs, memory };
}

function readMemory(memory: Map<bigint, number>, vaddr: bigint, length: number): Uint8Array {
  const out: number[] = [];
  for (let i = 0; i < length; i++) {
    const b = memory.get(vaddr + BigInt(i));
    if (b === undefined) break;
    out.push(b);
  }
  return Uint8Array.from(out);
}

/** The reads as the trampoline makes them (arch's EntryRead), over the made-up memory. */
function copy(reads: readonly InlineRead[], regs: Registers, memory: Map<bigint, number>) {
  const copied: InlineMemory[] = [];
  for (const read of reads) {
    let vaddr = read.constant;
    for (const term of read.terms) {
      const base = term.register === 'rflags' ? regs.get('eflags') : regs.get(term.register);
      const bits = (base >> BigInt(term.shift)) & ((1n << BigInt(term.bits)) - 1n);
      vaddr += bits * BigInt(term.scale);
    }
    if (read.after !== undefined) {
      const through = copied[read.after]!;
      if (through.bytes.length !== 8) {
        copied.push({ vaddr: 0n, bytes: new Uint8Array(0), asked: read.bytes });
        continue;
      }
      vaddr += new DataView(through.bytes.buffer).getBigUint64(0, true);
    }
    vaddr = BigInt.asUintN(64, vaddr);
    copied.push({ vaddr, bytes: readMemory(memory, vaddr, read.bytes), asked: read.bytes });
  }
  return copied;
}

function fetches(text: string, kind = ''): FetchArg[] {
  const { spec, diagnostics } = parseSpec(`${kind}./app:f ${text}`);
  assert.ok(spec, JSON.stringify(diagnostics));
  return [...spec.fetches];
}

/** Each fetch evaluated on the thread itself, and on what the planned reads copied. */
function both(text: string): {
  direct: unknown[];
  copied: unknown[];
  reads: readonly InlineRead[];
} {
  const list = fetches(text);
  const plan = planInlineReads(list, 0x401136n);
  if (!('reads' in plan)) assert.fail(`${text}: ${plan.why}`);
  const { regs, memory } = thread();
  const read = (vaddr: bigint, length: number) => {
    const bytes = readMemory(memory, vaddr, length);
    if (bytes.length < length) throw new ProbeError('ERR_TARGET_MEMORY', 'unreadable');
    return bytes;
  };
  const direct: FetchSource = {
    regs,
    retval: undefined,
    read,
    readCString: (vaddr, max) => {
      const out: number[] = [];
      for (let at = vaddr; out.length < max; at++) {
        const b = read(at, 1)[0]!;
        if (b === 0) break;
        out.push(b);
      }
      return Buffer.from(out).toString('utf8');
    },
    comm: () => 'app',
  };
  const memoryCopied = copy(plan.reads, regs, memory);
  // The record's stack words, as an inline hook keeps them.
  const stack = readMemory(memory, regs.rsp, 32);
  const fromCopies: FetchSource = {
    regs,
    retval: undefined,
    read: (vaddr, length) => {
      const offset = vaddr - regs.rsp;
      if (offset >= 0n && offset + BigInt(length) <= 32n) {
        return stack.slice(Number(offset), Number(offset) + length);
      }
      return readCopied(memoryCopied, vaddr, length);
    },
    readCString: (vaddr, max) => readCopiedString(memoryCopied, vaddr, max),
    comm: () => 'app',
  };
  return {
    direct: list.map((f) => evaluateFetch(f, direct)),
    copied: list.map((f) => evaluateFetch(f, fromCopies)),
    reads: plan.reads,
  };
}

test('fetches of memory give over what the planned reads copy what they give over the thread itself', () => {
  for (const text of [
    'a=+0(%di):u32 b=+4(%di):s32 p=+8(%di):x64',
    's=+0(+8(%di)):string t=+0(%dx):string',
    'c=+1(+8(+16(%di))):u8 d=+0(+16(+16(%di))):s32',
    'bad=+0(%si):u8 badstr=+0(%si):string through=+0(+0(%si)):u64',
    'arg6 arg7 e=+0(arg8):u32 f=+0(arg9):string',
    'g=+0(%cx):u8 h=+4080(%ax):u64 i=+0(%cl):u8',
    'j=+0(arg0):string k=+0(arg2):string l=+0(arg2):u8 comm',
  ]) {
    const { direct, copied } = both(text);
    assert.deepEqual(copied, direct, text);
  }
});

test('a string longer than the copy is cut at INLINE_STRING_BYTES; a fault inside it fails it', () => {
  const { direct, copied } = both('s=+0(%di):string');
  assert.deepEqual(copied, direct);
  const cut = both('s=+16384(%ax):string');
  // 0x1234 + 16384 = 0x5234: nothing readable there, on both.
  assert.deepEqual(cut.copied, [null]);
  const { regs, memory } = thread();
  regs.set('rdi', 0x4000n);
  const plan = planInlineReads(fetches('s=+0(%di):string'), 0n);
  assert.ok('reads' in plan);
  const memoryCopied = copy(plan.reads, regs, memory);
  assert.equal(readCopiedString(memoryCopied, 0x4000n, 4096), 'x'.repeat(INLINE_STRING_BYTES));
  // A copy cut short by memory that cannot be read, with no NUL: no value, as on the thread.
  regs.set('rdi', 0x4000n + 300n - 3n);
  const short = copy(plan.reads, regs, memory);
  assert.throws(() => readCopiedString(short, 0x4000n + 297n, 4096), { code: 'ERR_TARGET_MEMORY' });
});

test('reads are planned as the fetches read: one per pointer followed, shared where the same', () => {
  const { reads } = both('s=+0(+8(%di)):string n=+8(%di):u64 u=+0(+8(%di)):u8');
  const rdi = { register: 'rdi', shift: 0, bits: 64, scale: 1 } as const;
  assert.deepEqual(reads, [
    { constant: 8n, terms: [rdi], after: undefined, bytes: 8 },
    { constant: 0n, terms: [], after: 0, bytes: INLINE_STRING_BYTES },
    { constant: 0n, terms: [], after: 0, bytes: 1 },
  ]);
  assert.deepEqual(both('arg0 arg5 arg6 arg8 %ax comm').reads, [], 'registers and stack words');
  const ah = registerInfo('ah')!;
  assert.deepEqual(planInlineReads(fetches('x=+2(%ah):u8'), 0n), {
    reads: [
      {
        constant: 2n,
        terms: [{ register: 'rax', shift: ah.shift, bits: 8, scale: 1 }],
        after: undefined,
        bytes: 1,
      },
    ],
  });
  assert.deepEqual(planInlineReads(fetches('x=+0(%ip):u8'), 0x401136n), {
    reads: [{ constant: 0x401136n, terms: [], after: undefined, bytes: 1 }],
  });
});

test('reads an inline hook cannot make are refused with why, naming the fetch', () => {
  // At a return: the same reads, of the registers after it; %rip there is not an address.
  assert.deepEqual(planInlineReads(fetches('s=+0(retval):string', 'r:'), 0n, 'return'), {
    reads: [
      {
        constant: 0n,
        terms: [{ register: 'rax', shift: 0, bits: 64, scale: 1 }],
        after: undefined,
        bytes: INLINE_STRING_BYTES,
      },
    ],
  });
  assert.deepEqual(planInlineReads(fetches('x=+0(%ip):u8', 'r:'), 0n, 'return'), {
    why: 'an address made from %rip at a return',
    fetch: 'x',
  });
  assert.deepEqual(planInlineReads(fetches('r=retval ip', 'r:'), 0n, 'return'), { reads: [] });
  const many = Array.from({ length: READ_LIMITS.reads + 1 }, (_, i) => `f${i}=+${8 * i}(%di):u8`);
  const refused = planInlineReads(fetches(many.join(' ')), 0n);
  assert.ok('why' in refused);
  assert.match(
    refused.why,
    /more reads of memory \(17, 17 bytes\) than an inline hook's record holds/,
  );
  const big = { constant: 0n, terms: [], after: undefined, bytes: READ_LIMITS.bytes };
  assert.throws(() => readLayout([big, big]), /take 43 slots of a record's data, more than 24/);
  assert.throws(() => readLayout([{ ...big, after: 0, bytes: 8 }]), RangeError);
});
