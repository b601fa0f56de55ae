#!/usr/bin/env node
// Runs every test file through node:test with tsx. Node 20 does not expand globs itself, so
// the files are found here: unit tests beside the code (src/**/*.test.ts) and the suites in
// test/ (integration and end-to-end). Arguments narrow the run to files containing them.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;

function findTests(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules' && entry.name !== 'fixtures')
        found.push(...findTests(path));
    } else if (entry.name.endsWith('.test.ts')) {
      found.push(relative(root, path));
    }
  }
  return found;
}

const filters = process.argv.slice(2);
const files = [...findTests(join(root, 'src')), ...findTests(join(root, 'test'))]
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)))
  .sort();
if (files.length === 0) {
  console.error(`No test files match: ${filters.join(' ')}`);
  process.exit(1);
}
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', ...files], {
  cwd: root,
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
