#!/usr/bin/env node
// Enforces the layering in shared/STYLE.md: a file may import another top-level src/ folder only
// through that folder's index.ts, and the pure folders never import native/ or host/.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const src = new URL('../src/', import.meta.url).pathname;
const PURE = new Set(['spec', 'symbols', 'arch', 'aggregate', 'output', 'errors', 'internal']);
const IMPURE = new Set(['native', 'host']);

function files(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? files(join(dir, e.name))
      : /\.tsx?$/.test(e.name) && !e.name.endsWith('.test.ts')
        ? [join(dir, e.name)]
        : [],
  );
}

const problems = [];
for (const file of files(src)) {
  const from = relative(src, file).split('/')[0];
  const text = readFileSync(file, 'utf8');
  for (const m of text.matchAll(/^(?:import|export)[^'"]*from\s+'(\.[^']+)'/gm)) {
    const target = relative(src, resolve(dirname(file), m[1]));
    const parts = target.split('/');
    const to = parts[0];
    if (to === from || to.startsWith('..')) continue;
    // The page of `upscope ui` runs in a browser: of the library it takes only the contract
    // of the server's API (types and a constant), never code that needs Node.
    if (from === 'ui-page') {
      if (target !== 'api/ui-contract.js') {
        problems.push(
          `src/${relative(src, file)}: imports "${m[1]}": the page may import only src/api/ui-contract.ts`,
        );
      }
      continue;
    }
    const where = `src/${relative(src, file)}`;
    if (!(parts.length === 2 && parts[1] === 'index.js')) {
      problems.push(`${where}: imports "${m[1]}": import src/${to}/ through its index.ts`);
    }
    if (PURE.has(from) && IMPURE.has(to)) {
      problems.push(`${where}: the pure folder ${from}/ must not import ${to}/`);
    }
  }
}
if (problems.length > 0) {
  console.error(problems.join('\n'));
  process.exit(1);
}
