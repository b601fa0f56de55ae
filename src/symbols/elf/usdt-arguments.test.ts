import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { compileUsdtTarget, requireSdt } from '../../../test/helpers/usdt.js';
import { ProbeError } from '../../errors/index.js';
import { openElf, parseUsdtArguments, type UsdtOperand, usdtRegister } from './index.js';

const WHERE = { probe: 'prov:name', path: '/bin/app' };

function reg(name: string) {
  const r = usdtRegister(name);
  assert.ok(r, name);
  return r;
}

function mem(
  displacement: bigint,
  base?: string,
  index?: string,
  scale: 1 | 2 | 4 | 8 = 1,
  symbol?: string,
): UsdtOperand {
  return {
    kind: 'memory',
    displacement,
    symbol,
    base: base === undefined ? undefined : reg(base),
    index: index === undefined ? undefined : reg(index),
    scale,
  };
}

// The truth here is the AT&T operand syntax of the GNU assembler and the SIZE@OPERAND format
// of <sys/sdt.h> (a negative size is a signed value).
const CASES: [string, number, boolean, UsdtOperand][] = [
  ['-4@%edi', 4, true, { kind: 'register', register: reg('edi') }],
  ['8@%rax', 8, false, { kind: 'register', register: reg('rax') }],
  ['1@%al', 1, false, { kind: 'register', register: reg('al') }],
  ['-1@%ah', 1, true, { kind: 'register', register: reg('ah') }],
  ['-1@%sil', 1, true, { kind: 'register', register: reg('sil') }],
  ['2@%r8w', 2, false, { kind: 'register', register: reg('r8w') }],
  ['-4@%r9d', 4, true, { kind: 'register', register: reg('r9d') }],
  ['1@%r15b', 1, false, { kind: 'register', register: reg('r15b') }],
  ['2@%cx', 2, false, { kind: 'register', register: reg('cx') }],
  ['4@$5', 4, false, { kind: 'constant', value: 5n }],
  ['-4@$-7', 4, true, { kind: 'constant', value: -7n }],
  ['8@$0x10', 8, false, { kind: 'constant', value: 16n }],
  ['8@-16(%rbp)', 8, false, mem(-16n, 'rbp')],
  ['-4@(%rsi)', 4, true, mem(0n, 'rsi')],
  ['-4@0(%rbp)', 4, true, mem(0n, 'rbp')],
  ['4@112(%rsp)', 4, false, mem(112n, 'rsp')],
  ['-8@counter(%rip)', 8, true, mem(0n, 'rip', undefined, 1, 'counter')],
  ['8@table+16(%rip)', 8, false, mem(16n, 'rip', undefined, 1, 'table')],
  ['8@counter.0-8(%rip)', 8, false, mem(-8n, 'rip', undefined, 1, 'counter.0')],
  ['4@24(%rip)', 4, false, mem(24n, 'rip')],
  ['8@16(%rax,%rdx,8)', 8, false, mem(16n, 'rax', 'rdx', 8)],
  ['-4@(%r12,%r13,4)', 4, true, mem(0n, 'r12', 'r13', 4)],
  ['2@(,%rcx,2)', 2, false, mem(0n, undefined, 'rcx', 2)],
  ['4@(%rax,%rbx)', 4, false, mem(0n, 'rax', 'rbx', 1)],
  ['4@-0x20(%rbp)', 4, false, mem(-32n, 'rbp')],
  ['8@global', 8, false, mem(0n, undefined, undefined, 1, 'global')],
];

