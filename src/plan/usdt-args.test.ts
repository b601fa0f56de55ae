import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { evaluateFetch, type FetchSource, kernelFetchArg } from '../engines/index.js';
import { ProbeError } from '../errors/index.js';
import { type FetchArg, parseSpec, printFetchExpr } from '../spec/index.js';
import { type UsdtArgsContext, usdtFetches } from './usdt-args.js';

// The truth: what each AT&T operand reads when the probe's nop runs (%ip is the probe's
// address in every engine's handler), checked on a made-up thread whose registers and
// memory are chosen so that each operand has one right value.

const SITE = 0x1000n;
const SYMBOLS = new Map([['counter', 0x4010n]]);

function context(args: string, spec = 'u:./app:p:n'): UsdtArgsContext {
  return {
    probe: 'p:n',
    path: './app',
    args,
    vaddr: SITE,
    symbolVaddr: (name) => SYMBOLS.get(name),
    spec,
    span: { start: 0, end: spec.length },
  };
}

function lower(args: string, fetches = ''): FetchArg[] {
  const text = `u:./app:p:n${fetches === '' ? '' : ` ${fetches}`}`;
  const { spec } = parseSpec(text);
  assert.ok(spec);
  return usdtFetches(spec.fetches, context(args, text));
}

/** A thread stopped at the probe (loaded at bias 0x5550000), with memory of known bytes. */
function thread(): FetchSource {
  const bias = 0x5550000n;
  const regs = new Map<string, bigint>([
    ['rdi', 0xffff_fff6n], // edi = -10
    ['rsi', 0x1_0000_0080n], // sil = 0x80 (-128 as s8)
    ['rax', 0x1234n], // ah = 0x12
    ['rbp', 0x7000n],
    ['rdx', 2n],
    ['r12', 0x7100n],
    ['rip', SITE + bias],
  ]);
  const memory = new Map<bigint, number>();
  const put = (at: bigint, value: bigint, bytes: number) => {
    for (let i = 0; i < bytes; i++)
      memory.set(at + BigInt(i), Number((value >> BigInt(8 * i)) & 0xffn));
  };
  put(0x7000n - 16n, -3n, 8); // -16(%rbp)
  put(0x7100n + 8n + 2n * 4n, 77n, 4); // 8(%r12,%rdx,4)
  put(0x4010n + bias, 123456789n, 8); // counter
  put(0x4018n + bias, -2n, 4); // counter+8
  return {
    regs: { get: (name: string) => regs.get(name) ?? 0n, rip: SITE + bias, rsp: 0n } as never,
    retval: undefined,
    read: (vaddr, length) => {
      const out = new Uint8Array(length);
      for (let i = 0; i < length; i++) {
        const b = memory.get(vaddr + BigInt(i));
        if (b === undefined) throw new ProbeError('ERR_TARGET_MEMORY', 'unmapped');
        out[i] = b;
      }
      return out;
    },
    readCString: () => '',
    comm: () => 'app',
  };
}

