// README's example of C++ names in specs, typed in bash as README shows it: the quotes reach
// upscope and the specs resolve (only the program's path and its names are put in).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';

const README = new URL('../../README.md', import.meta.url).pathname;
const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

describe("README's quoting of C++ names", () => {
  test('the example resolves when typed in bash', (t) => {
    if (!requireHost(t, { commands: ['g++', 'bash'] })) return;
    const line = readFileSync(README, 'utf8')
      .split('\n')
      .find((l) => l.startsWith("npx upscope trace -c './app 5' \"./app:'ns::"));
    assert.ok(line, 'README has the example');
    const app = compileProgram('cxx-names', { flags: ['-O2'] });
    // The same words with this machine's program and names: resolve instead of trace (no root).
    const command = line
      .replace("npx upscope trace -c './app 5'", `${process.execPath} ${BIN} resolve --json`)
      .replaceAll('./app:', `${app}:`)
      .replaceAll('ns::Class::method', 'shapes::Counter::method')
      .replaceAll('ns::Box', 'shapes::Box');
    const out = JSON.parse(execFileSync('bash', ['-c', command], { encoding: 'utf8' }));
    assert.deepEqual(out.errors, []);
    assert.deepEqual(out.sites.map((s: { demangled: string }) => s.demangled).sort(), [
      'shapes::Box<int>::get() const',
      'shapes::Box<long>::get() const',
      'shapes::Counter::method(int)',
    ]);
  });
});