describe('parseUsdtArguments()', () => {
  for (const [text, size, signed, operand] of CASES) {
    test(`reads ${text}`, () => {
      const [arg, ...rest] = parseUsdtArguments(text, WHERE);
      assert.equal(rest.length, 0);
      assert.deepEqual(arg, { text, sizeBytes: size, signed, sizeExplicit: true, operand });
    });
  }

  test('reads the old size-less form as 8 unsigned bytes', () => {
    const [arg] = parseUsdtArguments('%rdi', WHERE);
    assert.deepEqual(arg, {
      text: '%rdi',
      sizeBytes: 8,
      signed: false,
      sizeExplicit: false,
      operand: { kind: 'register', register: reg('rdi') },
    });
  });

  test('splits on any run of spaces and gives none for an empty string', () => {
    assert.deepEqual(parseUsdtArguments('', WHERE), []);
    assert.deepEqual(parseUsdtArguments('  ', WHERE), []);
    const args = parseUsdtArguments(' -4@%edi   8@-16(%rbp) 4@$5 ', WHERE);
    assert.deepEqual(
      args.map((a) => a.text),
      ['-4@%edi', '8@-16(%rbp)', '4@$5'],
    );
  });

  test('AT&T register names mean their own widths (%ax is 16 bits, %ah the second byte)', () => {
    assert.deepEqual(reg('ax'), { name: 'ax', base: 'rax', bits: 16, shift: 0 });
    assert.deepEqual(reg('ah'), { name: 'ah', base: 'rax', bits: 8, shift: 8 });
    assert.deepEqual(reg('sil'), { name: 'sil', base: 'rsi', bits: 8, shift: 0 });
    assert.deepEqual(reg('r10w'), { name: 'r10w', base: 'r10', bits: 16, shift: 0 });
    assert.equal(usdtRegister('xmm0'), undefined);
  });

  const BAD: [string, RegExp][] = [
    ['3@%eax', /the size 3 is not 1, 2, 4 or 8 bytes/],
    ['4@%foo', /unknown register "%foo"/],
    ['4@$sym', /the constant "\$sym" is not a number/],
    ['4@8(%rax', /expected "\)" at the end/],
    ['4@8(%rax,%rbx,3)', /the scale "3" is not 1, 2, 4 or 8/],
    ['4@%fs:0x28', /segment-relative/],
    ['4@', /the operand is empty/],
    ['x@%eax', /expected SIZE@OPERAND/],
    ['8@1+2(%rax)', /cannot read the displacement "1\+2"/],
    ['8@(%rip,%rax,1)', /cannot index a %rip-relative address/],
  ];
  for (const [text, reason] of BAD) {
    test(`refuses ${text} naming the probe, the argument and why`, () => {
      assert.throws(
        () => parseUsdtArguments(`-4@%edi ${text}`, WHERE),
        (err: unknown) => {
          assert.ok(err instanceof ProbeError);
          assert.equal(err.code, 'ERR_USDT_ARGUMENT');
          assert.ok(
            err.message.startsWith(
              `Cannot read argument 1 (${JSON.stringify(text)}) of USDT probe "prov:name" in "/bin/app": `,
            ),
            err.message,
          );
          assert.match(err.message, reason);
          return true;
        },
      );
    });
  }
});

/** Each probe's argument string as `readelf -n` prints it. */
function readelfUsdtArgs(path: string): Map<string, string> {
  const text = execFileSync('readelf', ['-n', path], { encoding: 'utf8' });
  const args = new Map<string, string>();
  let provider = '';
  let name = '';
  for (const line of text.split('\n')) {
    const m = /^\s+(Provider|Name|Arguments): ?(.*)$/.exec(line);
    if (m === null) continue;
    if (m[1] === 'Provider') provider = m[2]!;
    else if (m[1] === 'Name') name = m[2]!;
    else args.set(`${provider}:${name}`, m[2]!);
  }
  return args;
}

describe('parseUsdtArguments() on what gcc emits', () => {
  for (const opt of ['-O0', '-O2'] as const) {
    test(`reads every argument of test/programs/usdt-target at ${opt}`, (t) => {
      if (!requireSdt(t)) return;
      const path = compileUsdtTarget(opt);
      const truth = readelfUsdtArgs(path);
      const elf = openElf(path);
      try {
        const notes = elf.usdtNotes();
        assert.deepEqual(
          notes.map((n) => `${n.provider}:${n.name}`).sort(),
          [...truth.keys()].sort(),
        );
        const kinds = new Set<string>();
        for (const note of notes) {
          const probe = `${note.provider}:${note.name}`;
          assert.equal(note.args, truth.get(probe));
          const args = parseUsdtArguments(note.args, { probe, path });
          const words = truth
            .get(probe)!
            .split(' ')
            .filter((w) => w !== '');
          assert.deepEqual(
            args.map((a) => a.text),
            words,
          );
          for (const [i, arg] of args.entries()) {
            // The size and sign as the note writes them.
            const [, sign, size] = /^(-?)([0-9]+)@/.exec(words[i]!)!;
            assert.equal(arg.sizeBytes, Number(size));
            assert.equal(arg.signed, sign === '-');
            const op = arg.operand;
            kinds.add(
              op.kind === 'memory'
                ? op.index !== undefined
                  ? 'indexed'
                  : op.symbol !== undefined
                    ? 'symbol'
                    : 'memory'
                : op.kind,
            );
          }
        }
        // The forms gcc picks at each level (the target is written to get them).
        const expected =
          opt === '-O0'
            ? ['constant', 'memory', 'register']
            : ['constant', 'indexed', 'memory', 'register', 'symbol'];
        assert.deepEqual([...kinds].sort(), expected);
      } finally {
        elf.close();
      }
    });
  }
});
