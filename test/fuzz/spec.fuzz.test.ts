import { test } from 'node:test';
import fc from 'fast-check';
import {
  parseComparisonOrThrow,
  parseFetchOrThrow,
  parseSpec,
  parseSpecOrThrow,
  printSpec,
} from '../../src/spec/index.js';
import { fuzz, isProbeError, mutatedText } from './harness.js';

// The probe-spec parser (and the fetch and comparison parsers built on it) over specs in the
// forms the grammar in src/spec/index.ts lists, damaged, and over strings of the grammar's
// characters. parseSpec() reports problems as diagnostics and never throws; the *OrThrow
// forms throw a ProbeError.

const SPECS = [
  'p:/bin/bash:readline',
  'r:/bin/bash:readline ret=retval:string',
  '/usr/lib/x86_64-linux-gnu/libc.so.6:malloc size=arg1:u64',
  'libc:malloc@GLIBC_2.2.5',
  'libc:memcpy@@GLIBC_2.14+0x10',
  "./app:'ns::C<int>::~C()'",
  "./app:'operator new(unsigned long)'@V1+4 %rdi",
  './app:do_*',
  './app:[a-c]?x*',
  './app:0x401136',
  './app:@0x1136',
  './app:@4406',
  './app:main.c:42 x=+8(%rsp):s32',
  'u:./app:myprov:myprobe arg0 arg1:x64',
  './app:myprov:req_*',
  'p:./p:f a=-16(+8(%rbp)):u8 b=comm c=ip d=sp e=arg15',
  './app:f point->x p.y arr[3] v:bool c:char',
  'r:./app:f retval:s64',
  'p:app:f+4294967295',
];

const FETCHES = ['arg1', 'retval:u32', '%rax', '+8(%rsp):string', 'req->len', 'comm', 'x=arg2:x16'];
const COMPARISONS = ['arg1 > 4', 'retval == 0', 'arg2:s32 < -1', 'req->len >= 0x10', 'comm != 3'];

const ALPHABET = "prux:./_$@+-0123456789abcdefABCXYZ'()*?[]!%=>,<~&; \t->";

test('fuzz: the probe-spec parser reports diagnostics and throws only ProbeError', (t) => {
  const grammar = fc.string({ unit: fc.constantFrom(...ALPHABET), maxLength: 60 });
  fuzz(t, {
    name: 'spec',
    input: fc.oneof(mutatedText(SPECS, ALPHABET), grammar),
    run: (text) => {
      const result = parseSpec(text);
      if (result.spec !== undefined) parseSpec(printSpec(result.spec));
      parseSpecOrThrow(text);
    },
    expected: isProbeError(),
    shortRuns: 2000,
  });
  fuzz(t, {
    name: 'fetch',
    input: fc.oneof(
      mutatedText([...FETCHES, ...COMPARISONS], ALPHABET),
      fc.string({ unit: fc.constantFrom(...ALPHABET), maxLength: 30 }),
    ),
    run: (text) => {
      try {
        parseFetchOrThrow(text, '--by');
      } finally {
        parseComparisonOrThrow(text, '--filter');
      }
    },
    expected: isProbeError(),
    shortRuns: 2000,
  });
});
