import { test } from 'node:test';
import fc from 'fast-check';
import { parseUsdtArguments } from '../../src/symbols/index.js';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { tool } from '../helpers/tools.js';
import { compileUsdtTarget, requireSdt } from '../helpers/usdt.js';
import { fuzz, isProbeError, mutatedText } from './harness.js';

// The USDT argument parser over the argument strings readelf shows in notes gcc and
// <sys/sdt.h> wrote here, damaged, and over strings built from the operand grammar
// (SIZE@%REG, SIZE@$CONST, SIZE@DISP(%BASE,%INDEX,SCALE), SIZE@sym(%rip)).

const REGISTERS = [
  'rax',
  'eax',
  'ax',
  'al',
  'ah',
  'rdi',
  'edi',
  'sil',
  'r8',
  'r8d',
  'r8w',
  'r8b',
  'r15',
  'rip',
  'rsp',
  'xmm0',
  'cs',
  'bogus',
  '',
];

const register = fc.constantFrom(...REGISTERS).map((r) => `%${r}`);
const number = fc.oneof(
  fc.integer({ min: -4096, max: 4096 }).map(String),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
  fc.nat().map((n) => `0x${n.toString(16)}`),
  fc.constantFrom('', '-', '0x', '08', '1e3', 'sym', '-0'),
);
const memory = fc
  .tuple(
    fc.option(number, { nil: '' }),
    fc.option(register, { nil: '' }),
    fc.option(register, { nil: undefined }),
    fc.option(fc.constantFrom('1', '2', '4', '8', '3', '', '16'), { nil: undefined }),
  )
  .map(([disp, base, index, scale]) => {
    const parts = [base, index, scale].filter((p) => p !== undefined);
    return `${disp}(${parts.join(',')})`;
  });
const operand = fc.oneof(
  register,
  number.map((n) => `$${n}`),
  memory,
  fc.constantFrom('usdt_total(%rip)', ''),
);
const argument = fc
  .tuple(
    fc.constantFrom('', '-'),
    fc.constantFrom('1', '2', '4', '8', '3', '0', '', '16'),
    fc.constantFrom('@', '@@', ''),
    operand,
  )
  .map(([sign, size, at, op]) => `${sign}${size}${at}${op}`);
const generated = fc.array(argument, { maxLength: 6 }).map((args) => args.join(' '));

function readelfArguments(path: string): string[] {
  return [...tool('readelf', ['-n', path]).matchAll(/Arguments: (.*)$/gm)].map((m) => m[1]!);
}

test('fuzz: the USDT argument parser throws only ERR_USDT_ARGUMENT', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
  const seeds = readelfArguments(compileProgram('elf-usdt', { flags: ['-O2'] }));
  if (requireSdt(t)) {
    seeds.push(...readelfArguments(compileUsdtTarget('-O0')));
    seeds.push(...readelfArguments(compileUsdtTarget('-O2')));
  }
  fuzz(t, {
    name: 'usdt-arguments',
    input: fc.oneof(mutatedText(seeds, '-@%$(),0123456789abcdefxrip '), generated),
    run: (args) => parseUsdtArguments(args, { probe: 'fuzz:probe', path: '/fuzz' }),
    expected: isProbeError('ERR_USDT_ARGUMENT'),
    shortRuns: 2000,
  });
});