describe('usdtFetches()', () => {
  const ARGS =
    '-4@%edi -1@%sil 1@%ah -8@-16(%rbp) -4@$-7 8@counter(%rip) -4@counter+8(%rip) 4@8(%r12,%rdx,4)';

  test('with no fetches: every argument, named arg0.., typed by the note', () => {
    const fetches = lower(ARGS);
    assert.deepEqual(
      fetches.map((f) => `${f.name}=${printFetchExpr(f.expr)}:${f.type}`),
      [
        'arg0=%rdi:s32',
        'arg1=%rsi:s8',
        'arg2=%ah:u8',
        'arg3=-16(%rbp):s64',
        'arg4=\\-7:s32',
        'arg5=+12304(ip):u64',
        'arg6=+12312(ip):s32',
        'arg7=+8(%r12+%rdx*4):u32',
      ],
    );
  });

  test('the ptrace engine reads each as the operand means', () => {
    const src = thread();
    const values = lower(ARGS).map((f) => evaluateFetch(f, src));
    assert.deepEqual(values, [-10, -128, 0x12, -3n, -7, 123456789n, -2, 77]);
  });

  test('argN is the note’s N-th argument (0-based); a type given wins', () => {
    const fetches = lower(ARGS, 'arg3 x=arg0:x32 p=+0(arg3):u8');
    assert.deepEqual(
      fetches.map((f) => `${f.name}=${printFetchExpr(f.expr)}:${f.type}`),
      ['arg3=-16(%rbp):s64', 'x=%rdi:x32', 'p=+0(-16(%rbp)):u8'],
    );
  });

  test('argN:string is the string the argument points at, in a register or in memory', () => {
    const fetches = lower(
      '8@%r12 8@-16(%rbp) 8@counter(%rip)',
      's=arg0:string m=arg1:string g=arg2:string',
    );
    assert.deepEqual(
      fetches.map((f) => `${f.name}=${printFetchExpr(f.expr)}:${f.type}`),
      ['s=%r12:string', 'm=+0(-16(%rbp)):string', 'g=+0(+12304(ip)):string'],
    );
    // The ptrace engine reads the string at the pointer's value, as at a register's.
    const src = thread();
    const at: bigint[] = [];
    const reader = {
      ...src,
      readCString: (vaddr: bigint) => {
        at.push(vaddr);
        return 'x';
      },
    };
    for (const f of fetches) evaluateFetch(f, reader);
    assert.deepEqual(at, [0x7100n, BigInt.asUintN(64, -3n), 123456789n]);
  });

  test('an argument past the note’s last is refused, pointing at it', () => {
    assert.throws(
      () => lower('-4@%edi', 'arg1'),
      (err: unknown) =>
        err instanceof ProbeError &&
        err.code === 'ERR_SPEC_INVALID' &&
        err.message === 'Cannot fetch arg1 at USDT probe "p:n": it has 1 argument, arg0 to arg0' &&
        err.source?.span.start === 12,
    );
  });

  test('a symbol missing from the file is refused with the argument named', () => {
    assert.throws(
      () => lower('8@gone(%rip)'),
      /Cannot read argument "8@gone\(%rip\)" of USDT probe "p:n" in "\.\/app": the symbol "gone" is not in the file's symbol tables/,
    );
  });
});

describe('the tracefs line of USDT arguments', () => {
  test('constants are the kernel’s immediates; %ah its second byte as a bitfield', () => {
    const fetches = lower('-4@$-7 8@$0x10 1@%ah');
    assert.deepEqual(fetches.map(kernelFetchArg), [
      'arg0=\\-7:s32',
      'arg1=\\16:u64',
      'arg2=%ax:b8@8/64',
    ]);
  });

  test('a string at a register’s value is read through +0(): the kernel takes no other', () => {
    const fetches = lower('8@%r12 8@-16(%rbp)', 's=arg0:string u=arg0:ustring m=arg1:string');
    assert.deepEqual(fetches.map(kernelFetchArg), [
      's=+0(%r12):string',
      'u=+0(%r12):ustring',
      'm=+0(-16(%bp)):string',
    ]);
  });

  test('a string at a narrow register is refused: the kernel would read the whole register', () => {
    const { spec } = parseSpec('./app:f s=%eax:string');
    assert.ok(spec);
    assert.throws(
      () => kernelFetchArg(spec.fetches[0]!),
      (err: unknown) =>
        err instanceof ProbeError &&
        err.category === 'not-supported' &&
        /Cannot fetch a string at %eax with the tracefs engine/.test(err.message),
    );
  });

  test('base + index * scale and a signed %ah are refused as not supported', () => {
    for (const args of ['4@8(%r12,%rdx,4)', '-1@%ah']) {
      const [fetch] = lower(args);
      assert.throws(
        () => kernelFetchArg(fetch!),
        (err: unknown) => err instanceof ProbeError && err.category === 'not-supported',
      );
    }
  });
});
