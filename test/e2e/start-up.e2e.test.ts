// The command starts from V8's code cache of its bundle (bin/load-bundle.js), made by the
// build: this Node.js takes it, and no class of the bundle has a static private member (V8
// compiles one wrongly from a cache: see NO_STATIC_PRIVATE in scripts/build.mjs).
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { compileBundle } from '../../bin/load-bundle.js';
import { runNode } from '../helpers/run-cli.js';

const BUNDLE = new URL('../../dist/cli.cjs', import.meta.url).pathname;

test('the build leaves the bundle with a code cache that this Node.js takes', () => {
  assert.ok(existsSync(`${BUNDLE}.cache`), 'dist/cli.cjs.cache is missing: npm run build makes it');
  const script = compileBundle();
  assert.equal(script.cachedDataRejected, false, 'V8 refused the code cache the build made');
});

test('no class of the bundle has a static private member', () => {
  const text = readFileSync(BUNDLE, 'utf8');
  const found = /^\s*static\s+(?:async\s+|get\s+|set\s+)?#\w+/m.exec(text);
  assert.equal(found, null, `the bundle has ${found?.[0].trim()}`);
});

test('a checkout not built yet: one line that says how to build it, no stack trace', () => {
  const dir = mkdtempSync(join(tmpdir(), 'upscope-unbuilt-'));
  try {
    // The command's own files as a checkout has them, without dist/.
    cpSync(new URL('../../bin', import.meta.url).pathname, join(dir, 'bin'), { recursive: true });
    cpSync(new URL('../../package.json', import.meta.url).pathname, join(dir, 'package.json'));
    const run = runNode([join(dir, 'bin/upscope.js'), '--version']);
    assert.equal(run.status, 1);
    assert.equal(run.stdout, '');
    assert.match(
      run.stderr,
      /^error: cannot start upscope: .*dist\/cli\.cjs is not there; build it with: npm ci \(or npm run build\)\n$/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
