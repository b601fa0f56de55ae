#!/usr/bin/env node
// `npm run demo`: compile the bundled sample program and show what upscope makes of it:
// its functions, where probes on them would go (and why one is refused), and what this
// machine allows. Each step prints the command it runs, so it can be copied.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const buildDir = join(root, '.upscope-build');
const app = join(buildDir, 'app');
const rel = relative(process.cwd(), app) || app;
const target = rel.includes('/') ? rel : `./${rel}`;

mkdirSync(buildDir, { recursive: true });
try {
  execFileSync('gcc', ['-g', '-O2', '-o', app, join(root, 'sample/app.c')], { stdio: 'inherit' });
} catch {
  console.error('demo: cannot compile sample/app.c: gcc is missing (run: apt-get install gcc)');
  process.exit(1);
}

function upscope(...args) {
  const shown = args.map((a) => (/[\s*'>]/.test(a) ? `'${a}'` : a)).join(' ');
  console.log(`\n$ upscope ${shown}`);
  spawnSync(process.execPath, [join(root, 'bin/upscope.js'), ...args], { stdio: 'inherit' });
}

console.log(`Compiled the sample program to ${target}`);
upscope('list', target);
upscope(
  'resolve',
  `${target}:parse_request line=+0(arg0):string`,
  `r:${target}:checksum hash=retval:x64`,
  'libc:malloc size=arg0:u64',
);
console.log(
  '\nA probe in the middle of an instruction would corrupt the program, so it is refused:',
);
upscope('resolve', `${target}:parse_request+0x1`);
upscope('doctor');
console.log('\nTracing the sample from its first instruction (kernel uprobes; needs root):');
upscope(
  'trace',
  '-c',
  `${target} 2`,
  `${target}:parse_request line=+0(arg0):string`,
  `r:${target}:checksum hash=retval:x64`,
  'libc:malloc size=arg0:u64',
);
